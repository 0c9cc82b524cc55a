"""Canary nodes inside ``fedleak audit --flower-app`` (issue 42, item 2): ``examples/flower-app-dp-nodes`` puts
Flower's ``fixedclipping_mod`` on every node, except the partitions its run config's ``no-clip-on`` builds without
it — the misconfiguration a node operator makes (Flower's client-side DP mods are opt-in per ClientApp).

The fast tests run the wrapper ClientApp in this process (no Ray): a canary node follows the app into the ClientApp
it builds for its node and runs that ClientApp's own mods; a real partition is answered as without canaries. Bad
input is one line, exit 2, nothing written. The slow test runs Flower's simulation twice (Ray; ~90 s each on the
2 shared cores under load, unavoidable: the wrapper must be loaded in Ray's actors by Flower's own runtime): the
misconfigured app names exactly nodes 1 and 3, the correct one flags none.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr.serverapp")

from fedleak.cli import main  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "flower-app-dp-nodes"


@pytest.fixture
def task_identity():
    """The identity Flower's runtime gives a process (a Message takes its run id from it), restored after."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)  # noqa: SLF001
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved  # noqa: SLF001


def test_a_canary_node_runs_its_nodes_own_mods_and_real_nodes_are_unchanged(task_identity):
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

    from fedleak.integrations.flower import app_loading
    from fedleak.integrations.flower.app_canary_nodes import CanaryNodeApp, homes, plan
    from fedleak.integrations.flower.canary_nodes import _floats, _Plan

    app = app_loading.load(EXAMPLE, 'no-clip-on="1,3"')
    try:
        canaries = plan(5, 24)
        wrapper = CanaryNodeApp(app.client_app, 5, canaries)
        from fedleak_dp_nodes_app.task import Net

        initial = ArrayRecord(Net().state_dict())
        theta, _ = _floats(initial)

        def call(target, partition, partitions):
            config = ConfigRecord({"lr": 0.1, "batch-size": 4, "clipping_norm": 0.1})
            msg = Message(RecordDict({"arrays": initial, "config": config}), dst_node_id=partition + 1,
                          message_type="train")
            context = Context(run_id=1, node_id=partition + 1, state=RecordDict(), run_config=dict(app.run_config),
                              node_config={"partition-id": partition, "num-partitions": partitions})
            return _floats(next(iter(target(msg, context).content.array_records.values())))[0]

        included = np.flatnonzero(canaries.included)
        home = homes(canaries, 5)
        seen = {}
        for i, j in enumerate(included):  # partition 5 + i is the i-th included canary
            u = _Plan(canaries, None).direction(int(j), theta.size)
            seen[int(j)] = float(u @ (call(wrapper, 5 + i, 5 + len(included)) - theta)) / 0.1
        raw = canaries.raw_norm(np.arange(canaries.count))
        for j, projection in seen.items():  # clipped to C (1) by the node's mod, else its raw norm (10)
            expected = raw[j] if home[j] in (1, 3) else 1.0
            assert projection == pytest.approx(expected, rel=1e-4), (j, home[j])
        assert {int(home[j]) for j in seen if raw[j] > 1} == {0, 1, 2, 3, 4}  # every node tested
        # a real partition: the user's ClientApp with the node config it has without canaries (5 partitions)
        assert np.array_equal(call(wrapper, 2, 5 + len(included)), call(app.client_app, 2, 5))
    finally:
        app_loading.forget_modules(app)


def test_a_clientapp_with_its_mods_on_itself_adaptive_clipping(task_identity):
    """The other way an app carries its mods — on the loaded ClientApp itself (here Flower's
    ``adaptiveclipping_mod``): the canary runs inside them, clipped to C, with the mod's norm bit in its reply."""
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp.mod import adaptiveclipping_mod
    from torch import nn

    import fedleak
    from fedleak.integrations.flower.app_canary_nodes import CanaryNodeApp, plan
    from fedleak.integrations.flower.canary_nodes import _floats, _Plan, train_mods
    from fedleak.integrations.flower.demo import make_client_app

    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 4), nn.Sigmoid(), nn.Linear(4, 62))
    _, parts = fedleak.data.load("digits", num_clients=3, samples_per_client=2, seed=0)
    user = make_client_app(parts, lambda: net, mods=[adaptiveclipping_mod])
    assert adaptiveclipping_mod in train_mods(user)
    canaries = plan(3, 24)
    initial = ArrayRecord(net.state_dict())
    theta, _ = _floats(initial)
    j = int(np.flatnonzero(canaries.included & (canaries.raw_norm(np.arange(24)) > 1))[0])
    msg = Message(RecordDict({"arrays": initial, "config": ConfigRecord({"lr": 0.1, "clipping_norm": 0.05})}),
                  dst_node_id=9, message_type="train")
    context = Context(run_id=1, node_id=9, state=RecordDict(), run_config={},
                      node_config={"partition-id": 3 + int(np.flatnonzero(canaries.included).tolist().index(j)),
                                   "num-partitions": 3 + int(canaries.included.sum())})
    reply = CanaryNodeApp(user, 3, canaries)(msg, context)
    flat, _ = _floats(reply.content["arrays"])
    assert float(_Plan(canaries, None).direction(j, flat.size) @ (flat - theta)) / 0.05 == pytest.approx(1.0, 1e-4)
    assert dict(reply.content["metrics"])["norm_bit"] == 1  # raw norm 10·C: the mod saw it above its clip norm


def _local_dp_run(run_config: str, seed: int = 0):
    """One round of the example with ``dp = "local"`` (each node's LocalDpMod, Flower's FedAvg) on an in-process
    grid: the canary-node ClientApp and the recorder as ``--flower-app --canary-nodes 24`` runs them; returns the
    findings and the config each node received."""
    from flwr.app import ArrayRecord, ConfigRecord
    from flwr.serverapp.strategy import FedAvg

    from fedleak.integrations.flower import app_loading
    from fedleak.integrations.flower.app_canary_nodes import CanaryNodeApp, NodeRecorder, plan, result
    from fedleak.integrations.flower.grid import InlineGrid

    app = app_loading.load(EXAMPLE, f'dp="local" {run_config}')
    state = np.random.get_state()
    np.random.seed(seed)  # LocalDpMod draws its noise from numpy's global generator
    try:
        from fedleak_dp_nodes_app.task import Net

        canaries = plan(5, 24)
        total = 5 + int(canaries.included.sum())
        wrapper = CanaryNodeApp(app.client_app, 5, canaries, dict(app.run_config))
        seen = {}

        def client(msg, ctx):
            seen[ctx.node_id] = dict(next(iter(msg.content.config_records.values())))
            return wrapper(msg, ctx)

        grid = InlineGrid(client, total, run_config=dict(app.run_config))
        recorder = NodeRecorder(FedAvg(fraction_evaluate=0.0, min_train_nodes=total, min_available_nodes=total),
                                canaries, 5, {k + 1: k for k in range(total)}, [], wrapper)
        recorder.start(grid, ArrayRecord(Net().state_dict()), num_rounds=1,
                       train_config=ConfigRecord({"lr": 0.1, "batch-size": 4}))
        return result(recorder, 0.0), seen
    finally:
        np.random.set_state(state)
        app_loading.forget_modules(app)


def test_local_dp_nodes_canaries_come_back_clipped_and_noised_and_a_node_without_the_mod_is_named(task_identity):
    """LocalDpMod alone (no clip norm in the train config): the claim is read from the nodes' own LocalDpMod
    (C = 0.1, S = 0.1, ε = 8, δ = 1e-5: s = S·√(2 ln(1.25/δ))/ε ≈ 0.0606 per coordinate); a canary of a node with
    the mod comes back clipped to C with s/C of noise per coordinate (13,614 coordinates: the measured ratio is
    within 3 %), the canaries of nodes 1 and 3, built without the mod, come back at 10·C with no noise at all."""
    from fedleak.integrations.flower.app_report import node_verdict

    found, seen = _local_dp_run('no-clip-on="1,3"')
    claim = found["claim"]
    assert (claim["clipping_norm"], claim["sensitivity"], claim["epsilon"], claim["delta"]) == (0.1, 0.1, 8.0, 1e-5)
    assert claim["noise_std"] == pytest.approx(0.1 * np.sqrt(2 * np.log(1.25e5)) / 8)
    assert claim["stated_by"] == "the LocalDpMod of 3 of the 5 nodes' ClientApps"
    assert found["nodes_flagged_by_replies"] == [1, 3]
    rows = {r["node"]: r for r in found["reply_test"]}
    assert set(rows) == {0, 1, 2, 3, 4}
    s_over_c = claim["noise_std"] / 0.1
    for k in (0, 2, 4):  # clipped to C (projection 1 ± s/C per reply), noised at the claim's scale
        assert not rows[k]["flagged"] and rows[k]["noise_ratio"] == pytest.approx(1.0, abs=0.03)
        assert abs(rows[k]["mean_projection"] - 1.0) < 4 * s_over_c
    for k in (1, 3):  # unclipped (raw norm 10·C) and noiseless: both tests name them
        assert rows[k]["mean_projection"] == pytest.approx(10.0, rel=1e-4) and rows[k]["noise_ratio"] < 1e-3
        assert len(rows[k]["reasons"]) == 2 and rows[k]["p_value"] < 1e-6
    # the aggregate test runs with the claim's noise (s·√n/C for the n replies FedAvg averages)
    n = 5 + found["canaries_inserted"]
    assert found["noise_multiplier_seen"] == pytest.approx(s_over_c * np.sqrt(n))
    assert found["noise_by"].startswith("the nodes' LocalDpMod adds it to each reply; claim tested: C = 0.1, "
                                        "sensitivity 0.1, (ε, δ) = (8, 1e-05) per round, s = 0.0606")
    verdict = node_verdict(found)
    assert verdict["verdict"] == "not in force" and verdict["nodes_missing_mod"] == [1, 3]
    assert "node(s) 1, 3 (their LocalDpMod missing, or not clipping and noising)" in verdict["evidence"]
    assert "reply noise 0× the claimed" in verdict["evidence"]
    # integer buffers released noised (buffer_check, flwr #8381) are said beside the verdict, never change its level
    sentence = "Integer buffers came back noised: 1 array(s) integer-typed in every reply (...)"
    beside = node_verdict({**found, "buffer_finding": {"sentence": sentence}})
    assert beside["verdict"] == verdict["verdict"] and beside["evidence"].endswith(f"; also seen: {sentence}")
    # the canaries' C reaches the canary nodes only: a real node's train config is the app's own
    assert all("clipping_norm" not in seen[k + 1] for k in range(5))
    assert all(seen[k + 1]["clipping_norm"] == 0.1 for k in range(5, n))


def test_local_dp_nodes_all_with_the_mod_none_flagged_none_with_it_refused(task_identity):
    from fedleak.errors import FedleakError

    found, _ = _local_dp_run("", seed=1)
    assert found["nodes_flagged_by_replies"] == []
    assert found["claim"]["stated_by"] == "the LocalDpMod of 5 of the 5 nodes' ClientApps"
    assert all(r["noise_ratio"] == pytest.approx(1.0, abs=0.03) for r in found["reply_test"])
    with pytest.raises(FedleakError, match="carries no clipping_norm .* and no node's ClientApp carries a LocalDpMod"):
        _local_dp_run('no-clip-on="0,1,2,3,4"')


def test_the_local_dp_claim_read_from_the_loaded_clientapp_or_refused_when_nodes_state_different_ones(task_identity):
    """A LocalDpMod on the loaded ClientApp itself is read without calling the train function; nodes whose own
    ClientApps' LocalDpMods state different claims are refused in one line naming two of them."""
    import torch
    from flwr.app import ArrayRecord, ConfigRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.clientapp.mod import LocalDpMod
    from torch import nn

    import fedleak
    from fedleak.errors import FedleakError
    from fedleak.integrations.flower import node_settings
    from fedleak.integrations.flower.app_canary_claim import local_dp_claim
    from fedleak.integrations.flower.demo import make_client_app

    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 2))
    _, parts = fedleak.data.load("digits", num_clients=3, samples_per_client=2, seed=0)
    calls = []

    def model():
        calls.append(1)  # the train function builds the model: never called when the mod is on the loaded app
        return net

    content = RecordDict({"arrays": ArrayRecord(net.state_dict()), "config": ConfigRecord({"lr": 0.1})})
    claim = local_dp_claim(make_client_app(parts, model, mods=[LocalDpMod(0.5, 0.5, 2.0, 1e-6)]), content, 3, {})
    assert (claim["clipping_norm"], claim["epsilon"], claim["delta"]) == (0.5, 2.0, 1e-6) and not calls
    assert claim["stated_by"] == "the LocalDpMod of 3 of the 3 nodes' ClientApps"
    per_node = [make_client_app(parts, model, mods=[LocalDpMod(0.5, 0.5, eps, 1e-6)]) for eps in (2.0, 2.0, 4.0)]
    outer = ClientApp()

    @outer.train()
    def train(msg, context):
        return per_node[node_settings(context).partition_id](msg, context)

    with pytest.raises(FedleakError, match=r"LocalDpMods state different claims \(node 0: .* node 2: "):
        local_dp_claim(outer, content, 3, {})


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_canary_nodes_that_do_not_fit_or_a_clientapp_that_does_not_load(tmp_path, capsys):
    out = tmp_path / "report"
    for flags, named in ((["--canary-nodes", "10"], "would have no included canary"),
                         (["--canary-nodes", "500"], "from 2 to 120"),
                         (["--run-config", "fedleak-canary-nodes=1"], "got 1"),
                         (["--canary-nodes", "120", "--supernodes", "20"], "more than 64")):
        assert main(["audit", "--flower-app", str(EXAMPLE), "--out", str(out), *flags]) == 2
        assert named in _one_error_line(capsys)
        assert not out.exists()
    broken = tmp_path / "app"
    shutil.copytree(EXAMPLE, broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "fedleak_dp_nodes_app" / "client_app.py").write_text("raise ImportError('no such build')\n")
    assert main(["audit", "--flower-app", str(broken), "--out", str(out), "--canary-nodes", "24"]) == 2
    line = _one_error_line(capsys)
    assert "ClientApp 'fedleak_dp_nodes_app.client_app:app' does not import" in line and "no such build" in line
    assert "fedleak_dp_nodes_app" not in sys.modules and str(broken) not in sys.path  # the next app loads fresh
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["app"]
    assert main(["audit", "--canary-nodes", "24", "--out", str(out)]) == 2
    assert "add --flower-app" in _one_error_line(capsys)


@pytest.mark.slow
def test_flower_app_names_the_nodes_built_without_their_mod(tmp_path, capsys):
    """Two runs of Flower's simulation (module docstring): nodes 1, 3 built without fixedclipping_mod are named
    from their canaries' replies; the correct app flags none; canary replies are never attacked."""
    bad = tmp_path / "bad"
    assert main(["audit", "--flower-app", str(EXAMPLE), "--run-config", 'no-clip-on="1,3"', "--out", str(bad),
                 "--quiet"]) == 0
    metrics = json.loads((bad / "metrics.json").read_text())
    found = metrics["flower"]["canary_nodes"]
    assert found["nodes_flagged_by_replies"] == [1, 3]
    assert {r["node"] for r in found["reply_test"]} == {0, 1, 2, 3, 4}
    assert metrics["dp_verdict"]["verdict"] == "not in force" and metrics["dp_verdict"]["nodes_missing_mod"] == [1, 3]
    assert "DP: mod missing on nodes 1, 3 (estimated" in metrics["overall"]["line"]
    evidence = metrics["dp_verdict"]["evidence"]
    assert "the server sees replies only" in evidence and "node's operator to run the canary ClientApp" in evidence
    assert f"cost: {found['cost']['canary_replies']} canary replies" in evidence
    assert "mod missing on nodes 1, 3" in (bad / "report.html").read_text()
    # the leakage audit attacked the 5 real nodes' replies only (a canary holds no data)
    assert sum(metrics["flower"]["replies"].values()) == 5
    good = tmp_path / "good"
    assert main(["audit", "--flower-app", str(EXAMPLE), "--out", str(good), "--quiet"]) == 0
    metrics = json.loads((good / "metrics.json").read_text())
    assert metrics["flower"]["canary_nodes"]["nodes_flagged_by_replies"] == []
    assert metrics["dp_verdict"]["verdict"] == "consistent" and metrics["dp_verdict"]["nodes_missing_mod"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "good"]
