"""``fedleak dp-audit --level example``: is the example-level DP-SGD a client claims in force, and how tight is it?

Issue #29, item 2. One client of the user's model and data runs DP-SGD (``--defense dp-sgd:clip=C,noise=σ``,
fedleak's own DP-SGD, :class:`fedleak.fl.defenses.Defense`) for ``--rounds`` × ``--epochs`` × ⌈N/B⌉ steps with
m Dirac gradient canaries (:mod:`.sgd_canaries`, Steinke et al. NeurIPS 2023 §7, white-box) — one training
run (:mod:`.sgd_run`) — and the audit reports, beside Opacus's RDP and PRV ε for the same σ, q = B/N, T and δ
(:func:`.accountants.dpsgd_epsilons`):

* ``epsilon_lower`` (*proved*, 95 %): the one-run analyses of :mod:`.one_run` on the canaries' statistics.
  Without subsampling (q = 1) the mechanism is exactly √T/σ-GDP and the Gaussian f-DP refinement
  (Mahloujifar et al., ICML 2025) is the headline; with q < 1 its privacy curve is not Gaussian, so the
  headline is Steinke et al.'s assumption-free (ε, δ)-DP bound (§5) and the GDP figure is reported beside it
  only as what it would be under a Gaussian curve;
* ``epsilon_estimate`` (*estimated*): Andrew et al.'s Gaussian fit (ICLR 2024 §3) to the same statistics;
* ``misconfiguration``: the claim test and findings (:mod:`.sgd_diagnose`).
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import FedleakError
from .accountants import dpsgd_epsilons
from .checks import THREATS
from .estimate import estimate
from .one_run import lower_bounds
from .sgd_canaries import DiracCanaries
from .sgd_diagnose import diagnose_sgd
from .sgd_run import run_dpsgd



def claimed_dpsgd(parsed, privacy: dict) -> tuple[float, float]:
    """(σ, C) of the claimed DP-SGD; σ must be > 0 (σ = 0 claims no privacy: nothing to audit)."""
    if privacy:
        raise FedleakError(f"--defense: give {', '.join(sorted(privacy))} as dp-audit's options (--rounds, "
                           "--batch-size, --delta), not inside the dp-sgd spec")
    noise, clip = float(parsed.scale), float(parsed.clip)
    if not (math.isfinite(noise) and noise > 0):
        raise FedleakError(f"--defense: the DP-SGD noise multiplier σ must be a finite number > 0, got {parsed.scale!r}")
    return noise, clip


def prepare(a: dict) -> tuple:
    """(model, the client's data, canaries): everything that can still refuse the input, before ``--out`` is made."""
    from .. import data as data_mod
    from .. import models

    spec, client_data = data_mod.load(a["data"], root=a["data_root"], num_clients=1, samples_per_client=a["samples"],
                                      seed=a["seed"])
    if not client_data or len(client_data[0]) < 1:
        raise FedleakError(f"--data {a['data']} has no client of {a['samples']} samples")
    net = models.build(a["model"], spec, seed=a["model_seed"])
    from ..fl.client import has_batchnorm

    if has_batchnorm(net):  # per-example gradients (DP-SGD) are undefined under batch statistics
        raise FedleakError(f"--model {a['model']} has BatchNorm: DP-SGD needs per-example gradients; use a model "
                           "without BatchNorm (e.g. lenet, femnist-cnn, mlp)")
    dim = sum(p.numel() for p in net.parameters() if p.requires_grad)
    return net, client_data[0], DiracCanaries(a["m"], dim, a["seed"], a["canary_scale"])


def run_example_audit(a: dict, out_dir: Optional[Path]) -> dict:
    """The example-level audit once its inputs are valid (``a``: :func:`fedleak.privacy.audit.dp_audit`'s checked
    arguments, ``a["prepared"]`` from :func:`prepare`)."""
    started, m, seed, delta, rounds, threat = a["started"], a["m"], a["seed"], a["delta"], a["rounds"], a["threat"]
    noise, clip, protocol, samples = a["noise"], a["clip"], a["protocol"], a["samples"]
    net, client, canaries = a["prepared"]
    client_data, dim = [client], canaries.dim
    run = run_dpsgd(net, client_data[0], protocol, noise, clip, canaries, rounds=rounds, fault=a["sgd_fault"],
                    seed=seed, log=a["log"])
    analysis_start = time.perf_counter()
    q, steps = run.sample_rate, run.steps
    acc = dpsgd_epsilons(noise, q, steps, delta)
    claimed = next((acc[k] for k in ("opacus_prv", "opacus_rdp", "gdp_exact") if acc.get(k) is not None), math.inf)
    bounds = {t: lower_bounds(run.scores[t], run.included, delta) for t in THREATS}
    headline_key = "epsilon_gdp" if q == 1 else "epsilon_approx_dp"
    for b in bounds.values():
        b["epsilon"] = b[headline_key]
        b["gdp_family"] = ("exact: without subsampling T steps are √T/σ-GDP (headline)" if q == 1 else
                           "not assumed: the subsampled Gaussian's curve is not Gaussian; epsilon_gdp is what the "
                           "bound would be if it were, the headline is epsilon_approx_dp")
    estimates = {t: estimate(run.scores[t], run.included, delta) for t in THREATS}
    check = diagnose_sgd(run.scores["all-iterates"], run.mean_shift, run.included, run.raw_norm, noise=noise,
                         steps=steps, sample_rate=q, epsilon_claimed=claimed, delta=delta)
    batch = protocol.batch_size_for(len(client_data[0]))
    result = {
        "level": "example",
        "epsilon_accountant": acc,
        "epsilon_lower": bounds[threat]["epsilon"],
        "epsilon_estimate": estimates[threat]["epsilon"],
        "exceeds_claim": None,  # the verdict's (:mod:`.sgd_verdict`): violated (proved)
        "evidence": {"epsilon_lower": "proved", "epsilon_estimate": "estimated"},
        "threat": threat, "canaries": m, "canaries_inserted": int(run.included.sum()), "canary_kind": "dirac gradient",
        "rounds": rounds, "steps": steps, "sample_rate": q, "delta": delta,
        "lower_bounds": bounds, "estimates": estimates, "misconfiguration": check,
        "setting": {"defense": f"dp-sgd:clip={clip:g},noise={noise:g}", "noise": noise, "clip": clip,
                    "batch_size": batch, "samples": len(client_data[0]), "sample_rate": q, "steps": steps,
                    "mu_gdp": check["mu_claimed"]},
        "fault": a["sgd_fault"].to_json(), "canary_scale": a["canary_scale"], "model": a["model"], "data": a["data"],
        "dimension": dim, "samples": samples,
        "protocol": {"algorithm": "fedavg", "epochs": protocol.epochs, "batch_size": protocol.batch_size,
                     "lr": protocol.lr},
        "seed": seed, "threads": torch.get_num_threads(), "device": "cpu", "machine": platform.machine(),
        "methods": {
            "canaries": "Steinke, Nasr, Jagielski (NeurIPS 2023) §7 white-box Dirac gradient canaries, each included "
                        "with probability 1/2 and then in each step's batch with probability q; all-iterates statistic "
                        "the per-step log-likelihood ratio summed (q < 1) or the summed shift (q = 1) after removing "
                        "the real examples' clipped gradient sum",
            "epsilon_lower": ("Mahloujifar, Melis, Chaudhuri (ICML 2025) one-run f-DP audit, Gaussian family (exact at "
                              "q = 1)" if q == 1 else "Steinke, Nasr, Jagielski (NeurIPS 2023) §5 one-run (ε, δ)-DP "
                              "analysis") + " on k = ⌈0.1·m⌉ highest 'in', k lowest 'out' guesses; 95 % confidence",
            "epsilon_estimate": "Andrew et al. (ICLR 2024) Gaussian fit, equal variances",
            "epsilon_accountant": "Opacus RDP and PRV (σ, q = B/N, T steps)" + (", exact GDP (q = 1)" if q == 1 else "")},
    }
    from .sgd_verdict import sgd_verdict

    raw = run.raw_norm
    result["verdict"] = sgd_verdict(
        scores=run.scores["all-iterates"], mean_shift=run.mean_shift, included=run.included,
        test_set=raw != 1.0 if (raw != 1.0).sum() >= 2 else np.ones_like(raw, bool), bound=bounds[threat],
        check=check, noise=noise, q=q, steps=steps, claimed=claimed,
        claim_name=("Opacus PRV" if acc.get("opacus_prv") else "Opacus RDP") + f", σ = {noise:g}, q = {q:.3g}",
        estimate_epsilon=result["epsilon_estimate"], estimate_interval=estimates[threat].get("epsilon_interval"),
        delta=delta, budget=f"{m} gradient canaries, {steps} steps")
    result["exceeds_claim"] = result["verdict"]["exceeds_claim"]
    result["cost_seconds"] = {**{k: round(v, 3) for k, v in run.seconds.items()},
                              "analysis": round(time.perf_counter() - analysis_start, 3),
                              "total": round(time.perf_counter() - started, 3)}
    from .report import plot as draw, sgd_summary_lines

    result["summary"] = sgd_summary_lines(result)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        if a["plot"]:
            draw(result, run.scores, run.included, out_dir / "dp-audit.png")
        (out_dir / "dp-audit.json").write_text(json.dumps(result, indent=2, allow_nan=True) + "\n")
    return result
