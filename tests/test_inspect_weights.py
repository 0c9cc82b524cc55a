"""The inspector reads weights, not names (issue #30): imprint blocks with renamed keys, transposed and
permuted matrices are found; fishing classifiers (class and feature) are found; honest models pass.
About 3 s (LeNet on embedded digits, no training)."""

from __future__ import annotations

import copy

import pytest
import torch

import fedleak
from fedleak.fl.inspect import inspect_state
from fedleak.fl.inspect_fishing import classifier
from fedleak.models.fishing import fishing
from fedleak.models.imprint import imprint


@pytest.fixture(scope="module")
def lenet():
    spec, _ = fedleak.data.load("digits", num_clients=1, samples_per_client=4, seed=0)
    return spec, fedleak.models.build("lenet", spec, seed=0)


def disguised(state: dict, seed: int = 0) -> dict:
    """Random names; every 2-D weight's rows and columns permuted (its bias with it) and stored transposed."""
    g = torch.Generator().manual_seed(seed)
    state = {k: v.detach().clone() for k, v in state.items()}
    names = list(state)
    for name in names:
        if state[name].dim() == 2:
            rows, cols = torch.randperm(state[name].shape[0], generator=g), torch.randperm(state[name].shape[1], generator=g)
            state[name] = state[name][rows][:, cols].T.contiguous()
            bias = name[: -len("weight")] + "bias"
            if bias in state:
                state[bias] = state[bias][rows].contiguous()
    return {f"t{i}_{int(torch.randint(10 ** 6, (1,), generator=g))}": state[n] for i, n in enumerate(names)}


def signatures(state) -> set:
    inspection = inspect_state(state)
    return {f.signature for f in inspection.findings if f.confidence >= inspection.threshold}


def test_honest_model_passes_also_disguised(lenet):
    _, model = lenet
    assert signatures(model.state_dict()) == set()
    assert signatures(disguised(model.state_dict())) == set()


@pytest.mark.parametrize("structure", ["cumulative", "sparse"])
def test_imprint_found_under_renamed_transposed_permuted_weights(lenet, structure):
    spec, model = lenet
    block = imprint(model, spec, bins=32, structure=structure, linfunc="randn", seed=0)
    assert "imprint-rows" in signatures(block.state_dict())
    assert "imprint-rows" in signatures(disguised(block.state_dict(), seed=1))


def test_class_and_feature_fishing_found(lenet):
    spec, model = lenet
    fished = fishing(model, spec, target_class=3).state_dict()
    assert "fishing" in signatures(fished) and "fishing" in signatures(disguised(fished))
    feature = copy.deepcopy(model)
    name, _, _ = classifier(feature.state_dict())
    params = dict(feature.named_parameters())
    with torch.no_grad():  # Wen et al. §3.3: the target row reads one feature, bias at a threshold
        scale = float(params[name][3].norm())
        params[name][3].zero_()
        params[name][3, 7] = 10 * scale
        params[name[: -len("weight")] + "bias"][3] = -scale
    inspection = inspect_state(feature.state_dict())
    finding = next(f for f in inspection.findings if f.signature == "fishing")
    assert inspection.suspicious and finding.evidence["feature_share"] > 0.99 and finding.evidence["target"] == 3
