"""``flwr run`` that fails when the run fails.

    python -m fedleak.integrations.flower.flwr_run APP [CONNECTION] [--run-config "..."]
        [--federation-config "..."] [--timeout S]

Flower 1.42's ``flwr run`` exits 0 once the run is *submitted*: without ``--stream`` it returns at
once, with it after the logs end, whether the ServerApp finished or crashed. This runs
``flwr run APP [CONNECTION] --stream …`` (its output passed through), then asks the SuperLink for
the run's final status (``flwr list --run-id N --format json``) and exits **0** only for
``finished:completed``; a failed, stopped or unfinished run prints one line naming it and exits
**1**; a run that never started exits with ``flwr run``'s own code (or 1). Nothing is written.

Without a connection (Flower's local simulation) ``flwr run`` starts a local ``flower-superlink`` from ``PATH``
and keeps it for later runs, with the environment it was started in. So ``flwr run`` gets ``PATH`` with this
Python's ``bin`` first (a venv need not be activated) and ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``
unless it is set (Flower would otherwise ``uv sync`` the app and fail offline), and a local SuperLink already
answering is named in one line before the run (it was started earlier and keeps that start's environment; stop
it to start a fresh one). ``fedleak audit --flower-app`` needs none of this: it starts no SuperLink.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

STARTED = re.compile(r"Successfully started run (\d+)")


def _flwr() -> str:
    here = shutil.which("flwr", path=str(Path(sys.executable).parent)) or shutil.which("flwr")
    if here is None:
        raise SystemExit("fedleak: error: the flwr command is not installed (pip install \"fedleak[flower]\")")
    return here


def run_environment() -> dict:
    """The environment ``flwr run`` gets: this Python's ``bin`` first on ``PATH``, runtime installation off."""
    import os

    env = dict(os.environ)
    here = str(Path(sys.executable).parent)
    env["PATH"] = here + (os.pathsep + env["PATH"] if env.get("PATH") else "")
    env.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
    return env


def stale_local_superlink() -> Optional[str]:
    """A line naming the local SuperLink Flower's simulation would reuse, or ``None`` when none answers."""
    try:
        from flwr.cli.constant import LOCAL_SUPERLINK_HTTP_API_PORT
        from flwr.cli.local_superlink import _is_local_superlink_started  # Flower's own probe (its /health)

        if not _is_local_superlink_started():
            return None
    except Exception:  # noqa: BLE001 - another Flower, or the probe failing: nothing to say
        return None
    return (f"fedleak: note: a local SuperLink already answers on 127.0.0.1:{LOCAL_SUPERLINK_HTTP_API_PORT}; flwr run "
            "reuses it with the environment it was started in (stop that flower-superlink process to start a fresh "
            "one)")


def run_status(run_id: int, connection: Optional[str], wait: float = 60.0) -> tuple[str, str]:
    """``(status, details)`` of a run once it has finished (or the last one seen after ``wait`` s)."""
    command = [_flwr(), "list", "--run-id", str(run_id), "--format", "json"] + ([connection] if connection else [])
    deadline, status, details = time.monotonic() + wait, "unknown", ""
    while True:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=run_environment())
        try:
            run = json.loads(done.stdout)["runs"][0]
            status, details = str(run.get("status", "unknown")), str(run.get("status-details", ""))
        except (ValueError, KeyError, IndexError, TypeError):
            status, details = "unknown", (done.stdout + done.stderr).strip()[-200:]
        if status.startswith("finished") or time.monotonic() > deadline:
            return status, details
        time.sleep(1.0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedleak.integrations.flower.flwr_run",
                                     description="flwr run --stream, exiting non-zero when the run did not complete")
    parser.add_argument("app", help="the Flower app folder (e.g. examples/flower-app)")
    parser.add_argument("connection", nargs="?", help="a SuperLink connection of $FLWR_HOME/config.toml")
    parser.add_argument("--run-config", default=None, help="passed to flwr run")
    parser.add_argument("--federation-config", default=None,
                        help="passed to flwr run (simulation: e.g. 'num-supernodes=3')")
    parser.add_argument("--timeout", type=float, default=None, help="give up (exit 1) after this many seconds")
    args = parser.parse_args(argv)
    command = [_flwr(), "run", args.app] + ([args.connection] if args.connection else []) + ["--stream"]
    if args.run_config:
        command += ["--run-config", args.run_config]
    if args.federation_config:
        command += ["--federation-config", args.federation_config]
    run_id = None
    if args.connection is None:
        stale = stale_local_superlink()
        if stale:
            print(stale, file=sys.stderr)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=run_environment())
    start = time.monotonic()
    try:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            match = STARTED.search(line)
            if match and run_id is None:
                run_id = int(match.group(1))
            if args.timeout is not None and time.monotonic() - start > args.timeout:
                process.kill()
                print(f"fedleak: error: flwr run took longer than {args.timeout:g} s (run {run_id})", file=sys.stderr)
                return 1
        code = process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    if run_id is None:
        print("fedleak: error: flwr run started no run", file=sys.stderr)
        return code or 1
    status, details = run_status(run_id, args.connection)
    if status != "finished:completed":
        print(f"fedleak: error: run {run_id} ended {status}" + (f" ({details})" if details and details != "N/A"
                                                                else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
