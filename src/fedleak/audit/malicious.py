"""The malicious server at secure-aggregation scale in the audit: LOKI beside Robbing the Fed.

Under ``secagg:K`` (K ≥ 2) a malicious server that may ship each client its own model runs LOKI
(Zhao et al., IEEE S&P 2024; :mod:`fedleak.models.loki`): ``--bins`` bins per client, the
aggregate of the K clients separates by client. One shared imprint block (Fowl et al. 2022 §4.2)
mixes the K clients in one set of bins. The audit's malicious verdict takes the stronger of the
two (more inputs read back verbatim) unless ``--attacks`` names one; the other's numbers are kept
under ``compared`` so that a ``--sweep secagg=...`` shows how each scales with K.

LOKI's assumption is stated with its result: the clients accept a model that differs from their
peers' (no model-consistency check across clients, e.g. no shared hash of the broadcast model).
"""

from __future__ import annotations

import copy
import time

from .. import metrics
from ..errors import FedleakError
from ..fl.secagg import concatenate, secure_aggregate_per_client
from ..models.loki import check_budget, loki
from . import threats
from .config import Scenario

VERBATIM_DB = 60.0
ASSUMPTION = ("LOKI's threat model: the server ships every client of the aggregate its own model (per-client "
              "convolution kernels); clients do not compare the model they received with their peers'")
LOKI_TITLE = "LOKI per-client kernels and bins"
COMPARED_KEYS = ("attack", "title", "verbatim_count", "verbatim_percent", "rec_percent", "psnr", "bins",
                 "added_parameters", "seconds")


def check(cfg, spec, plans) -> None:
    """Before any work: ``--attacks loki`` needs K ≥ 2 (at every point, unless another malicious attack
    is named for the points of a sweep without secure aggregation) and a LOKI layer that fits."""
    if cfg.attacks and "fishing" in cfg.attacks:
        raise FedleakError("--attacks fishing: class fishing is not an audit attack (it needs the server's fishing "
                           "model); use fedleak.models.fishing.fishing with fedleak.attacks.build('fishing') "
                           "(docs/malicious.md)")
    if not cfg.attacks or "loki" not in cfg.attacks or not cfg.malicious:
        return
    others = [a for a in cfg.attacks if a in ("imprint", "imprint-sparse", "imprint-one-shot", "cah")]
    for plan in plans:
        if plan.secagg < 2 and others and any(p.secagg >= 2 for p in plans):
            continue  # a sweep point without secure aggregation: the other malicious attacks run there
        if plan.secagg < 2:
            raise FedleakError("--attacks loki attacks a secure aggregate of several clients (each gets its own "
                               f"model): give --defense secagg:K with K >= 2 (got K = {plan.secagg})")
        check_budget(plan.secagg, cfg.bins, spec.shape)


def fits(plan, spec, bins: int) -> bool:
    """LOKI applies: images, K ≥ 2 and the per-client FC layer within the size limit."""
    if plan.secagg < 2:
        return False
    try:
        check_budget(plan.secagg, bins, spec.shape)
    except FedleakError:
        return False
    return True


def loki_summary(auditor, plan, prefix: str, result) -> dict:
    """LOKI against every target group of K clients: per-client models, the aggregate, the readout."""
    from .engine import _event, _example, _summarize

    cfg = auditor.config
    first = plan.scenarios[0]
    samples = max(s.samples for s in plan.scenarios)
    scenario = Scenario(first.key, first.protocol, samples)
    fedsgd = scenario.protocol.algorithm == "fedsgd"
    structure = "cumulative" if fedsgd else "sparse"
    shipped = loki(copy.deepcopy(auditor.model).cpu(), auditor.spec, clients=plan.secagg, bins=cfg.bins,
                   structure=structure, gain=1.0 if fedsgd else 1e-3, seed=cfg.seed).to(auditor.device)
    choice = threats.choose("loki", quick=cfg.quick, iterations=cfg.iterations, seed=cfg.seed)
    choice = threats.AttackChoice(choice.name, choice.options, LOKI_TITLE)
    per_target, seconds, verbatim, total = [], 0.0, 0, 0
    for t, group in enumerate(auditor.targets(plan, samples)):
        stage = f"{prefix}malicious: {choice.title}" + (f", target {t + 1}" if cfg.clients > 1 else "")
        _event(auditor.progress, stage)
        update = secure_aggregate_per_client(shipped.route, group, scenario.protocol,
                                             seed=cfg.seed + t * plan.secagg, defense=plan.defense)
        truth = concatenate(group)
        start = time.perf_counter()
        rec = threats.build(choice).reconstruct(update, shipped, auditor.spec)
        seconds += time.perf_counter() - start
        scores = metrics.evaluate(rec, truth, auditor.spec)
        scores["target"] = truth.client_id
        per_target.append(scores)
        verbatim += sum(1 for p in scores["psnr_per_input"] if p is not None and p > VERBATIM_DB)
        total += len(truth)
        if t == 0:
            result.examples[("malicious", choice.title)] = _example(rec, truth, auditor.spec, scores)
    from ..attacks.imprint import expected_recovered

    summary = _summarize(per_target, seconds, choice)
    added = sum(p.numel() for p in shipped.loki.parameters())
    expected = len(per_target) * plan.secagg * expected_recovered(samples, cfg.bins)
    summary.update({
        "protocol": scenario.protocol.to_json(), "structure": structure, "bins": cfg.bins,
        "bins_per_client": cfg.bins, "clients_per_aggregate": plan.secagg, "added_parameters": int(added),
        "num_inputs": total, "verbatim_count": verbatim, "verbatim_db": VERBATIM_DB,
        "verbatim_percent": 100.0 * verbatim / total, "expected_count": expected,
        "expected_percent": 100.0 * expected / total, "assumption": ASSUMPTION,
    })
    summary["sentence"] = (
        f"LOKI: the server ships each of the {plan.secagg} clients of an aggregate its own model (a routing "
        f"convolution and {cfg.bins} bins per client, {int(added):,} added parameters). From the secure aggregate it "
        f"reads back {verbatim} of {total} images verbatim (PSNR above {VERBATIM_DB:.0f} dB); Proposition 1 of Fowl "
        f"et al. per client expects {expected:.1f}. {summary['rec_percent']:.0f}% are recognizable (PSNR above "
        f"{summary['threshold']:g} dB), with no optimization, in {seconds:.2f} s. Assumes {ASSUMPTION}.")
    return summary


def strongest(summaries: list, result) -> dict:
    """The summary with the most verbatim inputs (then Rec%); every one kept under ``compared``."""
    best = max(summaries, key=lambda s: (s["verbatim_count"], s["rec_percent"] or 0.0))
    for other in summaries:
        if other is not best and other["title"] != best["title"]:
            result.examples.pop(("malicious", other["title"]), None)
    best["compared"] = {s["attack"]: {k: s.get(k) for k in COMPARED_KEYS} for s in summaries}
    from .report import imprint_sentence

    others = "; ".join(f"{s['title']} [{s['attack']}] {s['verbatim_count']} of {s['num_inputs']}"
                       for s in summaries if s is not best)
    best["sentence"] = imprint_sentence(best) + f" Verbatim with the other malicious attacks: {others}."
    return best


__all__ = ["ASSUMPTION", "check", "fits", "loki_summary", "strongest"]
