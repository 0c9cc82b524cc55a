"""Flower's own DP around LeakageAudit, in either nesting order, with clients sharing their batch.

Every Flower DP mod (LocalDpMod, fixedclipping_mod, adaptiveclipping_mod) and wrapper
(DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping), the audit inside or around the
wrapper: no client errors, every shared batch read, and the global model after two rounds is
bit-identical to the same Flower federation with no fedleak at all (numpy's noise seeded alike) —
Flower's DP code saw exactly the replies it expects. Each record carries the DP in force, what the
reply had been through, and for fixed clipping Flower's accountant ε after the round, equal to the
ε Flower's own accountant reports in the federation without fedleak.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

pytest.importorskip("flwr.serverapp")
pytest.importorskip("dp_accounting")

import fedleak  # noqa: E402
from fedleak import Protocol  # noqa: E402
from fedleak.integrations.flower import LeakageAudit  # noqa: E402
from fedleak.integrations.flower import recipes  # noqa: E402
from fedleak.integrations.flower.convert import model_record  # noqa: E402
from fedleak.integrations.flower.demo import federation_model, make_client_app  # noqa: E402
from fedleak.integrations.flower.grid import run_inline  # noqa: E402

torch.set_num_threads(1)
CLIENTS, ROUNDS, NOISE, CLIP = 3, 2, 0.5, 0.05
CASES = [(mode, audit) for mode in recipes.DP_MODES if mode != "none" for audit in recipes.POSITIONS
         if not (mode == "local" and audit == "inner")]


def _federation(tmp_path, mode, audit, audited):
    from flwr.app import ConfigRecord
    from flwr.serverapp import ServerApp
    from flwr.serverapp.strategy import FedAvg

    spec, parts = fedleak.data.load("digits", num_clients=CLIENTS, samples_per_client=2, seed=0)
    model = federation_model(spec, False)
    app = make_client_app(parts, lambda: federation_model(spec, False), share=audited,
                          mods=recipes.client_mods(mode, CLIP))
    holder = {"eps": []}
    server = ServerApp()

    @server.main()
    def main(grid, context):
        base = FedAvg(fraction_evaluate=0.0, min_train_nodes=CLIENTS, min_available_nodes=CLIENTS)
        if audited:
            strategy, made = recipes.server_strategy(
                mode, audit, base, lambda s, acc: LeakageAudit(s, model, tmp_path, spec=spec, attack=None,
                                                               blocking=True, accountant=acc,
                                                               protocol=Protocol("fedavg", reshuffle=False)),
                noise=NOISE, clip=CLIP, clients=CLIENTS)
            holder["audit"] = made
        else:  # plain Flower: the wrapper around FedAvg, its accountant on it
            strategy, _ = recipes.server_strategy(mode, "outer", base, lambda s, acc: s, noise=NOISE, clip=CLIP,
                                                  clients=CLIENTS)
            inner = strategy

            def spy(server_round, replies, _orig=inner.aggregate_train):
                out = _orig(server_round, replies)
                spent = inner.privacy_spent() if hasattr(inner, "privacy_spent") else None
                holder["eps"].append(None if spent is None else spent.epsilon)
                return out

            inner.aggregate_train = spy
        np.random.seed(0)
        random.seed(0)  # FedAvg samples nodes with random.sample: the same order of replies
        result = strategy.start(grid=grid, initial_arrays=model_record(model), num_rounds=ROUNDS,
                                train_config=ConfigRecord({"lr": 0.05, "local-epochs": 1, "batch-size": 2}))
        holder["result"] = {k: v.numpy().copy() for k, v in result.arrays.items()}
        if audited:
            made.close()

    run_inline(server, app, CLIENTS)
    return holder


@pytest.mark.parametrize("mode,audit", CASES)
def test_flower_dp_sees_the_reply_it_expects_and_the_audit_records_it(tmp_path, mode, audit):
    plain = _federation(tmp_path / "plain", mode, audit, audited=False)
    audited = _federation(tmp_path / "audited", mode, audit, audited=True)
    for name, value in plain["result"].items():
        np.testing.assert_array_equal(audited["result"][name], value, err_msg=f"{mode} {audit}: {name}")
    records = audited["audit"].records
    assert len(records) == CLIENTS * ROUNDS
    assert {r["status"] for r in records} == {"recorded"}, records
    assert all(r.get("truth") == "client-reported" and "truth_error" not in r for r in records)
    for r in records:
        mechanisms = {m["mechanism"]: m for m in r["dp"]["mechanisms"]}
        if mode == "local":
            assert mechanisms["LocalDpMod"]["origin"] == "client-reported"
            assert r["dp"]["sees"] == {"clipping": "after", "noise": "after (local noise)"}
            continue
        wrapper = next(m for m in mechanisms.values() if m["mechanism"].startswith("DifferentialPrivacy"))
        assert wrapper["where"] == mode.split("-")[0] and wrapper["clipping"] == mode.split("-")[1]
        assert wrapper["position"] == ("around the audit" if audit == "inner" else "inside the audit")
        if mode.endswith("fixed"):
            assert wrapper["noise_multiplier"] == NOISE and wrapper["clipping_norm"] == CLIP
        clipped_first = mode.startswith("client") or audit == "inner"
        assert r["dp"]["sees"]["clipping"] == ("after" if clipped_first else "before")
        assert r["dp"]["sees"]["noise"].startswith("before")
    if mode.endswith("fixed"):  # Flower's accountant's ε after each round, as Flower reports it
        eps = [sorted({r["dp"]["epsilon"] for r in records if r["round"] == k}) for k in (1, 2)]
        assert [e[0] for e in eps] == pytest.approx(plain["eps"], rel=1e-9) and all(len(e) == 1 for e in eps)
        assert plain["eps"][0] < plain["eps"][1]
