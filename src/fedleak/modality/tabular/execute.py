"""Execute a tabular audit: the honest clients' updates (the one client update) and the attacks that apply.

For every audited client and protocol the server (honest but curious) receives one update and runs:

* the **exact** attacks where the model's first layer is linear + ReLU (``analytic-fc``, ``spear``): their result
  is *proved* when the update recomputed from the recovered records matches the one sent
  (:func:`fedleak.attacks.fc_exact.verify`); they apply to FedSGD (one local step);
* **TabLeak** (:mod:`fedleak.attacks.tabular.tableak`): an optimization attack, its result *estimated* at its
  budget (restarts × iterations, stated).

Each result is scored by :mod:`fedleak.metrics.tabular` against the client's true records (the audit knows them;
the attacks never see them) with the random and prior baselines beside it.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from ...attacks import build as build_attack
from ...errors import FedleakError
from ...fl.client import client_update
from ...metrics.tabular import evaluate

EXACT = ("analytic-fc", "spear")
OPTIMIZATION = ("tableak",)


def tableak_budget(cfg, protocol) -> dict:
    """TabLeak's budget in an audit: the reference's 1500 iterations / 30 restarts (FedSGD; FedAvg 15 restarts at
    500 iterations, its unrolled simulation being the costly part); ``--quick`` 200 / 8; ``--iterations`` wins."""
    fedsgd = protocol.algorithm == "fedsgd"
    iterations = 200 if cfg.quick else (1500 if fedsgd else 500)
    restarts = 8 if cfg.quick else (30 if fedsgd else 15)
    return {"iterations": int(cfg.iterations or iterations), "restarts": restarts}


def attacks_for(cfg, protocol) -> list[str]:
    names = list(cfg.attacks) if cfg.attacks else [*EXACT, *OPTIMIZATION]
    unknown = [n for n in names if n not in (*EXACT, *OPTIMIZATION, "tableak-no-pooling", "tableak-no-softmax",
                                              "inverting-gradients-tabular")]
    if unknown:
        raise FedleakError(f"--attacks {unknown[0]}: not a tabular attack; a tabular audit takes "
                           f"{', '.join((*EXACT, *OPTIMIZATION, 'tableak-no-pooling', 'tableak-no-softmax', 'inverting-gradients-tabular'))}")
    if protocol.algorithm != "fedsgd" or protocol.local_epochs() > 1:
        names = [n for n in names if n not in EXACT]  # several local steps: the exact attacks' precondition fails
    return names


def run_attack(name: str, cfg, update, model, spec, truth: torch.Tensor) -> tuple[dict, object]:
    """One attack on one update: its scores, evidence and timing, and the reconstruction."""
    options = tableak_budget(cfg, update.protocol) if name not in EXACT else {}
    attack = build_attack(name, seed=cfg.seed, **options)
    started = time.process_time()
    rec = attack.reconstruct(update, model, spec)
    seconds = time.process_time() - started
    n = rec.inputs.shape[0]
    guess = rec.inputs.reshape(n, spec.schema.width)
    entropy = torch.tensor(rec.extras["entropy"]) if "entropy" in rec.extras else None
    scores = evaluate(spec.schema, guess, truth, entropy=entropy, seed=cfg.seed)
    if name in EXACT:
        exactness = rec.extras.get("exactness", {})
        verification = exactness.get("verification") or {}
        proved = bool(rec.extras.get("certain")) and bool(verification.get("matches"))
        # unverified: only measured against the truth; nothing returned: not found
        scores["evidence"] = "proved" if proved else ("estimated" if n else "not-found")
        scores["evidence_text"] = (
            f"proved: the update recomputed from the {n} recovered records matches the one sent (relative error "
            f"{verification.get('relative_error', float('nan')):.1e} <= {verification.get('tolerance', 0):g})"
            if proved else f"not proved ({exactness.get('reason', 'the precondition did not hold')}); its records are "
                           f"only measured against the true ones")
        scores["kind"] = "exact"
    else:
        scores["evidence"] = "estimated"
        scores["evidence_text"] = (f"estimated at a budget of {options['restarts']} restarts x "
                                   f"{options['iterations']} iterations (one optimization, not a proof)")
        scores["kind"] = "optimization"
        scores["budget"] = options
    scores["cpu_seconds"] = round(seconds, 2)
    scores["label_strategy"] = rec.extras.get("label_strategy")
    return scores, (guess, rec.extras.get("entropy"))


def run_client(cfg, plan, scenario, model, spec, data, seed: int, show: Optional[Callable] = None) -> dict:
    """Every applicable attack on one client's update; the records of the strongest for the report."""
    update = client_update(model, data, scenario.protocol, seed=seed, defense=plan.defense)
    results, guesses = {}, {}
    for name in attacks_for(cfg, scenario.protocol):
        if show is not None:
            show({"stage": f"{scenario.key}: {name} on {data.client_id} ({len(data)} records)"})
        try:
            results[name], guesses[name] = run_attack(name, cfg, update, model, spec, data.inputs)
        except FedleakError as exc:  # an exact attack whose precondition the model does not meet (no linear layer)
            if name not in EXACT:
                raise
            empty = data.inputs[:0]
            results[name] = {**evaluate(spec.schema, empty, data.inputs, seed=cfg.seed), "kind": "exact",
                             "evidence": "not-found", "cpu_seconds": 0.0,
                             "evidence_text": f"precondition not met: {exc}"}
            guesses[name] = (empty, None)
    strongest = max(results, key=lambda k: (results[k]["evidence"] == "proved", results[k]["exact_match_rate"],
                                            results[k]["accuracy"]))
    guess, entropy = guesses[strongest]
    return {"client": data.client_id, "records": len(data), "attacks": results, "strongest": strongest,
            "guess": guess, "entropy": entropy, "truth": data.inputs}


def surrogate_stats(records: torch.Tensor) -> dict:
    """loc/scale of the imprint block's measurement (the mean of a standardized record) on the server's own
    records (Fowl et al. fit its distribution on public data; here: records no audited client holds)."""
    h = records.reshape(records.shape[0], -1).mean(dim=1)
    return {"loc": float(h.mean()), "scale": float(h.std().clamp_min(1e-6))}


def run_malicious(cfg, scenario, model_name: str, spec, data, stats: dict, seed: int, server_records=None) -> dict:
    """The malicious server, FedSGD: Robbing the Fed's imprint block (``cfg.bins`` bins) in front of the model, its
    single-record bins read out verbatim (:mod:`fedleak.attacks.imprint`); and, where the server holds records of its
    own (``server_records``), VGIA's parallel hyperplanes (``cfg.bins`` of them), each slab's record certified by
    recomputation (:mod:`fedleak.attacks.tabular.vgia`: proved)."""
    from ...models import build as build_model

    if ":" in model_name:
        raise FedleakError("the malicious threat model on tables needs a zoo model to imprint (--model tabular-mlp "
                           "or ft-transformer); add --no-malicious for your own module")
    malicious = build_model("imprint", spec, seed=cfg.model_seed, base=model_name, bins=cfg.bins, **stats)
    _, guess, scores, seconds = _attack_shipped(cfg, scenario, "imprint", malicious, spec, data, seed)
    scores.update({"evidence": "estimated", "kind": "analytic", "cpu_seconds": round(seconds, 2),
                   "evidence_text": f"read verbatim out of the imprint's bins ({cfg.bins} bins, fitted on records no "
                                    f"audited client holds); measured against the true records, not recomputed"})
    results, guesses = {"imprint": scores}, {"imprint": guess}
    if server_records is not None:
        results["vgia"], guesses["vgia"] = run_vgia(cfg, scenario, model_name, spec, data, server_records, seed)
    strongest = max(results, key=lambda k: (results[k]["exact_match_rate"], results[k]["evidence"] == "proved"))
    return {"client": data.client_id, "records": len(data), "attacks": results, "strongest": strongest,
            "guess": guesses[strongest], "entropy": None, "truth": data.inputs}


def _attack_shipped(cfg, scenario, attack: str, shipped, spec, data, seed: int):
    """The client's FedSGD update on the model the server shipped, ``attack`` on it, the records read and their
    scores against the truth: ``(reconstruction, records, scores, CPU seconds of the attack)``."""
    from ...types import ClientData

    records = ClientData(data.inputs.reshape(len(data), *spec.shape), data.labels, data.client_id)
    update = client_update(shipped, records, scenario.protocol, seed=seed)
    started = time.process_time()
    rec = build_attack(attack, seed=cfg.seed).reconstruct(update, shipped, spec)
    seconds = time.process_time() - started
    guess = rec.inputs.reshape(rec.inputs.shape[0], spec.schema.width)
    return rec, guess, evaluate(spec.schema, guess, data.inputs, seed=cfg.seed), seconds


def run_vgia(cfg, scenario, model_name: str, spec, data, server_records, seed: int) -> tuple[dict, torch.Tensor]:
    """VGIA's certified slabs on one client's FedSGD update: the scores, and the records read."""
    from ...attacks.tabular.vgia import ship
    from ...models import build as build_model

    shipped = ship(build_model(model_name, spec, seed=cfg.model_seed), spec, server_records, slabs=cfg.bins,
                   seed=cfg.seed)
    rec, guess, scores, seconds = _attack_shipped(cfg, scenario, "vgia", shipped, spec, data, seed)
    count, n = rec.extras["certified_count"], len(data)
    whole = bool(rec.extras["certain"])
    scores.update({"evidence": "proved" if count else "not-found", "kind": "exact", "cpu_seconds": round(seconds, 2),
                   "certified": count,
                   "evidence_text": (f"{count} of {n} records certified alone in their slab of {cfg.bins} parallel "
                                     "hyperplanes, each by recomputing its share of the update from it"
                                     + ("; the whole update recomputed from all of them matches the one sent"
                                        if whole else "") if count else
                                     f"no slab of the {cfg.bins} hyperplanes held a single record")})
    return scores, guess
