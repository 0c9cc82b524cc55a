"""Faults planted inside the real Flower, found by the client-level audit's canary nodes (issue #42, item 3).

``fedleak.dp_audit`` at the client level runs the federation through Flower 1.42's own code (client-side mods under
its DP wrappers, :mod:`fedleak.privacy.federation`) with canary nodes (:mod:`fedleak.integrations.flower.canary_nodes`).
Faults (:mod:`fedleak.privacy.flower_faults`): the mod missing on 2 of 10 nodes (nodes 3, 7 built without it),
clipping skipped (Flower's clipping functions patched), noise ×0.5 and ×0.1 in the server wrapper
(``DifferentialPrivacyClientSideFixedClipping``), noise ×0.5 in the adaptive wrapper and in ``LocalDpMod``; 20
correct configurations (fixed clipping × 14 seeds, LocalDpMod × 6), which must not be flagged; and adaptive clipping
as Flower 1.42 releases it, × 6 seeds (``adaptive``), kept apart: its wrappers update the clip norm before they add
the noise (``dp_adaptive_clipping.py``: ``_geometric_update`` runs before ``_add_noise_to_aggregated_arrays``), so
round t's updates, clipped at C_t, get σ·C_{t+1} — below the claim whenever C shrinks. A flag there is the library
falling short of its claim, not a false alarm, so those runs are not counted among the correct configurations.
lenet on the embedded digits, 10 clients × 10 samples, 5 rounds, claimed ε = 4 at δ = 1e-5 (central: σ = √5/μ(4);
LocalDpMod: per-round ε 24 at δ 1e-5, clip 1), 1,000 canaries.

Beside them (``native``), nothing planted: flwr 1.42's DP wrappers clip and noise BatchNorm's integer counter with
the weights (flwr #8381, fixed in 1.45), found from the replies and the release (:func:`run_batchnorm`,
:mod:`fedleak.privacy.buffer_check`).

Per fault: library, function planted, detected (verdict not "consistent at this budget"), p (Bonferroni ×4 over the
pre-registered tests: the claim test, the 95 % bound's guesses against the claimed μ, the per-node tests, the
noise-scale χ² test of the released aggregates — the verdict's ``tests``, so p < 0.01 is never "consistent"),
nodes named, canaries, CPU seconds. Written into ``flower_faults`` of ``--out`` after every run (the file's other
keys, the Opacus entries, re-read and kept); rows already there are skipped unless ``--redo``.
Run under ``nice -n 19`` with OMP_NUM_THREADS=1. Usage: python benchmarks/bench_dp_audit_flower.py
--out benchmarks/results/dp_audit_planted.json [--only central|adaptive|local|batchnorm] [--redo].
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402

ROUNDS, CLIENTS, M, DELTA = 5, 10, 1000, 1e-5
#: correct configurations: seeds per mechanism (20 in all)
CORRECT = {"central": 14, "local": 6}
#: adaptive clipping as Flower 1.42 releases it (noise with the next round's clip norm): reported apart
ADAPTIVE = 6
#: canaries of the BatchNorm row (no planted fault: Flower < 1.45 noises integer buffers, flwr #8381)
BN_CANARIES = 200
P_NOTE = ("Bonferroni ×4 over the pre-registered tests: the claim test (one-sided guesses, claim_design), the 95 % "
          "bound's guesses (10 % each side) against the claimed μ, the per-node tests (aggregates Bonferroni ×K, "
          "replies ×2K, then ×2), the noise-scale χ² test of the released aggregates on the unseen canaries' "
          "directions (≥ 0.9× the claimed noise); each is one of the verdict's tests, so p < 0.01 is never "
          "'consistent at this budget'")


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
    check, v = r["misconfiguration"], r["verdict"]
    tests = {"claim test": check["claim_test"]["p_value"], **v["tests"]}
    noise = check["noise_test"]
    return {"library": "flwr 1.42", "fault": ",".join(fault) or None, "defense": defense,
            "function_planted": where or (["ClientApp of nodes " + ", ".join(map(str, f.no_dp_clients))
                                          + " built without the mod"] if f.no_dp_clients else None),
            "seed": seed, "canaries": M, "canaries_inserted": r["canaries_inserted"], "rounds": ROUNDS,
            "verdict": v["verdict"], "exceeds_claim": r["exceeds_claim"],
            "detected": v["verdict"] != "consistent at this budget",
            "p": min(1.0, len(tests) * min(tests.values())), "p_note": P_NOTE, "tests": tests,
            "claim_test_p": check["claim_test"]["p_value"], "z_test_p": (v["z_test"] or {}).get("p_value"),
            "bound_guesses_p": v["tests"]["the 95 % bound's guesses against the claimed μ"],
            "noise_test_p": noise["p_value"], "noise_ratio": noise["noise_ratio"], "noise_test_dof": noise["dof"],
            "smallest_node_p": min([n["p_value"] for n in check["clients"]] + [n["p_value"] for n in check["reply_test"]]
                                   + [1.0]),
            "nodes_flagged_by_aggregates": check["flagged_clients"],
            "nodes_flagged_by_replies": check["nodes_flagged_by_replies"],
            "epsilon_claimed": v["epsilon_claimed"], "epsilon_lower": r["epsilon_lower"],
            "epsilon_estimate": r["epsilon_estimate"], "assumption": v["assumption"], "alpha": v["alpha"],
            "epsilon_gdp": r["lower_bounds"][r["threat"]]["epsilon_gdp"],
            "epsilon_approx_dp": r["lower_bounds"][r["threat"]]["epsilon_approx_dp"], "reasons": v["reasons"],
            "findings": check["findings"], "clip_norms": r.get("adaptive_clipping", {}).get("clip_norms"),
            "cpu_seconds": round(time.process_time() - start, 1), "threads": torch.get_num_threads()}


def run_batchnorm(seed: int = 0, canaries: int = BN_CANARIES, clients: int = CLIENTS, rounds: int = ROUNDS,
                  batchnorm: bool = True) -> dict:
    """No planted fault: flwr 1.42's own ``DifferentialPrivacyClientSideFixedClipping`` + ``fixedclipping_mod`` on a
    small model with BatchNorm whose ClientApps send ``state_dict()`` (``num_batches_tracked`` int64 included), as a
    user's Flower app does; canary nodes run the nodes' mods (:func:`run_canary_nodes`). Detected: the integer
    buffer released off the replies' average (:mod:`fedleak.privacy.buffer_check`, an exact check: p is None)."""
    import numpy as np
    import torch
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg

    from fedleak.integrations.flower.canary_nodes import run_canary_nodes
    from fedleak.privacy.gdp import mu_of

    start = time.process_time()
    torch.manual_seed(seed)
    norm = torch.nn.BatchNorm1d(16) if batchnorm else torch.nn.LayerNorm(16)  # LayerNorm: no integer buffer
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), norm, torch.nn.ReLU(), torch.nn.Linear(16, 2))
    g = torch.Generator().manual_seed(seed)
    data = [(torch.randn(20, 8, generator=g), torch.randint(0, 2, (20,), generator=g)) for _ in range(clients)]

    def record(model) -> ArrayRecord:
        return ArrayRecord({k: Array(v.detach().cpu().numpy().copy()) for k, v in model.state_dict().items()})

    def app_of(k: int) -> ClientApp:
        app = ClientApp(mods=[fixedclipping_mod])

        @app.train()
        def train(msg: Message, context) -> Message:
            key, rec = next(iter(msg.content.array_records.items()))
            net.load_state_dict({n: torch.from_numpy(np.asarray(a)).to(net.state_dict()[n].dtype)
                                 for n, a in zip(rec.keys(), rec.to_numpy_ndarrays())})
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            x, y = data[k]
            for i in range(0, 20, 10):  # two local steps: num_batches_tracked += 2
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[i:i + 10]), y[i:i + 10]).backward()
                opt.step()
            return Message(RecordDict({key: record(net), "metrics": MetricRecord({"num-examples": 20})}), reply_to=msg)

        return app

    noise = math.sqrt(rounds) / mu_of(4.0, DELTA)
    initial = record(net)
    r = run_canary_nodes(
        [app_of(k) for k in range(clients)],
        lambda n: DifferentialPrivacyClientSideFixedClipping(FedAvg(fraction_evaluate=0.0, min_train_nodes=n,
                                                                    min_available_nodes=n), noise_multiplier=noise,
                                                             clipping_norm=1.0, num_sampled_clients=n),
        initial, nodes=clients, rounds=rounds, canaries=canaries, clip=1.0, seed=seed)
    finding = r["buffer_finding"]
    return {"library": "flwr 1.42", "fault": "batchnorm", "defense": f"flower-central-dp:noise={noise:.6f},clip=1,"
            f"clients={clients} (DifferentialPrivacyClientSideFixedClipping + fixedclipping_mod)",
            "function_planted": "none: native in flwr 1.42 (flwr #8381)",
            "model": f"Linear(8,16)-{type(norm).__name__}(16)-ReLU-Linear(16,2), state_dict() in the ArrayRecord",
            "seed": seed, "canaries": canaries, "canaries_inserted": r["canaries_inserted"], "rounds": r["rounds"],
            "detected": finding is not None, "p": None,
            "p_note": "exact check (no statistics): an int64 reply entry released off the replies' weighted mean",
            "arrays": (finding or {}).get("arrays", []), "finding": (finding or {}).get("sentence"),
            "detail": (finding or {}).get("detail"), "privacy_violation": False,
            "nodes_flagged_by_replies": r["nodes_flagged_by_replies"],
            "nodes_flagged_by_aggregates": r["nodes_flagged_by_aggregates"],
            "noise_test_p": r["noise_test"].get("p_value"),
            "cpu_seconds": round(time.process_time() - start, 1), "threads": torch.get_num_threads()}


def main() -> None:
    from fedleak.privacy.gdp import mu_of

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=fresh("dp_audit_planted.json"),
                    help="results file; its flower_faults key is (re)written, other keys kept")
    ap.add_argument("--only", choices=["central", "adaptive", "local", "batchnorm"],
                    help="(re-)measure one mechanism's rows (batchnorm: the native row, run_batchnorm)")
    ap.add_argument("--redo", action="store_true", help="re-measure rows already in the file")
    args = ap.parse_args()
    path = Path(args.out)
    noise = math.sqrt(ROUNDS) / mu_of(4.0, DELTA)
    mechanisms = {"central": f"flower-central-dp:noise={noise:.6f},clip=1,clients={CLIENTS}",
                  "adaptive": f"flower-central-dp:noise={noise:.6f},clip=1,clients={CLIENTS},adaptive=1",
                  "local": "flower-local-dp:clip=1,sensitivity=1,epsilon=24,delta=1e-5"}
    old = (json.loads(path.read_text()) if path.exists() else {}).get("flower_faults") or {}
    wanted = {mechanisms[args.only]} if args.only in mechanisms else set() if args.only else set(mechanisms.values())

    def key(row):
        return row["defense"], row["fault"], row["seed"]

    keep = [] if args.redo and not args.only else [r for r in old.get("faults", []) + old.get("correct", [])
                                                     + old.get("adaptive", [])
                                                     if not (args.redo and r["defense"] in wanted)]
    done = {key(r): r for r in keep}
    out = {"meta": {"library": "flwr 1.42", "machine": platform.machine(), "device": "cpu", "model": "lenet",
                    "data": "embedded digits", "clients": CLIENTS, "rounds": ROUNDS, "canaries": M,
                    "claim": f"central σ = {noise:.4f} (exact GDP ε = 4 at δ = 1e-5; adaptive: σ split by Flower "
                             "into σ_Δ and σ_b); LocalDpMod ε = 24/round, clip 1", "p_note": P_NOTE},
           "faults": [], "correct": [], "adaptive": [], "native": []}

    def save():
        out["meta"]["load_average"] = os.getloadavg()
        out["correct_flagged"] = sum(r["detected"] for r in out["correct"])
        out["adaptive_flagged"] = sum(r["detected"] for r in out["adaptive"])
        data = json.loads(path.read_text()) if path.exists() else {}  # re-read: another bench's keys are kept
        data["flower_faults"] = out
        path.write_text(json.dumps(data, indent=1) + "\n")

    faults = [("faults", mechanisms[m], fault, 0) for m, fault in (
        ("central", ["noise=0.5"]), ("central", ["no-dp=3,7"]), ("central", ["no-clip"]), ("central", ["noise=0.1"]),
        ("adaptive", ["noise=0.5"]), ("local", ["no-dp=3,7"]), ("local", ["noise=0.5"]))]
    correct = [("correct", mechanisms[m], [], 100 + seed) for seed in range(max(CORRECT.values())) for m in CORRECT
               if seed < CORRECT[m]]
    adaptive = [("adaptive", mechanisms["adaptive"], [], 100 + seed) for seed in range(ADAPTIVE)]
    plan = [faults[0], *correct[:2], *faults[1:], *correct[2:], *adaptive]
    for part, defense, fault, seed in plan:
        row = done.get((defense, ",".join(fault) or None, seed))
        if row is None and defense in wanted:
            row = run(defense, fault, seed)
        if row is not None:
            out[part].append(row)
            save()
    # native in flwr 1.42, nothing planted: BatchNorm's integer counter clipped and noised (flwr #8381)
    native = [] if args.redo and args.only in (None, "batchnorm") else old.get("native", [])
    out["native"] = native or ([run_batchnorm()] if args.only in (None, "batchnorm") else [])
    save()
    out["done"] = all(done.get((d, ",".join(f) or None, s)) is not None or d in wanted for _, d, f, s in plan)
    save()
    print(f"wrote {path}: {out['correct_flagged']} of {len(out['correct'])} correct configurations flagged; "
          f"batchnorm (native) detected: {[r['detected'] for r in out['native']]}; "
          f"adaptive clipping as released: {out['adaptive_flagged']} of {len(out['adaptive'])} flagged")


if __name__ == "__main__":
    main()
