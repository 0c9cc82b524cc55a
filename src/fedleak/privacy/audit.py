"""``fedleak.dp_audit``: is the client-level DP a federation claims actually in force, and how tight is it?

Walks one line: the claimed DP setting (``--defense flower-central-dp:noise=σ,clip=C,clients=K``, parsed as
``fedleak audit`` parses it) → a DP-FedAvg federation of the user's model and data with canary clients
(:mod:`.federation`) → per threat model the rigorous one-run lower bound (:mod:`.one_run`, *proved*
privacy loss) and the Gaussian estimate (:mod:`.estimate`, *estimated*) beside the accountants' ε
(:mod:`.accountants`) → the claim test and findings (:mod:`.diagnose`) → ``dp-audit.json`` and
``dp-audit.png`` in ``out``.
"""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import FedleakError
from .accountants import accountant_epsilons
from .canaries import Canaries
from .diagnose import diagnose
from .estimate import estimate
from .federation import DPSetting, Fault, run_federation
from .gdp import composed_mu
from .one_run import lower_bounds

THREATS = ("all-iterates", "final-model")
MAX_CANARIES = 1_000_000


def _positive(name: str, value, integer: bool = False, upper: float = math.inf):
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= upper
    if ok and integer and int(value) != value:
        ok = False
    if not ok:
        if integer:
            raise FedleakError(f"{name} must be an integer from 1 to {upper:.0f}, got {value!r}")
        bound = f" and < {upper:g}" if math.isfinite(upper) else ""
        raise FedleakError(f"{name} must be a finite number > 0{bound}, got {value!r}")
    return int(value) if integer else float(value)


def claimed_setting(defense, rounds: int, clients: Optional[int]) -> tuple[DPSetting, int]:
    """(σ, C, T) and K from the ``--defense`` specs; only client-level central DP is audited here."""
    from ..audit.plan.config import parse_defenses
    from ..fl.update_filters import UpdateFilter

    specs = [defense] if isinstance(defense, str) else list(defense or ())
    try:
        parsed, _, _ = parse_defenses(specs)
    except FedleakError as exc:
        raise FedleakError(f"--defense: {exc}") from None
    if not isinstance(parsed, UpdateFilter) or parsed.kind != "flower-central-dp":
        raise FedleakError("--defense: dp-audit audits client-level DP; give the claimed setting as "
                           "flower-central-dp:noise=σ,clip=C,clients=K")
    p = parsed.params
    k = int(p["clients"])
    if clients is not None and int(clients) != k:
        raise FedleakError(f"--clients {clients} differs from clients={k} in --defense")
    if p.get("adaptive"):
        raise FedleakError("--defense: adaptive clipping is not audited yet (fixed clipping only)")
    return DPSetting(float(p["noise"]), float(p["clip"]), rounds), k


def dp_audit(*, defense, model: str = "femnist-cnn", data: str = "digits", data_root=None, clients: Optional[int] = None,
             samples: int = 20, rounds: int = 10, epochs: int = 1, batch_size: Optional[int] = None, lr: float = 0.004,
             canaries: int = 1000, canary_scale: float = 10.0, delta: float = 1e-5, seed: int = 0, model_seed: int = 0,
             threat: str = "all-iterates", fault: Sequence[str] = (), out=None, log=None, plot: bool = True) -> dict:
    """Run the audit; returns the ``dp-audit.json`` content and writes it (and the plot) into ``out`` if given."""
    from ..types import Protocol

    started = time.perf_counter()
    rounds = _positive("--rounds", rounds, integer=True, upper=100_000)
    m = _positive("--canaries", canaries, integer=True, upper=MAX_CANARIES)
    if m < 2:
        raise FedleakError(f"--canaries must be at least 2, got {m}")
    delta = _positive("--delta", delta, upper=1.0)
    if delta >= 1:
        raise FedleakError(f"--delta must be a finite number > 0 and < 1, got {delta!r}")
    samples = _positive("--samples", samples, integer=True, upper=100_000)
    if threat not in THREATS:
        raise FedleakError(f"--threat must be one of {', '.join(THREATS)}, got {threat!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise FedleakError(f"--seed must be an integer ≥ 0, got {seed!r}")
    Canaries(m, 1, seed, canary_scale)  # checks --canary-scale before any work
    setting, k = claimed_setting(defense, rounds, clients)
    faults = Fault.parse(fault, k)
    protocol = Protocol("fedavg", epochs, batch_size, lr, True)
    if out is None:
        return _run(locals(), None)
    from ..runs.lock import OutLock
    from ..runs.outdir import prepare_out_dir

    out_dir = prepare_out_dir(out, "--out")
    with OutLock(out_dir, "fedleak dp-audit"):  # a second dp-audit on this --out refuses before any work
        return _run(locals(), out_dir)


def _run(a: dict, out_dir: Optional[Path]) -> dict:
    """The audit once its inputs are valid (``a``: :func:`dp_audit`'s checked arguments)."""
    from .. import data as data_mod
    from .. import models

    started, k, m, seed, delta, rounds, threat = a["started"], a["k"], a["m"], a["seed"], a["delta"], a["rounds"], a["threat"]
    setting, faults, protocol, log = a["setting"], a["faults"], a["protocol"], a["log"]
    data, model, samples, canary_scale = a["data"], a["model"], a["samples"], a["canary_scale"]
    epochs, batch_size, lr = a["epochs"], a["batch_size"], a["lr"]
    spec, client_data = data_mod.load(data, root=a["data_root"], num_clients=k, samples_per_client=samples, seed=seed)
    if len(client_data) < k:
        raise FedleakError(f"--data {data} has only {len(client_data)} clients of {samples} samples; asked for {k}")
    net = models.build(model, spec, seed=a["model_seed"])
    dim = sum(p.numel() for p in net.parameters())
    canary_set = Canaries(m, dim, seed, canary_scale, k)
    fed = run_federation(net, client_data, protocol, setting, canary_set, fault=faults, seed=seed, log=log)
    analysis_start = time.perf_counter()
    mu_claimed = composed_mu(setting.noise, rounds)
    bounds = {t: lower_bounds(fed.scores[t], fed.included, delta) for t in THREATS}
    estimates = {t: estimate(fed.scores[t], fed.included, delta, null_sd=1.0) for t in THREATS}
    check = diagnose(fed.scores[threat], fed.included, fed.raw_norm, fed.node, mu_claimed, setting.noise, k,
                     delta=delta)
    result = {
        "epsilon_accountant": accountant_epsilons(setting.noise, rounds, delta),
        "epsilon_lower": bounds[threat]["epsilon_gdp"],
        "epsilon_estimate": estimates[threat]["epsilon"],
        "evidence": {"epsilon_lower": "proved", "epsilon_estimate": "estimated"},
        "threat": threat, "canaries": m, "canaries_inserted": int(fed.included.sum()), "rounds": rounds,
        "delta": delta, "lower_bounds": bounds, "estimates": estimates, "misconfiguration": check,
        "setting": {"defense": f"flower-central-dp:noise={setting.noise:g},clip={setting.clip:g},clients={k}",
                    "noise": setting.noise, "clip": setting.clip, "clients": k, "mu_gdp": mu_claimed},
        "fault": faults.to_json(), "canary_scale": canary_scale, "model": model, "data": data, "dimension": dim,
        "samples": samples, "protocol": {"algorithm": "fedavg", "epochs": epochs, "batch_size": batch_size, "lr": lr},
        "seed": seed, "threads": torch.get_num_threads(), "device": "cpu", "machine": platform.machine(),
        "methods": {
            "epsilon_lower": "Mahloujifar, Melis, Chaudhuri (ICML 2025) one-run f-DP audit, Gaussian family, on "
                             "Steinke, Nasr, Jagielski (NeurIPS 2023, Alg. 1) guesses: k = ⌈0.1·m⌉ highest 'in', k lowest "
                             "'out', fixed in advance; 95 % confidence; lower_bounds.epsilon_approx_dp is Steinke et al.'s "
                             "(ε, δ)-DP analysis (§5) of the same guesses",
            "epsilon_estimate": "Andrew et al. (ICLR 2024) Gaussian fit, equal variances (μ = Δmean/sd, exact GDP "
                                "curve); estimates.*.epsilon_separate_variances with one variance each",
            "epsilon_accountant": "exact GDP (Dong, Roth, Su Cor. 2.13/3.3), Opacus RDP and PRV (q = 1), Flower RdpAccountant"},
    }
    result["cost_seconds"] = {**{k2: round(v, 3) for k2, v in fed.seconds.items()},
                              "analysis": round(time.perf_counter() - analysis_start, 3),
                              "total": round(time.perf_counter() - started, 3)}
    from .report import plot as draw, summary_lines

    result["summary"] = summary_lines(result)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        if a["plot"]:
            draw(result, fed.scores, fed.included, out_dir / "dp-audit.png")
        (out_dir / "dp-audit.json").write_text(json.dumps(result, indent=2, allow_nan=True) + "\n")
    return result
