"""``fedleak audit --flower-app PATH`` (issue 43): a user's own Flower app run in Flower's simulation, audited.

The fast tests need no simulation: a folder that is not a Flower app, a ClientApp that does not import, an unknown
run-config key — one line, exit 2, nothing written. The slow ones run Flower 1.42's simulation (Ray) for real, on a
second app built here that fedleak never saw: a different model (an MLP), Flower's ``FedProx`` inside Flower's
``DifferentialPrivacyServerSideFixedClipping``, DP canaries switched on by its run config; and on the same app's
failure modes (a ServerApp that raises, one that starts no strategy). Measured on 2 shared cores at load ~12:
the second app 78 s, the crash 31 s, the example by its README (two runs) 138 s; the other tests < 10 s each.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("flwr.serverapp")
pytest.importorskip("ray")

from fedleak.cli import main  # noqa: E402

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "1.0.0"
dependencies = ["flwr[simulation]>=1.42,<1.43"]

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "tests"

[tool.flwr.app.components]
serverapp = "{package}.server:app"
clientapp = "{package}.client:app"

[tool.flwr.app.config]
num-server-rounds = 1
lr = 0.1
mode = "normal"
fedleak-canaries = 20

[tool.fedleak]
model = "{package}.task:Net"
data = "digits"
supernodes = 2
iterations = 4
"""

TASK = """\
import torch
from torch import nn


def Net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 16), nn.Sigmoid(), nn.Linear(16, 62))
"""

CLIENT = """\
import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import fedleak
from {package}.task import Net

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    pid, parts = int(context.node_config["partition-id"]), int(context.node_config["num-partitions"])
    _, clients = fedleak.data.load("digits", num_clients=parts, samples_per_client=2, seed=0)
    net = Net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    glob = [p.detach().clone() for p in net.parameters()]
    mu, lr = float(msg.content["config"].get("proximal-mu", 0.0)), float(msg.content["config"]["lr"])
    x, y = clients[pid].inputs, clients[pid].labels
    loss = F.cross_entropy(net(x), y) + mu / 2 * sum(((p - g) ** 2).sum() for p, g in zip(net.parameters(), glob))
    grads = torch.autograd.grad(loss, list(net.parameters()))
    with torch.no_grad():
        for p, g in zip(net.parameters(), grads):
            p -= lr * g
    content = RecordDict({{"arrays": ArrayRecord(net.state_dict()),
                          "metrics": MetricRecord({{"num-examples": len(x), "train-loss": float(loss.detach())}})}})
    return Message(content=content, reply_to=msg)
"""

SERVER = """\
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedProx

from {package}.task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    if cfg["mode"] == "crash":
        raise RuntimeError("the test ServerApp crashed on purpose")
    if cfg["mode"] == "nostart":
        return
    strategy = DifferentialPrivacyServerSideFixedClipping(
        FedProx(fraction_evaluate=0.0, proximal_mu=0.1, min_train_nodes=2, min_available_nodes=2),
        noise_multiplier=0.5, clipping_norm=1.0, num_sampled_clients=2)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({{"lr": float(cfg["lr"])}}))
"""


def build_app(root: Path, package: str, client: str = CLIENT) -> Path:
    """A Flower app fedleak never saw: MLP, FedProx in Flower's server-side DP wrapper, canaries on."""
    app = root / package.replace("_", "-")
    (app / package).mkdir(parents=True)
    (app / "pyproject.toml").write_text(PYPROJECT.format(name=package.replace("_", "-"), package=package))
    (app / package / "__init__.py").write_text("")
    (app / package / "task.py").write_text(TASK)
    (app / package / "client.py").write_text(client.format(package=package))
    (app / package / "server.py").write_text(SERVER.format(package=package))
    return app


def _ray_running() -> bool:
    import ray

    return ray.is_initialized()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# -- bad input: one line, exit 2, nothing written (no simulation) ---------------------------------------------------

def test_not_a_folder(tmp_path, capsys):
    assert main(["audit", "--flower-app", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "not a folder" in _one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_folder_without_a_flower_app(tmp_path, capsys):
    (tmp_path / "app").mkdir()
    assert main(["audit", "--flower-app", str(tmp_path / "app"), "--out", str(tmp_path / "out")]) == 2
    assert "not a Flower app (no pyproject.toml)" in _one_error_line(capsys)
    (tmp_path / "app" / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.0.0"\n')
    assert main(["audit", "--flower-app", str(tmp_path / "app"), "--out", str(tmp_path / "out")]) == 2
    assert "not a Flower app" in _one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_clientapp_that_does_not_import(tmp_path, capsys):
    broken = CLIENT.replace("import torch\n", "import torch\nimport a_module_nobody_installed\n", 1)
    app = build_app(tmp_path, "broken_client_app", client=broken)
    assert main(["audit", "--flower-app", str(app), "--out", str(tmp_path / "out")]) == 2
    line = _one_error_line(capsys)
    assert "ClientApp 'broken_client_app.client:app' does not import" in line and "a_module_nobody_installed" in line
    assert not (tmp_path / "out").exists()


def test_unknown_run_config_key_and_bad_settings(tmp_path, capsys):
    app = build_app(tmp_path, "config_check_app")
    assert main(["audit", "--flower-app", str(app), "--run-config", "no-such-key=1", "--out", str(tmp_path / "o")]) == 2
    assert "--run-config" in _one_error_line(capsys)
    assert main(["audit", "--flower-app", str(app), "--epochs", "3", "--out", str(tmp_path / "o")]) == 2
    assert "--epochs" in _one_error_line(capsys)
    text = (app / "pyproject.toml").read_text()
    (app / "pyproject.toml").write_text(text.replace("iterations = 4", "iterations = 4\nbogus = 1"))
    assert main(["audit", "--flower-app", str(app), "--out", str(tmp_path / "o")]) == 2
    assert "[tool.fedleak] has unknown key(s) bogus" in _one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_api_names_the_bad_argument(tmp_path):
    import fedleak
    from fedleak.errors import FedleakError

    with pytest.raises(FedleakError, match="unknown argument.*epochs"):
        fedleak.audit(flower_app=str(tmp_path), epochs=3, out=str(tmp_path / "o"))
    with pytest.raises(FedleakError, match="share_truth"):
        fedleak.audit(flower_app=str(tmp_path), share_truth="yes", out=str(tmp_path / "o"))


# -- real simulations -----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_second_app_audited_unchanged(tmp_path, capsys):
    """MLP + FedProx inside Flower's DP wrapper, canaries from the run config: the same command, exit 0."""
    app = build_app(tmp_path, "second_app")
    before = sorted(p.relative_to(app) for p in app.rglob("*") if "__pycache__" not in p.parts)
    out = tmp_path / "report"
    assert main(["audit", "--flower-app", str(app), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert not _ray_running()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["format"] == "fedleak.audit/2" and (out / "report.html").is_file()
    assert metrics["flower"]["strategies"] == ["DifferentialPrivacyServerSideFixedClipping > FedProx"]
    assert metrics["flower"]["replies"] == {"attacked": 2}  # 2 nodes x 1 round, every reply attacked
    records = [json.loads(line) for line in (out / "flower" / "leakage.jsonl").read_text().splitlines()]
    assert {r["attack"] for r in records} == {"inverting-gradients"} and all(r["protocol"]["lr"] == 0.1 for r in records)
    honest = metrics["threat_models"]["honest-but-curious"]
    assert honest["verdict"] == "inconclusive" and honest.get("truth") is None  # no client shared its batch
    canary = metrics["flower"]["canaries"]
    assert canary["canaries"] == 20 and canary["rounds"] == 1 and "claim_test" in canary
    assert metrics["dp_verdict"]["verdict"] in ("consistent", "violated")
    line = metrics["overall"]["line"]
    assert line.startswith("honest: inconclusive · malicious: not run · DP: ") and "20 canaries" in line
    assert line in printed and str(out / "report.html") in printed
    page = (out / "report.html").read_text()
    assert line.replace("·", "&middot;") in page or line in page
    after = sorted(p.relative_to(app) for p in app.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing written into the app


@pytest.mark.slow
def test_a_run_flower_ends_ends_non_zero(tmp_path, capsys):
    """A ServerApp that raises inside Flower's simulation: one line naming it, exit 2, Ray stopped."""
    app = build_app(tmp_path, "failing_app")
    out = tmp_path / "out"
    assert main(["audit", "--flower-app", str(app), "--run-config", "mode='crash'", "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert "the Flower run of failing-app ended: RuntimeError: the test ServerApp crashed on purpose" in line
    assert not _ray_running() and not (out / "metrics.json").exists()


def test_a_serverapp_that_starts_no_strategy_cannot_be_wrapped(tmp_path, capsys, monkeypatch):
    """Nothing called Strategy.start (the ServerApp's main, run here without Ray): one line, exit 2."""
    from fedleak.integrations.flower import app_audit, app_runtime

    def run_main_only(app, watch, supernodes, share_truth):  # the ServerApp's own main, no nodes needed
        from flwr.app import Context, RecordDict

        with app_runtime.wrapped_start(watch):
            app.server_app._main(None, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(),
                                               run_config=dict(app.run_config)))

    monkeypatch.setattr(app_audit, "simulate", run_main_only)
    app = build_app(tmp_path, "nostart_app")
    out = tmp_path / "out"
    assert main(["audit", "--flower-app", str(app), "--run-config", "mode='nostart'", "--out", str(out)]) == 2
    assert "started no Message-API strategy" in _one_error_line(capsys)
    assert not (out / "metrics.json").exists()


def test_example_readme_command_is_the_one_tested():
    """The README's simulation path is ``fedleak audit --flower-app examples/flower-app`` (run by the slow test)."""
    readme = (Path(__file__).resolve().parents[1] / "examples" / "flower-app" / "README.md").read_text()
    assert "fedleak audit --flower-app examples/flower-app" in readme
    assert textwrap.dedent(readme).count("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1") >= 1


@pytest.mark.slow
def test_example_app_as_the_readme_runs_it(tmp_path, capsys):
    """examples/flower-app by the README's command (its run config scaled to 1 round, 2 nodes, 2 images, 2
    attack iterations for CI): honest and malicious runs, the DP canaries its run config switches on, the grids,
    nothing written into the example."""
    import re
    import shlex

    root = Path(__file__).resolve().parents[1]
    readme = (root / "examples" / "flower-app" / "README.md").read_text()
    command = re.search(r"^\s+\.venv/bin/fedleak (audit --flower-app examples/flower-app .*)$", readme, re.M).group(1)
    args = shlex.split(command)
    args[args.index("--out") + 1] = str(tmp_path / "flower-report")
    args[args.index("--flower-app") + 1] = str(root / "examples" / "flower-app")
    before = sorted(p.name for p in (root / "examples" / "flower-app").iterdir())
    small = "num-server-rounds=1 num-clients=2 samples=2 iterations=2"
    assert main(args + ["--run-config", small]) == 0
    printed = capsys.readouterr().out
    assert not _ray_running()
    metrics = json.loads((tmp_path / "flower-report" / "metrics.json").read_text())
    tms = metrics["threat_models"]
    assert tms["malicious"]["verdict"] == "high"  # the imprint readout: inputs verbatim
    assert tms["honest-but-curious"]["truth"].startswith("client-reported batches of 2 of 2")
    assert metrics["flower"]["canaries"]["canaries"] == 100
    assert metrics["overall"]["line"].startswith(f"honest: {tms['honest-but-curious']['verdict']} · malicious: high")
    assert "100 canaries" in metrics["overall"]["line"] and metrics["overall"]["line"] in printed
    page = (tmp_path / "flower-report" / "report.html").read_text()
    assert "originals (top) vs reconstructions (bottom)" in page and "Not seen" in page
    dashboard = (tmp_path / "flower-report" / "flower" / "dashboard.html").read_text()
    assert metrics["overall"]["line"] in dashboard and "IIP (%)" in dashboard
    assert sorted(p.name for p in (root / "examples" / "flower-app").iterdir()) == before


def test_overall_line_states_each_threat_with_its_evidence():
    from fedleak.audit.judge.overall import html, overall

    result = {"threat_models": {
        "honest-but-curious": {"verdict": "high", "evidence": "estimated", "evidence_text": "Rec 75 % (estimated)",
                               "membership": {"verdict": "medium", "evidence": "AUC 0.81 (estimated)"}},
        "malicious": {"verdict": "not run", "not_run_reason": "no malicious model shipped"}},
        "dp_verdict": {"verdict": "consistent", "short": "claim holds at 1,000 canaries", "evidence": "p = 0.4"}}
    info = overall(result)
    assert info["line"] == ("honest: high · malicious: not run · membership: medium · DP: claim holds at 1,000 "
                            "canaries")
    assert [p["evidence"] for p in info["parts"]] == ["Rec 75 % (estimated)", "no malicious model shipped",
                                                      "AUC 0.81 (estimated)", "p = 0.4"]
    assert "safe" not in info["line"] and info["line"] in html(result)
    plain = overall({"threat_models": {}, "epsilon": {"fedsgd": {"epsilon_rdp": 3.25}}})
    assert plain["line"] == "honest: not run · malicious: not run · DP: ε = 3.25 (accountant, not audited)"


def test_dashboard_in_the_reports_units_with_the_live_verdict(tmp_path):
    from fedleak.integrations.flower.dashboard import write_dashboard

    records = [{"round": 1, "client": 7, "status": "attacked", "attack": "inverting-gradients", "psnr": 12.5,
                "rec_percent": 0.0, "iip": 0.25, "truth": "client-reported",
                "leakage": {"level": "inconclusive", "evidence": "an optimization attack's estimate"},
                "dp": {"mechanisms": [{"mechanism": "gaussian"}], "epsilon": 2.0}}]
    page = write_dashboard(tmp_path / "d.html", records, None, "t").read_text()
    assert "<th>IIP (%)</th>" in page and '<td class="num">25</td>' in page and "<th>PSNR (dB)</th>" in page
    assert "honest: inconclusive · DP: gaussian in force" in page and "ε = 2.00" in page


def test_canaries_go_around_the_dp_wrapper_unless_its_accountant_refuses_them():
    pytest.importorskip("dp_accounting")
    from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

    from fedleak.integrations.flower import recipes
    from fedleak.integrations.flower.app_runtime import Watch, _add_canaries, chain
    from fedleak.integrations.flower.canary import CanaryAudit

    plain = DifferentialPrivacyServerSideFixedClipping(FedAvg(), 0.5, 1.0, 2)
    watch = Watch(make_audit=None, canaries=10)
    top = _add_canaries(plain, watch)
    assert isinstance(top, CanaryAudit) and top.strategy is plain and watch.notes == []
    strict = DifferentialPrivacyServerSideFixedClipping(FedAvg(), 0.5, 1.0, 2, accountant=recipes.accountant(2))
    watch = Watch(make_audit=None, canaries=10)
    assert _add_canaries(strict, watch) is strict and not watch.canary_audits  # the federation is left as it was
    assert "keeps Flower's accountant" in watch.notes[0]
    watch = Watch(make_audit=None, canaries=10)
    assert [type(n).__name__ for n in chain(_add_canaries(FedAvg(), watch))] == ["FedAvg"]
    assert "holds no Flower server-side DP wrapper" in watch.notes[0]


def test_a_serverapp_outliving_its_simulation_is_stopped():
    """Ray did not start: the ServerApp thread would wait for nodes forever; its grid is made to raise."""
    import threading
    import time

    from fedleak.integrations.flower.app_runtime import SimulationEnded, stop_serverapp

    class Grid:
        def get_node_ids(self):
            return []

    grid, seen = Grid(), []

    def wait_for_nodes():  # FedAvg's sample_nodes: poll until enough nodes connect
        try:
            while len(list(grid.get_node_ids())) < 2:
                time.sleep(0.05)
        except SimulationEnded as exc:
            seen.append(str(exc))

    thread = threading.Thread(target=wait_for_nodes)
    thread.start()
    stop_serverapp(grid, thread, wait=10)
    assert not thread.is_alive() and seen == ["the Flower simulation ended"]


def test_app_flags_without_an_app_are_refused(tmp_path, capsys):
    assert main(["audit", "--run-config", "x=1", "--canaries", "5", "--out", str(tmp_path / "o")]) == 2
    assert "--run-config, --canaries apply to a Flower app: add --flower-app PATH" in _one_error_line(capsys)
    assert not (tmp_path / "o").exists()


def test_flwr_run_wrapper_finds_flower_superlink_and_names_a_running_local_superlink(monkeypatch):
    """The issue's first three failures of `flwr run` in simulation: flower-superlink not on PATH without an
    activated venv, Flower's runtime `uv sync`, a local SuperLink kept from an earlier try."""
    import http.server
    import sys
    import threading

    from flwr.cli.constant import LOCAL_SUPERLINK_HTTP_API_PORT

    from fedleak.integrations.flower import flwr_run

    monkeypatch.delenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", raising=False)
    env = flwr_run.run_environment()
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    assert env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "1"
    monkeypatch.setenv("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "0")  # the user's own choice is kept
    assert flwr_run.run_environment()["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] == "0"

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    assert flwr_run.stale_local_superlink() is None
    try:
        server = http.server.HTTPServer(("127.0.0.1", int(LOCAL_SUPERLINK_HTTP_API_PORT)), Health)
    except OSError:
        pytest.skip("the local SuperLink port is in use on this machine")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        line = flwr_run.stale_local_superlink()
    finally:
        server.shutdown()
        server.server_close()
    assert line and f"a local SuperLink already answers on 127.0.0.1:{LOCAL_SUPERLINK_HTTP_API_PORT}" in line
