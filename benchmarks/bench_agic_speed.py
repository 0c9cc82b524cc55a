"""Seconds per attack iteration: AGIC's one-batch approximation vs the simulation attack (AGIC Fig. 8b).

AGIC §V-C: a FedAvg update is computed from 8 images split into minibatches of 8, 4, 2 or 1, i.e.
1, 2, 4 or 8 local steps (lr μ = 1e-4, untrained ResNet20-4, CIFAR-10). The simulation attack
(Inverting Gradients on FedAvg, ``invg-simulation``) unrolls every local step in every iteration,
so its cost grows with the number of steps; AGIC's one-batch approximation runs one
forward/backward on the 8 dummy images whatever the number of steps. The paper reports 6.7 min
(AGIC) vs 33.2 min (InvG) for 10,000 iterations at 8 local steps on an RTX 2080 Ti (≈ 5×).

Each case runs one warm-up iteration, then times ``--iterations`` iterations of the real attack
(label inference included, amortized). Writes ``benchmarks/results/agic_speed-<host>-<time>.json`` (``--out benchmarks/results/agic_speed.json`` updates the tracked file).

    python benchmarks/bench_agic_speed.py [--iterations 5] [--model resnet20-4] [--threads 1]
        [--data-root ../shared/data/cifar10] [--device cpu] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

import fedleak
from fedleak.types import Protocol
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default

PAPER = {"agic_minutes_10k": 6.7, "invg_minutes_10k": 33.2, "local_steps": 8, "gpu": "NVIDIA GeForce RTX 2080 Ti"}


def seconds_per_iteration(name: str, update, model, spec, iterations: int) -> float:
    fedleak.attacks.build(name, iterations=1, labels="known").reconstruct(update, model, spec)  # warm-up
    attack = fedleak.attacks.build(name, iterations=iterations, labels="known")
    start = time.perf_counter()
    attack.reconstruct(update, model, spec)
    return (time.perf_counter() - start) / iterations


def load_images(root, count: int):
    if root:
        spec, clients = fedleak.data.load("cifar10", root=root, num_clients=1, samples_per_client=count,
                                          split="test", partition="sequential")
    else:  # no CIFAR files: the embedded 32×32 RGB photos (same shapes, same costs)
        spec, clients = fedleak.data.load("photos", num_clients=1, samples_per_client=count, seed=0)
    return spec, clients[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--model", default="resnet20-4")
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=fresh("agic_speed.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    root = args.data_root if args.data_root and Path(args.data_root).exists() else None
    spec, data = load_images(root, args.images)
    data = data.to(args.device)
    model = fedleak.models.build(args.model, spec, seed=0).to(args.device)
    rows = []
    for batch in sorted({args.images // k for k in (1, 2, 4, 8) if args.images % k == 0}, reverse=True):
        protocol = Protocol("fedavg", epochs=1, batch_size=batch, lr=1e-4, reshuffle=False)
        update = fedleak.client_update(model, data, protocol, seed=0, metadata={"labels": data.labels.tolist()})
        agic = seconds_per_iteration("agic", update, model, spec, args.iterations)
        invg = seconds_per_iteration("invg-simulation", update, model, spec, args.iterations)
        row = {"local_steps": update.num_steps, "batch_size": batch, "agic_s_per_it": agic, "invg_s_per_it": invg,
               "invg_over_agic": invg / agic}
        rows.append(row)
        print(f"{update.num_steps} local steps × batch {batch}: AGIC {agic:.3f} s/it, InvG simulation {invg:.3f} s/it, "
              f"ratio {invg / agic:.2f}", flush=True)
    agic_times = [r["agic_s_per_it"] for r in rows]
    payload = {
        "benchmark": "AGIC one-batch approximation vs InvG simulation, seconds per attack iteration (AGIC Fig. 8b)",
        "model": args.model, "images": args.images, "data": spec.name, "device": args.device,
        "machine": platform.machine(), "processor": platform.processor(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "iterations_timed": args.iterations, "rows": rows,
        "agic_spread": max(agic_times) / min(agic_times),
        "factor_at_max_steps": rows[-1]["invg_over_agic"],
        "paper": {**PAPER, "factor": PAPER["invg_minutes_10k"] / PAPER["agic_minutes_10k"]},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    print(f"AGIC cost spread over local steps: {payload['agic_spread']:.2f}x; InvG/AGIC at "
          f"{rows[-1]['local_steps']} steps: {payload['factor_at_max_steps']:.2f}x (paper: "
          f"{payload['paper']['factor']:.2f}x); wrote {out}")


if __name__ == "__main__":
    main()
