"""The Flower dashboard (leakage against Flower's ε, integer count ticks, a table that fits its box)
and the node-owned client settings (node config decides; the run config can only make stricter)."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr.serverapp")

from fedleak import FedleakError  # noqa: E402
from fedleak.integrations.flower.client import node_settings  # noqa: E402
from fedleak.integrations.flower.dashboard import CELL, leakage_figure, write_dashboard  # noqa: E402


def _records():
    records = []
    for rnd, eps in ((1, 4.7), (2, 7.1), (3, 9.0)):
        for node in (11, 12):
            records.append({"round": rnd, "client": node, "status": "attacked", "attack": "imprint",
                            "verbatim": rnd + node % 2, "dp": {"epsilon": eps, "mechanisms": []},
                            "leakage": {"level": "high", "evidence": "proved"}})
    records.append({"round": 3, "client": 13, "status": "quarantined", "reason": "x" * 400})
    return records


def test_the_dashboard_plots_leakage_against_epsilon_with_integer_count_ticks(tmp_path):
    from matplotlib.ticker import MaxNLocator

    figure = leakage_figure(_records())
    axes = figure.get_axes()
    assert [a.get_xlabel() for a in axes] == ["round", "ε after the round (Flower's accountant)"]
    for axis in axes:  # verbatim counts inputs: whole-number ticks only
        locator = axis.yaxis.get_major_locator()
        assert isinstance(locator, MaxNLocator) and locator._integer
        assert all(float(t).is_integer() for t in axis.get_yticks())
    xs = sorted({round(x, 1) for line in axes[1].get_lines() for x in line.get_xdata()})
    assert xs == [4.7, 7.1, 9.0]
    page = write_dashboard(tmp_path / "d.html", _records(), None, "t").read_text()
    assert "x" * CELL not in page and "x" * (CELL - 1) + "…" in page  # long reasons shortened in the table
    assert "1 quarantined" in page and "<th>epsilon</th>" in page


class _Context:
    def __init__(self, node, run=None):
        self.node_config, self.run_config = node, run or {}


def test_client_settings_come_from_the_node_and_the_run_config_only_tightens(monkeypatch):
    monkeypatch.delenv("FEDLEAK_NODE_CONFIG", raising=False)
    part = {"partition-id": 1, "num-partitions": 3}
    plain = node_settings(_Context(part))
    assert (plain.partition_id, plain.num_partitions, plain.inspect, plain.share_truth) == (1, 3, False, False)
    own = {**part, "inspect": True, "share-truth": True}
    # the server cannot turn a node's inspector off
    assert node_settings(_Context(own, {"inspect": False, "share-truth": True})).inspect is True
    assert node_settings(_Context(part, {"share-truth": True})).share_truth is False  # nor make a node share
    assert node_settings(_Context(part, {"inspect": True})).inspect is True  # stricter: allowed
    assert node_settings(_Context(own, {"share-truth": False})).share_truth is False
    monkeypatch.setenv("FEDLEAK_NODE_CONFIG", "share-truth=true")  # Flower's simulation engine
    assert node_settings(_Context(part)).share_truth is True
    for node, match in (({}, "no partition-id or num-partitions: start it with --node-config"),
                        ({"partition-id": 3, "num-partitions": 3}, "0 <= partition-id"),
                        ({**part, "inspect": "maybe"}, "inspect='maybe'")):
        with pytest.raises(FedleakError, match=match) as info:
            node_settings(_Context(node))
        assert "\n" not in str(info.value)


def test_a_supernode_without_a_partition_gets_one_line_not_a_keyerror(tmp_path):
    """Node 2 is started without partition-id/num-partitions: its error reply names the fix; node 1's
    node config opts in to sharing its batch, node 2's would not (per-node opt-in)."""
    import fedleak
    from fedleak import Protocol
    from fedleak.integrations.flower import LeakageAudit
    from fedleak.integrations.flower.demo import federation_model, make_client_app, make_server_app
    from fedleak.integrations.flower.grid import run_inline
    from flwr.serverapp.strategy import FedAvg

    spec, parts = fedleak.data.load("digits", num_clients=2, samples_per_client=2, seed=0)
    model = federation_model(spec, False)
    holder = {}
    server = make_server_app(model, lambda: LeakageAudit(
        FedAvg(fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2), model, tmp_path, spec=spec,
        attack=None, protocol=Protocol("fedavg", reshuffle=False)), 1, {"lr": 0.05, "batch-size": 2}, holder)
    run_inline(server, make_client_app(parts, lambda: federation_model(spec, False)), 2,
               node_configs=[{"partition-id": 0, "num-partitions": 2, "share-truth": True}, {"inspect": True}])
    records = {r["client"]: r for r in holder["audit"].records}
    assert records[1]["status"] == "recorded" and records[1]["truth"] == "client-reported"
    assert records[2]["status"] == "error" and "KeyError" not in records[2]["reason"]
    first = records[2]["reason"].splitlines()[0]
    assert first.startswith("FedleakError: this SuperNode's node config has no partition-id or num-partitions: "
                            "start it with --node-config"), first
