"""Model zoo: shapes, exact paper parameter counts, LeCun-normal init, determinism, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fedleak import DataSpec, FedleakError
from fedleak.models import MODELS, build, model_options, register
from fedleak.models import registry
from fedleak.models.zoo import TRUNC_NORMAL_STD
from fedleak.types.params import layers, last_linear

FEMNIST = DataSpec("femnist", (1, 28, 28), 62, (0.9642384386141873,), (0.15767843198426892,))
CIFAR10 = DataSpec("cifar10", (3, 32, 32), 10, (0.4914, 0.4822, 0.4465), (0.247, 0.243, 0.261))
CIFAR100 = DataSpec("cifar100", (3, 32, 32), 100, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))

ZOO = ["femnist-cnn", "cifar100-cnn", "lenet", "convnet", "resnet18", "resnet20-4", "resnet20", "mlp"]


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_zoo_is_registered():
    for name in ZOO:
        assert name in MODELS and MODELS[name].strip()


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("spec", [FEMNIST, CIFAR10], ids=["1x28x28", "3x32x32"])
def test_build_and_forward(name, spec):
    model = build(name, spec)
    assert model.training
    assert all(p.dtype == torch.float32 and p.device.type == "cpu" for p in model.parameters())
    out = model(torch.randn(2, *spec.shape))
    assert out.shape == (2, spec.num_classes)
    assert torch.isfinite(out).all()
    # logits, not log-probabilities: rows need not sum to one after exp
    assert not torch.allclose(out.exp().sum(1), torch.ones(2), atol=1e-3)
    head = last_linear(model)
    assert head == layers(model)[-1]  # the classifier is the last layer
    assert dict(model.named_modules())[head.module].out_features == spec.num_classes


@pytest.mark.parametrize("name", ZOO)
def test_layers_in_forward_order(name):
    """params.layers sees conv/bn/fc only, in the order the forward pass runs them."""
    model = build(name, CIFAR10)
    listed = layers(model)
    assert {layer.kind for layer in listed} <= {"conv", "bn", "fc"}
    assert listed[-1].kind == "fc"
    executed: list[str] = []
    names = {module: path for path, module in model.named_modules()}
    parameterized = {layer.module for layer in listed}
    hooks = [
        module.register_forward_hook(lambda m, i, o: executed.append(names[m]))
        for path, module in model.named_modules() if path in parameterized
    ]
    try:
        model(torch.randn(2, *CIFAR10.shape))
    finally:
        for hook in hooks:
            hook.remove()
    assert executed == [layer.module for layer in listed]
    # every parameter belongs to exactly one listed layer, in named_parameters order
    flat = [name for layer in listed for name in layer.param_names]
    assert flat == [name for name, _ in model.named_parameters()]


def test_dimitrov_parameter_counts_and_names():
    femnist = build("femnist-cnn", FEMNIST)
    cifar = build("cifar100-cnn", CIFAR100)
    assert count(femnist) == 338_778  # Dimitrov et al. App. A.2 (1,355,742-byte pickles / 4)
    assert count(cifar) == 1_734_348
    expected = ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in femnist.named_parameters()] == expected
    assert [n for n, _ in cifar.named_parameters()] == expected
    assert femnist.fc1.in_features == 7 * 7 * 64 and cifar.fc1.in_features == 8 * 8 * 128
    assert [layer.kind for layer in layers(femnist)] == ["conv", "conv", "fc", "fc"]
    assert femnist.features(torch.randn(3, 1, 28, 28)).shape == (3, 100)


@pytest.mark.parametrize("name,spec", [("femnist-cnn", FEMNIST), ("cifar100-cnn", CIFAR100)])
def test_lecun_normal_init(name, spec):
    model = build(name, spec, seed=3)
    for module in (model.conv1, model.conv2, model.fc1, model.fc2):
        weight = module.weight.detach()
        fan_in = weight[0].numel()
        std = math.sqrt(1.0 / fan_in)
        bound = 2.0 * std / TRUNC_NORMAL_STD
        assert weight.abs().max() <= bound * (1 + 1e-6)
        if weight.numel() >= 1000:
            assert abs(weight.std().item() - std) < 0.1 * std
            assert abs(weight.mean().item()) < 0.1 * std
        assert torch.count_nonzero(module.bias) == 0
    torch_init = build(name, spec, init="torch")
    assert torch.count_nonzero(torch_init.conv1.bias) > 0


def test_flatten_order_hwc_matches_permuted_weights():
    chw = build("femnist-cnn", FEMNIST, seed=1)
    hwc = build("femnist-cnn", FEMNIST, seed=1, flatten_order="hwc")
    # the Flax (NHWC) flatten order is the PyTorch one with fc1's input columns permuted
    with torch.no_grad():
        w = chw.fc1.weight.view(100, 64, 7, 7).permute(0, 2, 3, 1).reshape(100, -1)
        hwc.fc1.weight.copy_(w)
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(chw(x), hwc(x))


def test_lenet_dlg():
    model = build("lenet", CIFAR10)
    assert model.fc.in_features == 768  # DLG's LeNet on 32x32
    assert build("lenet", FEMNIST).fc.in_features == 12 * 7 * 7
    for param in model.parameters():
        assert param.min() >= -0.5 and param.max() <= 0.5
        if param.numel() >= 100:
            assert abs(param.std().item() - 1 / math.sqrt(12)) < 0.03
    assert [m.stride for m in (model.conv1, model.conv2, model.conv3)] == [(2, 2), (2, 2), (1, 1)]
    assert any(isinstance(m, nn.Sigmoid) for m in model.modules())


def test_convnet_matches_inverting_gradients():
    model = build("convnet", CIFAR10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [64 * f for f in (1, 2, 2, 4, 4, 4, 4, 4)]
    assert model.linear.in_features == 36 * 64
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2
    narrow = build("convnet", CIFAR10, width=8)
    assert narrow.linear.in_features == 36 * 8


def _kinds(model):
    kinds = [layer.kind for layer in layers(model)]
    return kinds.count("conv"), kinds.count("bn"), kinds.count("fc")


def test_resnet_structure():
    r18 = build("resnet18", CIFAR10)
    # 17 convs/BNs on the main path (AWA's count) + 3 shortcut convs/BNs, 1 FC
    assert _kinds(r18) == (20, 20, 1)
    shortcuts = [n for n, _ in r18.named_modules() if n.endswith("downsample.0")]
    assert shortcuts == ["layer2.0.downsample.0", "layer3.0.downsample.0", "layer4.0.downsample.0"]
    assert r18.conv1.kernel_size == (3, 3) and r18.conv1.bias is None
    assert r18.fc.in_features == 512
    assert 11_000_000 < count(r18) < 11_300_000
    assert build("resnet18", CIFAR10, width=0.5).fc.in_features == 256

    r20 = build("resnet20-4", CIFAR10)
    assert _kinds(r20) == (21, 21, 1)  # stem + 18 block convs + 2 shortcuts
    assert r20.conv1.out_channels == 64 and r20.fc.in_features == 256
    assert [r20.layer1[0].conv1.stride, r20.layer2[0].conv1.stride, r20.layer3[0].conv1.stride] == [(1, 1), (2, 2), (2, 2)]
    assert r20.layer1[0].downsample is None
    same = build("resnet20", CIFAR10, width=4)
    assert [n for n, _ in same.named_parameters()] == [n for n, _ in r20.named_parameters()]

    kaiming = build("resnet20-4", CIFAR10, init="kaiming")
    conv = kaiming.layer2[0].conv2.weight
    expected = math.sqrt(2.0 / (conv.shape[0] * 9))  # fan_out, ReLU gain
    assert abs(conv.std().item() - expected) < 0.05 * expected


def test_mlp_options():
    assert [n for n, _ in build("mlp", FEMNIST, hidden=[32, 16]).named_parameters()][-2:] == ["fc3.weight", "fc3.bias"]
    linear = build("mlp", FEMNIST, hidden=())
    assert count(linear) == 28 * 28 * 62 + 62
    assert build("mlp", FEMNIST, hidden=8).fc1.out_features == 8


@pytest.mark.parametrize("name", ZOO)
def test_deterministic_and_rng_untouched(name):
    small = DataSpec("small", (1, 12, 12), 5, (0.0,), (1.0,))  # keeps the big nets cheap
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    a = build(name, small, seed=7)
    assert torch.equal(torch.get_rng_state(), before)
    b = build(name, small, seed=7)
    c = build(name, small, seed=8)
    pa, pb, pc = (dict(m.named_parameters()) for m in (a, b, c))
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert any(not torch.equal(pa[k], pc[k]) for k in pa)


def test_float32_even_with_float64_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model = build("femnist-cnn", FEMNIST)
    finally:
        torch.set_default_dtype(previous)
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_unknown_name_and_options():
    with pytest.raises(FedleakError, match="unknown model 'resnet19'.*allowed:.*resnet18"):
        build("resnet19", CIFAR10)
    with pytest.raises(FedleakError, match="unknown option.*'depth'.*allowed: .*width"):
        build("resnet18", CIFAR10, depth=34)
    with pytest.raises(FedleakError, match="unknown option"):
        build("lenet", CIFAR10, width=2)
    with pytest.raises(FedleakError, match="width"):
        build("convnet", CIFAR10, width=0)
    with pytest.raises(FedleakError, match="init"):
        build("femnist-cnn", FEMNIST, init="xavier")
    with pytest.raises(FedleakError, match="too small"):
        build("convnet", DataSpec("tiny", (1, 8, 8), 2, (0.0,), (1.0,)))
    with pytest.raises(FedleakError, match="DataSpec"):
        build("lenet", (3, 32, 32))
    with pytest.raises(FedleakError, match="seed"):
        build("lenet", CIFAR10, seed=1.5)
    assert model_options("resnet18") == {"width": 1, "init": "torch"}
    assert model_options("lenet") == {}


def test_register_decorator():
    name = "test-linear-probe"
    try:
        @register(name, "a test model")
        def probe(spec, *, bias: bool = True):
            return nn.Sequential(nn.Flatten(), nn.Linear(spec.input_numel, spec.num_classes, bias=bias))

        assert MODELS[name] == "a test model"
        model = build(name, FEMNIST, bias=False)
        assert model(torch.randn(2, 1, 28, 28)).shape == (2, 62)
        with pytest.raises(FedleakError, match="unknown option"):
            build(name, FEMNIST, hidden=3)
        with pytest.raises(FedleakError, match="already registered"):
            register(name, "again")(lambda spec: nn.Linear(1, 1))
    finally:
        MODELS.pop(name, None)
        registry._FACTORIES.pop(name, None)
