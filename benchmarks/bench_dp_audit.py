"""DP audit of a small DP-FedAvg federation: proved lower bound and estimate vs the accountants' ε (issue #29).

lenet (44,054 parameters) on the embedded digits, 10 clients × 20 samples, 10 rounds, every client every
round (no subsampling: the exact GDP curve and the PRV accountant agree), clip C = 1, noise multiplier σ set so
that the exact ε at δ = 1e-5 is 1, 4 or 8. All-iterates threat (final-model reported beside it). Per ε: seeds
0..S-1 with 1,000 canaries; at ε = 4 also one run with more canaries. Then each misconfiguration with 200
canaries. Writes benchmarks/results/dp_audit.json with thread count, load average and device;
``benchmarks/dp_audit_doc.py`` turns it into the numbers of docs/dp-audit.md.

    OMP_NUM_THREADS=1 python benchmarks/bench_dp_audit.py --out benchmarks/results/dp_audit.json
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
ROUNDS = 10
CLIENTS = 10
MODEL = "lenet"


def one(noise: float, canaries: int, seed: int, fault=()) -> dict:
    from fedleak.privacy import dp_audit

    r = dp_audit(defense=f"flower-central-dp:noise={noise:.6g},clip=1,clients={CLIENTS}", rounds=ROUNDS, model=MODEL,
                 canaries=canaries, seed=seed, delta=DELTA, fault=fault, plot=False)
    acc = r["epsilon_accountant"]
    tight = acc["opacus_prv"]
    row = {"seed": seed, "canaries": canaries, "noise_multiplier": noise, "fault": list(fault),
           "epsilon_accountant": acc, "epsilon_lower": r["epsilon_lower"],
           "epsilon_lower_approx_dp": r["lower_bounds"]["all-iterates"]["epsilon_approx_dp"],
           "epsilon_estimate": r["epsilon_estimate"],
           "epsilon_estimate_final_model": r["estimates"]["final-model"]["epsilon"],
           "epsilon_lower_final_model": r["lower_bounds"]["final-model"]["epsilon_gdp"],
           "ratio_lower_to_prv": r["epsilon_lower"] / tight,
           "estimate_error_vs_prv": r["epsilon_estimate"] / tight - 1,
           "claim_p_value": r["misconfiguration"]["claim_test"]["p_value"],
           "detected": r["misconfiguration"]["detected"], "evidence": r["misconfiguration"]["evidence"],
           "flagged_clients": r["misconfiguration"]["flagged_clients"],
           "findings": r["misconfiguration"]["findings"], "cost_seconds": r["cost_seconds"]}
    print(json.dumps({k: row[k] for k in ("seed", "canaries", "fault", "epsilon_lower", "epsilon_estimate",
                                           "ratio_lower_to_prv", "claim_p_value", "detected")}), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--many", type=int, default=10000, help="canaries of the extra run at ε = 4")
    parser.add_argument("--out", default=fresh("dp_audit.json"), help="default: a new timestamped file in "
                        "benchmarks/results/; an existing --out is resumed (its finished runs are kept)")
    args = parser.parse_args()
    import torch

    from fedleak.privacy.gdp import mu_of

    torch.set_num_threads(1)
    path = Path(args.out)
    done = json.loads(path.read_text()).get("done", {}) if path.exists() else {}
    started = time.time()
    load_before = os.getloadavg()
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_count": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "device": "cpu",
              "python": platform.python_version(), "machine": platform.machine(),
              "setup": {"model": MODEL, "data": "digits", "clients": CLIENTS, "samples": 20,
                        "rounds": ROUNDS, "clip": 1.0, "delta": DELTA, "threat": "all-iterates"},
              "epsilons": {}, "misconfigurations": {}, "done": done}

    def cached(key: str, *a):
        if key not in done:
            done[key] = one(*a)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=1) + "\n")  # partial: resumable
        return done[key]

    for eps in (1.0, 4.0, 8.0):
        noise = math.sqrt(ROUNDS) / mu_of(eps, DELTA)
        rows = [cached(f"eps{eps:g}-m1000-seed{s}", noise, 1000, s) for s in range(args.seeds)]
        if eps == 4.0 and args.many:
            rows.append(cached(f"eps4-m{args.many}-seed0", noise, args.many, 0))
        result["epsilons"][f"{eps:g}"] = {"noise_multiplier": noise, "runs": rows}
    noise4 = math.sqrt(ROUNDS) / mu_of(4.0, DELTA)
    for name, fault in (("none", ()), ("noise off by 10x", ("noise=0.1",)), ("no DP on clients 3, 7", ("no-dp=3,7",)),
                        ("clipping skipped in Flower", ("no-clip",))):
        result["misconfigurations"][name] = cached(f"fault-{name}", noise4, 200, 0, fault)
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_seconds"] = round(time.time() - started, 1)
    result["cost_seconds_sum"] = round(sum(r["cost_seconds"]["total"] for r in done.values()), 1)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
