"""Wall-clock time of ``fedleak audit`` as a user runs it: the no-argument default and ``--quick``.

    .venv/bin/python benchmarks/bench_audit.py [--repeats 1] [--only default|quick]

Each run is the real command (``python -m fedleak.cli audit``, a fresh process, the CLI's default
of one torch thread) writing to a temporary folder. Writes ``benchmarks/results/audit_timing-<host>-<time>.json`` (``--out benchmarks/results/audit_timing.json`` updates the tracked file)
with the seconds of each run, the verdicts and strongest scores it printed, the load average
before and after (the machine is shared: numbers taken under load are slower), the CPU count and
the torch thread count. Each invocation appends one entry to ``measurements`` (earlier ones are
kept, so quiet-machine and loaded-machine numbers stand side by side). Targets: default under 5 minutes, ``--quick`` under 1 minute on 2 cores.
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
TARGETS = {"default": 300.0, "quick": 60.0}


def run(kind: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        command = [sys.executable, "-m", "fedleak.cli", "audit", "--out", str(out), "--quiet"]
        if kind == "quick":
            command.append("--quick")
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        load_before = os.getloadavg()
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{kind} audit failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        metrics = json.loads((out / "metrics.json").read_text())
    scores = {}
    for key, scenario in metrics["scenarios"].items():
        attacks = {scenario["attack"]: scenario} if key == "malicious" else scenario["attacks"]
        scores.update({f"{key}/{name}": {"psnr": s["psnr"], "rec_percent": s["rec_percent"]}
                       for name, s in attacks.items()})
    return {"seconds": round(seconds, 2), "target_seconds": TARGETS[kind], "within_target": seconds < TARGETS[kind],
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "verdicts": metrics["verdicts"], "scores": scores, "table": done.stdout.strip().splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", choices=sorted(TARGETS))
    parser.add_argument("--out", default=fresh("audit_timing.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    import torch

    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu_count": os.cpu_count(),
              "torch_threads": 1, "torch": torch.__version__, "python": platform.python_version(),
              "machine": platform.machine(), "nice": os.nice(0), "runs": {}}
    for kind in ([args.only] if args.only else ["quick", "default"]):
        result["runs"][kind] = [run(kind) for _ in range(args.repeats)]
        print(kind, [r["seconds"] for r in result["runs"][kind]], flush=True)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    history = json.loads(path.read_text()) if path.exists() else {}
    measurements = history.get("measurements", [])
    path.write_text(json.dumps({"command": "fedleak audit [--quick]", "measurements": [*measurements, result]},
                               indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
