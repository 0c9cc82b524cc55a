"""The inspector's door: a model file the server sent (issue 47 class 9).

A renamed (and moved) imprint bias must not hide the bins: the attacker picks names and order, so every 1-D
tensor of one value per row is tried as the bias. And the fishing check must not flag honest models of the
architectures people federate (``benchmarks/honest_zoo.py``; the full calibration is
``benchmarks/bench_inspect_honest.py`` → ``benchmarks/results/inspect-honest.json``) while still flagging fishing
built on them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import fedleak
from fedleak.fl.inspect import inspect_state

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from honest_zoo import build, client_data, sgd_steps  # noqa: E402

torch.set_num_threads(1)


def _imprinted():
    from fedleak.models.imprint import imprint

    spec, _ = fedleak.data.load("digits", num_clients=1, samples_per_client=2)
    return imprint(fedleak.models.build("mlp", spec), spec, bins=16, structure="cumulative", seed=0).state_dict()


def _renamed(state, moved: bool):
    """The imprint bias under a new name, at the end of the file (``moved``) or in its place."""
    out = {}
    for name, tensor in state.items():
        if name == "imprint.linear.bias":
            if not moved:
                out["zz.renamed"] = tensor
            continue
        out[name] = tensor
    if moved:
        out["zz.renamed"] = state["imprint.linear.bias"]
    return out


@pytest.mark.parametrize("moved", [False, True], ids=["renamed", "renamed and moved"])
def test_a_renamed_imprint_bias_is_found(moved, tmp_path, capsys):
    from safetensors.torch import save_file

    from fedleak.cli import main

    state = _renamed(_imprinted(), moved)
    inspection = inspect_state(state)
    assert inspection.suspicious, inspection.summary()
    found = [f for f in inspection.findings if f.signature == "imprint-rows"][0]
    assert found.confidence > 0.9 and found.evidence["bins"] == 16
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp_path / "global.safetensors"))
    code = main(["inspect", str(tmp_path / "global.safetensors")])
    out = capsys.readouterr()
    assert code == 1 and "imprint-rows" in out.out + out.err  # was exit 0, "no bias, so no bins"


#: the honest models the issue's peer found flagged (VGG-11 at init and after 20 SGD steps) and the zero-head ViT
HONEST = [("vgg11", "init"), ("vgg11-tv", "init"), ("vgg11-tv", "sgd-3-one-class"), ("vit-tiny-zero-head", "init"),
          ("mlp-mnist", "sgd-20-one-class")]


@pytest.mark.parametrize("name, kind", HONEST, ids=[f"{n}-{k}" for n, k in HONEST])
def test_honest_models_of_federated_architectures_pass_and_fishing_on_them_is_flagged(name, kind):
    from fedleak.models.fishing import fishing

    model = build(name, 10, seed=1)
    if kind != "init":
        shape = (1, 28, 28) if name.startswith("mlp-mnist") else (3, 32, 32)
        x, y = client_data(shape, 10, n=16, seed=1, one_class=True)
        sgd_steps(model, x, y, int(kind.split("-")[1]), batch=4, seed=1)
    inspection = inspect_state(model.state_dict())
    assert not inspection.suspicious, inspection.summary()
    spec = fedleak.DataSpec("x", (3, 32, 32), 10, (0.0,) * 3, (1.0,) * 3)
    assert inspect_state(fishing(model, spec, target_class=3, shift=30.0).state_dict()).suspicious


def test_random_heads_of_few_features_are_not_feature_fishing():
    """A random row of few features puts most of its mass on one by chance (10 classes of 8 features: 8.6 % of
    random heads above the 0.8 share): below 32 features the share must reach 0.99; a head that does rest on one
    feature is still flagged, of 64 features or of 16."""
    generator = torch.Generator().manual_seed(0)
    for features in (8, 10, 12, 16):
        for _ in range(50):
            state = {"fc.weight": torch.randn(10, features, generator=generator), "fc.bias": torch.zeros(10)}
            assert not inspect_state(state).suspicious, features
    fished = {"fc.weight": torch.randn(10, 64, generator=generator) * 0.1, "fc.bias": torch.zeros(10)}
    fished["fc.weight"][3].zero_()
    fished["fc.weight"][3, 5] = 1.0
    fished["fc.bias"][3] = -0.1
    assert [f.signature for f in inspect_state(fished).findings] == ["fishing"]
    small = {"fc.weight": torch.randn(10, 16, generator=generator) * 0.1, "fc.bias": torch.zeros(10)}
    small["fc.weight"][3].zero_()
    small["fc.weight"][3, 5] = 1.0
    assert [f.signature for f in inspect_state(small).findings] == ["fishing"]


def test_a_rank_one_head_beside_norm_layers_is_not_an_imprint():
    """A zero-initialized head after one-class SGD is rank one (ViT's JAX init; found by bench_inspect_honest.py:
    ``head.weight (transposed): imprint-rows 1.00``): the renamed-bias search must not borrow a norm layer's
    weight or bias as its thresholds. Only tensors of the weight's own layer or of no other layer are tried."""
    generator = torch.Generator().manual_seed(0)
    head = torch.outer(torch.randn(10, generator=generator), torch.randn(192, generator=generator))
    state = {"norm.weight": 1 + 0.1 * torch.randn(192, generator=generator),
             "norm.bias": 0.1 * torch.randn(192, generator=generator), "head.weight": head, "head.bias": torch.zeros(10)}
    assert not inspect_state(state).suspicious, inspect_state(state).summary()
