"""Ray vs local executor: jobs per hour of ``fedleak run`` on a 4-job experiment, and Ray's overhead per job.

The experiment: 4 digits clients × Inverting Gradients against FedSGD on the FEMNIST CNN (one
variant, ``--iterations`` steps each), run end to end through :func:`fedleak.runs.experiment.run_experiment`
into fresh folders:

* ``local-1thread``: the local executor, torch with 1 thread (the Ray workers' setting);
* ``local-Nthreads``: the local executor with torch's default thread count (all cores);
* ``ray``: a local Ray instance with ``--cpus`` CPUs, 1 CPU (and 1 torch thread) per job; wall time
  with and without starting Ray.

Throughput = jobs / wall seconds × 3600. Overhead per job: 8 trivial jobs (1 iteration) on Ray vs
locally, ``(ray wall × cpus − local wall) / jobs``: the CPU-seconds Ray adds to each job (task
shipping, a worker's first imports and data loading). Results (with thread counts and load
averages) go to ``benchmarks/results/executor-<host>-<time>.json``. Run it nice'd on a quiet machine::

    PYTHONPATH=src nice -n 10 python benchmarks/bench_executor.py
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from fedleak.config import parse_config
from fedleak.runs.execution import RayExecutor
from fedleak.runs.experiment import run_experiment


def experiment(iterations: int, clients: int) -> dict:
    return {"name": "bench-executor", "data": {"dataset": "digits", "num_clients": clients, "samples_per_client": 4},
            "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
            "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": iterations}}},
            "metrics": {"save_images": False}}


def timed_run(raw: dict, executor=None, threads: int | None = None) -> dict:
    before = os.getloadavg()
    saved = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="bench-executor-") as out:
            start = time.perf_counter()
            summary = run_experiment(parse_config(raw), out, show_progress=False, log=lambda *_: None,
                                     executor=executor)
            wall = time.perf_counter() - start
    finally:
        torch.set_num_threads(saved)
    jobs = summary["jobs"]
    return {"jobs": jobs, "wall_s": wall, "jobs_per_hour": jobs / wall * 3600,
            "mean_attack_s": summary["means"]["seconds"], "torch_threads": threads or saved,
            "loadavg_before": before, "loadavg_after": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--cpus", type=int, default=2, help="Ray CPUs (= parallel jobs)")
    parser.add_argument("--skip-default-threads", action="store_true",
                        help="skip the local run with torch's default threads (slow on a busy machine)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    import ray

    raw = experiment(args.iterations, 4)
    result = {"benchmark": "executor", "host": platform.node(), "cpu_count": os.cpu_count(), "ray": ray.__version__,
              "torch": torch.__version__, "iterations": args.iterations, "cpus": args.cpus,
              "default_torch_threads": torch.get_num_threads()}
    print("local, 1 thread ...", flush=True)
    result["local-1thread"] = timed_run(raw, threads=1)
    if not args.skip_default_threads:
        print("local, default threads ...", flush=True)
        result["local-default-threads"] = timed_run(raw)
    print("ray ...", flush=True)
    # the shared machine's memory is sometimes nearly full from other programs: do not let Ray's
    # memory monitor kill our 0.3 GB workers for it (a throughput measurement, not a memory policy)
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    start = time.perf_counter()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level="ERROR")
    init_s = time.perf_counter() - start
    try:
        result["ray"] = timed_run(raw, executor=RayExecutor(cpus_per_job=1))
        result["ray"]["ray_init_s"] = init_s
        result["ray"]["jobs_per_hour_with_init"] = 4 / (result["ray"]["wall_s"] + init_s) * 3600
        trivial = experiment(1, 8)
        print("overhead: 8 trivial jobs ...", flush=True)
        ray_trivial = timed_run(trivial, executor=RayExecutor(cpus_per_job=1))
    finally:
        ray.shutdown()
    local_trivial = timed_run(trivial, threads=1)
    result["overhead"] = {"ray_wall_s": ray_trivial["wall_s"], "local_wall_s": local_trivial["wall_s"], "jobs": 8,
                          "ray_cpu_s_added_per_job": (ray_trivial["wall_s"] * args.cpus - local_trivial["wall_s"]) / 8,
                          "ray_wall_s_per_job": ray_trivial["wall_s"] / 8,
                          "local_wall_s_per_job": local_trivial["wall_s"] / 8}
    local = result["local-1thread"]["jobs_per_hour"]
    result["speedup_vs_local_1thread"] = result["ray"]["jobs_per_hour"] / local
    result["speedup_vs_local_1thread_with_init"] = result["ray"]["jobs_per_hour_with_init"] / local
    if "local-default-threads" in result:
        result["speedup_vs_local_default_threads"] = (result["ray"]["jobs_per_hour"]
                                                      / result["local-default-threads"]["jobs_per_hour"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"executor-{platform.node()}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
