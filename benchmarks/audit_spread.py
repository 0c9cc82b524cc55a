"""How much the default audit's numbers move with the CPU's instruction set and with the seed.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/audit_spread.py [--capabilities default,avx2,avx512] \
        [--seeds 0,1,2] [--out benchmarks/results/audit_spread.json]

Each run is the real command a user types, ``fedleak --threads 1 audit --seed S --quiet`` (a fresh
process, one torch thread), with ``ATEN_CPU_CAPABILITY`` set: torch then runs its CPU kernels
compiled for that instruction set (``default`` = no vector extensions, ``avx2``, ``avx512``), which
is what changes between two x86 machines with the same torch build. Different kernels sum in a
different order, the attacks' optimizations amplify the rounding, and the headline PSNR moves. A
capability the CPU lacks is recorded as skipped. Every run's scores, the capability torch actually
used (``metrics.json``'s ``environment``), the load average and the seconds are appended to the
output after each run, so an interrupted measurement resumes where it stopped. ``summary`` gives,
per attack, the range (max − min) of mean PSNR and IIP over the capabilities at each seed and over
all runs; the README's sentence on the spread cites it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import fresh  # benchmarks/_results.py: a new timestamped file by default

ROOT = Path(__file__).resolve().parents[1]


def cpu_flags() -> set:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def supported(capability: str, flags: set) -> bool:
    return {"default": True, "avx2": "avx2" in flags, "avx512": "avx512f" in flags and "avx512bw" in flags}.get(
        capability, False)


def run(capability: str, seed: int) -> dict:
    """One default audit under ``ATEN_CPU_CAPABILITY=capability`` and ``--seed seed``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        command = [sys.executable, "-m", "fedleak.cli", "--threads", "1", "audit", "--seed", str(seed),
                   "--quiet", "--out", str(out)]
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        load_before = os.getloadavg()
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"audit ({capability}, seed {seed}) failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        metrics = json.loads((out / "metrics.json").read_text())
    scores = {}
    for key, scenario in metrics["scenarios"].items():
        attacks = {scenario["attack"]: scenario} if "attacks" not in scenario else scenario["attacks"]
        for name, s in attacks.items():
            scores[f"{key}/{name}"] = {k: s.get(k) for k in ("psnr", "ssim", "rec_percent", "iip")}
    return {"capability": capability, "seed": seed, "seconds": round(seconds, 1),
            "environment": metrics.get("environment"), "verdicts": metrics.get("verdicts"), "scores": scores,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()]}


def _range(values: list) -> dict:
    values = [v for v in values if isinstance(v, (int, float))]
    if not values:
        return {}
    return {"min": round(min(values), 2), "max": round(max(values), 2), "range": round(max(values) - min(values), 2),
            "n": len(values)}


def summarize(runs: list) -> dict:
    """Per attack: the range of PSNR and IIP over capabilities (per seed) and over every run."""
    attacks = sorted({name for r in runs for name in r["scores"]})
    seeds = sorted({r["seed"] for r in runs})
    summary = {}
    for name in attacks:
        entry = {}
        for metric in ("psnr", "iip"):
            values = [r["scores"].get(name, {}).get(metric) for r in runs]
            per_seed = {str(s): _range([r["scores"].get(name, {}).get(metric) for r in runs if r["seed"] == s])
                        for s in seeds}
            entry[metric] = {"over_all_runs": _range(values), "over_capabilities_per_seed": per_seed}
        summary[name] = entry
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capabilities", default="default,avx2,avx512")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default=fresh("audit_spread.json"),
                        help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    import torch

    path = Path(args.out)
    previous = json.loads(path.read_text()) if path.exists() else {}
    runs = previous.get("runs", [])
    skipped = previous.get("skipped", [])
    flags = cpu_flags()
    for seed in [int(s) for s in args.seeds.split(",")]:
        for capability in args.capabilities.split(","):
            if not supported(capability, flags):
                if capability not in skipped:
                    skipped.append(capability)
                continue
            if any(r["capability"] == capability and r["seed"] == seed and r["environment"]["cpu_model"] == cpu_model()
                   for r in runs if "cpu_model" in (r.get("environment") or {})):
                continue  # already measured on this CPU: resume
            entry = run(capability, seed)
            entry["environment"] = {**(entry["environment"] or {}), "cpu_model": cpu_model()}
            runs.append(entry)
            print(capability, seed, f"{entry['seconds']} s",
                  {k: v["psnr"] for k, v in entry["scores"].items()}, flush=True)
            result = {"command": "ATEN_CPU_CAPABILITY=C fedleak --threads 1 audit --seed S --quiet",
                      "torch": torch.__version__, "python": platform.python_version(), "cpu_count": os.cpu_count(),
                      "torch_threads": 1, "device": "cpu", "machine": platform.machine(),
                      "skipped": skipped, "skipped_reason": "the CPU lacks the instruction set", "runs": runs,
                      "summary": summarize(runs)}
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
