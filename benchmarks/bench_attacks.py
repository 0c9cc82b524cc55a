"""Seconds per attack iteration of Inverting Gradients on femnist-cnn (issue: foundation benchmarks).

Cases: FedSGD with batch 1 and batch 50; a FedAvg update with E=10 epochs of 10 batches of 5
(N=50, 100 local steps), attacked with IG's shared-image simulation. Each case runs a few warm-up
iterations, then times ``--iterations`` iterations of the real attack loop. Writes
``benchmarks/results/attacks.json`` (machine, torch version, threads, seconds/iteration, peak RSS).

    python benchmarks/bench_attacks.py [--iterations 20] [--device cpu] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import torch

import fedleak
from fedleak.types import Protocol
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default


def time_attack(attack_name: str, update, model, spec, iterations: int, **options) -> float:
    warm = fedleak.attacks.build(attack_name, iterations=2, **options)
    warm.reconstruct(update, model, spec)
    attack = fedleak.attacks.build(attack_name, iterations=iterations, **options)
    start = time.perf_counter()
    attack.reconstruct(update, model, spec)
    return (time.perf_counter() - start) / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--out", default=fresh("attacks.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=50, seed=0)
    client = clients[0].to(args.device)
    model = fedleak.models.build("femnist-cnn", spec, seed=0).to(args.device)
    cases = {
        "ig_fedsgd_batch1": (Protocol("fedsgd"), client.subset(1)),
        "ig_fedsgd_batch50": (Protocol("fedsgd"), client),
        "ig_fedavg_E10_10x5": (Protocol("fedavg", epochs=10, batch_size=5, lr=0.004), client),
    }
    results = {}
    for name, (protocol, data) in cases.items():
        update = fedleak.client_update(model, data, protocol, seed=0)
        update.metadata["label_counts"] = torch.bincount(data.labels, minlength=spec.num_classes).tolist()
        seconds = time_attack("inverting-gradients", update, model, spec, args.iterations)
        results[name] = {"seconds_per_iteration": seconds, "num_samples": len(data), "local_steps": update.num_steps}
        print(f"{name:>22}: {seconds * 1000:8.1f} ms / iteration ({update.num_steps} local steps)")
    payload = {
        "benchmark": "inverting-gradients seconds per iteration, femnist-cnn",
        "machine": platform.machine(), "processor": platform.processor(), "torch": torch.__version__,
        "threads": torch.get_num_threads(), "device": args.device, "iterations_timed": args.iterations,
        "load_average": list(os.getloadavg()), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
