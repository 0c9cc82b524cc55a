"""Faults planted inside the real Flower, found by the client-level audit's canary nodes (issue #42, item 3).

``fedleak.dp_audit`` at the client level runs the federation through Flower 1.42's own code (client-side mods under
its DP wrappers, :mod:`fedleak.privacy.federation`) with canary nodes (:mod:`fedleak.integrations.flower.canary_nodes`).
Faults (:mod:`fedleak.privacy.flower_faults`): the mod missing on 2 of 10 nodes (nodes 3, 7 built without it),
clipping skipped (Flower's clipping functions patched), noise ×0.5 and ×0.1 in the server wrapper
(``DifferentialPrivacyClientSideFixedClipping``) and noise ×0.5 in ``LocalDpMod``; and correct configurations,
which must not be flagged. lenet on the embedded digits, 10 clients × 10 samples, 5 rounds, claimed ε = 4 at
δ = 1e-5 (central: σ = √5/μ(4); LocalDpMod: per-round ε 24 at δ 1e-5, clip 1), 1,000 canaries.

Per fault: library, function planted, detected (verdict not "consistent at this budget"), p (Bonferroni over the
claim test, the bound's guesses against the claimed μ, and the smallest per-node test), nodes named, canaries,
CPU seconds. Written into ``flower_faults`` of
``benchmarks/results/dp_audit_planted.json`` (the Opacus entries are left as they are) after every run.
Run under ``nice -n 19`` with OMP_NUM_THREADS=1. Usage: python benchmarks/bench_dp_audit_flower.py [--correct N]
[--only central|local] (``--only``: re-measure that mechanism's rows, keep the other's as measured).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "dp_audit_planted.json"
ROUNDS, CLIENTS, M, DELTA = 5, 10, 1000, 1e-5


def run(defense: str, fault: list, seed: int = 0) -> dict:
    import torch

    from fedleak.privacy.audit import dp_audit
    from fedleak.privacy.federation import Fault
    from fedleak.privacy.flower_faults import planted

    start = time.process_time()
    f = Fault.parse(fault, CLIENTS)
    with planted(f.noise_factor, f.no_clip) as where:
        pass  # the functions the audit's own planting patches (the audit plants them itself, from --fault)
    r = dp_audit(defense=defense, model="lenet", samples=10, rounds=ROUNDS, canaries=M, seed=seed, fault=fault,
                 plot=False, **({"clients": CLIENTS} if defense.startswith("flower-local-dp") else {}))
    from fedleak.privacy.one_run import Guesses, gdp_p_value

    check, v = r["misconfiguration"], r["verdict"]
    node_p = min([n["p_value"] for n in check["clients"]] + [n["p_value"] for n in check["reply_test"]] + [1.0])
    b = r["lower_bounds"][r["threat"]]  # the 95 % bound's two-sided guesses, tested against the claim itself
    bound_p = gdp_p_value(check["mu_claimed"], Guesses(b["canaries"], b["guesses"], b["correct"], b["guess_in"],
                                                       b["guess_out"]))
    return {"library": "flwr 1.42", "fault": ",".join(fault) or None, "defense": defense,
            "function_planted": where or (["ClientApp of nodes " + ", ".join(map(str, f.no_dp_clients))
                                          + " built without the mod"] if f.no_dp_clients else None),
            "seed": seed, "canaries": M, "canaries_inserted": r["canaries_inserted"], "rounds": ROUNDS,
            "verdict": v["verdict"], "exceeds_claim": r["exceeds_claim"],
            "detected": v["verdict"] != "consistent at this budget",
            "p": min(1.0, 3 * min(check["claim_test"]["p_value"], bound_p, node_p)),
            "p_note": "Bonferroni over three pre-registered tests: the claim test (30 % one-sided guesses), the 95 % "
                      "bound's guesses (10 % each side) against the claimed μ, the smallest per-node test",
            "claim_test_p": check["claim_test"]["p_value"], "bound_guesses_p": bound_p, "smallest_node_p": node_p, "nodes_flagged_by_aggregates": check["flagged_clients"],
            "nodes_flagged_by_replies": check["nodes_flagged_by_replies"],
            "epsilon_lower": r["epsilon_lower"], "epsilon_estimate": r["epsilon_estimate"],
            "findings": check["findings"], "cpu_seconds": round(time.process_time() - start, 1),
            "threads": torch.get_num_threads()}


def main() -> None:
    from fedleak.privacy.gdp import mu_of

    ap = argparse.ArgumentParser()
    ap.add_argument("--correct", type=int, default=10, help="correct configurations per mechanism (default 10)")
    ap.add_argument("--only", choices=["central", "local"], help="re-measure one mechanism's rows, keep the other's")
    args = ap.parse_args()
    noise = math.sqrt(ROUNDS) / mu_of(4.0, DELTA)
    central = f"flower-central-dp:noise={noise:.6f},clip=1,clients={CLIENTS}"
    local = "flower-local-dp:clip=1,sensitivity=1,epsilon=24,delta=1e-5"
    data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"meta": {}, "faults": []}
    kept = data.get("flower_faults") if args.only else None
    out = data["flower_faults"] = {"meta": {"library": "flwr 1.42", "machine": platform.machine(), "device": "cpu",
                                            "model": "lenet", "data": "embedded digits", "clients": CLIENTS,
                                            "rounds": ROUNDS, "canaries": M, "claim": f"central σ = {noise:.4f} "
                                            "(exact GDP ε = 4 at δ = 1e-5); LocalDpMod ε = 24/round, clip 1"},
                                   "faults": [], "correct": []}

    def save():
        out["meta"]["load_average"] = os.getloadavg()
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")

    mechanisms = {"central": central, "local": local}
    wanted = [mechanisms[args.only]] if args.only else [central, local]
    if kept:  # the other mechanism's rows as they were measured
        out["faults"] = [r for r in kept["faults"] if r["defense"] not in wanted]
        out["correct"] = [r for r in kept["correct"] if r["defense"] not in wanted]
    for defense, fault in ((central, ["no-dp=3,7"]), (central, ["no-clip"]), (central, ["noise=0.5"]),
                           (central, ["noise=0.1"]), (local, ["no-dp=3,7"]), (local, ["noise=0.5"])):
        if defense in wanted:
            out["faults"].append(run(defense, fault))
            save()
    for seed in range(args.correct):
        for defense in wanted:
            out["correct"].append(run(defense, [], seed=100 + seed))
            save()
    out["correct_flagged"] = sum(r["detected"] for r in out["correct"])
    out["done"] = True
    save()
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
