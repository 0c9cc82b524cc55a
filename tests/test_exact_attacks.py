"""Exact attacks through a linear + ReLU layer: SPEAR (a batch of 8 recovered exactly and verified) and the
row/bias ratio (Phong et al.); each reports its precondition, and is certain only when the recomputed
gradient matches the update."""

import torch

from fedleak.attacks import build
from fedleak.fl import client_update
from fedleak.metrics import evaluate
from fedleak.models import MLP
from fedleak.types import ClientData, DataSpec, Protocol

SPEC = DataSpec("toy", (1, 8, 8), 10, (0.0,), (1.0,), pixel_range=(-4.0, 4.0))


def _setup(batch: int, width: int = 128, seed: int = 0):
    torch.manual_seed(seed)
    model = MLP(SPEC, (width,))
    g = torch.Generator().manual_seed(seed + 1)
    data = ClientData(torch.randn((batch, *SPEC.shape), generator=g).clamp(-3.5, 3.5),
                      torch.randint(0, 10, (batch,), generator=g))
    return model, data


def _max_error(rec, data):
    scores = evaluate(rec, data, SPEC)
    pairs = [(i, j) for i, j in enumerate(scores["assignment"]) if j is not None]
    return max(float((rec.inputs[j] - data.inputs[i]).abs().max()) for i, j in pairs), scores


def test_spear_recovers_a_batch_of_eight_exactly_and_marks_it_certain():
    model, data = _setup(8)
    update = client_update(model, data, Protocol("fedsgd"))
    rec = build("spear", seed=0).reconstruct(update, model, SPEC)
    error, scores = _max_error(rec, data)
    assert error < 1e-4 and scores["rec_percent"] == 100.0 and scores["psnr"] > 100
    assert sorted(rec.labels.tolist()) == sorted(data.labels.tolist())
    assert rec.extras["certain"] is True
    exact = rec.extras["exactness"]
    assert exact["holds"] and exact["rank"] == 8 and exact["verification"]["relative_error"] < 1e-4


def test_spear_reports_its_precondition_false_past_the_layer_width():
    model, data = _setup(8, width=6)
    update = client_update(model, data, Protocol("fedsgd"))
    rec = build("spear").reconstruct(update, model, SPEC)
    assert rec.extras["certain"] is False
    assert rec.extras["exactness"]["holds"] is False and "rank" in rec.extras["exactness"]["reason"]


def test_spear_reports_failure_when_the_sampling_budget_is_too_small_for_the_batch():
    model, data = _setup(24, width=128)
    update = client_update(model, data, Protocol("fedsgd"))
    rec = build("spear", max_samples=2048, chunk=1024).reconstruct(update, model, SPEC)
    assert rec.extras["certain"] is False  # 2^(B-1) growth: refused up front, with the expected count
    assert "sparse direction" in rec.extras["exactness"]["reason"] and "2^(B-1)" in rec.extras["exactness"]["reason"]
    model, data = _setup(13, width=128)  # ≈ 1.3e4 subsets expected: refused at 4,096
    update = client_update(model, data, Protocol("fedsgd"))
    rec = build("spear", max_samples=4096, chunk=1024).reconstruct(update, model, SPEC)
    assert rec.extras["certain"] is False and "max_samples = 4096" in rec.extras["exactness"]["reason"]


def test_noise_defense_breaks_the_verification_so_nothing_is_certain():
    model, data = _setup(1)
    update = client_update(model, data, Protocol("fedsgd"), defense="gaussian:0.01")
    rec = build("analytic-fc").reconstruct(update, model, SPEC)
    assert rec.extras["certain"] is False
    exact = rec.extras["exactness"]  # the precondition (one sample, one step) still held: only the proof fails
    assert exact["holds"] is True and exact["verification"]["matches"] is False
    assert "does not match" in exact["reason"]


def test_multi_step_fedavg_is_outside_the_precondition():
    model, data = _setup(4)
    update = client_update(model, data, Protocol("fedavg", epochs=2, batch_size=2, lr=0.01), seed=0)
    rec = build("spear").reconstruct(update, model, SPEC)
    assert rec.extras["exactness"]["holds"] is False and "FedAvg" in rec.extras["exactness"]["reason"]


def test_analytic_fc_is_exact_for_one_sample_and_finds_lone_rows_in_a_small_batch():
    model, data = _setup(1)
    rec = build("analytic-fc").reconstruct(client_update(model, data, Protocol("fedsgd")), model, SPEC)
    error, _ = _max_error(rec, data)
    assert error < 1e-4 and rec.extras["certain"] is True and rec.labels.tolist() == data.labels.tolist()
    model, data = _setup(4, width=256)
    rec = build("analytic-fc").reconstruct(client_update(model, data, Protocol("fedsgd")), model, SPEC)
    assert rec.extras["exactness"]["inputs_found"] >= 3
    error, _ = _max_error(rec, data)
    assert error < 1e-3


def _counts(labels, classes=10):
    return torch.bincount(torch.as_tensor(labels), minlength=classes).tolist()


def test_ilrg_restores_exact_label_counts_on_a_small_untrained_model():
    torch.manual_seed(3)
    model = MLP(SPEC, (64,))
    g = torch.Generator().manual_seed(4)
    labels = torch.tensor([0, 0, 0, 2, 5, 5, 7, 9, 9, 9, 9, 1])
    base = torch.randn(SPEC.shape, generator=g)  # images share most of their content (like natural images)
    data = ClientData(base + 0.3 * torch.randn((len(labels), *SPEC.shape), generator=g), labels)
    rec = build("ilrg").reconstruct(client_update(model, data, Protocol("fedsgd")), model, SPEC)
    assert rec.extras["label_counts"] == _counts(labels)
    assert "residual" in rec.extras["exactness"] and isinstance(rec.extras["certain"], bool)
    assert rec.extras["exactness"]["holds"] is True  # the precondition (FedSGD); the residual decides `certain`


def test_rlu_restores_label_counts_from_a_multi_epoch_fedavg_update():
    torch.manual_seed(3)
    model = MLP(SPEC, (64,))
    g = torch.Generator().manual_seed(5)
    labels = torch.tensor([1, 1, 3, 3, 3, 4, 8, 8])
    base = torch.randn(SPEC.shape, generator=g)
    data = ClientData(base + 0.3 * torch.randn((len(labels), *SPEC.shape), generator=g), labels)
    update = client_update(model, data, Protocol("fedavg", epochs=3, batch_size=4, lr=0.01), seed=0)
    rec = build("rlu").reconstruct(update, model, SPEC)
    assert rec.extras["label_counts"] == _counts(labels)
    assert rec.extras["certain"] is False and "estimate" in rec.extras["exactness"]["reason"]
    assert rec.extras["exactness"]["holds"] is False  # several steps: outside iLRG's precondition
