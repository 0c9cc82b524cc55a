"""The dp-audit's consistency checks (issue #29 items 3–4): LocalDpMod, DP-LoRA, and the audit beside the attacks.

* **LocalDpMod** (:mod:`fedleak.privacy.local_dp`): lenet on digits, K = 4 clients × 5 samples, T = 3 rounds,
  100 canary clients, ``flower-local-dp:clip=1,sensitivity=1,epsilon=50,delta=1e-5``; seeds 0..S-1 correctly
  configured and with the mod missing on clients 1 and 3: flagged? which clients? cost.
* **DP-LoRA** (:mod:`fedleak.privacy.lora_check`, Opacus #820): llama-tiny, LoRA rank 4 on PEFT's targets, 8
  sequences of 8 tokens, DP-SGD claim C = 1, σ = 1, η = 0.05, T = 3, B = 4; seeds 0..L-1 correct, and each
  degradation (unprocessed, partial, base-moves) on seeds 0..2: flagged?
* **Beside the attacks** (:mod:`fedleak.privacy.beside`): one example-level audit of lenet (dp-sgd clip 1, σ 1,
  4 steps, 200 canaries) with ``with_attacks`` (a quick ``fedleak audit`` at the same defense): the sentences.

Writes the results JSON with thread count, load average and device; ``benchmarks/dp_audit_doc.py`` puts the
numbers into docs/dp-audit.md.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_dp_audit_checks.py --out benchmarks/results/dp_audit_checks.json
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

from _results import fresh

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

LOCAL = "flower-local-dp:clip=1,sensitivity=1,epsilon=50,delta=1e-5"


def local_runs(seeds: int) -> list:
    from fedleak.privacy.audit import dp_audit

    rows = []
    for fault in ((), ("no-dp=1,3",)):
        for seed in range(seeds):
            r = dp_audit(defense=LOCAL, clients=4, model="lenet", rounds=3, canaries=100, samples=5, fault=fault,
                         seed=seed, plot=False)
            check = r["misconfiguration"]
            rows.append({"fault": list(fault), "seed": seed, "detected": check["detected"],
                         "flagged_clients": check["flagged_clients"], "claim_p_value": check["claim_test"]["p_value"],
                         "epsilon_lower": r["epsilon_lower"], "epsilon_estimate": r["epsilon_estimate"],
                         "epsilon_per_client_gdp": r["epsilon_accountant"]["gdp_exact"],
                         "flower_per_round": r["epsilon_accountant"]["flower_per_round"],
                         "mu_aggregate": r["setting"]["mu_gdp"], "cost_seconds": r["cost_seconds"]["total"]})
    return rows


def lora_runs(seeds: int) -> list:
    from fedleak import data, models
    from fedleak.privacy.lora_check import DEGRADATIONS, LoraDPClaim, check_lora_update, simulate_dp_lora

    spec, clients = data.load("text", num_clients=1, samples_per_client=8, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=4, lora_targets="peft", lora_warmup=2)
    claim = LoraDPClaim(clip=1.0, noise=1.0, lr=0.05, steps=3, batch_size=4)
    rows = []
    for degrade, n in ((None, seeds), *((d, 3) for d in DEGRADATIONS)):
        for seed in range(n):
            start = time.perf_counter()
            before, after = simulate_dp_lora(model, clients[0], claim, seed=seed, degrade=degrade)
            r = check_lora_update(model, before, after, claim)
            rows.append({"degrade": degrade, "seed": seed, "detected": r["detected"],
                         "inconsistent_tensors": sum(not t["consistent"] for t in r["tensors"]),
                         "structural": r["structural"], "whole_norm": r["whole"]["norm"],
                         "whole_interval": r["whole"]["interval"], "seconds": round(time.perf_counter() - start, 3)})
    return rows


def beside_run() -> dict:
    from fedleak.privacy.audit import dp_audit

    r = dp_audit(defense="dp-sgd:clip=1,noise=1", level="example", model="lenet", rounds=4, canaries=200, plot=False,
                 with_attacks=True)
    return {"lines": r["leakage_beside"]["lines"], "threat_models": r["leakage_beside"]["threat_models"],
            "epsilon_lower": r["epsilon_lower"], "epsilon_estimate": r["epsilon_estimate"],
            "epsilon_accountant": r["epsilon_accountant"], "cost_seconds": r["cost_seconds"]["total"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="LocalDpMod seeds per case (default 3)")
    parser.add_argument("--lora-seeds", type=int, default=10, help="correct DP-LoRA updates checked (default 10)")
    parser.add_argument("--out", default=fresh("dp_audit_checks.json"), help="default: a new timestamped file")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    started, load_before = time.time(), os.getloadavg()
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_count": os.cpu_count(),
              "torch_threads": torch.get_num_threads(), "torch": torch.__version__, "device": "cpu",
              "python": platform.python_version(), "machine": platform.machine(),
              "setup": {"local": LOCAL, "local_clients": 4, "local_rounds": 3, "local_canaries": 100,
                        "lora": "llama-tiny r4 (q_proj, v_proj), C 1, σ 1, η 0.05, T 3, B 4"}}
    result["local_dp"] = local_runs(args.seeds)
    result["lora"] = lora_runs(args.lora_seeds)
    result["beside"] = beside_run()
    result["load_average_before"] = [round(x, 2) for x in load_before]
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["wall_seconds"] = round(time.time() - started, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
