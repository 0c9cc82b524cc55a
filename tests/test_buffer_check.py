"""Integer buffers noised by Flower 1.42's own DP wrapper (flwr #8381), found from the replies and the release only."""

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg  # noqa: E402
from flwr.supercore.task_identity import TaskIdentity  # noqa: E402

from fedleak.privacy.buffer_check import check_release  # noqa: E402


def _record(arrays: dict) -> ArrayRecord:
    return ArrayRecord({k: Array(v) for k, v in arrays.items()})


def _aggregate(strategy, start: dict, replies: list):
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)  # noqa: SLF001
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    state = np.random.get_state()
    np.random.seed(3)
    try:
        strategy.current_arrays = _record(start)
        messages = [Message(RecordDict({"arrays": _record(r), "metrics": MetricRecord({"num-examples": 10})}),
                            dst_node_id=i + 1, message_type="train") for i, r in enumerate(replies)]
        released, _ = strategy.aggregate_train(1, messages)
    finally:
        np.random.set_state(state)
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved  # noqa: SLF001
    return check_release([m.content["arrays"] for m in messages], released, [10] * len(replies))


def _dp(n):
    return DifferentialPrivacyServerSideFixedClipping(FedAvg(), noise_multiplier=1.0, clipping_norm=1.0,
                                                      num_sampled_clients=n)


def test_flower_dp_wrapper_noises_batchnorm_counter_and_the_check_names_it():
    start = {"bn.weight": np.zeros(5, np.float32), "bn.num_batches_tracked": np.array(7, np.int64)}
    replies = [{"bn.weight": np.full(5, 3, np.float32), "bn.num_batches_tracked": np.array(9, np.int64)}] * 2
    finding = _aggregate(_dp(2), start, replies)
    assert finding is not None and finding["arrays"] == ["bn.num_batches_tracked"]
    assert finding["privacy_violation"] is False
    assert "flwr #8381" in finding["sentence"] and "int64" in finding["sentence"] and "float64" in finding["sentence"]


def test_no_integer_buffers_or_plain_fedavg_gives_no_finding():
    floats = {"w": np.zeros(5, np.float32)}
    assert _aggregate(_dp(2), floats, [{"w": np.full(5, 3, np.float32)}] * 2) is None
    # plain FedAvg returns the counter as float64 too, but as the replies' average: not a finding
    start = {"w": np.zeros(5, np.float32), "n": np.array(7, np.int64)}
    replies = [{"w": np.full(5, 3, np.float32), "n": np.array(v, np.int64)} for v in (8, 9)]
    assert _aggregate(FedAvg(), start, replies) is None


def _bench():
    import importlib
    import sys
    from pathlib import Path

    path = str(Path(__file__).resolve().parents[1] / "benchmarks")
    sys.path.insert(0, path)
    try:
        return importlib.import_module("bench_dp_audit_flower")
    finally:
        sys.path.remove(path)


def test_canary_nodes_federation_with_batchnorm_reports_the_buffer_and_runs_through():
    """The client-level audit's recorder (canary_nodes._Recorder) on flwr 1.42's DifferentialPrivacyClientSide-
    FixedClipping + fixedclipping_mod, ClientApps sending state_dict(): the counter is named, every round; with
    LayerNorm (no integer buffer) nothing is reported."""
    bench = _bench()
    row = bench.run_batchnorm(0, canaries=8, clients=2, rounds=2)
    assert row["detected"] and row["arrays"] == ["1.num_batches_tracked"] and row["rounds"] == 2
    assert row["detail"]["1.num_batches_tracked"]["rounds"] == [1, 2]
    assert row["nodes_flagged_by_replies"] == []  # the canaries still read the weights right
    clean = bench.run_batchnorm(0, canaries=8, clients=2, rounds=2, batchnorm=False)
    assert not clean["detected"] and clean["finding"] is None and clean["rounds"] == 2
