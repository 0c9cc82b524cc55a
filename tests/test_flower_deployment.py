"""Flower's deployment mode, for real: ``flower-superlink --insecure`` and two ``flower-supernode``s on
127.0.0.1 (free ports, an isolated ``FLWR_HOME``), ``examples/flower-app`` submitted with
``python -m fedleak.integrations.flower.flwr_run`` (``flwr run --stream`` + the run's final status).

One SuperLink and its SuperNodes serve the whole module (started once, every wait bounded, torn
down by their process-group ids). Node 0 runs with ``inspect=true share-truth=true`` in its
``--node-config``, node 1 with neither. Runs: honest; malicious, with the run config trying to turn
the inspector off (node 0 still refuses, node 1 leaks verbatim); honest under Flower's client-side
fixed clipping with the DP wrapper around the audit (Flower's ``fixedclipping_mod`` on real
SuperNodes, ε recorded); a ServerApp that crashes (exit 1). The audit writes inside the installed
app's folder, nothing lands in the SuperLink's working directory, the app's pyproject.toml is
not rewritten. Measured 284 s on 2 shared cores (SuperLink + SuperNodes 19 s, honest 84 s, DP 73 s,
malicious 60 s, crash 35 s): in 1.42 every message spawns a ClientApp process that imports torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr.serverapp")
pytest.importorskip("dp_accounting")

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NODES = ("partition-id=0 num-partitions=2 inspect=true share-truth=true", "partition-id=1 num-partitions=2")
BASE = "num-clients=2 samples=2 num-server-rounds=1 iterations=2"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(predicate, seconds: float, what: str, logs) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in logs if p.exists())
    raise AssertionError(f"{what} not ready after {seconds} s\n{tails}")


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    base = tmp_path_factory.mktemp("deploy")
    home, link_cwd, app = base / "flwr-home", base / "superlink-cwd", base / "app"
    home.mkdir(), link_cwd.mkdir()
    shutil.copytree(ROOT / "examples" / "flower-app", app, ignore=shutil.ignore_patterns("__pycache__"))
    port = _free_port()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                      f'address = "127.0.0.1:{port}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    env.pop("FEDLEAK_NODE_CONFIG", None)
    procs, logs = [], []

    def start(name, command):
        log = base / f"{name}.log"
        logs.append(log)
        procs.append(subprocess.Popen(command, cwd=link_cwd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                      start_new_session=True))

    try:
        start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
                            "--disable-runtime-dependency-installation"])
        _wait(lambda: _listening(port), 120, "the SuperLink", logs)
        for i, node_config in enumerate(NODES):
            start(f"supernode{i}", [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{port}",
                                    "--port", str(_free_port()), "--node-config", node_config])
        _wait(lambda: logs[0].read_text().count("Activated node_id") >= len(NODES), 180, "the SuperNodes", logs)
        yield {"app": app, "env": env, "home": home, "link_cwd": link_cwd, "base": base,
               "pyproject": hashlib.sha256((app / "pyproject.toml").read_bytes()).hexdigest()}
    finally:
        for proc in reversed(procs):  # each in its own session: its group holds what it spawned
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def _run(deployment, run_config: str, timeout: float = 420):
    """Submit the example app; returns (exit code, output, records, audit folder)."""
    cwd = deployment["base"] / "client-cwd"
    cwd.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "fedleak.integrations.flower.flwr_run", str(deployment["app"]),
                           "local", "--run-config", f"{BASE} {run_config}", "--timeout", str(timeout)],
                          cwd=cwd, env=deployment["env"], capture_output=True, text=True, timeout=timeout + 60)
    output = done.stdout + done.stderr
    match = re.search(r"fedleak: auditing run \d+ into (\S+)", output)
    out = Path(match.group(1)) if match else None
    records = []
    if out is not None and (out / "leakage.jsonl").exists():
        records = [json.loads(line) for line in (out / "leakage.jsonl").read_text().splitlines()]
    assert list(deployment["link_cwd"].iterdir()) == [], "nothing may land in the SuperLink's working directory"
    assert list(cwd.iterdir()) == []
    assert hashlib.sha256((deployment["app"] / "pyproject.toml").read_bytes()).hexdigest() == deployment["pyproject"]
    return done.returncode, output, records, out


def _by_partition(records):
    """Node ids are the SuperNodes' own: tell them apart by whether they shared their batch (node 0 does)."""
    shared = [r for r in records if r.get("truth") == "client-reported" or "refused" in r.get("reason", "")]
    return shared, [r for r in records if r not in shared]


def test_honest_server(deployment):
    code, output, records, out = _run(deployment, "")
    assert code == 0, output[-3000:]
    assert out.is_relative_to(deployment["home"] / "apps") and (out / "dashboard.html").exists()
    assert [r["status"] for r in records] == ["attacked", "attacked"], records
    node0, node1 = _by_partition(records)
    assert len(node0) == 1 and node0[0].get("psnr") is not None  # node 0 opted in to share its batch
    assert node1[0].get("psnr") is None and "truth" not in node1[0]  # node 1 did not: no run config can make it


def test_malicious_server_cannot_turn_a_nodes_inspector_off(deployment):
    code, output, records, _ = _run(deployment, "malicious=true inspect=false")
    assert code == 0, output[-3000:]
    statuses = sorted(r["status"] for r in records)
    assert statuses == ["attacked", "error"], records
    refused = next(r for r in records if r["status"] == "error")
    assert "fedleak inspector refused the model" in refused["reason"]
    leaked = next(r for r in records if r["status"] == "attacked")
    assert leaked["verbatim"] >= 1 and leaked["leakage"]["level"] == "high"


def test_flower_client_side_fixed_clipping_around_the_audit(deployment):
    code, output, records, _ = _run(deployment, "dp='client-fixed' dp-audit='inner' noise=0.5 clip=0.05")
    assert code == 0, output[-3000:]
    assert [r["status"] for r in records] == ["attacked", "attacked"], records
    for r in records:
        wrapper = r["dp"]["mechanisms"][0]
        assert wrapper["mechanism"] == "DifferentialPrivacyClientSideFixedClipping"
        assert wrapper["clipping_norm"] == 0.05 and wrapper["noise_multiplier"] == 0.5
        assert r["dp"]["sees"]["clipping"] == "after" and r["dp"]["epsilon"] > 0


def test_a_crashed_server_app_exits_non_zero(deployment):
    code, output, _, _ = _run(deployment, "dp='bogus'")
    assert code == 1 and "ended finished:failed" in output and "unknown dp mode 'bogus'" in output, output[-2000:]
