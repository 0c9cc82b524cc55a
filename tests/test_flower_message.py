"""Flower's Message API: a real in-process federation (ServerApp main, Flower's FedAvg, ClientApps,
Messages over InlineGrid) audited by LeakageAudit; malicious shipping; the inspector client mod."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("flwr.serverapp")

import fedleak  # noqa: E402
from fedleak import FedleakError, Protocol, Update  # noqa: E402
from fedleak.fl import client_update  # noqa: E402
from fedleak.integrations.flower import LeakageAudit, LeakageRecorder  # noqa: E402
from fedleak.integrations.flower.client import REFUSAL  # noqa: E402
from fedleak.integrations.flower.demo import (federation_model, make_client_app, make_server_app,  # noqa: E402
                                              run_demo)
from fedleak.integrations.flower.grid import run_inline  # noqa: E402

torch.set_num_threads(1)
LR = 0.05


def federation(tmp_path, *, clients=2, rounds=2, samples=4, epochs=2, batch=2, malicious=False, inspect=False,
               client_app=None, strategy_cls=None, share=False, blocking=True, holder=None, **audit_options):
    """Run a federation of LeNet clients on digits; returns (audit, data parts, initial model)."""
    from flwr.serverapp.strategy import FedAvg

    spec, parts = fedleak.data.load("digits", num_clients=clients, samples_per_client=samples, seed=0)
    model = federation_model(spec, malicious)
    app = client_app or make_client_app(parts, lambda: federation_model(spec, malicious), inspect=inspect, share=share)

    def audit_fn():
        strategy = (strategy_cls or FedAvg)(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients)
        return LeakageAudit(strategy, model, tmp_path, spec=spec, blocking=blocking,
                            protocol=Protocol("fedavg", lr=LR, reshuffle=False), **audit_options)

    holder = {} if holder is None else holder
    config = {"lr": LR, "local-epochs": epochs, "batch-size": batch}
    run_inline(make_server_app(model, audit_fn, rounds, config, holder), app, clients)
    return holder, parts, model, spec


def test_recorded_updates_are_the_clients_true_updates(tmp_path):
    """Non-blocking worker pool (start waits at the end); a shared batch is stripped before FedAvg."""
    holder, parts, model, _ = federation(tmp_path, attack=None, blocking=False, share=True)
    records = [json.loads(line) for line in (tmp_path / "leakage.jsonl").read_text().splitlines()]
    assert sorted((r["round"], r["client"], r["status"]) for r in records) == \
        [(1, 1, "recorded"), (1, 2, "recorded"), (2, 1, "recorded"), (2, 2, "recorded")]
    expected_protocol = Protocol("fedavg", epochs=2, batch_size=2, lr=LR, reshuffle=False)
    by_round = {}
    for r in records:
        update = Update.load(r["update"])
        assert update.protocol == expected_protocol and update.num_samples == 4
        ours = client_update(model, parts[r["client"] - 1], expected_protocol, params=update.server_params)
        for name, value in ours.client_params.items():
            torch.testing.assert_close(update.client_params[name], value, rtol=1e-4, atol=1e-5)
        by_round.setdefault(r["round"], []).append(update)
    for name, value in model.named_parameters():  # round 1 starts from the initial model
        assert torch.equal(by_round[1][0].server_params[name], value.detach())
    for name in by_round[2][0].server_params:  # round 2 from Flower's FedAvg of round 1 (equal N: the mean)
        mean = torch.stack([u.client_params[name] for u in by_round[1]]).mean(0)
        torch.testing.assert_close(by_round[2][0].server_params[name], mean, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "dashboard.html").exists()


def test_malicious_server_ships_an_imprint_model_and_reads_inputs_verbatim(tmp_path):
    audit = run_demo(tmp_path, clients=2, rounds=1, samples=4, malicious=True, blocking=True)
    assert len(audit.records) == 2
    for record in audit.records:
        assert record["status"] == "attacked" and record["attack"] == "imprint" and record["evaluated"]
        verbatim = sum(p is not None and p > 40 for p in record["psnr_per_input"])
        assert record["verbatim"] >= 2 and verbatim >= record["verbatim"] - 1, record
    html = (tmp_path / "dashboard.html").read_text()
    assert "Latest reconstructions" in html and "data:image/png;base64" in html


def test_inspector_mod_refuses_the_imprinted_model_and_passes_an_honest_one(tmp_path):
    _, _, _, _ = federation(tmp_path / "bad", rounds=1, malicious=True, inspect=True, attack=None)
    bad = [json.loads(line) for line in (tmp_path / "bad" / "leakage.jsonl").read_text().splitlines()]
    assert [r["status"] for r in bad] == ["error", "error"]
    assert all(REFUSAL in r["reason"] and "imprint-rows" in r["reason"] for r in bad)
    federation(tmp_path / "good", rounds=1, inspect=True, attack=None)
    good = [json.loads(line) for line in (tmp_path / "good" / "leakage.jsonl").read_text().splitlines()]
    assert [r["status"] for r in good] == ["recorded", "recorded"]


def test_any_message_api_strategy_can_be_wrapped(tmp_path):
    """FedProx adds its proximal term to the train config; the audit records the replies unchanged."""
    from flwr.serverapp.strategy import FedProx

    holder, *_ = federation(tmp_path, rounds=1, attack=None, strategy_cls=FedProx)
    assert [r["status"] for r in holder["audit"].records] == ["recorded", "recorded"]
    update = Update.load(holder["audit"].records[0]["update"])
    assert "proximal-mu" in update.metadata["train_config"] and holder["result"].arrays is not None


def test_bad_replies_are_quarantined_and_never_crash_the_federation(tmp_path):
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    spec, parts = fedleak.data.load("digits", num_clients=3, samples_per_client=4, seed=0)
    honest = make_client_app(parts, lambda: federation_model(spec, False))
    app = ClientApp()

    @app.train()
    def train(msg, context):
        node = int(context.node_config["partition-id"])
        if node == 1:  # arrays of another architecture
            other = fedleak.models.build("mlp", spec, seed=0)
            return Message(RecordDict({"arrays": ArrayRecord(other.state_dict()),
                                       "metrics": MetricRecord({"num-examples": 4})}), reply_to=msg)
        if node == 2:
            raise RuntimeError("client crashed")
        return honest(msg, context)

    from flwr.serverapp.exception import InconsistentMessageReplies

    holder = {}  # guarded (the default): the other architecture is quarantined, FedAvg aggregates node 1 alone
    federation(tmp_path / "guarded", clients=3, rounds=1, client_app=app, attack=None, holder=holder)
    records = {r["client"]: r for r in holder["audit"].records}
    assert records[1]["status"] == "recorded" and holder["result"].arrays is not None
    assert records[2]["status"] == "quarantined" and "array names differ" in records[2]["reason"]
    assert records[3]["status"] == "error" and "client crashed" in records[3]["reason"]
    holder = {}
    with pytest.raises(InconsistentMessageReplies):  # guard=False: every reply passed on, FedAvg itself refuses
        federation(tmp_path / "open", clients=3, rounds=1, client_app=app, attack=None, holder=holder, guard=False)
    records = {r["client"]: r for r in holder["audit"].records}
    assert records[2]["status"] == "rejected" and "arrays the client returned" in records[2]["reason"]


def test_wrapping_anything_but_a_message_api_strategy_fails_at_construction(tmp_path):
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.serverapp.strategy import FedAvg

    spec, _ = fedleak.data.load("digits", num_clients=1, samples_per_client=2, seed=0)
    model = fedleak.models.build("lenet", spec, seed=0)
    with pytest.raises(FedleakError, match="Message-API strategy .*got flwr.server.strategy"):
        LeakageAudit(LegacyFedAvg(), model, tmp_path, spec=spec)
    with pytest.raises(FedleakError, match="needs spec"):
        LeakageAudit(FedAvg(), model, tmp_path)
    with pytest.raises(FedleakError, match="unknown attack"):
        LeakageAudit(FedAvg(), model, tmp_path, spec=spec, attack="nope")
    with pytest.raises(FedleakError, match="workers"):
        LeakageAudit(FedAvg(), model, tmp_path, spec=spec, workers=0)
    assert LeakageRecorder is not None  # the legacy recorder is still exported
