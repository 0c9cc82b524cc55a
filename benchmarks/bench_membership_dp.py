"""Membership under Flower's central DP wrapper (issue 45, item 3): the membership curve against the noise σ.

A FlowerTune-shaped client scaled to ``llama-tiny`` (LoRA r 8, dropout 0.075 on PEFT's targets, AdamW at lr 5e-5,
10 local steps of 4 × 16 tokens; 40 members and 40 non-members held back from the same shuffled corpus); the
client's update passes through ``flower-central-dp:noise=σ,clip=C,clients=K`` (fedleak's copy of Flower's
``DifferentialPrivacyClientSideFixedClipping`` + server noise σ·C/K on the mean, :mod:`fedleak.fl.update_filters`),
then ProjRes, the joint fit and the AdamW fit score the candidates (:func:`fedleak.audit.execute.membership.measure`). One
row per σ with Flower's ε, AUC (DeLong 95 % CI) and TPR at 1 % FPR; the results file is rewritten after every
row. Flower's central DP adds its noise to the aggregate the server releases, after the server has seen each
client's clipped update: against the honest-but-curious server itself it is clipping only. For contrast, rows of
Flower's local DP (``flower-local-dp``: the client adds Laplace noise of its ε before sending) follow.

    OMP_NUM_THREADS=1 nice -n 10 python benchmarks/bench_membership_dp.py [--clip 0.001] [--clients 10] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from fedleak import data, models
from fedleak.audit.execute.membership import measure
from fedleak.fl.update_filters import UpdateFilter
from fedleak.types import ClientData, Protocol
from _results import fresh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", default="0,0.01,0.1,1,10")
    parser.add_argument("--clip", type=float, default=1e-3)
    parser.add_argument("--local-epsilon", default="10,1,0.1", help="flower-local-dp rows (sensitivity = clip)")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args()
    out = Path(args.out or fresh("membership_dp.json"))
    n = 40
    spec, pool = data.load("text", num_clients=1, samples_per_client=2 * n + 8, seq_len=16, task="causal-lm",
                           seed=args.seed)
    c = pool[0]
    model = models.build("llama-tiny", spec, seed=0, lora=8, lora_dropout=0.075, lora_targets="peft")
    victim = ClientData(c.inputs[:n], c.labels[:n], "client")
    outside = ClientData(c.inputs[n:], c.labels[n:], "held-back")
    protocol = Protocol("fedavg", 1, 4, 5e-5, optimizer="adamw")
    record = {"case": "membership under flower-central-dp", "model": "llama-tiny", "lora": model.lora_config,
              "shape": "4 x 16 tokens, 10 local steps", "optimizer": "adamw, lr 5e-05", "seed": args.seed,
              "split": f"{n} members, {n} non-members held back from the same shuffled corpus",
              "clip": args.clip, "clients": args.clients,
              "environment": {"threads": torch.get_num_threads(), "load_average": list(os.getloadavg()),
                              "device": "cpu", "torch": torch.__version__}, "rows": []}
    settings = [("central", float(s), UpdateFilter.parse(f"flower-central-dp:noise={float(s):g},clip={args.clip:g},"
                                                         f"clients={args.clients}") if float(s) > 0 else None)
                for s in args.noise.split(",")]
    settings += [("local", float(e), UpdateFilter.parse(f"flower-local-dp:clip={args.clip:g},sensitivity={args.clip:g},"
                                                       f"epsilon={float(e):g},delta=1e-5"))
                 for e in args.local_epsilon.split(",") if e]
    for wrapper, sigma, defense in settings:
        start = time.process_time()
        entry = measure(model, victim, outside, protocol, count=2 * n, seed=args.seed, spec=spec, defense=defense)
        eps = (entry.get("defense") or {}).get("epsilon")
        row = {"wrapper": wrapper, "noise" if wrapper == "central" else "epsilon": sigma,
               "epsilon_flower": eps.get("epsilon_flower", eps.get("epsilon")) if isinstance(eps, dict) else eps,
               "defense": entry.get("defense"), "cpu_seconds": time.process_time() - start,
               **{name: {k: s[k] for k in ("auc", "auc_ci95", "tpr_at_1pct_fpr")} for name, s in entry["attacks"].items()}}
        record["rows"].append(row)
        record["load_average_after"] = list(os.getloadavg())
        out.write_text(json.dumps(record, indent=1, default=str))
        print(json.dumps({"wrapper": wrapper, "value": sigma, **{k: round(v["auc"], 3) for k, v in entry["attacks"].items()}}), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
