"""Fishing (Wen et al., ICML 2022) at batch 64 and 256 on CIFAR-100: the target image out of the aggregate.

    .venv/bin/python benchmarks/bench_fishing.py [--trials 4] [--iterations 500] [--out PATH]

Per batch size and trial (one batch of the CIFAR-100 test split, untrained CIFAR-100 CNN of Dimitrov et
al., class fishing on its last layer): the server targets a class present exactly once in the batch
(an assumption: it knows which classes occur once, e.g. from the label counts of a previous round);
the share of random target classes that would have been present exactly once is reported beside it.
Success: the fished image recovered at PSNR > 20 dB. Beside it, Inverting Gradients on the honest
model's gradient of the same batch at the same budget (one trial per batch size).

CPU, one thread. Writes ``benchmarks/results/malicious-fishing.json``.
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
from fedleak.models.fishing import fishing
from fedleak.types import ClientData, Protocol
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)

RESULTS = Path(__file__).parent / "results" / "malicious-fishing.json"
ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar100"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--batches", default="64,256")
    parser.add_argument("--honest-iterations", type=int, default=None,
                        help="Inverting Gradients on the honest model at batch <= 64 (default: --iterations; 0 skips)")
    parser.add_argument("--root", default=os.environ.get("FEDLEAK_CIFAR100", str(ROOT)))
    parser.add_argument("--out", default=fresh("malicious-fishing.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    sizes = [int(b) for b in args.batches.split(",")]
    spec, pool = fedleak.data.load("cifar100", root=args.root, num_clients=args.trials, samples_per_client=max(sizes),
                                   seed=0, split="test")
    results = {}
    for size in sizes:
        trials = []
        for t, client in enumerate(pool):
            batch = client.subset(size)
            counts = torch.bincount(batch.labels, minlength=spec.num_classes)
            once = (counts == 1).nonzero().flatten()
            row = {"trial": t, "classes_present_once": int(once.numel()),
                   "random_target_once": float(once.numel()) / spec.num_classes}
            if once.numel():
                target = int(once[t % once.numel()])
                model = fishing(fedleak.models.build("cifar100-cnn", spec, seed=t), spec, target_class=target)
                update = client_update(model, batch, Protocol("fedsgd"), seed=t)
                tick = time.perf_counter()
                rec = fedleak.attacks.build("fishing", iterations=args.iterations, seed=t).reconstruct(update, model, spec)
                alone = ClientData(batch.inputs[batch.labels == target], batch.labels[batch.labels == target], "target")
                psnr = fedleak.metrics.evaluate(rec, alone, spec)["psnr_per_input"][0]
                row.update(target=target, counted=rec.extras["target_count"], psnr=psnr, success=bool(psnr and psnr > 20),
                           seconds=time.perf_counter() - tick)
            trials.append(row)
            print(size, row, flush=True)
        honest = None
        honest_iterations = args.iterations if args.honest_iterations is None else args.honest_iterations
        if size <= 64 and honest_iterations:
            batch = pool[0].subset(size)
            model = fedleak.models.build("cifar100-cnn", spec, seed=0)
            tick = time.perf_counter()
            rec = fedleak.attacks.build("inverting-gradients", iterations=honest_iterations, labels="known").reconstruct(
                client_update(model, batch, Protocol("fedsgd"), metadata={"labels": batch.labels.tolist()}), model, spec)
            scores = fedleak.metrics.evaluate(rec, batch, spec)
            honest = {"psnr_mean": scores["psnr"], "best_psnr": max(p for p in scores["psnr_per_input"] if p is not None),
                      "above_20db": sum(1 for p in scores["psnr_per_input"] if p is not None and p > 20),
                      "seconds": time.perf_counter() - tick}
            print(size, "honest IG", honest, flush=True)
        done = [r for r in trials if "psnr" in r]
        results[str(size)] = {"trials": trials, "success": sum(r["success"] for r in done), "attempted": len(done),
                              "mean_psnr": sum(r["psnr"] for r in done) / len(done) if done else None,
                              "random_target_once_mean": sum(r["random_target_once"] for r in trials) / len(trials),
                              "honest_inverting_gradients": honest}
    out = {"results": results, "iterations": args.iterations, "honest_iterations": honest_iterations, "model": "cifar100-cnn (untrained)",
           "data": "CIFAR-100 test split (exact subset)", "seconds": round(time.time() - start, 1),
           "threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
           "date": datetime.datetime.utcnow().isoformat() + "Z", "torch": torch.__version__,
           "python": platform.python_version()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
