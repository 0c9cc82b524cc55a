"""Layer weights: AGIC Eqs. 7–8 (shapes, ReLU modifier, FC mean, BN policy) and AWA Eq. 24 +
the enhancement subset of Eqs. 25–30 on constructed cases."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fedleak import FedleakError
from fedleak.attacks.layer_weights import (
    TABLE_I,
    EnhancedWeights,
    agic_layer_weights,
    awa_base_weights,
    conv_line,
    enhancement_subset,
    relative_errors,
    relu_modifier,
    zero_fraction,
)
from fedleak.types.params import layers


class TinyCNN(nn.Module):
    """conv1 → ReLU → conv2 → BN → ReLU → conv3 → ReLU → pool → fc (3 convs, 1 BN, 1 FC)."""

    def __init__(self, act=nn.ReLU) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 2, 3, padding=1)
        self.act1 = act()
        self.conv2 = nn.Conv2d(2, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.act2 = act()
        self.conv3 = nn.Conv2d(4, 4, 3, padding=1)
        self.act3 = act()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        x = self.act1(self.conv1(x))
        x = self.act2(self.bn(self.conv2(x)))
        x = self.act3(self.conv3(x))
        return self.fc(x.mean((2, 3)))


def _gradient(model: nn.Module, zero_fractions: dict[str, float]) -> dict[str, torch.Tensor]:
    """A fake received gradient: ones, with the first ⌊p·n⌋ entries of each named layer set to 0."""
    grad = {}
    for name, p in model.named_parameters():
        g = torch.ones_like(p).reshape(-1)
        module = name.rsplit(".", 1)[0]
        frac = zero_fractions.get(module, 0.0)
        grad[name] = g.clone()
        grad[name][: int(frac * g.numel())] = 0.0
        grad[name] = grad[name].reshape(p.shape)
    return grad


# ----------------------------------------------------------------------------------------------
# AGIC


def test_linear_line_passes_through_first_and_last_layer():
    line = conv_line(21, 50.0)  # ResNet20-4 has N_conv = 21 (Table I caption)
    assert line[0] == pytest.approx(1.0)
    assert line[-1] == pytest.approx(50.0)
    assert line[10] == pytest.approx(1 + 49 * 10 / 20)
    diffs = [b - a for a, b in zip(line, line[1:])]
    assert max(diffs) == pytest.approx(min(diffs))  # linear


@pytest.mark.parametrize("row", sorted(TABLE_I))
def test_table_i_shapes_hit_both_points_and_have_the_right_monotonicity(row):
    shape, beta = TABLE_I[row]
    line = conv_line(21, beta, shape)
    assert line[0] == pytest.approx(1.0) and line[-1] == pytest.approx(beta)
    diffs = [b - a for a, b in zip(line, line[1:])]
    if row.startswith("increase"):
        assert all(d > 0 for d in diffs)
    elif row.startswith("decrease"):
        assert all(d < 0 for d in diffs)
    else:
        assert all(d == 0 for d in diffs)
    second = [b - a for a, b in zip(diffs, diffs[1:])]
    # log is concave (shrinking steps), exp convex (growing steps) in absolute change
    if shape == "log":
        assert all(abs(b) < abs(a) for a, b in zip(diffs, diffs[1:]))
    if shape == "exp":
        assert all(abs(b) > abs(a) for a, b in zip(diffs, diffs[1:]))
    if shape == "linear":
        assert all(abs(s) < 1e-9 for s in second)


def test_line_edge_cases_and_errors():
    assert conv_line(1, 50.0) == [1.0]
    assert conv_line(0, 50.0) == []
    exp = conv_line(200, 3.0, "exp")  # no overflow for deep networks
    assert exp[0] == pytest.approx(1.0) and exp[-1] == pytest.approx(3.0) and all(map(math.isfinite, exp))
    with pytest.raises(FedleakError, match="allowed: constant, exp, linear, log"):
        conv_line(5, 2.0, "cubic")
    with pytest.raises(FedleakError, match="beta"):
        conv_line(5, 0.0)


def test_relu_modifier_and_zero_fraction():
    assert relu_modifier(0.0) == 1.0
    assert relu_modifier(0.75) == pytest.approx(4.0)
    assert relu_modifier(1.0) == 1.0  # an all-zero layer carries nothing: no infinite weight
    assert zero_fraction([torch.tensor([0.0, 1.0, 0.0, 2.0])]) == 0.5
    assert zero_fraction([torch.tensor([1e-9, 1.0])], tol=1e-6) == 0.5
    with pytest.raises(FedleakError):
        relu_modifier(1.5)


def test_agic_weights_first_last_conv_modifier_bn_and_fc():
    model = TinyCNN()
    beta = 5.0
    # conv1: 50% zeros, conv2 (no bias): 0%, conv3: 75% of weight+bias entries zero
    grad = _gradient(model, {"conv1": 0.5, "conv3": 0.75})
    p1 = zero_fraction([grad["conv1.weight"], grad["conv1.bias"]])
    p3 = zero_fraction([grad["conv3.weight"], grad["conv3.bias"]])
    w = agic_layer_weights(model, grad, beta=beta)
    l = [1.0, 3.0, 5.0]
    assert w["conv1.weight"] == pytest.approx(l[0] / (1 - p1))
    assert w["conv1.bias"] == w["conv1.weight"]  # biases share their layer's weight
    assert w["conv2.weight"] == pytest.approx(l[1])
    assert w["conv3.weight"] == pytest.approx(l[2] / (1 - p3))
    assert w["bn.weight"] == w["bn.bias"] == w["conv2.weight"]  # BN follows conv2 (our choice)
    assert w["fc.weight"] == w["fc.bias"] == pytest.approx(sum(l) / 3)  # FC: mean l_i, no modifier
    # without the modifier: α = l
    plain = agic_layer_weights(model, grad, beta=beta, relu=False)
    assert [plain[f"conv{i}.weight"] for i in (1, 2, 3)] == pytest.approx(l)
    # BN policies
    assert agic_layer_weights(model, grad, beta=beta, bn="mean")["bn.weight"] == pytest.approx(3.0)
    assert agic_layer_weights(model, grad, beta=beta, bn="one")["bn.weight"] == 1.0


def test_agic_modifier_only_for_relu_networks():
    model = TinyCNN(act=nn.Sigmoid)
    grad = _gradient(model, {"conv1": 0.5})
    w = agic_layer_weights(model, grad, beta=3.0)
    assert w["conv1.weight"] == pytest.approx(1.0)  # no ReLU modules: no modifier
    with pytest.raises(FedleakError, match="received gradient"):
        agic_layer_weights(TinyCNN(), None, beta=3.0)
    assert set(w) == {n for n, _ in model.named_parameters()}


def test_agic_weights_on_resnet20_4_follow_table_i_and_eq_8():
    """The AGIC setting itself: ResNet20-4 has N_conv = 21 (Table I caption), counted in
    registration order with each 1×1 shortcut after its block's second convolution (torchvision's
    BasicBlock order, as in the inversefed code AGIC builds on); α = l_i·z_i from the received
    gradient's zeros, the FC at mean l_i = (1 + β)/2, BN at the weight of the conv it follows."""
    from fedleak.models import build as build_model
    from fedleak.types import DataSpec

    spec = DataSpec("cifar-like", (3, 32, 32), 10, (0.5,) * 3, (0.25,) * 3)
    model = build_model("resnet20-4", spec, seed=0).eval()
    found = layers(model)
    convs = [layer for layer in found if layer.kind == "conv"]
    assert len(convs) == 21
    x = torch.randn((1, 3, 32, 32), generator=torch.Generator().manual_seed(0))
    loss = nn.functional.cross_entropy(model(x), torch.tensor([3]))
    names = [n for n, _ in model.named_parameters()]
    grad = dict(zip(names, torch.autograd.grad(loss, list(model.parameters()))))
    w = agic_layer_weights(model, grad, beta=50.0)
    line = conv_line(21, 50.0)
    for layer, l_i in zip(convs, line):
        z = relu_modifier(zero_fraction([grad[n] for n in layer.param_names]))
        assert w[layer.param_names[0]] == pytest.approx(l_i * z)
    assert any(w[c.param_names[0]] > l for c, l in zip(convs, line))  # the modifier is active here
    assert w["fc.weight"] == w["fc.bias"] == pytest.approx(25.5)
    assert w["layer3.0.downsample.1.weight"] == w["layer3.0.downsample.0.weight"]
    assert w["bn1.weight"] == w["conv1.weight"]


# ----------------------------------------------------------------------------------------------
# AWA


def test_awa_type_wise_linear_weights():
    model = TinyCNN()
    w = awa_base_weights(model, omega_conv=30.0, omega_bn=7.0, omega_fc=2.0)
    assert w["conv1.weight"] == pytest.approx(10.0)
    assert w["conv2.weight"] == pytest.approx(20.0)
    assert w["conv3.weight"] == w["conv3.bias"] == pytest.approx(30.0)
    assert w["bn.weight"] == pytest.approx(7.0)  # the only BN layer is the last of its type
    assert w["fc.weight"] == pytest.approx(2.0)
    with pytest.raises(FedleakError, match="omega_bn"):
        awa_base_weights(model, 1.0, -1.0, 1.0)


def test_enhancement_subset_is_the_intersection_of_the_top_layers():
    e_mu = torch.tensor([0.1, 5.0, 3.0, 0.2, 4.0, 0.0])
    e_sigma = torch.tensor([9.0, 0.1, 8.0, 0.3, 7.0, 0.0])
    # ⌈0.5·6⌉ = 3: top mean errors {1, 4, 2}; top variance errors {0, 2, 4} → {2, 4}
    assert enhancement_subset(e_mu, e_sigma, 0.5, 0.5) == {2, 4}
    # ⌈0.2·6⌉ = 2: {1, 4} ∩ {0, 2} = ∅
    assert enhancement_subset(e_mu, e_sigma, 0.2, 0.2) == set()
    assert enhancement_subset(e_mu, e_sigma, 0.0, 1.0) == set()
    assert enhancement_subset(e_mu, e_sigma, 1.0, 1.0) == set(range(6))
    with pytest.raises(FedleakError, match="p_mu"):
        enhancement_subset(e_mu, e_sigma, 1.5, 0.1)


def test_relative_errors_and_enhanced_weights_on_a_constructed_update():
    model = TinyCNN()
    found = layers(model)
    names = [layer.module for layer in found]
    assert names == ["conv1", "conv2", "bn", "conv3", "fc"]
    gen = torch.Generator().manual_seed(0)
    observed = {n: 1.0 + torch.rand(p.shape, generator=gen) for n, p in model.named_parameters()}
    simulated = {n: v.clone() for n, v in observed.items()}
    # conv2: its mean is off by 2x (e_mu = 1) and its spread by 9x; bn: spread only; fc: mean only
    simulated["conv2.weight"] = 2 * observed["conv2.weight"] + 3 * (observed["conv2.weight"] - observed["conv2.weight"].mean())
    for n in ("bn.weight", "bn.bias"):
        simulated[n] = observed[n].mean() + 4 * (observed[n] - observed[n].mean())
    for n in ("fc.weight", "fc.bias"):
        simulated[n] = observed[n] + 10.0
    e_mu, e_sigma = relative_errors(simulated, observed, found)
    assert float(e_mu[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(e_mu[1]) == pytest.approx(1.0, rel=1e-6)
    assert float(e_sigma[1]) == pytest.approx(24.0, rel=1e-5)  # (2+3)² − 1
    assert float(e_mu[2]) < 1e-6 and float(e_sigma[2]) > 1.0
    assert float(e_sigma[4]) == pytest.approx(0.0, abs=1e-5) and float(e_mu[4]) > 1.0

    base = awa_base_weights(model, 10.0, 10.0, 10.0)
    weights = EnhancedWeights(model, base, omega_enh=999.0, p_mu=0.4, p_sigma=0.4)
    assert dict(weights) == base  # before any refresh: the Eq. 24 weights
    # ⌈0.4·5⌉ = 2: top e_mu = {fc, conv2}; top e_sigma = {conv2, bn} → only conv2 is enhanced
    assert weights.refresh(simulated, observed) == {1}
    assert weights.enhanced_modules() == ["conv2"]
    assert weights["conv2.weight"] == 999.0
    assert weights["conv1.weight"] == base["conv1.weight"] and weights["fc.bias"] == base["fc.bias"]
    assert len(weights) == len(base)
