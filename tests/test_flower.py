"""Flower integration: arrays ↔ updates, the recording strategy, and attacks on what it records.

The client below trains the way Flower's PyTorch examples do (load the arrays into the model,
``torch.optim.SGD``, send ``state_dict()`` back), independently of fedleak's client update. The
tests that need real Flower types run only where ``flwr`` is installed.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fedleak
from fedleak import FedleakError, Protocol, Update
from fedleak.fl import client_update
from fedleak.integrations.flower import (FLOWER_AVAILABLE, LeakageRecorder, model_arrays, protocol_from_config,
                                         split_arrays, update_from_arrays)
from fedleak.metrics import evaluate

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup():
    spec, clients = fedleak.data.load("digits", num_clients=2, samples_per_client=4, seed=0)
    model = fedleak.models.build("lenet", spec, seed=0)
    return spec, clients, model


def flower_client_fit(model, arrays, data, lr, epochs=1, batch_size=None):
    """A Flower-style client: arrays in, plain SGD over the data in order, ``state_dict`` arrays out."""
    local = copy.deepcopy(model)
    local.load_state_dict(OrderedDict((k, torch.from_numpy(np.array(a))) for k, a in zip(local.state_dict(), arrays)))
    optimizer = torch.optim.SGD(local.parameters(), lr=lr)
    n = len(data)
    step = batch_size or n
    for _ in range(epochs):
        for start in range(0, n, step):
            optimizer.zero_grad()
            F.cross_entropy(local(data.inputs[start:start + step]), data.labels[start:start + step]).backward()
            optimizer.step()
    return [v.detach().numpy().copy() for v in local.state_dict().values()]


class FakeStrategy:
    """Stands in for a Flower strategy: one instruction per client, plain mean as aggregation."""

    def __init__(self, cids, config):
        self.cids, self.config, self.aggregated = cids, config, None

    def configure_fit(self, server_round, parameters, client_manager):
        return [(SimpleNamespace(cid=c), SimpleNamespace(parameters=parameters, config=dict(self.config)))
                for c in self.cids]

    def aggregate_fit(self, server_round, results, failures):
        arrays = [r.parameters for _, r in results]
        self.aggregated = [np.mean([a[i] for a in arrays], axis=0) for i in range(len(arrays[0]))]
        return self.aggregated, {}


def test_arrays_round_trip_and_errors(setup):
    spec, _, model = setup
    arrays = model_arrays(model)
    assert len(arrays) == len(model.state_dict())
    params, buffers = split_arrays(model, arrays)
    assert set(params) == {k for k, _ in model.named_parameters()} and buffers == {}
    assert all(torch.equal(params[k], v) for k, v in model.named_parameters())
    with pytest.raises(FedleakError, match="arrays for a model with"):
        split_arrays(model, arrays[:-1])
    bad = [a.copy() for a in arrays]
    bad[0] = bad[0][..., :1]
    with pytest.raises(FedleakError, match="has shape"):
        split_arrays(model, bad)
    bad = [a.copy() for a in arrays]
    bad[1][0] = np.nan
    with pytest.raises(FedleakError, match="NaN"):
        split_arrays(model, bad, what="arrays the client returned")
    with pytest.raises(FedleakError, match="array layout"):
        model_arrays(model, keys="weights")


def test_protocol_from_a_flower_fit_config():
    base = Protocol("fedavg", epochs=1, batch_size=5, lr=0.01)
    p = protocol_from_config(base, {"local_epochs": 3, "learning_rate": "0.1", "batch_size": 2, "server_round": 4})
    assert (p.epochs, p.batch_size, p.lr, p.algorithm) == (3, 2, 0.1, "fedavg")
    assert protocol_from_config(base, {}) is base
    with pytest.raises(FedleakError, match="epochs"):
        protocol_from_config(base, {"local_epochs": 0})


def test_recorded_update_is_the_clients_training(setup, tmp_path):
    """What the recorder stores equals fedleak's own client update on the same data and order."""
    spec, clients, model = setup
    protocol = Protocol("fedavg", epochs=2, batch_size=2, lr=0.05, reshuffle=False)
    inner = FakeStrategy(["a", "b"], {"local_epochs": 2})
    recorder = LeakageRecorder(inner, model, Protocol("fedavg", epochs=1, batch_size=2, lr=0.05, reshuffle=False),
                               tmp_path)
    sent = model_arrays(model)
    instructions = recorder.configure_fit(1, sent, client_manager=None)
    results = [(proxy, SimpleNamespace(parameters=flower_client_fit(model, sent, clients[i], 0.05, 2, 2),
                                       num_examples=len(clients[i]), metrics={"loss": 1.0}))
               for i, (proxy, _) in enumerate(instructions)]
    aggregated, _ = recorder.aggregate_fit(1, results, [])
    assert inner.aggregated is aggregated                       # the wrapped strategy still aggregates
    entries = [json.loads(line) for line in (tmp_path / "updates.jsonl").read_text().splitlines()]
    assert [(e["round"], e["client"], e["protocol"]["epochs"]) for e in entries] == [(1, "a", 2), (1, "b", 2)]
    for i, entry in enumerate(entries):
        stored = Update.load(entry["update"])
        ours = client_update(model, clients[i], protocol)
        assert stored.metadata["client_metrics"] == {"loss": 1.0} and stored.num_samples == len(clients[i])
        for name, value in ours.pseudo_gradient().items():
            torch.testing.assert_close(stored.pseudo_gradient()[name], value, rtol=1e-4, atol=1e-5)


def test_recorder_attacks_each_update_as_it_arrives(setup, tmp_path):
    """An honest-but-curious Flower server: one image per client, one SGD step, iDLG on arrival."""
    spec, clients, model = setup
    one = fedleak.ClientData(clients[0].inputs[:1], clients[0].labels[:1], "c0")
    recorder = LeakageRecorder(FakeStrategy(["c0"], {}), model, Protocol("fedsgd", lr=0.01), tmp_path,
                               attack="idlg", attack_options={"iterations": 60}, spec=spec)
    sent = model_arrays(model)
    recorder.configure_fit(3, sent, None)
    returned = flower_client_fit(model, sent, one, lr=0.01)
    recorder.aggregate_fit(3, [(SimpleNamespace(cid="c0"), SimpleNamespace(parameters=returned, num_examples=1))], [])
    [entry] = recorder.records
    rec = fedleak.Reconstruction.load(entry["reconstruction"])
    scores = evaluate(rec, one, spec)
    assert entry["attack"] == "idlg" and rec.labels.tolist() == one.labels.tolist()
    assert scores["psnr"] > 25, scores["psnr"]


def test_recorder_input_errors(setup, tmp_path):
    spec, _, model = setup
    with pytest.raises(FedleakError, match="needs spec"):
        LeakageRecorder(FakeStrategy([], {}), model, Protocol("fedsgd"), tmp_path, attack="idlg")
    with pytest.raises(FedleakError, match="torch model"):
        LeakageRecorder(FakeStrategy([], {}), "lenet", Protocol("fedsgd"), tmp_path)
    recorder = LeakageRecorder(FakeStrategy([], {}), model, Protocol("fedsgd"), tmp_path)
    with pytest.raises(FedleakError, match="no parameters recorded for round 7"):
        recorder.record(7, "x", SimpleNamespace(parameters=model_arrays(model), num_examples=1))
    other = fedleak.models.build("mlp", spec, seed=0)
    with pytest.raises(FedleakError, match="arrays for a model with"):
        update_from_arrays(model, model_arrays(other), model_arrays(other), 1, Protocol("fedsgd"))


@pytest.mark.skipif(not FLOWER_AVAILABLE, reason="flwr is not installed (pip install flwr)")
def test_malicious_flower_server_ships_an_imprint_model(setup, tmp_path):
    """With Flower's own FedAvg and Parameters: the recorder ships an imprinted model to the clients
    of the round and reads their images back verbatim from the FedSGD-style updates (Fowl et al.)."""
    from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
    from flwr.server.strategy import FedAvg

    from fedleak.models.imprint import imprint

    spec, clients, model = setup
    malicious = imprint(fedleak.models.build("lenet", spec, seed=0), spec, bins=64)

    class Manager:
        def num_available(self):
            return 2

        def sample(self, num_clients, min_num_clients=None, criterion=None):
            return [SimpleNamespace(cid=str(i)) for i in range(num_clients)]

        def wait_for(self, num_clients, timeout=86400):
            return True

    recorder = LeakageRecorder(FedAvg(min_fit_clients=2, min_available_clients=2), malicious,
                               Protocol("fedsgd", lr=0.01), tmp_path, attack="imprint", spec=spec, ship=malicious)
    start = recorder.initialize_parameters(Manager())
    instructions = recorder.configure_fit(1, start, Manager())
    assert len(instructions) == 2
    results = []
    for i, (proxy, fit_ins) in enumerate(instructions):
        from flwr.common import parameters_to_ndarrays

        arrays = flower_client_fit(malicious, parameters_to_ndarrays(fit_ins.parameters), clients[i], lr=0.01)
        results.append((proxy, FitRes(Status(Code.OK, ""), ndarrays_to_parameters(arrays), len(clients[i]), {})))
    aggregated, _ = recorder.aggregate_fit(1, results, [])
    assert aggregated is not None
    recovered = 0
    for i, entry in enumerate(recorder.records):
        scores = evaluate(fedleak.Reconstruction.load(entry["reconstruction"]), clients[i], spec)
        recovered += sum(p > 40 for p in scores["psnr_per_input"] if p is not None)
    # 8 images, 64 bins: most fall alone into a bin; > 40 dB, not bit-exact: the gradient is read
    # back from float32 weights as (θˢ − θᶜ)/η
    assert recovered >= 6, recovered
