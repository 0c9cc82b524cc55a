"""Update and Reconstruction storage (safetensors + JSON) and validation."""

import json

import pytest
import torch

import fedleak
from fedleak.types import ClientData, DataSpec, Protocol, Reconstruction, Update


def small_update(algorithm="fedavg"):
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=3, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    return fedleak.client_update(model, clients[0], Protocol(algorithm, epochs=2, batch_size=2), seed=1)


@pytest.mark.parametrize("algorithm", ["fedsgd", "fedavg"])
def test_update_round_trip(tmp_path, algorithm):
    update = small_update(algorithm)
    update.metadata["label_counts"] = [1, 2]
    update.save(tmp_path / "u")
    loaded = Update.load(tmp_path / "u")
    assert loaded.protocol == update.protocol and loaded.num_samples == update.num_samples
    assert loaded.metadata == json.loads(json.dumps(update.metadata))
    for k, v in update.pseudo_gradient().items():
        assert torch.equal(loaded.pseudo_gradient()[k], v)
    assert not list((tmp_path / "u").glob("*.pkl")) and (tmp_path / "u" / "update.safetensors").exists()


def test_update_load_errors(tmp_path):
    with pytest.raises(fedleak.FedleakError, match="missing update directory"):
        Update.load(tmp_path / "nope")
    update = small_update()
    update.save(tmp_path / "u")
    (tmp_path / "u" / "update.safetensors").write_bytes(b"garbage")
    with pytest.raises(fedleak.FedleakError, match="corrupt safetensors"):
        Update.load(tmp_path / "u")
    (tmp_path / "u" / "update.json").write_text("{not json")
    with pytest.raises(fedleak.FedleakError, match="corrupt JSON"):
        Update.load(tmp_path / "u")


def test_update_validation():
    update = small_update()
    with pytest.raises(fedleak.FedleakError, match="exactly one"):
        Update(update.server_params, update.protocol, 3)
    bad = dict(update.client_params)
    bad["fc2.bias"] = torch.zeros(5)
    with pytest.raises(fedleak.FedleakError, match="shape"):
        Update(update.server_params, update.protocol, 3, client_params=bad)


def test_reconstruction_round_trip(tmp_path):
    rec = Reconstruction(torch.randn(2, 1, 4, 4), torch.tensor([1, 0]), torch.randn(3, 2, 1, 4, 4), {"loss": 0.5})
    rec.save(tmp_path)
    back = Reconstruction.load(tmp_path)
    assert torch.equal(back.inputs, rec.inputs) and torch.equal(back.candidates, rec.candidates)
    assert back.extras == {"loss": 0.5}


def test_dataspec_validation_and_round_trip():
    spec = DataSpec("x", (3, 2, 2), 4, (0.5, 0.5, 0.5), (0.2, 0.2, 0.2))
    assert DataSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    x = torch.rand(2, 3, 2, 2)
    assert torch.allclose(spec.denormalize(spec.normalize(x)), x, atol=1e-6)
    with pytest.raises(fedleak.FedleakError, match="one value per channel"):
        DataSpec("x", (3, 2, 2), 4, (0.5,), (0.2,))
    with pytest.raises(fedleak.FedleakError, match="no samples"):
        ClientData(torch.zeros(0, 1, 2, 2), torch.zeros(0, dtype=torch.long))
