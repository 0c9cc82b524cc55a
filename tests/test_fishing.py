"""Fishing (Wen et al., ICML 2022): one class's gradient isolated exactly from a batch, then inverted."""

import pytest
import torch

import fedleak
from fedleak.attacks.fishing import target_gradient
from fedleak.errors import FedleakError
from fedleak.fl import client_update
from fedleak.fl.inspect import inspect_model, structure_finding
from fedleak.models.fishing import fishing
from fedleak.types import ClientData, Protocol


@pytest.fixture(scope="module")
def batch():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=32, seed=0)
    client = clients[0]
    counts = torch.bincount(client.labels, minlength=spec.num_classes)
    target = int((counts == 1).nonzero()[0])
    model = fishing(fedleak.models.build("femnist-cnn", spec, seed=0), spec, target_class=target)
    alone = ClientData(client.inputs[client.labels == target], client.labels[client.labels == target], "target")
    return spec, client, model, target, alone


def test_the_batch_gradient_is_the_target_inputs_gradient(batch):
    spec, client, model, target, alone = batch
    count, summed = target_gradient(client_update(model, client, Protocol("fedsgd")), model.fishing_secrets)
    single = client_update(model, alone, Protocol("fedsgd")).gradient
    assert count == 1
    for name, value in single.items():
        assert torch.allclose(summed[name], value, rtol=1e-4, atol=1e-6 * float(value.abs().max()) + 1e-12), name
    # same architecture: no structure finding; the inspector's fishing check (fl/inspect_fishing.py) sees the
    # silenced classifier rows in the weights alone, and the honest model of the same architecture is not flagged
    assert structure_finding(model.state_dict(), fedleak.models.build("femnist-cnn", spec, seed=0)) is None
    inspection = inspect_model(model)
    assert inspection.suspicious and "fishing" in {f.signature for f in inspection.findings}
    assert not inspect_model(fedleak.models.build("femnist-cnn", spec, seed=0)).suspicious


def test_fishing_inverts_the_target_out_of_32(batch):
    spec, client, model, target, alone = batch
    update = client_update(model, client, Protocol("fedsgd"))
    rec = fedleak.attacks.build("fishing", iterations=100).reconstruct(update, model, spec)
    assert rec.extras["target_count"] == 1
    psnr = fedleak.metrics.evaluate(rec, alone, spec)["psnr_per_input"][0]
    assert psnr > 17, psnr  # a random image: about 8 dB


def test_bad_target_is_one_line(batch):
    spec, _, _, _, _ = batch
    with pytest.raises(FedleakError, match="target_class"):
        fishing(fedleak.models.build("lenet", spec, seed=0), spec, target_class=spec.num_classes)
