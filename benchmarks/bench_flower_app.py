"""``fedleak audit --flower-app examples/flower-app`` as its README pastes it (issue 43): wall time and what it found.

Runs the README's command (``.venv/bin/fedleak`` beside this Python, else ``python -m fedleak.cli``) in a fresh
process with ``--out`` in a temporary folder, optionally with ``--run-config`` overrides, and records the exit
code, the wall and CPU seconds of the child, the overall verdict line with each part's evidence, the replies per
status, the canaries' claim test, the load average before and after, the thread variables, the CPU count, the
torch and flwr versions and the commit. ``python benchmarks/bench_flower_app.py --out
benchmarks/results/flower_app.json`` rewrites the tracked file the docs cite. ``--app
examples/flower-app-dp-nodes`` runs the canary-node example instead (issue 42 item 2; ``--run-config
'no-clip-on="1,3"'`` plants the missing mod): its canary nodes' findings and cost are recorded too
(``flower_app_dp_nodes_faulty.json`` / ``flower_app_dp_nodes_correct.json``). ``--app examples/flower-tabular-app``
runs the app of records (issue 44; ``flower_app_tabular.json``; with ``--run-config "local-epochs=5
num-server-rounds=1 num-clients=2"`` TabLeak's FedAvg case, ``flower_app_tabular_fedavg.json``): each threat model's
attacks (replies proved, records whole, cells right beside the baselines) are recorded too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).with_name("fedleak")
FEDLEAK = [str(SCRIPT)] if SCRIPT.is_file() else [sys.executable, "-m", "fedleak.cli"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-config", default=None, help="overrides appended to the README's command")
    parser.add_argument("--app", default="examples/flower-app", help="the app folder (default: the README's)")
    parser.add_argument("--out", default=fresh("flower_app.json"))
    args = parser.parse_args(argv)
    import flwr
    import torch

    with tempfile.TemporaryDirectory() as folder:
        command = FEDLEAK + ["audit", "--flower-app", args.app, "--out", str(Path(folder) / "report")]
        if args.run_config:
            command += ["--run-config", args.run_config]
        load_before = os.getloadavg()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        metrics_path = Path(folder) / "report" / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    canary = (metrics.get("flower") or {}).get("canaries") or {}
    nodes = (metrics.get("flower") or {}).get("canary_nodes") or {}
    result = {"command": " ".join(command[len(FEDLEAK):]).replace(folder, "TMP"), "exit_code": done.returncode,
              "wall_seconds": round(wall, 1),
              "cpu_seconds_child": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1),
              "overall": metrics.get("overall"), "replies": (metrics.get("flower") or {}).get("replies"),
              "strategies": (metrics.get("flower") or {}).get("strategies"),
              "verdicts": metrics.get("verdicts"), "dp_verdict": metrics.get("dp_verdict"),
              "modality": metrics.get("modality"),
              "threat_models": {k: {f: tm.get(f) for f in ("verdict", "evidence", "strongest", "rec_percent", "truth",
                                                           "attacks") if tm.get(f) is not None}
                                for k, tm in (metrics.get("threat_models") or {}).items()},
              "canaries": {k: canary.get(k) for k in ("canaries", "canaries_inserted", "rounds", "epsilon_lower",
                                                      "claim_test")} if canary else None,
              "canary_nodes": {"nodes": nodes.get("nodes"), "canaries": nodes.get("canaries"),
                               "canaries_inserted": nodes.get("canaries_inserted"), "rounds": nodes.get("rounds"),
                               "nodes_flagged_by_replies": nodes.get("nodes_flagged_by_replies"),
                               "nodes_flagged_by_aggregates": nodes.get("nodes_flagged_by_aggregates"),
                               "claim": nodes.get("claim"),  # the nodes' LocalDpMod claim, where one was read
                               "reply_test": [{k: r.get(k) for k in ("node", "canary_replies", "mean_projection",
                                                                     "noise_ratio", "p_value", "flagged")}
                                              for r in nodes.get("reply_test") or []],
                               "cost": nodes.get("cost")} if nodes else None,
              "error": done.stderr.strip().splitlines()[-1] if done.returncode else None,
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "cpu_count": os.cpu_count(), "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS",
                                                                                      "MKL_NUM_THREADS")},
              "device": "cpu", "torch": torch.__version__, "flwr": flwr.__version__, "python": platform.python_version(),
              "commit": commit.stdout.strip()}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("exit_code", "wall_seconds", "overall")}, indent=1))
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
