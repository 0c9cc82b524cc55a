"""Defenses named after a system run that system's code: NVFlare's PercentilePrivacy / SVTPrivacy classes and
Flower's LocalDpMod / fixedclipping_mod are run beside fedleak's filters on the same update and seed, and the
outputs must be bit-identical (numpy's global RNG seeded as fedleak seeds its RandomState). NVFlare ≤ 2.7's SVT
(``svt-legacy``) is not installable beside 2.9, so it is checked through its defining invariants (noise scales,
count released, clipping). Whole file: about 3 s."""

import numpy as np
import pytest
import torch

from fedleak.fl import client_update
from fedleak.fl import nvflare_filters as nf
from fedleak.fl.update_filters import UpdateFilter, flower_clip, flower_local_dp, flower_stdv
from fedleak.models import MLP
from fedleak.types import ClientData, DataSpec, Protocol

nvflare = pytest.importorskip("nvflare", reason="the `test` extra installs nvflare")
from nvflare.apis.dxo import DXO, DataKind, MetaKey  # noqa: E402
from nvflare.apis.fl_context import FLContext  # noqa: E402
from nvflare.apis.shareable import Shareable  # noqa: E402
from nvflare.app_common.filters import svt_privacy as nvflare_svt  # noqa: E402
from nvflare.app_common.filters.percentile_privacy import PercentilePrivacy  # noqa: E402


def _diff(seed=1, scale=1e-3):
    g = np.random.RandomState(seed)
    return {"fc.weight": (g.randn(40, 30) * scale).astype(np.float32), "fc.bias": (g.randn(500) * scale).astype(np.float32),
            "conv.weight": g.randn(3, 111).astype(np.float32), "temperature": np.float32(0.5)}


def _nvflare(filter_, diff, steps, seed):
    dxo = DXO(DataKind.WEIGHT_DIFF, data={k: np.array(v) for k, v in diff.items()},
              meta={MetaKey.NUM_STEPS_CURRENT_ROUND: steps})
    np.random.seed(seed)
    return filter_.process_dxo(dxo, Shareable(), FLContext())


@pytest.mark.parametrize("percentile, gamma, steps", [(10, 0.01, 1), (90, 1e-3, 4), (0, 1.0, 1), (100, 1e-4, 2)])
def test_percentile_is_nvflares_percentile_privacy(percentile, gamma, steps):
    diff = _diff()
    ours = nf.percentile_privacy({k: np.array(v) for k, v in diff.items()}, percentile, gamma, steps)
    theirs = _nvflare(PercentilePrivacy(percentile=percentile, gamma=gamma), diff, steps, 0).data
    for name in diff:
        assert np.asarray(ours[name]).dtype == np.asarray(theirs[name]).dtype
        assert np.array_equal(ours[name], theirs[name]), name


SVT_SETTINGS = [
    dict(),  # NVFlare's defaults: fraction 0.1, epsilon 0.1, noise_var 0.1, gamma 1e-5, tau 1e-6
    dict(fraction=0.1, epsilon=1.0, noise_var=0.1, gamma=1e-3, tau=1e-4),
    dict(fraction=0.3, epsilon=0.5, noise_var=1.0, gamma=1e-3, tau=1e-4, replace=False),
    dict(fraction=0.05, epsilon=1000.0, noise_var=0.5, gamma=1e-3, tau=2e-3),  # many re-query passes
    dict(fraction=0.2, epsilon=2.0, noise_var=0.1, gamma=1e-3, tau=1e-4, epsilon_query=1.5, epsilon_release=3.0),
]


@pytest.mark.parametrize("setting", SVT_SETTINGS)
@pytest.mark.parametrize("steps", [1, 3])
def test_svt_is_nvflares_svt_privacy_bit_for_bit(setting, steps, monkeypatch):
    diff = _diff()
    monkeypatch.setattr(nvflare_svt, "_SVT_CHUNK_SIZE", 100)  # several chunks per tensor: the chunked draws too
    monkeypatch.setattr(nf, "CHUNK", 100)
    theirs = _nvflare(nvflare_svt.SVTPrivacy(**setting), diff, steps, seed=7)
    ours, budget = nf.svt_privacy({k: np.array(v) for k, v in diff.items()}, steps=steps,
                                  rng=np.random.RandomState(7), **setting)
    for name in diff:
        assert np.array_equal(ours[name], theirs.data[name]), name
    record = theirs.get_meta_prop("svt_privacy_budget")
    assert {k: budget[k] for k in record if k in budget} == {k: record[k] for k in budget if k in record}
    if setting.get("tau") == 2e-3:
        assert record["acceptance_passes"] > 3  # the re-query ran


def _flat(out):
    return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for k, v in sorted(out.items()) if np.ndim(v)])


@pytest.mark.parametrize("kind", ["svt", "svt-legacy", "svt-2.0"])
def test_svt_release_noise_is_two_gamma_over_noise_var(kind):
    """Release noise Laplace(2γ/noise_var) (NVFlare: 2γc/ε_r with ε_r = c·noise_var, and 2γ/eps_3 before 2.8)."""
    g = np.random.RandomState(0)
    diff = {"w": (g.randn(20000) * 1e-3).astype(np.float32)}
    gamma, noise_var = 10.0, 2000.0  # γ far above |Δ|: no clipping; noise scale 0.01
    if kind == "svt":
        run = nf.svt_privacy
    else:
        def run(*args, **kw):
            return nf.svt_legacy_privacy(*args, **kw, release="2.0" if kind == "svt-2.0" else "2.3")
    out = run({"w": diff["w"].copy()}, fraction=1.0, epsilon=1.0, noise_var=noise_var, gamma=gamma, tau=0.0,
              rng=np.random.RandomState(1), replace=kind == "svt-2.0")  # 2.0 always draws with replacement
    out = out[0] if kind == "svt" else out
    noise = _flat(out) - diff["w"].astype(np.float64)
    noise = noise[noise != 0]  # svt-2.0: the undrawn entries go out raw
    assert noise.size > 10000 and np.mean(np.abs(noise)) == pytest.approx(2 * gamma / noise_var, rel=0.05)  # E|Lap(b)| = b


def test_svt_legacy_invariants():
    """NVFlare 2.2 … 2.7.3: at most c entries non-zero, each in [−γ, γ]·steps; τ + Lap(2γ/ε), ε₂ = ε(2c)^{2/3}."""
    diff = _diff(scale=1.0)
    total = sum(np.size(v) for v in diff.values())
    for replace in (True, False):
        out = nf.svt_legacy_privacy({k: np.array(v) for k, v in diff.items()}, fraction=0.1, epsilon=1.0,
                                    noise_var=0.1, gamma=0.5, tau=0.1, steps=3, rng=np.random.RandomState(2),
                                    replace=replace)
        flat = _flat(out)
        count = int(np.ceil(0.1 * total))
        assert 0 < np.count_nonzero(flat) <= count and (np.count_nonzero(flat) == count or replace)
        assert np.abs(flat).max() <= 0.5 * 3 + 1e-12 and out["temperature"] == diff["temperature"]
    assert nf.legacy_query_budget(0.1, 100) == pytest.approx(0.1 * 200 ** (2 / 3))


def test_svt_2_0_sends_the_accepted_but_undrawn_entries_raw():
    """NVFlare 2.0.0 … 2.0.16: every accepted entry not drawn goes out unchanged (the leak 2.0.18 closed)."""
    diff = _diff(scale=1.0)
    kw = dict(fraction=0.01, epsilon=0.1, noise_var=0.1, gamma=1e-3, tau=1e-6, rng=np.random.RandomState(2))
    leaky = _flat(nf.svt_legacy_privacy({k: np.array(v) for k, v in diff.items()}, release="2.0", **kw))
    kw["rng"] = np.random.RandomState(2)
    closed = _flat(nf.svt_legacy_privacy({k: np.array(v) for k, v in diff.items()}, release="2.0.18", **kw))
    raw = _flat({k: v for k, v in diff.items() if np.ndim(v)})
    count = int(np.ceil(0.01 * sum(np.size(v) for v in diff.values())))
    assert np.count_nonzero(closed) <= count < np.count_nonzero(leaky)
    assert np.sum(leaky == raw) > 10 * count  # far more raw entries than the c it should release


def test_the_svt_threshold_that_never_passes_stops_with_one_line():
    with pytest.raises(Exception, match="query passes"):
        nf.svt_privacy({"w": np.zeros(10, np.float32)}, fraction=1.0, epsilon=1e6, gamma=1e-6, tau=1.0,
                       rng=np.random.RandomState(0))


def _flower_message_api():
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    return Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict, TaskIdentity


def _run_mod(mod, server, client, config=None, seed=3):
    """One train message through a Flower client mod, the ClientApp replying with ``client``."""
    Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict, TaskIdentity = _flower_message_api()
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id = TaskIdentity.node_id = TaskIdentity.task_id = 1
    try:
        content = {"arrays": ArrayRecord({k: Array(v) for k, v in server.items()})}
        if config is not None:
            content["config"] = ConfigRecord(config)
        msg = Message(RecordDict(content), dst_node_id=1, message_type="train")
        ctx = Context(run_id=1, node_id=1, node_config={}, state=RecordDict(), run_config={})
        reply = lambda m, c: Message(RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in client.items()})}),  # noqa: E731
                                     reply_to=m)
        np.random.seed(seed)
        out = mod(msg, ctx, reply)
        return {k: v.numpy() for k, v in out.content["arrays"].items()}
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


def _server_client():
    g = np.random.RandomState(0)
    server = {"a": g.randn(4, 3).astype(np.float32), "b": g.randn(5).astype(np.float32)}
    return server, {k: v + g.randn(*v.shape).astype(np.float32) for k, v in server.items()}


@pytest.mark.parametrize("clip", [0.5, 100.0])
def test_flower_local_dp_is_flowers_local_dp_mod_bit_for_bit(clip):
    from flwr.clientapp.mod import LocalDpMod

    server, client = _server_client()
    theirs = _run_mod(LocalDpMod(clip, 1.0, 2.0, 1e-5), server, client, seed=3)
    names = list(server)
    ours = flower_local_dp([server[k].copy() for k in names], [client[k].copy() for k in names], clip, 1.0, 2.0, 1e-5,
                           np.random.RandomState(3))
    assert all(np.array_equal(o, theirs[k]) for k, o in zip(names, ours))


def test_flower_client_side_clipping_is_fixedclipping_mod_and_the_noise_is_compute_stdv():
    from flwr.clientapp.mod import fixedclipping_mod
    from flwr.supercore.differential_privacy import compute_stdv

    server, client = _server_client()
    theirs = _run_mod(fixedclipping_mod, server, client, config={"clipping_norm": 0.7})
    names = list(server)
    ours = flower_clip([server[k] for k in names], [client[k] for k in names], 0.7)
    assert all(np.array_equal(o, theirs[k]) for k, o in zip(names, ours))
    assert flower_stdv(1.3, 0.7, 10) == compute_stdv(1.3, 0.7, 10)


def test_filters_see_the_rounds_local_steps_and_server_side_clipping_changes_nothing():
    """Through the one client update: Δ/steps as NVFlare's learners report NUM_STEPS_CURRENT_ROUND."""
    spec = DataSpec("toy", (1, 4, 4), 3, (0.0,), (1.0,))
    torch.manual_seed(0)
    model = MLP(spec, (8,))
    data = ClientData(torch.randn((6, 1, 4, 4), generator=torch.Generator().manual_seed(1)), torch.tensor([0, 1, 2] * 2))
    protocol = Protocol("fedavg", epochs=2, batch_size=2, lr=0.5)  # 2 epochs × 3 batches = 6 local steps
    raw = client_update(model, data, protocol)
    delta = {k: raw.client_params[k] - raw.server_params[k] for k in raw.server_params}
    for spec_text, steps in (("percentile:percentile=50,gamma=1e-3", 6), ("percentile:percentile=50,gamma=1e-3,steps=1", 1)):
        sent = client_update(model, data, protocol, defense=spec_text)
        released = torch.cat([(sent.client_params[k] - sent.server_params[k]).reshape(-1) for k in delta])
        assert released.abs().max().item() == pytest.approx(1e-3 * steps, rel=1e-4)  # clipped at γ·steps
    server_side = UpdateFilter.parse("flower-central-dp:noise=1,clip=1e-3,clients=5,server_side=1")
    assert not server_side.changes_update  # client_update then returns the update as trained (its ε import is slow)
    assert UpdateFilter.parse("flower-central-dp:noise=1,clip=1e-3,clients=5").changes_update


def test_the_docs_table_is_the_benchmarks_and_every_nvflare_release_matched():
    """docs/defenses.md's table is rebuilt from benchmarks/results/defenses.json; the wheel check found no mismatch."""
    import json
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from bench_defenses import table
    finally:
        sys.path.remove(str(root / "benchmarks"))
    result = json.loads((root / "benchmarks/results/defenses.json").read_text())
    assert table(result) in (root / "docs/defenses.md").read_text()
    assert all(r["identical_to_nvflare"] is not False for r in result["rows"])
    versions = json.loads((root / "benchmarks/results/nvflare_versions.json").read_text())["rows"]
    assert {r["fedleak_kind"] for r in versions} == {"svt", "svt-legacy", "svt-2.0"} and all(r["identical"] for r in versions)
