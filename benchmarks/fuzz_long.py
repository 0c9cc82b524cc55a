"""The long fuzz run: every target of ``tests/fuzz_targets.py`` and ``tests/fuzz_doors.py`` (the CLI, the config loaders, the
Python API, the Flower reply converter, every file loader) with a larger hypothesis budget and a
fixed seed, recording how many generated cases ran and what failed.

    OMP_NUM_THREADS=1 nice -n 15 .venv/bin/python benchmarks/fuzz_long.py [--examples 2000] [--out PATH]

Writes ``benchmarks/results/fuzz.json`` (or ``--out``): per target the cases run, seconds, and the
failure (the falsifying input and the assertion) if any; with the thread count, load average,
device and date. The CI run of the same targets (``tests/test_fuzz_*.py``) uses 40–200 cases each.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000, help="cases per target (the CLI and API get 1/2)")
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--only", help="comma-separated target names")
    parser.add_argument("--out", default=fresh("fuzz.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    from fuzz_doors import TARGETS as DOOR_TARGETS
    from fuzz_targets import TARGETS, run_target

    every = {**TARGETS, **DOOR_TARGETS}  # the doors of tests/fuzz_doors.py too (dp-audit, the API, GGUF, ...)
    names = [n for n in every if not args.only or n in args.only.split(",")]
    results, started = {}, time.time()
    for name in names:
        budget = args.examples // 2 if name in ("cli", "api", "cli-more", "api-doors") else args.examples
        t0 = time.time()
        entry = {"budget": budget}
        try:
            entry["cases"] = run_target(name, budget, derandomize=False, seed=args.seed, targets=every)
            entry["failure"] = None
        except BaseException as exc:  # noqa: BLE001 - a finding is recorded, the run goes on
            if isinstance(exc, KeyboardInterrupt):
                raise
            entry["cases"] = None
            entry["failure"] = {"type": type(exc).__name__, "message": str(exc)[:2000],
                                "traceback": traceback.format_exc()[-3000:]}
        entry["seconds"] = round(time.time() - t0, 2)
        results[name] = entry
        print(f"{name:28s} {entry['cases'] if entry['cases'] is not None else 'FAILED':>6} cases "
              f"{entry['seconds']:8.1f} s", flush=True)
    total = sum(e["cases"] or 0 for e in results.values())
    found = {n: e["failure"] for n, e in results.items() if e["failure"]}
    payload = {
        "what": "hypothesis fuzzing of every entry point (tests/fuzz_targets.py), larger budget than CI",
        "seed": args.seed, "budget_per_target": args.examples, "targets": results, "total_cases": total,
        "failures": len(found), "seconds": round(time.time() - started, 1),
        "threads": torch.get_num_threads(), "load_average": list(os.getloadavg()), "device": "cpu",
        "machine": platform.machine(), "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(payload, indent=1))
    print(f"{total} cases, {len(found)} target(s) with a finding; written to {args.out}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
