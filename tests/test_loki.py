"""LOKI (Zhao et al., S&P 2024): per-client kernels and bins separate a secure aggregate by client."""

import pytest
import torch

import fedleak
from fedleak.errors import FedleakError
from fedleak.fl.secagg import concatenate, secure_aggregate_per_client
from fedleak.models.loki import check_budget, loki
from fedleak.types import Protocol


def _run(protocol, structure, gain):
    spec, clients = fedleak.data.load("photos", num_clients=4, samples_per_client=4, seed=0)
    model = loki(fedleak.models.build("cifar100-cnn", spec, seed=0), spec, clients=4, bins=64,
                 structure=structure, gain=gain, seed=0)
    update = secure_aggregate_per_client(model.for_client, clients, protocol, seed=0)
    rec = fedleak.attacks.build("loki").reconstruct(update, model, spec)
    truth = concatenate(clients)
    scores = fedleak.metrics.evaluate(rec, truth, spec)
    return rec, scores


@pytest.mark.parametrize("protocol,structure,gain,bar,least", [
    (Protocol("fedsgd"), "cumulative", 1.0, 100.0, 12), (Protocol("fedavg", 2, 2, 1e-4), "sparse", 1e-3, 60.0, 10)])
def test_loki_reads_each_client_back_verbatim_from_the_aggregate(protocol, structure, gain, bar, least):
    rec, scores = _run(protocol, structure, gain)
    verbatim = [i for i, p in enumerate(scores["psnr_per_input"]) if p is not None and p > bar]
    assert len(verbatim) >= least  # of 16 (4 clients x 4 images); Prop. 1 at 64 bins per client: 15.1
    # each verbatim input came from the slice of its own client (inputs are concatenated by client)
    for i in verbatim:
        j = scores["assignment"][i]
        assert rec.extras["client_of_candidate"][j] == i // 4


def test_one_shared_imprint_cannot_separate_what_loki_separates():
    """Same bin count in total, one shared block (Fowl et al. §4.2): the aggregate mixes clients."""
    spec, clients = fedleak.data.load("photos", num_clients=4, samples_per_client=4, seed=0)
    shared = fedleak.models.imprint(fedleak.models.build("cifar100-cnn", spec, seed=0), spec, bins=4,
                                    linfunc="randn", seed=0)
    update = fedleak.fl.secagg.secure_aggregate(shared, clients, Protocol("fedsgd"), seed=0)
    scores = fedleak.metrics.evaluate(fedleak.attacks.build("imprint").reconstruct(update, shared, spec),
                                      concatenate(clients), spec)
    assert sum(p is not None and p > 100 for p in scores["psnr_per_input"]) <= 4


def test_budget_and_routing_errors_are_one_line():
    with pytest.raises(FedleakError, match="at most .* clients fit"):
        check_budget(10**6, 64, (3, 32, 32))
    spec, _ = fedleak.data.load("photos", num_clients=1, samples_per_client=1, seed=0)
    model = loki(fedleak.models.build("cifar100-cnn", spec, seed=0), spec, clients=2, bins=4)
    with pytest.raises(FedleakError, match="client index"):
        model.for_client(2)
