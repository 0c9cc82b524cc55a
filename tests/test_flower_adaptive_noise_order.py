"""Flower 1.42's adaptive-clipping wrapper adds its noise with the NEXT round's clip norm (what fedleak's DP audit
reports about it, ``docs/dp-audit.md``; ``benchmarks/results/dp_audit_planted.json`` → ``flower_faults.adaptive``).

Andrew et al. (NeurIPS 2021, Alg. 1) clip round t's updates at C_t and add noise σ_Δ·C_t; the clip norm is updated
afterwards. ``flwr/serverapp/strategy/dp_adaptive_clipping.py`` calls ``_geometric_update`` before
``_add_noise_to_aggregated_arrays``, so the noise is σ_Δ·C_{t+1}/n: below the claim whenever C shrinks. Read here
from the released aggregate alone (released − the mean of the updates clipped at C_t), as the audit's noise-scale
test reads it; nothing of Flower is patched. If a Flower release fixes the order, this test fails and the docs'
sentence must go. ~0.2 s.
"""

import numpy as np
import pytest
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture
def task_identity():
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
    yield
    TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved


def test_adaptive_wrapper_noises_with_the_next_rounds_clip_norm(task_identity):
    n, d = 4, 400_000
    strategy = DifferentialPrivacyServerSideAdaptiveClipping(FedAvg(), noise_multiplier=0.8, num_sampled_clients=n,
                                                             initial_clipping_norm=1.0, clipped_count_stddev=1.0)
    start = np.zeros(d)
    strategy.current_arrays = ArrayRecord([start.copy()])
    rng = np.random.default_rng(0)
    np.random.seed(0)  # Flower draws the clipped count's noise from numpy's global generator
    updates = [u * 10.0 / np.linalg.norm(u) for u in rng.normal(size=(n, d))]  # every update above C: C shrinks
    replies = [Message(RecordDict({"arrays": ArrayRecord([start + u]), "metrics": MetricRecord({"num-examples": 10})}),
                       dst_node_id=i + 1, message_type="train") for i, u in enumerate(updates)]
    c_t = strategy.clipping_norm
    released = strategy.aggregate_train(1, replies)[0].to_numpy_ndarrays()[0]
    c_next = strategy.clipping_norm
    assert c_next < 0.9 * c_t  # all clipped: Flower's rule shrinks C
    noise = released - sum(u * c_t / np.linalg.norm(u) for u in updates) / n
    sigma = strategy.noise_multiplier  # σ_Δ, the update channel's share of the claimed σ
    seen = noise.std()  # ± 0.11 % at d = 400,000
    assert seen == pytest.approx(sigma * c_next / n, rel=0.01)
    assert seen < 0.9 * sigma * c_t / n  # the claim needs σ_Δ·C_t/n
