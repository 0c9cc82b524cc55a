"""Example-level DP audit: one DP-SGD client with Dirac gradient canaries, proved bound vs Opacus's ε (issue #29, item 2).

lenet (44,054 parameters) on the embedded digits, one client of 20 samples, clip C = 1, δ = 1e-5, all-iterates
threat (white-box, Steinke et al. NeurIPS 2023 §7). Two samplings:

* full batch (q = 1), 20 steps: exactly √T/σ-GDP, σ set so that the exact ε is 1, 4 or 8 (the headline bound is
  the Gaussian f-DP one, compared with the exact curve and Opacus's PRV);
* batch 5 (q = 1/4, canaries Poisson-sampled), 10 rounds × 4 = 40 steps, σ from Opacus's ``get_noise_multiplier``
  for a PRV ε of 1, 4 or 8 (the headline bound is Steinke et al.'s assumption-free (ε, δ) one).

Per ε seeds 0..S-1 with 1,000 canaries, at ε = 4 one run with 10,000; then the misconfigurations (claimed ε = 4,
1,000 canaries): noise off, noise 10× low, clipping missing. Writes benchmarks/results/dp_audit_sgd.json with
thread count, load average and device; ``benchmarks/dp_audit_doc.py`` puts the numbers into docs/dp-audit.md.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_dp_audit_sgd.py --out benchmarks/results/dp_audit_sgd.json
"""

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

from _results import fresh

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

DELTA = 1e-5
MODEL = "lenet"
SAMPLES = 20
SAMPLINGS = {"full batch": {"batch_size": None, "rounds": 20}, "batch 5": {"batch_size": 5, "rounds": 10}}


def noise_for(epsilon: float, sampling: str) -> float:
    s = SAMPLINGS[sampling]
    if s["batch_size"] is None:
        from fedleak.privacy.gdp import mu_of

        return math.sqrt(s["rounds"]) / mu_of(epsilon, DELTA)
    from opacus.accountants.utils import get_noise_multiplier

    q = s["batch_size"] / SAMPLES
    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=DELTA, sample_rate=q,
                                      steps=s["rounds"] * math.ceil(SAMPLES / s["batch_size"]), accountant="prv",
                                      epsilon_tolerance=0.005))


def one(sampling: str, noise: float, canaries: int, seed: int, fault=()) -> dict:
    from fedleak.privacy import dp_audit

    s = SAMPLINGS[sampling]
    r = dp_audit(defense=f"dp-sgd:clip=1,noise={noise:.6g}", level="example", model=MODEL, samples=SAMPLES,
                 rounds=s["rounds"], batch_size=s["batch_size"], canaries=canaries, seed=seed, delta=DELTA,
                 fault=fault, plot=False)
    acc = r["epsilon_accountant"]
    lb = r["lower_bounds"]["all-iterates"]
    row = {"sampling": sampling, "seed": seed, "canaries": canaries, "noise_multiplier": noise, "fault": list(fault),
           "sample_rate": r["sample_rate"], "steps": r["steps"], "epsilon_accountant": acc,
           "epsilon_lower": r["epsilon_lower"], "epsilon_lower_gdp": lb["epsilon_gdp"],
           "epsilon_lower_approx_dp": lb["epsilon_approx_dp"], "epsilon_estimate": r["epsilon_estimate"],
           "epsilon_estimate_final_model": r["estimates"]["final-model"]["epsilon"],
           "ratio_lower_to_prv": r["epsilon_lower"] / acc["opacus_prv"],
           "estimate_error_vs_prv": r["epsilon_estimate"] / acc["opacus_prv"] - 1,
           "exceeds_claim": r["exceeds_claim"], "claim_p_value": r["misconfiguration"]["claim_test"]["p_value"],
           "detected": r["misconfiguration"]["detected"], "findings": r["misconfiguration"]["findings"],
           "cost_seconds": r["cost_seconds"]}
    print(json.dumps({k: row[k] for k in ("sampling", "seed", "canaries", "fault", "epsilon_lower", "epsilon_estimate",
                                           "ratio_lower_to_prv", "claim_p_value", "detected")}), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--many", type=int, default=10000, help="canaries of the extra run at ε = 4 (≤ 44,054)")
    parser.add_argument("--out", default=fresh("dp_audit_sgd.json"), help="default: a new timestamped file in "
                        "benchmarks/results/; an existing --out is resumed (its finished runs are kept)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    path = Path(args.out)
    done = json.loads(path.read_text()).get("done", {}) if path.exists() else {}
    started = time.time()
    load_before = os.getloadavg()
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_count": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "device": "cpu",
              "python": platform.python_version(), "machine": platform.machine(),
              "setup": {"model": MODEL, "data": "digits", "samples": SAMPLES, "clip": 1.0, "delta": DELTA,
                        "threat": "all-iterates", "samplings": SAMPLINGS},
              "epsilons": {}, "misconfigurations": {}, "done": done}

    def cached(key: str, *a):
        if key not in done:
            done[key] = one(*a)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=1) + "\n")  # partial: resumable
        return done[key]

    for sampling in SAMPLINGS:
        for eps in (1.0, 4.0, 8.0):
            noise = noise_for(eps, sampling)
            rows = [cached(f"{sampling}-eps{eps:g}-m1000-seed{s}", sampling, noise, 1000, s) for s in range(args.seeds)]
            if eps == 4.0 and args.many:
                rows.append(cached(f"{sampling}-eps4-m{args.many}-seed0", sampling, noise, args.many, 0))
            result["epsilons"][f"{sampling}/{eps:g}"] = {"sampling": sampling, "epsilon": eps, "noise_multiplier": noise,
                                                         "runs": rows}
        noise4 = noise_for(4.0, sampling)
        for name, fault in (("none", ()), ("noise off", ("noise=0",)), ("noise 10x low", ("noise=0.1",)),
                            ("clipping missing", ("no-clip",))):
            result["misconfigurations"][f"{sampling}/{name}"] = cached(f"{sampling}-fault-{name}", sampling, noise4,
                                                                      1000, 0, fault)
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_seconds"] = round(time.time() - started, 1)
    result["cost_seconds_sum"] = round(sum(r["cost_seconds"]["total"] for r in done.values()), 1)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
