"""The malicious server's runs: one loop, configured as a shared imprint block or as LOKI.

Robbing the Fed (Fowl et al. 2022) puts one imprint block in front of the model and reads the inputs back
from the update: FedSGD uses the cumulative block (§3), FedAvg the sparse one (§4.3, small rows so the
lr-scaled update stays above float32 rounding); under ``secagg:K`` the K clients share one set of bins.
LOKI (Zhao et al., IEEE S&P 2024; :mod:`fedleak.models.loki`) ships each of the K clients of an aggregate
its own model (``--bins`` bins per client), so the aggregate separates by client. Both are a
:class:`MaliciousRun` of the same loop (:func:`run`): ship the model, observe each target, reconstruct,
evaluate, count verbatim inputs, keep the first example, summarize. The verdict takes the stronger of the
runs (more inputs read back verbatim) unless ``--attacks`` names one; the other's numbers are kept under
``compared`` so that a ``--sweep secagg=...`` shows how each scales with K.

LOKI's assumption is stated with its result: the clients accept a model that differs from their
peers' (no model-consistency check across clients, e.g. no shared hash of the broadcast model).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ...attacks.imprint import expected_recovered
from ...fl.secagg import concatenate, secure_aggregate_per_client
from ...models.loki import loki
from ...runs.interrupt import responsive
from ..plan import threats
from ..plan.config import Scenario
from ..plan.malicious import check, fits  # noqa: F401  (the checks before any work; re-exported)
from .steps import VERBATIM_DB, event

ASSUMPTION = ("LOKI's threat model: the server ships every client of the aggregate its own model (per-client "
              "convolution kernels); clients do not compare the model they received with their peers'")
LOKI_TITLE = "LOKI per-client kernels and bins"
COMPARED_KEYS = ("attack", "title", "verbatim_count", "verbatim_percent", "rec_percent", "psnr", "bins",
                 "added_parameters", "seconds", "num_inputs")


@dataclass
class MaliciousRun:
    """One configuration of the malicious loop: the model shipped, how a target's update is observed, what
    Proposition 1 of Fowl et al. expects, and what the summary says beside the shared keys."""

    choice: threats.AttackChoice
    shipped: object  # the model the server ships (an imprint or LOKI model)
    scenario: Scenario
    structure: str
    added_parameters: int
    #: ``(group, seed) -> Update``: what the server receives from one target group
    observe: Callable
    #: ``(targets, inputs) -> (expected count, expected percent)``
    expected: Callable
    layout: dict = field(default_factory=dict)  # keys after ``bins`` (LOKI: bins per client, K)
    notes: dict = field(default_factory=dict)  # keys at the end (LOKI: its assumption)
    counted: bool = True  # a progress "attack" event (the plan's count of attack runs includes it)


def _scenario(plan) -> Scenario:
    """The first scenario's protocol on as many samples as the largest scenario."""
    first = plan.scenarios[0]
    return Scenario(first.key, first.protocol, max(s.samples for s in plan.scenarios))


def imprint_run(auditor, plan, name: Optional[str]) -> MaliciousRun:
    """Robbing the Fed: one imprint block in front of the model, shared by the K clients of an aggregate."""
    from ...models.imprint import imprint

    cfg, spec, scenario = auditor.config, auditor.spec, _scenario(plan)
    structure = "cumulative" if scenario.protocol.algorithm == "fedsgd" else "sparse"
    name = name or ("imprint" if structure == "cumulative" else "imprint-sparse")
    base = copy.deepcopy(auditor.model).cpu()
    placement = auditor.modality.imprint_placement(base, spec)  # images: in front of the model
    shipped = imprint(base, spec, bins=cfg.bins, structure=structure, linfunc="randn",
                      gain=1.0 if structure == "cumulative" else 1e-3, seed=cfg.seed,
                      **placement).to(auditor.context.device)

    def expected(targets: int, inputs: int):
        per_target = inputs // targets
        return (targets * expected_recovered(per_target, cfg.bins),
                100.0 * expected_recovered(per_target, cfg.bins) / per_target)

    return MaliciousRun(auditor.context.budget.choose(name), shipped, scenario, structure,
                        int(sum(p.numel() for p in shipped.imprint.parameters())),
                        lambda group, seed: auditor.observe(shipped, group, scenario, plan, seed), expected)


def loki_run(auditor, plan) -> MaliciousRun:
    """LOKI: each client of an aggregate of K gets its own kernels and ``--bins`` bins."""
    cfg, scenario = auditor.config, _scenario(plan)
    fedsgd = scenario.protocol.algorithm == "fedsgd"
    structure = "cumulative" if fedsgd else "sparse"
    shipped = loki(copy.deepcopy(auditor.model).cpu(), auditor.spec, clients=plan.secagg, bins=cfg.bins,
                   structure=structure, gain=1.0 if fedsgd else 1e-3, seed=cfg.seed).to(auditor.context.device)
    choice = auditor.context.budget.choose("loki")

    def observe(group, seed):
        return secure_aggregate_per_client(shipped.route, group, scenario.protocol, seed=seed, defense=plan.defense)

    def expected(targets: int, inputs: int):
        count = targets * plan.secagg * expected_recovered(scenario.samples, cfg.bins)
        return count, 100.0 * count / inputs

    return MaliciousRun(threats.AttackChoice(choice.name, choice.options, LOKI_TITLE), shipped, scenario, structure,
                        int(sum(p.numel() for p in shipped.loki.parameters())), observe, expected,
                        layout={"bins_per_client": cfg.bins, "clients_per_aggregate": plan.secagg},
                        notes={"assumption": ASSUMPTION}, counted=False)


def run(auditor, plan, setup: MaliciousRun, ctx, result) -> dict:
    """The one malicious loop: every target group observed through ``setup``, reconstructed, scored."""
    cfg, choice, shipped = auditor.config, setup.choice, setup.shipped
    per_target, seconds, found, total = [], 0.0, 0, 0
    for t, group in enumerate(auditor.targets(plan, setup.scenario.samples)):
        stage = ctx.stage(f"malicious: {choice.title}" + (f", target {t + 1}" if cfg.clients > 1 else ""))
        event(ctx.progress, stage, **({"attack": True} if setup.counted else {}))
        update = setup.observe(group, ctx.seed(t, plan.secagg))
        truth = concatenate(group)
        start = time.perf_counter()
        rec = responsive(threats.build(choice).reconstruct, update, shipped, auditor.spec)
        seconds += time.perf_counter() - start
        scores = auditor.evaluate(rec, truth, shipped)
        scores["target"] = truth.client_id
        per_target.append(scores)
        found += auditor.modality.verbatim(scores)
        total += len(truth)
        if t == 0:
            result.examples[("malicious", choice.title)] = auditor.example(rec, truth, scores)
    summary = auditor.summarize(per_target, seconds, choice)
    expected_count, expected_percent = setup.expected(len(per_target), total)
    summary.update({"protocol": setup.scenario.protocol.to_json(), "structure": setup.structure, "bins": cfg.bins,
                    **setup.layout, "added_parameters": setup.added_parameters, "num_inputs": total,
                    "verbatim_count": found, "verbatim_db": VERBATIM_DB, "verbatim_percent": 100.0 * found / total,
                    "expected_count": expected_count, "expected_percent": expected_percent, **setup.notes})
    return summary


def strongest(summaries: list, result) -> dict:
    """The summary with the most verbatim inputs (then Rec%); every one kept under ``compared``."""
    best = max(summaries, key=lambda s: (s["verbatim_count"], s["rec_percent"] or 0.0))
    for other in summaries:
        if other is not best and other["title"] != best["title"]:
            result.examples.pop(("malicious", other["title"]), None)
    best["compared"] = {s["attack"]: {k: s.get(k) for k in COMPARED_KEYS} for s in summaries}
    return best


def threat_model(auditor, plan, ctx, result) -> None:
    """The malicious server's strongest attack that fits the protocol and K, judged into ``result``.

    ``--attacks`` naming malicious attacks (``loki``, ``imprint``, ``cah``, ...): those; none named: the
    imprint block, and under ``secagg:K`` (K ≥ 2) also LOKI; with several, the strongest is kept.
    """
    names = [a for a in (auditor.config.attacks or ()) if a in threats.MALICIOUS_NAMES] or [None]
    if len(names) > 1 and plan.secagg < 2:
        names = [n for n in names if n != "loki"]  # LOKI needs an aggregate of K >= 2 clients
    if names == [None] and fits(plan, auditor.spec, auditor.config.bins):
        names.append("loki")
    summaries = [run(auditor, plan, loki_run(auditor, plan) if name == "loki" else imprint_run(auditor, plan, name),
                     ctx, result) for name in names]
    mal = summaries[0] if len(summaries) == 1 else strongest(summaries, result)
    mal["kind"] = threats.kind(mal["attack"])
    result.data["scenarios"]["malicious"] = mal
    result.data["threat_models"][threats.MALICIOUS] = {
        "description": threats.THREAT_MODELS[threats.MALICIOUS],
        **auditor.judge({f"{mal['title']} [{mal['attack']}]": mal}, auditor.knowledge(plan, True))}


__all__ = ["ASSUMPTION", "MaliciousRun", "check", "fits", "imprint_run", "loki_run", "run", "strongest",
           "threat_model"]
