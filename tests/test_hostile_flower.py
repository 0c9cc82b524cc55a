"""A client controls its reply; the audit must never take the federation down (issue 21, class 6).

Each malformed reply (non-finite, negative or huge ``num-examples``, NaN weights, an integer dtype,
no arrays, huge metadata, a string count) is recorded by ``LeakageAudit`` as rejected, and Flower's
own FedAvg around it aggregates exactly what it aggregates with no fedleak in between: the same
arrays (NaN where FedAvg itself makes NaN) or the same exception from FedAvg itself.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("flwr.serverapp")

import fedleak  # noqa: E402
from fedleak import Protocol  # noqa: E402
from fedleak.integrations.flower import LeakageAudit  # noqa: E402
from fedleak.integrations.flower.convert import model_record  # noqa: E402
from fedleak.integrations.flower.demo import federation_model, make_client_app  # noqa: E402
from fedleak.integrations.flower.grid import run_inline  # noqa: E402

torch.set_num_threads(1)


def _bad_metrics(value):
    return lambda state: ({"arrays": state}, {"num-examples": value})


def _nan_weights(state):
    state = {k: v.clone() for k, v in state.items()}
    first = next(iter(state))
    state[first].view(-1)[0] = float("nan")
    return {"arrays": state}, {"num-examples": 2}


def _int_weights(state):
    return {"arrays": {k: v.to(torch.int64) for k, v in state.items()}}, {"num-examples": 2}


def _no_arrays(state):
    return {}, {"num-examples": 2}


def _huge_metadata(state):
    return {"arrays": state}, {"num-examples": 2, **{f"m{i}": float(i) for i in range(1500)}}


CASES = {
    "num-examples NaN": _bad_metrics(float("nan")),
    "num-examples inf": _bad_metrics(float("inf")),
    "num-examples negative": _bad_metrics(-4),
    "num-examples 1e300": _bad_metrics(1e300),
    "num-examples fraction": _bad_metrics(2.5),
    "NaN weights": _nan_weights,
    "integer weights": _int_weights,
    "no arrays": _no_arrays,
    "huge metadata": _huge_metadata,
}


def _run(tmp_path, mutate, audited: bool):
    """One round, two clients; client 2 sends ``mutate``'s reply. Returns (final arrays or exception, audit)."""
    from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    spec, parts = fedleak.data.load("digits", num_clients=2, samples_per_client=2, seed=0)
    model = federation_model(spec, False)
    honest = make_client_app(parts, lambda: federation_model(spec, False))
    app = ClientApp()

    @app.train()
    def train(msg, context):
        reply = honest(msg, context)
        if int(context.node_config["partition-id"]) != 1:
            return reply
        arrays = reply.content.array_records["arrays"].to_torch_state_dict()
        records, metrics = mutate(arrays)
        content = {k: ArrayRecord(v) for k, v in records.items()}
        content["metrics"] = MetricRecord(metrics)
        return Message(RecordDict(content), reply_to=msg)

    holder = {}
    server = ServerApp()

    @server.main()
    def main(grid, context):
        strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=2, min_available_nodes=2)
        if audited:
            strategy = LeakageAudit(strategy, model, tmp_path, spec=spec, blocking=True, attack=None,
                                    protocol=Protocol("fedavg", lr=0.05, reshuffle=False))
            holder["audit"] = strategy
        try:
            result = strategy.start(grid=grid, initial_arrays=model_record(model), num_rounds=1,
                                    train_config=ConfigRecord({"lr": 0.05, "local-epochs": 1, "batch-size": 2}))
            holder["result"] = {k: v.numpy() for k, v in result.arrays.items()}
        except Exception as exc:  # FedAvg's own failure: must be the same with and without fedleak
            holder["result"] = type(exc)

    run_inline(server, app, 2)
    return holder["result"], holder.get("audit")


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_reply_is_skipped_by_the_audit_and_aggregated_as_without_it(tmp_path, case):
    plain, _ = _run(tmp_path / "plain", CASES[case], audited=False)
    wrapped, audit = _run(tmp_path / "audited", CASES[case], audited=True)
    if isinstance(plain, type):
        assert wrapped is plain, (case, plain, wrapped)
    else:
        assert isinstance(wrapped, dict) and wrapped.keys() == plain.keys()
        for name in plain:
            np.testing.assert_array_equal(wrapped[name], plain[name])
    statuses = {r["client"]: r["status"] for r in audit.records}
    assert sorted(statuses.values()) == ["recorded", "rejected"], audit.records
    rejected = next(r for r in audit.records if r["status"] == "rejected")
    assert rejected["reason"] and len(rejected["reason"]) <= 500


def test_the_num_examples_check_names_the_value():
    from fedleak.integrations.flower.convert import check_num_examples

    for bad in (float("nan"), float("inf"), -1, 0, 2.5, True, "4", 10 ** 12, None):
        with pytest.raises(fedleak.FedleakError, match="examples"):
            check_num_examples(bad)
    assert check_num_examples(np.int64(4)) == 4 and check_num_examples(4.0) == 4
    assert not math.isnan(check_num_examples(np.float32(3)))
