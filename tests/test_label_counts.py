"""Label counts: Geng et al.'s estimator, RecLabels, the two roundings, the label-count error."""

import pytest
import torch
from torch import nn

from fedleak.attacks import build
from fedleak.attacks.labels import (counts_to_labels, dummy_inputs, geng_counts, geng_raw_counts, labels_to_counts,
                                    reclabels, reclabels_raw, resolve_labels, round_counts, round_counts_eth,
                                    round_counts_geng)
from fedleak.errors import FedleakError
from fedleak.fl import client_update
from fedleak.metrics import label_count_error
from fedleak.types import ClientData, DataSpec, Protocol

SPEC = DataSpec("toy", (1, 4, 4), 5, (0.0,), (1.0,))


class ConstantFeatures(nn.Module):
    """Penultimate features that do not depend on the input: Geng et al.'s Õ and p̃ are then exact."""

    def __init__(self, classes: int = 5, width: int = 6) -> None:
        super().__init__()
        self.width = width
        self.fc = nn.Linear(width, classes)
        torch.manual_seed(0)
        nn.init.normal_(self.fc.weight, std=0.3)
        nn.init.normal_(self.fc.bias, std=0.3)

    def forward(self, x):
        features = x.flatten(1)[:, :1] * 0 + torch.linspace(0.5, 1.5, self.width, dtype=x.dtype)
        return self.fc(features)


def _client(labels, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.as_tensor(labels)
    return ClientData(torch.randn((len(labels), *SPEC.shape), generator=g), labels)


def test_geng_is_exact_for_fedsgd_when_statistics_do_not_depend_on_data():
    model = ConstantFeatures()
    client = _client([0, 0, 1, 3, 3, 3, 4])
    update = client_update(model, client, Protocol("fedsgd"))
    raw = reclabels_raw(update, model, num_dummy=16, input_shape=SPEC.shape)
    assert torch.allclose(raw, labels_to_counts(client.labels, 5).double().to(raw), atol=1e-4)
    for mode in ("avg", "start", "end"):  # one step: every mode is Geng et al. at θˢ
        counts = reclabels(update, model, num_dummy=16, mode=mode, input_shape=SPEC.shape)
        assert counts.tolist() == [2, 1, 0, 3, 1]


def test_reclabels_recovers_fedavg_counts_where_geng_at_either_end_drifts():
    # Every batch holds the same labels, so p̃ moves smoothly over the 40 local steps: the average
    # of the interpolated per-step estimates is right, the estimate at θˢ or θᶜ alone is not.
    model = ConstantFeatures()
    labels = [0, 0, 2, 4, 4] * 4
    client = _client(labels)
    protocol = Protocol("fedavg", epochs=10, batch_size=5, lr=0.01, reshuffle=False)
    update = client_update(model, client, protocol, seed=1)
    truth = labels_to_counts(client.labels, 5)
    raw = {m: reclabels_raw(update, model, num_dummy=8, mode=m, input_shape=SPEC.shape) for m in ("avg", "start", "end")}
    err = {m: float((v - truth.to(v)).abs().sum()) for m, v in raw.items()}
    assert err["avg"] < 0.5 and err["start"] > 2.5 and err["end"] > 2.0
    counts = reclabels(update, model, num_dummy=8, input_shape=SPEC.shape)
    assert counts.tolist() == truth.tolist() == [8, 0, 4, 0, 8]
    assert reclabels(update, model, num_dummy=8, mode="start", input_shape=SPEC.shape).tolist() == [7, 0, 4, 0, 9]
    assert reclabels(update, model, num_dummy=8, mode="end", input_shape=SPEC.shape).tolist() == [9, 0, 4, 0, 7]
    assert label_count_error(client.labels, counts_to_labels(counts), 5) == 0.0


def test_geng_counts_at_any_weights_and_label_only_attacks():
    model = ConstantFeatures()
    client = _client([1, 1, 2, 2, 2, 4])
    update = client_update(model, client, Protocol("fedsgd"))
    assert geng_counts(update, model, input_shape=SPEC.shape).tolist() == [0, 2, 3, 0, 1]
    assert geng_counts(update, model, update.final_params(), input_shape=SPEC.shape, rounding="geng").sum() == 6
    for name in ("reclabels", "geng-server", "geng-client"):
        rec = build(name, label_samples=8).reconstruct(update, model, SPEC)
        assert rec.labels.tolist() == [1, 1, 2, 2, 2, 4]
        assert rec.inputs.shape == (6, *SPEC.shape) and rec.extras["labels_only"]


def test_resolve_labels_reclabels_strategy():
    model = ConstantFeatures()
    client = _client([3, 0, 3])
    update = client_update(model, client, Protocol("fedsgd"))
    labels = resolve_labels("reclabels", update, model, 5, num_dummy=4, input_shape=SPEC.shape)
    assert labels.tolist() == [0, 3, 3]


def test_eth_rounding_cases():
    assert round_counts_eth(torch.tensor([1.6, 0.3, 2.1]), 4).tolist() == [2, 0, 2]
    # too many after flooring: remove from classes with f ≥ 1 and the smallest fractional part
    assert round_counts_eth(torch.tensor([2.9, 1.1, 1.2, -0.5]), 3).tolist() == [2, 0, 1, 0]
    # more excess than candidate classes: the rest comes off the largest classes
    assert round_counts_eth(torch.tensor([5.0, 1.0, 0.2]), 2).tolist() == [2, 0, 0]
    # far too few: whole rounds first
    assert round_counts_eth(torch.tensor([0.0, 0.0]), 5).tolist() == [3, 2]


def test_geng_rounding_cases():
    assert round_counts_geng(torch.tensor([1.6, 0.3, 2.1]), 4).tolist() == [2, 0, 2]
    # residuals: class 2 exact → visited first; the list is truncated at N
    assert round_counts_geng(torch.tensor([3.4, 0.2, 2.0]), 4).tolist() == [2, 0, 2]
    # too few: absent classes are added in descending residual
    assert round_counts_geng(torch.tensor([1.0, 0.4, 0.1]), 3).tolist() == [1, 1, 1]


@pytest.mark.parametrize("rounding", ["eth", "geng"])
def test_rounding_always_sums_to_n(rounding):
    g = torch.Generator().manual_seed(0)
    for trial in range(50):
        raw = torch.randn(7, generator=g) * 4 + 2
        total = int(torch.randint(0, 30, (1,), generator=g))
        counts = round_counts(raw, total, rounding)
        assert counts.dtype == torch.long and int(counts.sum()) == total and bool((counts >= 0).all())


def test_label_count_error_is_half_l1():
    assert label_count_error([0, 0, 1, 2], [0, 1, 1, 1], 3) == 2.0  # counts (2,1,1) vs (1,3,0)


def test_errors_are_clear():
    model = ConstantFeatures()
    update = client_update(model, _client([0, 1]), Protocol("fedsgd"))
    with pytest.raises(FedleakError, match="input shape"):
        reclabels(update, model)
    with pytest.raises(FedleakError, match="RecLabels mode"):
        reclabels(update, model, mode="middle", input_shape=SPEC.shape)
    with pytest.raises(FedleakError, match="rounding"):
        round_counts(torch.ones(3), 3, "ceil")
    with pytest.raises(FedleakError, match="finite"):
        round_counts(torch.tensor([1.0, float("nan")]), 3)
    with pytest.raises(FedleakError, match="positive mean penultimate"):
        geng_raw_counts(torch.zeros(3), torch.ones(3) / 3, torch.tensor(0.0), 4)
    with pytest.raises(FedleakError, match="dummy"):
        dummy_inputs((1, 2, 2), 0)
