"""Flower replies, the door a client controls (issue 47 classes 1 and 2).

Class 1: what a valid reply looks like follows from what the server sent, never from a vote of the replies —
one hostile reply with more (or fewer) metric keys than an honest one must not get the honest one quarantined.
Class 2: the guard is one behaviour of every strategy wrapper: :class:`CanaryAudit` survives the hostile replies
:class:`LeakageAudit` quarantines, and aggregates the honest ones (plus its canaries) exactly as without them.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numpy as np
import pytest
import torch

pytest.importorskip("flwr.serverapp")

import fedleak  # noqa: E402
from fedleak import Protocol  # noqa: E402
from fedleak.integrations.flower import LeakageAudit  # noqa: E402
from fedleak.integrations.flower.canary import CanaryAudit  # noqa: E402
from fedleak.integrations.flower.convert import model_record  # noqa: E402
from fedleak.integrations.flower.demo import federation_model, make_client_app  # noqa: E402
from fedleak.integrations.flower.grid import run_inline  # noqa: E402

torch.set_num_threads(1)


def _content(state, metrics):
    from flwr.app import ArrayRecord, MetricRecord, RecordDict

    return RecordDict({"arrays": ArrayRecord(state), "metrics": MetricRecord(metrics)})


def federate(tmp_path, hostile=None, *, nodes=3, wrap=None):
    """One FedAvg round over ``nodes`` digit clients; the last node replies ``hostile(its honest state)`` when
    given. ``wrap(strategy, model, spec)`` wraps FedAvg. Returns (aggregated arrays, the wrapper)."""
    from flwr.app import ConfigRecord, Message
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    spec, parts = fedleak.data.load("digits", num_clients=3, samples_per_client=2, seed=0)
    model = federation_model(spec, False)
    honest = make_client_app(parts, lambda: federation_model(spec, False))
    app = ClientApp()

    @app.train()
    def train(msg, context):
        reply = honest(msg, context)
        if hostile is None or int(context.node_config["partition-id"]) != nodes - 1:
            return reply
        return Message(hostile(reply.content.array_records["arrays"].to_torch_state_dict()), reply_to=msg)

    holder = {}
    server = ServerApp()

    @server.main()
    def main(grid, context):
        strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
        if wrap is not None:
            strategy = holder["wrapper"] = wrap(strategy, model, spec)
        random.seed(0)
        result = strategy.start(grid=grid, initial_arrays=model_record(model), num_rounds=1,
                                train_config=ConfigRecord({"lr": 0.05, "local-epochs": 1, "batch-size": 2}))
        holder["result"] = {k: v.numpy() for k, v in result.arrays.items()}

    run_inline(server, app, nodes)
    return holder["result"], holder.get("wrapper")


def leakage(tmp_path, **options):
    return lambda strategy, model, spec: LeakageAudit(strategy, model, tmp_path, spec=spec, blocking=True,
                                                      attack=None, protocol=Protocol("fedavg", lr=0.05), **options)


def _same(a, b):
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


# -- class 1: no vote --------------------------------------------------------------------------------------------
def test_a_hostile_reply_with_extra_metric_keys_cannot_get_the_honest_one_quarantined(tmp_path):
    """Issue 47 class 1: one honest, one hostile reply whose MetricRecord has extra keys (a tie of the vote)."""
    poison = lambda s: _content({k: v + 0.25 for k, v in s.items()},  # noqa: E731 - valid arrays, other values
                                {"train-loss": 1.0, "num-examples": 2, "backdoor": 1.0, "x": 2.0})
    guarded, audit = federate(tmp_path / "g", poison, nodes=2, wrap=leakage(tmp_path / "a"))
    assert sorted(r["status"] for r in audit.records) == ["recorded", "recorded"], audit.records
    by_node = {r["client"]: r for r in audit.records}
    assert by_node[2]["metrics_dropped"] == ["backdoor", "x"] and "metrics_dropped" not in by_node[1]
    # FedAvg alone over the same two replies without the extra keys: the same aggregate, bit for bit
    plain, _ = federate(tmp_path / "p", lambda s: _content({k: v + 0.25 for k, v in s.items()},
                                                           {"train-loss": 1.0, "num-examples": 2}), nodes=2)
    _same(guarded, plain)


def test_a_hostile_reply_with_fewer_metric_keys_cannot_either(tmp_path):
    bare = lambda s: _content(s, {"num-examples": 2})  # noqa: E731
    guarded, audit = federate(tmp_path / "g", bare, wrap=leakage(tmp_path / "a"))
    assert [r["status"] for r in audit.records].count("quarantined") == 0, audit.records
    assert all(r.get("metrics_dropped") == ["train-loss"] for r in audit.records if r["client"] != 3)


def test_configured_metrics_are_what_a_reply_must_carry(tmp_path):
    """metric_keys= is what the server expects: a reply lacking one is quarantined, whoever else lacks it."""
    bare = lambda s: _content(s, {"num-examples": 2})  # noqa: E731
    guarded, audit = federate(tmp_path / "g", bare, wrap=leakage(tmp_path / "a", metric_keys=["train-loss"]))
    by_node = {r["client"]: r for r in audit.records}
    assert by_node[3]["status"] == "quarantined" and "train-loss" in by_node[3]["reason"]
    honest, _ = federate(tmp_path / "h", nodes=2)
    _same(guarded, honest)
    with pytest.raises(fedleak.FedleakError, match="metric_keys"):
        LeakageAudit(__import__("flwr.serverapp.strategy", fromlist=["FedAvg"]).FedAvg(), torch.nn.Linear(2, 2),
                     tmp_path / "x", attack=None, metric_keys="train-loss")


# -- class 2: the same guard for every wrapper ---------------------------------------------------------------------
SEVEN = {  # the seven num-examples replies of issue 47 class 2 (NaN and inf ended a CanaryAudit federation)
    "NaN": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "a list": [2, 2], "negative": -4,
    "zero": 0, "1e300": 1e300,
}


def canary(tmp_path):
    return lambda strategy, model, spec: CanaryAudit(strategy, canaries=4, clip=1.0, seed=0, out=tmp_path)


@pytest.fixture(scope="module")
def canary_honest(tmp_path_factory):
    result, audit = federate(tmp_path_factory.mktemp("c"), nodes=2, wrap=canary(tmp_path_factory.mktemp("co")))
    assert audit.inserted > 0 and audit.aggregated == [2 + audit.inserted]
    return result


@pytest.mark.parametrize("case", list(SEVEN))
def test_canary_audit_quarantines_what_leakage_audit_does(tmp_path, case, canary_honest):
    hostile = lambda s: _content(s, {"train-loss": 1.0, "num-examples": SEVEN[case]})  # noqa: E731
    guarded, audit = federate(tmp_path / "c", hostile, wrap=canary(tmp_path / "co"))
    assert [q["client"] for q in audit.quarantined] == [3], audit.quarantined
    assert "num-examples" in audit.quarantined[0]["reason"]
    _same(guarded, canary_honest)  # the honest replies and the same canaries, bit for bit
    report = audit.report()
    assert report["quarantined"] == audit.quarantined and (tmp_path / "co" / "canary-audit.json").is_file()
    # LeakageAudit: the same reply quarantined for the same reason
    _, leak = federate(tmp_path / "l", hostile, wrap=leakage(tmp_path / "la"))
    reasons = [r["reason"] for r in leak.records if r["status"] == "quarantined"]
    assert reasons == [audit.quarantined[0]["reason"]]


@pytest.mark.parametrize("argument, value, needle", [
    ("canaries", 2 ** 40, "canaries"), ("canaries", 1, "canaries"), ("seed", -1, "seed"), ("seed", "x", "seed"),
    ("seed", 2 ** 70, "seed"), ("out", 5, "out"), ("delta", float("nan"), "delta"),
])
def test_canary_audit_arguments(argument, value, needle, tmp_path):
    """Issue 47 class 6: CanaryAudit(canaries=2**40) tried to allocate 8 TiB; seed=-1 raised ValueError."""
    from flwr.serverapp.strategy import FedAvg

    from hostile_doors import check_api

    kwargs = {"canaries": 4, "clip": 1.0, argument: value}
    assert check_api(lambda: CanaryAudit(FedAvg(), **kwargs), needle) == ""


# -- fuzzed: whatever metric records Sybil replies carry, no honest reply is quarantined ----------------------------
@pytest.fixture()
def identity():
    """The task identity Flower's runtime gives a ServerApp (messages take their ids from it), as run_inline sets."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


METRIC_VALUES = st.one_of(st.integers(-3, 10 ** 12), st.floats(allow_nan=True, allow_infinity=True),
                          st.lists(st.floats(-1e3, 1e3), max_size=3))  # MetricRecord itself refuses bools


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(honest=st.integers(1, 3),
       hostile=st.lists(st.dictionaries(st.sampled_from(["num-examples", "train-loss", "acc", "x", "y"]),
                                        METRIC_VALUES, max_size=5), min_size=1, max_size=4),
       name=st.sampled_from(["metrics", "m2"]))
def test_fuzzed_sybil_metric_records_never_evict_an_honest_reply(identity, honest, hostile, name):
    from uuid import uuid4

    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.serverapp.strategy import FedAvg

    from fedleak.integrations.flower.guard import ReplyGuard

    state = {"w": torch.zeros(2, 3), "b": torch.zeros(3)}
    guard, sent = ReplyGuard(), []
    for node in range(1, honest + len(hostile) + 1):
        message = Message(RecordDict({"arrays": ArrayRecord(state)}), dst_node_id=node, message_type="train")
        message.metadata.__dict__["_message_id"] = str(uuid4())
        sent.append(message)
    guard.sent(1, sent)

    def reply(to, metrics, key="metrics"):
        arrays = ArrayRecord({k: v + to.metadata.dst_node_id for k, v in state.items()})
        return Message(RecordDict({"arrays": arrays, key: MetricRecord(metrics)}), reply_to=to)

    honest_replies = [reply(m, {"num-examples": 2, "train-loss": 0.5}) for m in sent[:honest]]
    replies = honest_replies + [reply(m, metrics, name) for m, metrics in zip(sent[honest:], hostile)]
    screened = guard.screen(1, replies)
    passed = {id(m) for m in screened.passed}
    assert all(id(m) in passed for m in honest_replies), screened.quarantined
    FedAvg().aggregate_train(1, screened.passed)  # what passed, FedAvg aggregates without raising
