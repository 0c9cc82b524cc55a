"""The example-level audit through the real Opacus on digits (issue #42): targets, planted faults, correct runs.

The user's code is :func:`train` below, written as an Opacus user writes it (SGD, a DataLoader, PrivacyEngine
.make_private_with_epsilon at ε = 4, δ = 1e-5, max_grad_norm 1, a cross-entropy loop), on sklearn's embedded digits
(1,797 images, 64 features) and a 64-32-10 MLP; fedleak.privacy.audit_opacus runs it with 1,000 canary examples.

1. ``targets``: q = 1 (10 epochs) and q = ¼ with Opacus's Poisson sampler (50 epochs, 200 steps; the setting fixed
   before the subsampled-Gaussian f-DP bound existed, not chosen from its results): the proved ε over the
   accountant's, seeds 0–2, with the CPU seconds; ``targets_median``: the median over the seeds per setting, beside
   the assumption-free (Steinke et al.) bound's median.
2. ``planted`` (-> dp_audit_planted.json): faults planted inside the real Opacus (:mod:`fedleak.privacy.opacus_faults`):
   noise ×0.5, ×0.1, clipping skipped, clipping after the noise (q = 1), Poisson replaced by shuffling (q = ¼, 10
   epochs); per fault: library, function planted, detected, p, canaries.
3. ``correct``: 20 correct configurations (10 seeds at q = 1, 10 at q = ¼ with 5 epochs): how many are flagged.

Run under ``nice -n 19`` with OMP_NUM_THREADS=1; results are written after every run.
Usage: python benchmarks/bench_dp_audit_opacus.py [--quick]
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

RESULTS = Path(__file__).parent / "results"
EPS, DELTA, M = 4.0, 1e-5, 1000


def digits() -> TensorDataset:
    from sklearn.datasets import load_digits

    d = load_digits()
    return TensorDataset(torch.tensor(d.data / 16.0, dtype=torch.float32), torch.tensor(d.target))


def make_train(fraction: float, epochs: int):
    """The user's training function (what an Opacus user writes)."""
    def train(model, dataset):
        from opacus import PrivacyEngine

        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(dataset, batch_size=math.ceil(len(dataset) * fraction))
        engine = PrivacyEngine()
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model, optimizer=optimizer, data_loader=loader, target_epsilon=EPS, target_delta=DELTA,
            epochs=epochs, max_grad_norm=1.0)
        for _ in range(epochs):
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
        return engine
    return train


def net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def run(fraction: float, epochs: int, seed: int, fault: str | None, canaries: int = M) -> dict:
    from fedleak.privacy.opacus_audit import audit_opacus
    from fedleak.privacy.opacus_faults import planted

    start = time.process_time()
    if fault is None:
        r = audit_opacus(make_train(fraction, epochs), net(seed), digits(), canaries=canaries, seed=seed)
        where = None
    else:
        with planted(fault) as where:
            r = audit_opacus(make_train(fraction, epochs), net(seed), digits(), canaries=canaries, seed=seed)
    v = r["verdict"]
    p_sampling = r["sampling"]["p_value"]
    p = min(v["claim_test_p"], p_sampling) if v["verdict"] != "consistent at this budget" else v["claim_test_p"]
    return {"fault": fault, "function_planted": where, "q": r["sample_rate"], "steps": r["steps_observed"],
            "seed": seed, "canaries": canaries, "verdict": v["verdict"], "exceeds_claim": r["exceeds_claim"],
            "detected": v["verdict"] != "consistent at this budget" and p < 0.01, "p": p,
            "claim_test_p": v["claim_test_p"], "sampling_p": p_sampling,
            "epsilon_accountant": r["epsilon_accountant"]["user_accountant"], "epsilon_lower": r["epsilon_lower"],
            "epsilon_assumption_free": r["lower_bounds"]["all-iterates"]["epsilon_approx_dp"],
            "epsilon_subsampled_gaussian": r["lower_bounds"]["all-iterates"].get("subsampled_gaussian",
                                                                                {}).get("epsilon"),
            "ratio": r["epsilon_lower"] / r["epsilon_accountant"]["user_accountant"],
            "epsilon_estimate": r["epsilon_estimate"], "assumption": v["assumption"],
            "smallest_noise_fault": v["smallest_noise_fault"], "findings": r["misconfiguration"]["findings"],
            "cpu_seconds": round(time.process_time() - start, 1), "wall_seconds": r["cost_seconds"]}


def medians(rows: list) -> list:
    """Per setting: the median over its seeds of the proved / accountant ratio, the assumption-free one, CPU s."""
    import statistics

    out = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        group = [r for r in rows if r["setting"] == setting]
        out.append({"setting": setting, "seeds": [r["seed"] for r in group],
                    "ratio_median": statistics.median(r["ratio"] for r in group),
                    "ratio_assumption_free_median": statistics.median(r["epsilon_assumption_free"] /
                                                                      r["epsilon_accountant"] for r in group),
                    "assumption": group[0]["assumption"],
                    "cpu_seconds_median": statistics.median(r["cpu_seconds"] for r in group),
                    "wall_seconds_max": max(sum(r["wall_seconds"].values()) for r in group)})
    return out


def main() -> None:
    import opacus

    quick = "--quick" in sys.argv
    meta = {"library": f"opacus {opacus.__version__}", "torch": torch.__version__, "threads": torch.get_num_threads(),
            "device": "cpu", "machine": platform.machine(), "data": "sklearn digits (1,797)", "model": "MLP 64-32-10",
            "claim": f"make_private_with_epsilon(target_epsilon={EPS}, target_delta={DELTA}), PRV accountant"}
    out = {"meta": meta, "targets": [], "correct": []}
    planted_out = {"meta": meta, "faults": []}

    if (RESULTS / "dp_audit_planted.json").exists():  # bench_dp_audit_flower.py's entries are kept
        flower = json.loads((RESULTS / "dp_audit_planted.json").read_text()).get("flower_faults")
        if flower is not None:
            planted_out["flower_faults"] = flower

    def save():
        meta["load_average"] = os.getloadavg()
        if (RESULTS / "dp_audit_planted.json").exists():  # the Flower bench may have rewritten its entries since
            flower_now = json.loads((RESULTS / "dp_audit_planted.json").read_text()).get("flower_faults")
            if flower_now is not None:
                planted_out["flower_faults"] = flower_now
        (RESULTS / "dp_audit_opacus.json").write_text(json.dumps(out, indent=1) + "\n")
        (RESULTS / "dp_audit_planted.json").write_text(json.dumps(planted_out, indent=1) + "\n")

    seeds = [0] if quick else [0, 1, 2]
    for seed in seeds:
        out["targets"].append({"setting": "q=1, 10 epochs", **run(1.0, 10, seed, None)})
        save()
    for fault in ("noise=0.5", "noise=0.1", "no-clip", "clip-after-noise"):
        planted_out["faults"].append({"library": meta["library"], **run(1.0, 10, 0, fault)})
        save()
    planted_out["faults"].append({"library": meta["library"], **run(0.25, 10, 0, "shuffle")})
    save()
    for seed in seeds:
        out["targets"].append({"setting": "q=1/4 (Poisson), 50 epochs", **run(0.25, 50, seed, None)})
        save()
    out["targets_median"] = medians(out["targets"])
    save()
    for seed in range(2 if quick else 10):
        out["correct"].append({"setting": "q=1, 10 epochs", **run(1.0, 10, 100 + seed, None)})
        save()
        out["correct"].append({"setting": "q=1/4, 5 epochs", **run(0.25, 5, 200 + seed, None)})
        save()
    out["correct_flagged"] = sum(r["verdict"] != "consistent at this budget" for r in out["correct"])
    out["done"] = True
    save()


if __name__ == "__main__":
    main()
