"""How much an optimization attack's result depends on the CPU kernels torch picks, and on the attack's seed.

The measurement behind ``tests/test_classic_attacks.py::test_inverting_gradients_on_fedsgd_batch_of_one``:
Inverting Gradients (1500 iterations, TV 1e-3) on one CIFAR-10 test image through LeNet's FedSGD gradient, run
once per ``ATEN_CPU_CAPABILITY`` (``default``: no vector kernels; ``avx2``; ``avx512``: torch falls back to
the best the CPU has, recorded as ``cap``) and attack seed, each in its own process at one thread. Different
kernels round differently, and a non-convex optimization turns rounding into another trajectory; the seeds
show the spread of trajectories itself. ``--src`` runs an older checkout's ``src`` (e.g. ``git archive`` of the commit
that wrote "measured 28.9 dB") to tell code changes from environment changes.

Appends one JSON line per run to ``--out`` (default a fresh file; runs already in it are skipped, so it
resumes). Needs the shared CIFAR-10 subset (``FEDLEAK_SHARED_DATA`` or ``../shared/data``). About 150 CPU-s a run.

    OMP_NUM_THREADS=1 python benchmarks/bench_cpu_kernels.py --caps default avx2 avx512 --seeds 0 1 2 \\
        --out benchmarks/results/cpu_kernels_ig.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402


def one(seed: int, iterations: int) -> dict:
    """One attack run in this process (the test's setup, the attack seeded with ``seed``)."""
    import torch

    import fedleak
    from fedleak.types import Protocol

    torch.set_num_threads(1)
    shared = Path(os.environ.get("FEDLEAK_SHARED_DATA") or ROOT.parent / "shared" / "data")
    spec, clients = fedleak.data.load("cifar10", root=shared / "cifar10" / "cifar10_exact_subset.npz", split="test",
                                      num_clients=1, samples_per_client=1, partition="sequential")
    model = fedleak.models.build("lenet", spec, seed=0)
    update = fedleak.client_update(model, clients[0], Protocol("fedsgd"))
    start = time.process_time()
    options = {"seed": seed} if seed else {}  # seed 0 is the default (and all an old checkout may accept)
    rec = fedleak.attacks.build("inverting-gradients", iterations=iterations, tv=1e-3, **options).reconstruct(
        update, model, spec)
    scores = fedleak.metrics.evaluate(rec, clients[0], spec)
    return {"seed": seed, "cap": torch.backends.cpu.get_cpu_capability(), "psnr": float(scores["psnr"]),
            "ssim": float(scores["ssim"]), "cpu_s": time.process_time() - start, "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def table(rows: list[dict]) -> str:
    lines = ["| code | ATEN_CPU_CAPABILITY (kernels run) | attack seed | PSNR (dB) | SSIM |", "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["label"] != "current", r["label"], r["requested"], r["seed"])):
        lines.append(f"| {r['label']} | {r['requested']} ({r['cap']}) | {r['seed']} | {r['psnr']:.2f} | {r['ssim']:.3f} |")
    current = [r for r in rows if r["label"] == "current"]
    lines += ["", f"*Inverting Gradients, {current[0]['iterations'] if current else 1500} iterations, one CIFAR-10 "
              f"image through LeNet's FedSGD gradient; torch {rows[0]['torch']}, one thread; min over the current code "
              f"{min(r['psnr'] for r in current):.2f} dB / SSIM {min(r['ssim'] for r in current):.3f}; from "
              "`benchmarks/results/cpu_kernels_ig.jsonl`.*"]
    return "\n".join(lines)


def write_docs(rows: list[dict], path: Path) -> None:
    start, end = "<!-- cpu-kernels-table -->", "<!-- /cpu-kernels-table -->"
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} markers")
    head, rest = text.split(start, 1)
    path.write_text(f"{head}{start}\n{table(rows)}\n{end}{rest.split(end, 1)[1]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--caps", nargs="+", default=["default", "avx2", "avx512"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=1500)
    p.add_argument("--src", default=str(ROOT / "src"), help="the fedleak src folder to run")
    p.add_argument("--label", default="current")
    p.add_argument("--out", default=fresh("cpu_kernels_ig.jsonl"))
    p.add_argument("--docs", type=Path, help="rewrite the table in this markdown file from --out")
    p.add_argument("--table-only", action="store_true", help="only rebuild the --docs table")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one, args.iterations)))
        return
    out = Path(args.out)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            row = json.loads(line)
            done.add((row["label"], row["requested"], row["seed"], row.get("iterations", 1500)))
    for cap in args.caps if not args.table_only else ():
        for seed in args.seeds:
            if (args.label, cap, seed, args.iterations) in done:
                continue
            env = {**os.environ, "ATEN_CPU_CAPABILITY": cap, "OMP_NUM_THREADS": "1",
                   "PYTHONPATH": args.src + os.pathsep + os.environ.get("PYTHONPATH", "")}
            run = subprocess.run([sys.executable, __file__, "--one", str(seed), "--iterations", str(args.iterations)],
                                 env=env, capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(f"cap {cap} seed {seed}: {run.stderr.strip().splitlines()[-1]}")
            result = json.loads(run.stdout.strip().splitlines()[-1])
            row = {"label": args.label, "requested": cap, "iterations": args.iterations, **result,
                   "load_average": os.getloadavg(), "device": "cpu", "machine": platform.processor() or platform.machine()}
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row))
    if args.docs:
        write_docs([json.loads(line) for line in out.read_text().splitlines()], args.docs)


if __name__ == "__main__":
    main()

