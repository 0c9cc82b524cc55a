"""Canary nodes through the user's real ClientApp mods (issue 42 item 2): Flower 1.42's own ``fixedclipping_mod``,
``adaptiveclipping_mod`` and ``LocalDpMod`` on a ClientApp as a user writes it, Flower's DP wrappers around FedAvg,
nodes 3 and 7 built without the mod; the audit names them from the replies and from the released aggregates.

10 nodes, a 60 × 80 linear model (4,880 parameters) trained one SGD step a round on its node's data, 5 rounds,
200 canaries (≈ 100 inserted), σ = √5/μ(ε = 4, δ = 1e-5). Seed 0; every assertion states what it gives."""

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod
from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                     DifferentialPrivacyClientSideFixedClipping, FedAvg)

from fedleak.errors import FedleakError
from fedleak.integrations.flower.canary_nodes import run_canary_nodes, train_mods
from fedleak.privacy.gdp import mu_of

NODES, ROUNDS, M, MISSING = 10, 5, 200, (3, 7)
NOISE = math.sqrt(ROUNDS) / mu_of(4.0, 1e-5)


def _user_app(mods) -> ClientApp:
    """A user's ClientApp: one SGD step of least squares on the node's own 16 examples."""
    app = ClientApp(mods=list(mods))

    @app.train()
    def train(msg: Message, context) -> Message:
        rng = np.random.default_rng(int(context.node_config["partition-id"]))
        x, y = rng.normal(size=(16, 80)), rng.normal(size=(16, 60))
        record = msg.content["arrays"]
        w, b = (a.astype(np.float64) for a in record.to_numpy_ndarrays())
        err = x @ w.T + b - y
        w, b = w - 0.05 * err.T @ x / 16, b - 0.05 * err.mean(0)
        arrays = ArrayRecord({"w": Array(w.astype(np.float32)), "b": Array(b.astype(np.float32))})
        metrics = MetricRecord({"num-examples": 16, "loss": float((err ** 2).mean())})
        return Message(RecordDict({"arrays": arrays, "metrics": metrics}), reply_to=msg)

    return app


def _initial() -> ArrayRecord:
    return ArrayRecord({"w": Array(np.zeros((60, 80), np.float32)), "b": Array(np.zeros(60, np.float32))})


def _apps(mod):
    return lambda k: _user_app([] if k in MISSING else [mod])


def test_train_mods_reads_the_users_chain():
    app = _user_app([fixedclipping_mod])
    assert train_mods(app) == [fixedclipping_mod]
    local = LocalDpMod(1.0, 1.0, 2.0, 1e-5)
    app2 = ClientApp(mods=[local])
    app2.train(mods=[fixedclipping_mod])(lambda m, c: m)
    assert train_mods(app2) == [local, fixedclipping_mod]


def test_fixedclipping_mod_missing_on_two_nodes_is_found():
    """Client-side fixed clipping (Flower's wrapper + fixedclipping_mod), mod absent on nodes 3 and 7: the replies'
    projections name exactly those nodes (10 where a clipped canary reads 1), and so do the released aggregates."""
    r = run_canary_nodes(_apps(fixedclipping_mod), lambda n: DifferentialPrivacyClientSideFixedClipping(
        FedAvg(fraction_evaluate=0.0), noise_multiplier=NOISE, clipping_norm=1.0, num_sampled_clients=n),
        _initial(), nodes=NODES, rounds=ROUNDS, canaries=M, seed=0)
    assert r["nodes_flagged_by_replies"] == list(MISSING)
    assert r["nodes_flagged_by_aggregates"] == list(MISSING)
    by_node = {x["node"]: x["mean_projection"] for x in r["reply_test"]}
    assert by_node[3] == pytest.approx(10.0, rel=1e-4) and by_node[0] == pytest.approx(1.0, abs=1e-4)
    assert r["mods"][3] == [] and r["mods"][0] == ["fixedclipping_mod"]
    assert r["cost"]["canary_replies"] == r["canaries_inserted"] * ROUNDS
    noise = r["noise_test"]  # the wrapper's noise is in force (a missing client mod does not change it)
    assert not noise["flagged"] and noise["noise_ratio"] == pytest.approx(1.0, abs=0.1) and noise["dof"] > 400


def test_noise_halved_in_flowers_wrapper_is_found_from_the_aggregates():
    """Flower's own ``add_gaussian_noise_inplace`` patched to draw 0.5× the σ it is given (flower_faults.planted):
    the released aggregates projected on ~110 unseen canaries' directions × 5 rounds read 0.51× the claimed noise
    (χ² p 5e-59); at 0.9× (above the test's margin) nothing is flagged. ~2 CPU-s each."""
    from fedleak.privacy.flower_faults import planted

    def run():
        return run_canary_nodes(lambda k: _user_app([fixedclipping_mod]), lambda n: DifferentialPrivacyClientSideFixedClipping(
            FedAvg(fraction_evaluate=0.0), noise_multiplier=NOISE, clipping_norm=1.0, num_sampled_clients=n),
            _initial(), nodes=NODES, rounds=ROUNDS, canaries=M, seed=0)["noise_test"]

    with planted(0.5):
        half = run()
    assert half["flagged"] and half["p_value"] < 1e-40 and half["noise_ratio"] == pytest.approx(0.5, abs=0.05)
    with planted(0.9):
        slightly = run()
    assert not slightly["flagged"] and slightly["noise_ratio"] == pytest.approx(0.9, abs=0.05)


def test_noise_probe_is_chi_square_under_the_claim_and_only_grows_with_real_updates():
    """NoiseProbe on synthetic aggregates (d = 3,000, 40 non-orthogonal directions, 5 rounds): noise at the claim
    gives a uniform p (rejections at 1 % in 1 of 200 runs), any added update only raises the statistic, noise 0.5×
    is found every time. Pure numpy, < 1 s."""
    from fedleak.integrations.flower.canary_replies import NoiseProbe

    rng = np.random.default_rng(0)
    d, k = 3000, 40
    u = rng.normal(size=(k, d)) + 0.3 * rng.normal(size=d)  # correlated directions: Gram-whitening is needed
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    rejected, half = 0, 0
    probe, pushed, lowered = NoiseProbe(u), NoiseProbe(u), NoiseProbe(u)
    for run in range(200):
        probe.quadratic, pushed.quadratic, lowered.quadratic = [], [], []
        for _ in range(5):
            z = rng.normal(0.0, 0.01, d)
            probe.add(z)
            pushed.add(z + 0.01 * rng.normal(size=d) + 0.3 * u[0])
            lowered.add(0.5 * z)
        p, q = probe.test([0.01] * 5, margin=1.0), pushed.test([0.01] * 5, margin=1.0)
        rejected += p["flagged"]
        assert q["statistic"] > p["statistic"]
        half += lowered.test([0.01] * 5)["flagged"]
    assert rejected <= 5 and half == 200


def test_correct_app_flags_no_node_and_adaptive_mod_runs():
    """Every node with adaptiveclipping_mod under Flower's client-side adaptive wrapper: no node flagged either way,
    the clip norm moves with Flower's own update (the canaries follow it through the train config)."""
    r = run_canary_nodes(lambda k: _user_app([adaptiveclipping_mod]),
                         lambda n: DifferentialPrivacyClientSideAdaptiveClipping(
                             FedAvg(fraction_evaluate=0.0), noise_multiplier=0.5, num_sampled_clients=n,
                             initial_clipping_norm=1.0), _initial(), nodes=NODES, rounds=3, canaries=60, seed=1)
    assert r["nodes_flagged_by_replies"] == [] and r["nodes_flagged_by_aggregates"] == []
    assert len(set(r["clip_norms"])) == 3  # Flower moved C_t every round
    assert all(abs(x["mean_projection"] - 1) < 1e-4 for x in r["reply_test"])


def test_local_dp_mod_missing_is_found_against_its_noise():
    """LocalDpMod (clip 1, s = 0.2) on 8 of 10 nodes, plain FedAvg: the replies carry the mod's noise, the per-node
    z-test against s/C still names nodes 3 and 7."""
    mod = LocalDpMod(clipping_norm=1.0, sensitivity=1.0, epsilon=24.22, delta=1e-5)  # s = √(2 ln 1.25e5)/24.22 ≈ 0.2
    s = math.sqrt(2 * math.log(1.25 / 1e-5)) / 24.22
    n_total = {}

    def strategy(n):
        n_total["n"] = n
        return FedAvg(fraction_evaluate=0.0)

    r = run_canary_nodes(_apps(mod), strategy, _initial(), nodes=NODES, rounds=ROUNDS, canaries=M, clip=1.0,
                         claimed_noise=lambda st, n: s * math.sqrt(n), reply_noise=s, seed=0)
    assert r["nodes_flagged_by_replies"] == list(MISSING)
    assert r["nodes_flagged_by_aggregates"] == list(MISSING)


def test_bad_input_is_one_line():
    with pytest.raises(FedleakError, match="one flwr ClientApp per node"):
        run_canary_nodes([_user_app([])], lambda n: FedAvg(), _initial(), nodes=2, rounds=1)
    with pytest.raises(FedleakError, match="canaries"):
        run_canary_nodes(_user_app([]), lambda n: FedAvg(), _initial(), nodes=2, rounds=1, canaries=1)


def test_flower_faults_patch_flowers_functions_and_undo_them():
    """The planted faults live in Flower's own modules for the block only (privacy/flower_faults.py); < 0.1 s."""
    import flwr.clientapp.mod.centraldp_mods as central_mods
    import flwr.clientapp.mod.localdp_mod as local_mod
    import flwr.serverapp.strategy.dp_fixed_clipping as fixed

    from fedleak.privacy.flower_faults import planted

    before = (fixed.add_gaussian_noise_inplace, local_mod.add_gaussian_noise_inplace,
              central_mods.compute_clip_model_update)
    with planted(0.5, no_clip=True) as where:
        assert "flwr.serverapp.strategy.dp_fixed_clipping.add_gaussian_noise_inplace" in where
        arrays = [np.zeros(20000)]
        fixed.add_gaussian_noise_inplace(arrays, 2.0)
        assert np.std(arrays[0]) == pytest.approx(1.0, rel=0.03)  # 0.5 × the σ Flower asks for
        update, base = [np.full(4, 3.0)], [np.zeros(4)]
        central_mods.compute_clip_model_update(update, base, 1.0)
        assert np.allclose(update[0], 3.0)  # left unclipped
    assert (fixed.add_gaussian_noise_inplace, local_mod.add_gaussian_noise_inplace,
            central_mods.compute_clip_model_update) == before
    with pytest.raises(FedleakError, match="noise=F"):
        with planted(-1.0):
            pass
