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


def test_checked_under_a_dp_wrapper_only_against_fedavgs_mean():
    from flwr.serverapp.strategy import FedAdam

    from fedleak.privacy.buffer_check import dp_chain

    assert dp_chain(_dp(2)) == (True, "num-examples")
    assert dp_chain(FedAvg()) == (False, "num-examples")
    wrapped = DifferentialPrivacyServerSideFixedClipping(FedAdam(), noise_multiplier=1.0, clipping_norm=1.0,
                                                         num_sampled_clients=2)
    assert dp_chain(wrapped) == (True, None)  # a server optimizer: only the replies' range is checked


@pytest.fixture
def task_identity():
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)  # noqa: SLF001
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved  # noqa: SLF001


def test_a_canary_node_leaves_the_integer_entries_named_in_its_config_out_of_its_vector(task_identity):
    """--flower-app canary nodes run in other processes: the recorder sends them the names of the initial arrays'
    integer entries (KEY_SKIP), so that a buffer Flower released as float64 never becomes a canary coordinate."""
    from flwr.app import ConfigRecord, Context

    from fedleak.integrations.flower.canary_nodes import KEY_SKIP, _floats, _Plan
    from fedleak.privacy.canaries import Canaries

    arrays = {"w": np.zeros(4, np.float32), "bn.num_batches_tracked": np.array(2.37)}  # released as float64
    canaries = Canaries(4, 4, 0, 10.0, 2)
    for config, changed in (({"clipping_norm": 1.0, KEY_SKIP: ["bn.num_batches_tracked"]}, False),
                            ({"clipping_norm": 1.0}, True)):
        msg = Message(RecordDict({"arrays": _record(arrays), "config": ConfigRecord(config)}), dst_node_id=1,
                      message_type="train")
        reply = _Plan(canaries, None).reply_fn(0)(msg, Context(run_id=1, node_id=1, state=RecordDict(),
                                                               run_config={}, node_config={}))
        out = dict(zip(reply.content["arrays"].keys(), reply.content["arrays"].to_numpy_ndarrays()))
        assert (out["bn.num_batches_tracked"] != 2.37) == changed and out["bn.num_batches_tracked"].shape == ()
        if not changed:
            assert _floats(reply.content["arrays"], skip={"bn.num_batches_tracked"})[0].size == 4


def test_the_app_recorder_sends_the_integer_names_to_canary_nodes_only(task_identity):
    from flwr.app import ConfigRecord
    from flwr.serverapp.strategy import Strategy

    from fedleak.integrations.flower.app_canary_nodes import NodeRecorder, plan
    from fedleak.integrations.flower.canary_nodes import KEY_SKIP

    class Sends(Strategy):
        def configure_train(self, server_round, arrays, config, grid):
            return [Message(RecordDict({"arrays": arrays, "config": ConfigRecord({"clipping_norm": 1.0})}),
                            dst_node_id=n, message_type="train") for n in (11, 12)]

        def aggregate_train(self, server_round, replies):
            return None, None

        def configure_evaluate(self, server_round, arrays, config, grid):
            return []

        def aggregate_evaluate(self, server_round, replies):
            return None

        def summary(self):
            pass

    canaries = plan(2, 16)
    recorder = NodeRecorder(Sends(), canaries, 2, {11: 0, 12: 2}, [])  # node 12: partition 2, the first canary
    start = {"w": np.zeros(4, np.float32), "bn.num_batches_tracked": np.array(0, np.int64)}
    sent = recorder.configure_train(1, _record(start), ConfigRecord(), None)
    configs = {m.metadata.dst_node_id: dict(m.content["config"]) for m in sent}
    assert configs[12][KEY_SKIP] == ["bn.num_batches_tracked"] and KEY_SKIP not in configs[11]
    assert recorder.theta.size == 4
