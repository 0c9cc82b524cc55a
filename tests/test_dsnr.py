"""SEER's D-SNR and its row / pair variants on the client's own batch (fl/dsnr.py), and the inspector on
LOKI, trap weights and disguised models it was not written from."""

import pytest
import torch

import fedleak
from fedleak.fl.dsnr import dsnr_findings, measure
from fedleak.fl.inspect import inspect_model
from fedleak.models.disguise import disguised_imprint, honest_looking_trap
from fedleak.models.imprint import imprint
from fedleak.models.loki import loki


@pytest.fixture(scope="module")
def photos():
    spec, clients = fedleak.data.load("photos", num_clients=1, samples_per_client=16, seed=1)
    return spec, clients[0]


def _base(spec):
    return fedleak.models.build("cifar100-cnn", spec, seed=0)


def test_honest_models_pass(photos):
    spec, batch = photos
    for model in (_base(spec), fedleak.models.build("resnet20", spec, seed=1)):
        assert not inspect_model(model).suspicious
        assert dsnr_findings(model, batch.inputs, batch.labels) == []


def test_loki_and_trap_weights_are_flagged(photos):
    spec, batch = photos
    shipped = loki(_base(spec), spec, clients=4, bins=32).for_client(1)
    assert inspect_model(shipped).suspicious  # the slices' rows measure one function
    assert {f.signature for f in dsnr_findings(shipped, batch.inputs, batch.labels)} >= {"d-snr-pairs"}
    trap = imprint(_base(spec), spec, bins=64, structure="cah")
    assert inspect_model(trap).suspicious


def test_channel_mixed_imprint_evades_the_weight_checks_but_not_the_pair_test(photos):
    spec, batch = photos
    mixed = disguised_imprint(_base(spec), spec, bins=64, mix=True)
    assert not inspect_model(mixed).suspicious
    result = measure(mixed, batch.inputs, batch.labels)
    assert result["dsnr"] < 1  # SEER's whole-layer D-SNR does not see cumulative bins
    assert result["pair_layer"] == "fc.weight" and result["dominated_pair_share"] > 0.5


def test_honest_looking_trap_weights_pass_the_sign_test(photos):
    """What passes: trap rows with binomial sign shares look honest to the sign-share test."""
    spec, _ = photos
    assert not inspect_model(honest_looking_trap(_base(spec), spec, bins=64)).suspicious
