"""Benchmark: seconds per attack iteration of Dimitrov et al.'s ``ours-prior`` and its peak memory.

Setting of the paper's main row: FEMNIST net (``femnist-cnn``), E = 10 local epochs of 10 batches
of m = 5 (N = 50), so every attack iteration differentiates through an unrolled 100-step SGD
simulation over E·N = 500 dummy images, plus the l2_mean epoch prior. The client data are 50
``digits`` images (bundled, FEMNIST-like 28×28); the cost does not depend on the pixel values.

Writes ``benchmarks/results/dimitrov-<host>-<time>.json`` (``--out benchmarks/results/dimitrov.json`` updates the tracked file)::

    python benchmarks/bench_dimitrov.py [--iterations 10] [--threads 1] [--device cpu] [--out PATH]

Peak memory: the process's maximum resident set size (``resource.getrusage``), the part of it the
attack added over the set-up (data, model, update), and on CUDA ``torch.cuda.max_memory_allocated``.
The 1-minute load average is recorded too: on a shared machine it explains slow timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

from fedleak.attacks import build as build_attack
from fedleak.attacks.labels import labels_to_counts
from fedleak.data import load
from fedleak.fl import client_update
from fedleak.models import build as build_model
from fedleak.types import Protocol
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default


def _max_rss_mib() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024.0 if sys.platform != "darwin" else rss / 2**20  # KiB on Linux, bytes on macOS


def run(iterations: int, threads: int, device: str, epochs: int = 10, batch_size: int = 5, num_samples: int = 50) -> dict:
    torch.set_num_threads(threads)
    spec, clients = load("digits", None, num_clients=1, samples_per_client=num_samples, seed=0)
    client = clients[0].to(device)
    model = build_model("femnist-cnn", spec, seed=0).to(device)
    protocol = Protocol("fedavg", epochs=epochs, batch_size=batch_size, lr=0.004)
    counts = labels_to_counts(client.labels.cpu(), spec.num_classes).tolist()
    update = client_update(model, client, protocol, seed=0, metadata={"label_counts": counts})

    rss_setup = _max_rss_mib()  # data, model and update in memory; no attack graph yet
    warm = build_attack("dimitrov", iterations=1)
    warm.reconstruct(update, model, spec)  # first call pays one-time costs (allocator, kernels)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    attack = build_attack("dimitrov", iterations=iterations)
    started = time.perf_counter()
    rec = attack.reconstruct(update, model, spec)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    per_iteration = rec.extras["seconds_per_iteration"]
    result = {
        "benchmark": "dimitrov ours-prior, one attack iteration",
        "setting": {"model": "femnist-cnn", "epochs": epochs, "batch_size": batch_size, "num_samples": num_samples,
                    "local_steps": update.num_steps, "dummy_images": epochs * num_samples, "prior": "l2_mean"},
        "device": device, "threads": threads, "iterations": iterations,
        "seconds_per_iteration": per_iteration,
        "seconds_total": wall,
        "estimated_seconds_400_iterations": 400 * per_iteration,
        "estimated_hours_10_clients_x_400_iterations": 10 * 400 * per_iteration / 3600,
        "peak_rss_mib": _max_rss_mib(),
        "peak_rss_attack_mib": _max_rss_mib() - rss_setup,
        "load_average_1min": os.getloadavg()[0], "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
    }
    if device.startswith("cuda"):
        result["cuda_max_memory_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        result["gpu"] = torch.cuda.get_device_name()
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=fresh("dimitrov.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args(argv)
    result = run(args.iterations, args.threads, args.device)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
