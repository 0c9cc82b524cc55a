"""Robbing the Fed: imprint blocks, placements, variants and the analytic readout (small models)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import fedleak.models as models
from fedleak import DataSpec, FedleakError
from fedleak.attacks import build as build_attack
from fedleak.attacks.imprint import aggregate, block_update, expected_recovered, resolve_secrets
from fedleak.fl.client import client_update
from fedleak.metrics import evaluate, psnr
from fedleak.models.imprint import Distribution, Imprinted, Threshold, imprint, linear_function
from fedleak.types import ClientData, Protocol, Update

SPEC = DataSpec("toy", (3, 8, 8), 10, (0.5, 0.45, 0.4), (0.25, 0.24, 0.26))


def images(n: int, seed: int, spec: DataSpec = SPEC) -> torch.Tensor:
    """8-bit images (normalized), as real datasets have."""
    g = torch.Generator().manual_seed(seed)
    return spec.normalize((torch.rand(n, *spec.shape, generator=g) * 255).round() / 255)


def client(n: int = 32, seed: int = 0, spec: DataSpec = SPEC) -> ClientData:
    g = torch.Generator().manual_seed(seed + 1000)
    return ClientData(images(n, seed, spec), torch.randint(0, spec.num_classes, (n,), generator=g))


def true_bins(model: Imprinted, inputs: torch.Tensor) -> np.ndarray:
    """Ground truth for the tests: the bin of every input under the server's rows."""
    secrets = model.imprint_secrets()
    rows = model.imprint.linear.weight.detach()[torch.tensor(secrets["order"])]
    h = (inputs.to(rows.dtype).flatten(1) @ rows[0]) / secrets["bins"][0]["row_scale"]
    lows = np.array([b["low"] for b in secrets["bins"]])
    highs = np.array([b["high"] for b in secrets["bins"]])
    h = h.numpy()
    index = np.searchsorted(lows, h, side="right") - 1
    outside = (index < 0) | (h > highs[np.clip(index, 0, None)])
    return np.where(outside, -1, index)  # -1: in no bin (e.g. outside the one-shot rows)


def singles(bins: np.ndarray, k: int) -> set:
    counts = np.bincount(bins[bins >= 0], minlength=k)
    return set(np.nonzero(counts == 1)[0].tolist())


def best_psnr(rec: torch.Tensor, truth: torch.Tensor, spec: DataSpec = SPEC) -> torch.Tensor:
    """For each original, the PSNR of its closest reconstruction (pixel space)."""
    a, b = spec.denormalize(rec), spec.denormalize(truth)
    return torch.stack([psnr(a, t[None].expand_as(a)).max() for t in b])


@pytest.fixture(scope="module")
def surrogate():
    return images(256, seed=99)


def test_linear_functions_and_distributions():
    w = linear_function("mean", 12)
    assert torch.allclose(w, torch.full((12,), 1 / 12, dtype=torch.float64))
    d = linear_function("dct", 64, mode=5)
    assert abs(float(d.norm()) - 1) < 1e-12
    g = torch.Generator().manual_seed(0)
    r = linear_function("randn", 1000, generator=g)
    assert abs(float(r.mean())) < 1e-12 and abs(float(r.std()) * math.sqrt(1000) - 1) < 1e-9
    gauss = Distribution("gaussian", 1.0, 2.0)
    assert abs(float(gauss.quantile(0.5)) - 1.0) < 1e-12
    lap = Distribution("laplace", 0.0, 1.0)  # unit variance: b = 1/sqrt(2)
    assert abs(float(lap.quantile(0.75)) - math.log(2) / math.sqrt(2)) < 1e-12
    values = torch.randn(500, generator=g, dtype=torch.float64)
    emp = Distribution.fit("empirical", values)
    q = emp.quantile(np.array([0.1, 0.5, 0.9]))
    assert np.all(np.diff(q) > 0) and abs(emp.cdf(q[1]) - 0.5) < 1e-9
    for bad in (lambda: linear_function("sum", 4), lambda: Distribution("cauchy"),
                lambda: gauss.quantile(1.0), lambda: Distribution.fit("gaussian", torch.ones(5))):
        with pytest.raises(FedleakError):
            bad()


def test_threshold_nonlinearity_two_relus_equal_hardtanh():
    t = torch.linspace(-1, 3, 41)
    assert torch.allclose(Threshold(2.0, "hardtanh")(t), Threshold(2.0, "two-relu")(t))
    assert torch.equal(Threshold(2.0)(t), t.clamp(0, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cumulative_fedsgd_recovers_singles_verbatim(dtype, surrogate):
    data = client(48, seed=1)
    base = models.build("mlp", SPEC, hidden=(16,))
    model = imprint(base, SPEC, bins=96, linfunc="randn", surrogate=surrogate, seed=3).to(dtype)
    update = client_update(model, data.to(dtype=dtype), Protocol("fedsgd"))
    rec = build_attack("imprint").reconstruct(update, model, SPEC)
    assert rec.labels is None and rec.inputs.dtype == dtype
    truth_single = singles(true_bins(model, data.inputs), 96)
    assert len(truth_single) >= 20
    # every input alone in its bin comes back (almost) bit-exact, and the attack says which bins those are
    scores = best_psnr(rec.inputs, data.inputs.to(dtype))
    alone = torch.tensor([b in truth_single for b in true_bins(model, data.inputs)])
    bar = 150 if dtype == torch.float64 else 60
    assert bool((scores[alone] > bar).all())
    assert int((scores > bar).sum()) == len(truth_single)
    reported = set(rec.extras["single_bins"])
    assert len(reported ^ truth_single) <= 2
    assert rec.extras["source"] == "gradient" and rec.extras["seconds"] < 1.0


def test_bins_are_equal_mass_and_permuted(surrogate):
    model = imprint(models.build("mlp", SPEC), SPEC, bins=32, cdf="empirical", surrogate=surrogate, seed=0)
    secrets = model.imprint_secrets()
    assert sorted(secrets["order"]) == list(range(32)) and secrets["order"] != list(range(32))
    lows = [b["low"] for b in secrets["bins"]]
    assert lows == sorted(lows)
    # on fresh data from the same distribution every bin gets about 1/k of the inputs
    bins = true_bins(model, images(3200, seed=7))
    counts = np.bincount(bins, minlength=32)
    assert counts.min() > 40 and counts.max() < 180
    # the stored rows really are permuted: without the order the bias ramp is not monotone
    raw_bias = model.imprint.linear.bias.detach()
    assert not bool((raw_bias[:-1] >= raw_bias[1:]).all())
    assert bool((raw_bias[torch.tensor(secrets["order"])].diff() < 0).all())


def test_block_preserves_input_with_add_connection_and_linear_connection_has_identical_rows():
    x = images(4, seed=2)
    model = imprint(models.build("mlp", SPEC), SPEC, bins=8, seed=0)
    out = model.imprint(x)
    offset = (out - x).flatten(1)
    assert torch.allclose(offset, offset[:, :1].expand_as(offset))  # one scalar per input
    lin = imprint(models.build("mlp", SPEC), SPEC, bins=8, connection="linear", seed=0)
    v = lin.imprint.out.weight.detach()
    assert torch.equal(v, v[:, :1].expand_as(v))  # App. B: rows of identical elements
    update = client_update(lin, client(16), Protocol("fedsgd"))
    rec = build_attack("imprint").reconstruct(update, lin, SPEC)
    assert rec.inputs.shape[0] > 0 and float(best_psnr(rec.inputs, client(16).inputs).max()) > 60


def test_sparse_block_only_bin_rows_get_gradient(surrogate):
    data = client(16, seed=4)
    model = imprint(models.build("mlp", SPEC), SPEC, bins=64, structure="sparse", linfunc="randn",
                    surrogate=surrogate, seed=1)
    update = client_update(model, data, Protocol("fedsgd"))
    _, bias = block_update(update, model.imprint_secrets())
    occupied = set(true_bins(model, data.inputs).tolist())
    nonzero = set(torch.nonzero(bias).flatten().tolist())
    assert nonzero == occupied


def test_fedavg_sparse_weight_difference(surrogate):
    """§4.3: 8 local steps of 8 images, lr 1e-4, sparse rows read from θc − θs."""
    data = client(64, seed=5)
    model = imprint(models.build("mlp", SPEC, hidden=(32,)), SPEC, bins=128, structure="sparse", gain=1e-3,
                    linfunc="randn", surrogate=surrogate, seed=2)
    update = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=8, lr=1e-4), seed=0)
    rec = build_attack("imprint-sparse").reconstruct(update, model, SPEC)
    assert rec.extras["source"] == "weight difference"
    scores = evaluate(rec, data, SPEC, threshold=30, clip=False)
    expected = 100 * expected_recovered(64, 128) / 64
    assert scores["rec_percent"] >= expected - 20
    assert scores["iip"] >= 0.6


def test_one_shot_sparse_two_bins_from_a_large_aggregate():
    """§4.2: two rows around the median isolate single inputs out of 1,024 (four users' mean)."""
    spec = DataSpec("tiny", (3, 4, 4), 10, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))
    pool = images(1024, seed=11, spec=spec)
    surrogate = images(512, seed=12, spec=spec)
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 10, (1024,), generator=g)
    successes = expected = 0
    for trial in range(8):
        model = imprint(models.build("mlp", spec, hidden=(8,)), spec, bins=1024, structure="one-shot",
                        linfunc="randn", surrogate=surrogate, seed=trial)
        assert model.imprint.linear.weight.shape[0] == 2
        users = [ClientData(pool[i::4], labels[i::4], f"u{i}") for i in range(4)]
        update = aggregate([client_update(model, u, Protocol("fedsgd")) for u in users])
        assert update.num_samples == 1024
        rec = build_attack("imprint-one-shot").reconstruct(update, model, spec)
        truth = singles(true_bins(model, pool), 2)
        expected += bool(truth)
        assert set(rec.extras["single_bins"]) == truth
        if rec.inputs.shape[0]:
            successes += int((best_psnr(rec.inputs, pool, spec) > 100).any())
    # a trial succeeds exactly when one of the two bins holds one input (P ≈ 0.6 each)
    assert successes == expected >= 2


def test_one_shot_cumulative_places_two_relu_rows():
    model = imprint(models.build("mlp", SPEC), SPEC, bins=100, structure="one-shot", one_shot="cumulative",
                    target=0.98, seed=0)
    secrets = model.imprint_secrets()
    assert secrets["nonlinearity"] == "relu" and secrets["masses"] == pytest.approx([0.01, 0.01])
    with pytest.raises(FedleakError):
        imprint(models.build("mlp", SPEC), SPEC, bins=100, structure="one-shot", one_shot="cumulative", target=0.995)


def test_cah_trap_weights_recover_some_inputs_but_fewer_than_imprint(surrogate):
    data = client(32, seed=6)
    base = models.build("mlp", SPEC)
    results = {}
    for structure, attack in (("cah", "cah"), ("cumulative", "imprint")):
        model = imprint(base, SPEC, bins=64, structure=structure, linfunc="randn", surrogate=None, seed=0)
        update = client_update(model, data, Protocol("fedsgd"))
        rec = build_attack(attack).reconstruct(update, model, SPEC)
        results[structure] = int((best_psnr(rec.inputs, data.inputs) > 60).sum())
    assert 1 <= results["cah"] < results["cumulative"]


def test_deep_placement_in_linearized_resnet():
    spec = DataSpec("toy16", (3, 16, 16), 10, (0.5, 0.45, 0.4), (0.25, 0.24, 0.26))
    data = client(16, seed=8, spec=spec)
    base = models.build("resnet20", spec)
    model = imprint(base, spec, bins=64, position="layer3", linfunc="mean", seed=0, surrogate=images(64, 9, spec))
    secrets = model.imprint_secrets()
    assert secrets["input_shape"] == [32, 8, 8] and secrets["features"]["stride"] == 2
    assert {n for n, _ in base.named_parameters()} == {n[5:] for n, _ in model.named_parameters() if n.startswith("base.")}
    update = client_update(model, data, Protocol("fedsgd"))
    rec = build_attack("imprint").reconstruct(update, model, spec)
    assert rec.inputs.shape[1:] == data.inputs.shape[1:]
    scores = evaluate(rec, data, spec)
    assert scores["iip"] >= 0.5
    # the block saw every second pixel, standardized per channel: those pixels come back up to that map
    sub_rec = rec.inputs[:, :, ::2, ::2].flatten(2)
    sub_true = data.inputs[:, :, ::2, ::2].flatten(2)
    exact = 0
    for r in sub_rec:
        corr = torch.stack([torch.stack([torch.corrcoef(torch.stack([r[c], t[c]]))[0, 1] for c in range(3)]).min()
                            for t in sub_true])
        exact += int(corr.max() > 0.999)
    assert exact >= len(data) // 2
    # the original model is untouched (linearization works on a copy)
    with torch.no_grad():
        assert float(base.conv1.weight.abs().sum()) > 0 and float(model.base.conv1.weight[3:].abs().sum()) == 0
    with pytest.raises(FedleakError, match="inside the residual block"):
        imprint(base, spec, position="layer2.0.conv1")
    with pytest.raises(FedleakError, match="ResNet"):
        imprint(models.build("mlp", spec), spec, position="fc2", linearize=True)


def test_secrets_travel_with_a_saved_update_and_a_rebuilt_model(tmp_path):
    spec = SPEC
    model = models.build("imprint", spec, seed=5, base="mlp", base_options={"hidden": [8]}, bins=64, linfunc="randn")
    again = models.build("imprint", spec, seed=5, base="mlp", base_options={"hidden": [8]}, bins=64, linfunc="randn")
    assert model.imprint_secrets() == again.imprint_secrets()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    data = client(24, seed=3)
    update = client_update(model, data, Protocol("fedsgd"), metadata={"imprint": model.imprint_secrets()})
    json.dumps(update.metadata)
    update.save(tmp_path / "u")
    loaded = Update.load(tmp_path / "u")
    plain = models.build("mlp", spec, hidden=(8,))  # no secrets on this model: they come from the update
    with pytest.raises(FedleakError, match="check_update|does not match"):
        build_attack("imprint").reconstruct(loaded, plain, spec)
    rec_a = build_attack("imprint").reconstruct(loaded, again, spec)
    rec_b = build_attack("imprint").reconstruct(update, model, spec)
    assert torch.equal(rec_a.inputs, rec_b.inputs)
    assert resolve_secrets(loaded, again) == model.imprint_secrets()


def test_callable_module_registry_and_errors():
    model = models.imprint(models.build("mlp", SPEC), SPEC, bins=16)
    assert isinstance(model, Imprinted) and "imprint" in models.MODELS
    assert models.imprint.ImprintBlock is type(model.imprint)
    with pytest.raises(FedleakError, match="already carries"):
        imprint(model, SPEC)
    for kwargs in ({"bins": 1}, {"structure": "dense"}, {"linfunc": "max"}, {"cdf": "empirical"},
                   {"connection": "cat"}, {"gain": 0}, {"position": "nope"}, {"seed": 1.5},
                   {"surrogate": torch.zeros(1, 3, 8, 8)}, {"surrogate": torch.zeros(4, 3, 4, 4)}):
        with pytest.raises(FedleakError):
            imprint(models.build("mlp", SPEC), SPEC, **kwargs)
    with pytest.raises(FedleakError):
        models.build("imprint", SPEC, base="imprint")
    honest = models.build("mlp", SPEC)
    update = client_update(honest, client(4), Protocol("fedsgd"))
    with pytest.raises(FedleakError, match="secrets"):
        build_attack("imprint").reconstruct(update, honest, SPEC)
    sparse = imprint(models.build("mlp", SPEC), SPEC, bins=16, structure="sparse")
    update = client_update(sparse, client(4), Protocol("fedsgd"))
    with pytest.raises(FedleakError, match="expects a 'cumulative'|expects a 'one-shot'"):
        build_attack("imprint-one-shot").reconstruct(update, sparse, SPEC)
    for options in ({"reduction": "best"}, {"structure": "dense"}, {"levels": -1}, {"tolerance": -1.0}):
        with pytest.raises(FedleakError):
            build_attack("imprint", **options)


def test_reduction_keeps_at_most_n_candidates_under_noise():
    data = client(16, seed=2)
    model = imprint(models.build("mlp", SPEC), SPEC, bins=64, linfunc="randn", connection_scale=100.0, seed=0)
    update = client_update(model, data, Protocol("fedsgd"), defense="laplacian:1e-1", seed=1)
    rec = build_attack("imprint", clip=True).reconstruct(update, model, SPEC)
    assert len(rec.extras["nonempty_bins"]) > 32  # noise reaches (nearly) every bin
    assert rec.inputs.shape[0] == 16  # the 16 strongest rows are kept
    pixels = SPEC.denormalize(rec.inputs)
    assert float(pixels.min()) >= -1e-6 and float(pixels.max()) <= 1 + 1e-6
    assert evaluate(rec, data, SPEC)["iip"] >= 0.4

