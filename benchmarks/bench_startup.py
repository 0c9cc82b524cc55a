"""Start-up time of the ``fedleak`` command and of ``import fedleak`` (issue 46 item 1).

Each case runs ``--repeats`` times in a fresh interpreter (the console script ``fedleak`` beside this Python,
else ``python -m fedleak.cli``), in turn, so that a burst of load hits every case alike; per case it records
the wall seconds and the CPU seconds of the child (user + system, from ``getrusage(RUSAGE_CHILDREN)``), their
median, minimum and maximum; one more run per case under ``-X importtime`` (whose log names every module
imported; not timed) records whether torch was imported. The targets: ``fedleak --help``, ``attacks`` and
``datasets`` ≤ 1.5 s on 2 cores without torch; ``import fedleak`` ≤ ``import torch`` + 0.5 s.

The JSON records the load average before and after, the CPU count, the thread variables, Python and torch
versions and the commit. ``python benchmarks/bench_startup.py --out benchmarks/results/startup.json``
rewrites the tracked file (``benchmarks/regen_docs.py`` reads it for ``docs/performance.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("fedleak")
FEDLEAK = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "fedleak.cli"]
CASES = {
    "fedleak --help": FEDLEAK + ["--help"],
    "fedleak attacks": FEDLEAK + ["attacks"],
    "fedleak datasets": FEDLEAK + ["datasets"],
    "fedleak models": FEDLEAK + ["models"],
    "fedleak presets": FEDLEAK + ["presets"],
    "python -c 'import torch'": [sys.executable, "-c", "import torch"],
    "python -c 'import fedleak'": [sys.executable, "-c", "import fedleak"],
    "python -c 'import fedleak; fedleak.audit'": [sys.executable, "-c", "import fedleak; fedleak.audit"],
}


def run_once(argv: list[str], probe: bool = False) -> dict:
    """One run: wall and child CPU seconds; with ``probe``, whether torch was imported (``-X importtime``)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"} if probe else dict(os.environ)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"bench_startup: {' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]}")
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "torch_imported": "torch" in imported}


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=fresh("startup.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    torch_imported = {name: run_once(argv, probe=True)["torch_imported"] for name, argv in CASES.items()}
    runs: dict[str, list[dict]] = {name: [] for name in CASES}
    for _ in range(args.repeats):  # interleaved: a burst of load falls on every case alike
        for name, argv in CASES.items():
            runs[name].append(run_once(argv))
    cases = {name: {"argv": [Path(a).name if a == sys.executable or a == str(SCRIPT) else a for a in CASES[name]],
                    "wall_s": summary([r["wall_s"] for r in rs]), "cpu_s": summary([r["cpu_s"] for r in rs]),
                    "torch_imported": torch_imported[name],
                    "wall_s_each": [round(r["wall_s"], 3) for r in rs]} for name, rs in runs.items()}
    torch_wall = cases["python -c 'import torch'"]["wall_s"]["median"]
    fedleak_wall = cases["python -c 'import fedleak'"]["wall_s"]["median"]
    listings = ("fedleak --help", "fedleak attacks", "fedleak datasets")
    targets = {
        "help_and_listings_within_1.5_s_without_torch": all(
            cases[c]["wall_s"]["median"] <= 1.5 and not cases[c]["torch_imported"] for c in listings),
        "import_fedleak_within_import_torch_plus_0.5_s": fedleak_wall <= torch_wall + 0.5,
    }
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = None
    import torch

    result = {
        "benchmark": "startup", "repeats": args.repeats, "cases": cases, "targets": targets,
        "environment": {"cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                        "load_average_after": [round(x, 2) for x in os.getloadavg()],
                        "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")},
                        "python": platform.python_version(), "torch": torch.__version__, "device": "cpu",
                        "machine": platform.machine(), "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M:%S")},
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    for name, case in cases.items():
        print(f"{name:45s} wall {case['wall_s']['median']:6.2f} s (min {case['wall_s']['min']:.2f}), "
              f"CPU {case['cpu_s']['median']:5.2f} s, torch {'imported' if case['torch_imported'] else 'not imported'}")
    print(f"targets: {targets}; written to {args.out}")


if __name__ == "__main__":
    main()
