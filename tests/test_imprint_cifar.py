"""Robbing the Fed on real CIFAR-10 images (../shared/data/cifar10; skipped when absent).

The ResNet-18 measurements of the paper's settings are in ``benchmarks/bench_imprint.py``; here the
block sits in front of the small CIFAR CNN (the readout does not depend on the model behind it).
"""

from __future__ import annotations

import statistics

import pytest
import torch

from fedleak.attacks import build as build_attack
from fedleak.attacks.imprint import expected_recovered
from fedleak.data import load
from fedleak.fl.client import client_update
from fedleak.metrics import evaluate
from fedleak.models import build as build_model
from fedleak.models.imprint import imprint
from fedleak.types import Protocol

from conftest import shared_path


@pytest.fixture(scope="module")
def cifar():
    root = shared_path("cifar10")
    spec, clients = load("cifar10", root=root, num_clients=4, samples_per_client=64, seed=0)
    _, test = load("cifar10", root=root, num_clients=1, samples_per_client=256, seed=0, split="test")
    return spec, clients, test[0].inputs


def test_fedsgd_128_bins_matches_proposition_1_and_is_bit_exact_in_float64(cifar):
    spec, clients, surrogate = cifar
    base = build_model("cifar100-cnn", spec, seed=0)
    model = imprint(base, spec, bins=128, linfunc="mean", cdf="gaussian", surrogate=surrogate, seed=0).double()
    fractions = []
    for client in clients:
        data = client.to(dtype=torch.float64)
        update = client_update(model, data, Protocol("fedsgd"))
        rec = build_attack("imprint").reconstruct(update, model, spec)
        scores = evaluate(rec, data, spec, threshold=60, clip=False)
        recovered = [p for p in scores["psnr_per_input"] if p > 60]
        assert all(p > 100 for p in recovered)  # alone in its bin = verbatim, to float64 precision
        assert abs(len(rec.extras["single_bins"]) - len(recovered)) <= 3
        fractions.append(scores["rec_percent"])
    expected = 100 * expected_recovered(64, 128) / 64  # 61.0 %
    assert abs(statistics.mean(fractions) - expected) < 8


def test_fedavg_sparse_identifies_most_images(cifar):
    spec, clients, surrogate = cifar
    model = imprint(build_model("cifar100-cnn", spec, seed=0), spec, bins=128, structure="sparse", gain=1e-3,
                    linfunc="mean", surrogate=surrogate, seed=0)
    update = client_update(model, clients[0], Protocol("fedavg", epochs=1, batch_size=8, lr=1e-4))
    rec = build_attack("imprint-sparse").reconstruct(update, model, spec)
    scores = evaluate(rec, clients[0], spec)
    assert scores["iip"] >= 0.6
