"""Trap weights (Boenisch et al., "When the Curious Abandon Honesty", EuroS&P 2023) at batch 100.

    .venv/bin/python benchmarks/bench_cah.py [--trials 3] [--out PATH]

FedSGD, one client with 100 CIFAR-10 images (train split of the exact subset), the ``cah`` imprint
(trap rows in front of the CIFAR-100 CNN of Dimitrov et al.; σ = 0.5, scale 0.95, as in
:func:`fedleak.models.imprint`), rows ∈ {128, 500, 1000}; the ``cah`` attack reads every row
(x̂ = ΔW/Δb, duplicates merged). Verbatim: PSNR > 60 dB; also the share above 20 dB.
Writes ``benchmarks/results/malicious-cah.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

import fedleak
from fedleak.fl import client_update
from fedleak.models.imprint import imprint
from fedleak.types import Protocol
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)

RESULTS = Path(__file__).parent / "results" / "malicious-cah.json"
ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rows", default="128,500,1000")
    parser.add_argument("--root", default=os.environ.get("FEDLEAK_CIFAR10", str(ROOT)))
    parser.add_argument("--out", default=fresh("malicious-cah.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    spec, pool = fedleak.data.load("cifar10", root=args.root, num_clients=args.trials, samples_per_client=args.batch,
                                   seed=0, split="train")
    rows = []
    for k in (int(r) for r in args.rows.split(",")):
        for t, client in enumerate(pool):
            model = imprint(fedleak.models.build("cifar100-cnn", spec, seed=t), spec, bins=k, structure="cah", seed=t)
            rec = fedleak.attacks.build("cah").reconstruct(client_update(model, client, Protocol("fedsgd"), seed=t),
                                                           model, spec)
            psnr = [p for p in fedleak.metrics.evaluate(rec, client, spec)["psnr_per_input"]]
            row = {"rows": k, "trial": t, "verbatim": sum(1 for p in psnr if p is not None and p > 60),
                   "above_20db": sum(1 for p in psnr if p is not None and p > 20), "batch": args.batch}
            rows.append(row)
            print(row, flush=True)
    summary = {}
    for k in sorted({r["rows"] for r in rows}):
        sel = [r for r in rows if r["rows"] == k]
        summary[str(k)] = {"verbatim_percent": 100 * sum(r["verbatim"] for r in sel) / (len(sel) * args.batch),
                           "above_20db_percent": 100 * sum(r["above_20db"] for r in sel) / (len(sel) * args.batch)}
    out = {"summary": summary, "rows": rows, "model": "cah block in front of cifar100-cnn (untrained)",
           "data": "CIFAR-10 train (exact subset)", "seconds": round(time.time() - start, 1),
           "threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
           "date": datetime.datetime.utcnow().isoformat() + "Z", "torch": torch.__version__,
           "python": platform.python_version()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(summary)


if __name__ == "__main__":
    main()
