"""The model zoo: the networks the reproduced papers attack.

Every model takes its input shape and class count from the :class:`~fedleak.types.DataSpec`,
returns **logits** (cross-entropy on logits equals the papers' NLL on log-softmax), and
registers its submodules in forward order, so :func:`fedleak.types.params.layers` lists layers from
first to last. Build them through :func:`fedleak.models.build`, which seeds and restores the RNG.
This module registers the names below and checks their options; the ResNet architecture itself is
:mod:`fedleak.models.resnet` (:class:`BasicBlock` and :class:`ResNet` stay importable from here).

=================  ===============================================================================
name               source
=================  ===============================================================================
``femnist-cnn``    Dimitrov et al., "Data Leakage in Federated Averaging" (TMLR 2022), App. A.2:
                   Flax ``CNN`` (ETH ``fedavg/models/base_flax.py``), LeCun-normal init.
``cifar100-cnn``   Same paper, Flax ``CNN_3``.
``lenet``          Zhu et al., "Deep Leakage from Gradients" (NeurIPS 2019), ``models/vision.py``
                   ``LeNet``: sigmoid activations, uniform(−0.5, 0.5) init.
``convnet``        Geiping et al., "Inverting Gradients" (NeurIPS 2020), ``inversefed/nn/models.py``
                   ``ConvNet`` (the ``ConvNetBN`` of their experiments).
``resnet18``       CIFAR-style ResNet-18 (He et al. 2016 with a 3×3 stem, as in inversefed and
                   breaching); the model of AWA (Song et al. 2023, §5.1).
``resnet20-4``     ResNet-20 with base width 16·4 = 64 (inversefed / breaching ``ResNet20-4``); the
                   model of AGIC (Xu et al., §V-A).
``resnet20``       The same family with a ``width`` option (base width 16·width).
``mlp``            A small fully connected baseline.
=================  ===============================================================================
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import FedleakError
from ..types import DataSpec
from .registry import register
from .resnet import BasicBlock, ResNet

__all__ = ["TRUNC_NORMAL_STD", "lecun_normal_", "DimitrovCNN", "femnist_cnn", "cifar100_cnn", "LeNetZhu", "lenet",
           "ConvNet", "convnet", "BasicBlock", "ResNet", "resnet18", "resnet20_4", "resnet20", "MLP", "mlp"]

# JAX's truncated normal on [-2, 2] has standard deviation 0.87962566103423978 · σ; its
# ``variance_scaling(..., "truncated_normal")`` divides by this constant so the result has
# exactly the requested variance (jax/_src/nn/initializers.py).
TRUNC_NORMAL_STD = 0.87962566103423978


# ----------------------------------------------------------------------------------------------
# initializers and option checks


def lecun_normal_(tensor: torch.Tensor, fan_in: int) -> torch.Tensor:
    """JAX/Flax ``lecun_normal()``: variance-scaling(1.0, "fan_in", "truncated_normal").

    Samples a standard normal truncated to [−2, 2], scaled by ``sqrt(1/fan_in) / 0.8796…`` so the
    variance is exactly ``1/fan_in``; every value lies within ``2·sqrt(1/fan_in)/0.8796…``.
    """
    std = math.sqrt(1.0 / fan_in) / TRUNC_NORMAL_STD
    # Inverse-CDF sampling, as JAX's truncated_normal: u ~ U(Φ(−2), Φ(2)), x = Φ⁻¹(u). (Recent
    # torch.nn.init.trunc_normal_ uses rejection sampling: slower and version dependent.)
    lower = math.erf(-2.0 / math.sqrt(2.0))  # 2·Φ(−2) − 1
    with torch.no_grad():
        tensor.uniform_(lower, -lower)
        tensor.erfinv_().mul_(std * math.sqrt(2.0))
        return tensor.clamp_(-2.0 * std, 2.0 * std)


def _fan_in(module: nn.Module) -> int:
    weight = module.weight
    return int(weight.shape[1] * math.prod(weight.shape[2:]))


def _positive_int(kind: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FedleakError(f"{kind} option {name!r} must be a positive integer, got {value!r}")
    return value


def _choice(kind: str, name: str, value, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise FedleakError(f"{kind} option {name!r} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _check_spatial(kind: str, spec: DataSpec, height: int, width: int) -> None:
    if height < 1 or width < 1:
        raise FedleakError(
            f"{kind}: input shape {tuple(spec.shape)} is too small, the feature map shrinks to "
            f"{height}×{width} before the classifier"
        )


# ----------------------------------------------------------------------------------------------
# Dimitrov et al. (App. A.2): the FEMNIST and CIFAR100 nets


class DimitrovCNN(nn.Module):
    """The CNNs of Dimitrov et al., "Data Leakage in Federated Averaging", App. A.2.

    ``conv1`` 3×3 SAME (bias) → ReLU → AvgPool 2×2/2 → ``conv2`` 3×3 SAME → ReLU → AvgPool 2×2/2
    → flatten → ``fc1`` (``hidden``) → ReLU → ``fc2`` (classes). The authors' Flax model ends in
    log-softmax; this one returns the logits (same cross-entropy). Init as Flax's defaults:
    LeCun-normal kernels (truncated normal, see :func:`lecun_normal_`) and zero biases
    (``init="lecun"``), or PyTorch's default (``init="torch"``).

    ``flatten_order``: Flax flattens NHWC feature maps, PyTorch NCHW. ``"chw"`` (default) is the
    PyTorch order; ``"hwc"`` flattens like Flax, so the authors' ``Dense_0`` kernel loads as
    ``fc1.weight = kernel.T`` without permuting rows (conv kernels: HWIO → OIHW). For random init
    the two orders give the same distribution of models.

    :meth:`features` returns the penultimate features (the ReLU after ``fc1``) used for label
    restoration.
    """

    def __init__(self, spec: DataSpec, channels: tuple[int, int], hidden: int,
                 init: str = "lecun", flatten_order: str = "chw") -> None:
        super().__init__()
        in_channels, height, width = spec.shape
        out_h, out_w = height // 2 // 2, width // 2 // 2
        _check_spatial(type(self).__name__, spec, out_h, out_w)
        self.flatten_order = flatten_order
        self.conv1 = nn.Conv2d(in_channels, channels[0], kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], kernel_size=3, padding=1)
        self.fc1 = nn.Linear(channels[1] * out_h * out_w, hidden)
        self.fc2 = nn.Linear(hidden, spec.num_classes)
        if init == "lecun":
            for module in (self.conv1, self.conv2, self.fc1, self.fc2):
                lecun_normal_(module.weight, _fan_in(module))
                nn.init.zeros_(module.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = F.avg_pool2d(F.relu(self.conv1(x)), kernel_size=2, stride=2)
        x = F.avg_pool2d(F.relu(self.conv2(x)), kernel_size=2, stride=2)
        if self.flatten_order == "hwc":
            x = x.permute(0, 2, 3, 1)
        return F.relu(self.fc1(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.features(x))


def _dimitrov(kind: str, spec: DataSpec, channels, hidden, init, flatten_order) -> DimitrovCNN:
    _choice(kind, "init", init, ("lecun", "torch"))
    _choice(kind, "flatten_order", flatten_order, ("chw", "hwc"))
    return DimitrovCNN(spec, channels, hidden, init=init, flatten_order=flatten_order)


@register("femnist-cnn", "Dimitrov et al. FEMNIST CNN: conv32-avgpool-conv64-avgpool-fc100-fc (LeCun-normal init)")
def femnist_cnn(spec: DataSpec, *, init: str = "lecun", flatten_order: str = "chw") -> DimitrovCNN:
    """Dimitrov et al. App. A.2, FEMNIST net (Flax ``CNN``): 338,778 parameters for 1×28×28, 62 classes."""
    return _dimitrov("femnist-cnn", spec, (32, 64), 100, init, flatten_order)


@register("cifar100-cnn", "Dimitrov et al. CIFAR100 CNN: conv64-avgpool-conv128-avgpool-fc200-fc (LeCun-normal init)")
def cifar100_cnn(spec: DataSpec, *, init: str = "lecun", flatten_order: str = "chw") -> DimitrovCNN:
    """Dimitrov et al. App. A.2, CIFAR100 net (Flax ``CNN_3``): 1,734,348 parameters for 3×32×32, 100 classes."""
    return _dimitrov("cifar100-cnn", spec, (64, 128), 200, init, flatten_order)


# ----------------------------------------------------------------------------------------------
# DLG's LeNet (Zhu et al. 2019)


class LeNetZhu(nn.Module):
    """The LeNet of Zhu et al., "Deep Leakage from Gradients" (``mit-han-lab/dlg`` ``models/vision.py``).

    Three 5×5 convolutions with 12 channels (padding 2, strides 2, 2, 1), each followed by a
    Sigmoid (twice differentiable, as DLG needs), then one linear layer to the classes
    (768 inputs for 32×32 images, 588 for 28×28). Every weight and bias is drawn from
    uniform(−0.5, 0.5), as DLG's ``weights_init``.
    """

    def __init__(self, spec: DataSpec) -> None:
        super().__init__()
        in_channels, height, width = spec.shape
        self.conv1 = nn.Conv2d(in_channels, 12, kernel_size=5, padding=2, stride=2)
        self.act1 = nn.Sigmoid()
        self.conv2 = nn.Conv2d(12, 12, kernel_size=5, padding=2, stride=2)
        self.act2 = nn.Sigmoid()
        self.conv3 = nn.Conv2d(12, 12, kernel_size=5, padding=2, stride=1)
        self.act3 = nn.Sigmoid()
        # k=5, p=2, s=2 maps n -> ceil(n/2); the stride-1 conv keeps the size.
        out_h, out_w = math.ceil(math.ceil(height / 2) / 2), math.ceil(math.ceil(width / 2) / 2)
        self.fc = nn.Linear(12 * out_h * out_w, spec.num_classes)
        with torch.no_grad():
            for param in self.parameters():
                param.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.conv1(x))
        x = self.act2(self.conv2(x))
        x = self.act3(self.conv3(x))
        return self.fc(x.flatten(1))


@register("lenet", "DLG LeNet (Zhu et al. 2019): 3 sigmoid conv5x5 layers of 12 channels + linear, uniform(-0.5,0.5) init")
def lenet(spec: DataSpec) -> LeNetZhu:
    """Zhu et al. 2019 (DLG) LeNet, see :class:`LeNetZhu`."""
    return LeNetZhu(spec)


# ----------------------------------------------------------------------------------------------
# Inverting Gradients' ConvNet (Geiping et al. 2020)


class ConvNet(nn.Sequential):
    """The ConvNet of Geiping et al., "Inverting Gradients" (``inversefed/nn/models.py`` ``ConvNet``).

    Eight conv3×3 (padding 1, bias) → BatchNorm → ReLU blocks with widths
    ``width × (1, 2, 2, 4, 4, 4, 4, 4)``; a 3×3 max-pool (stride 3) after the sixth and after the
    eighth block; flatten; one linear layer. For 32×32 inputs the feature map is 3×3, so the
    linear layer has ``36·width`` inputs as in inversefed; for other shapes it is computed from
    the spec. Module names follow inversefed (``conv0``, ``bn0``, …, ``linear``). PyTorch's
    default initialization, as inversefed (no custom init).
    """

    WIDTHS = (1, 2, 2, 4, 4, 4, 4, 4)
    POOL_AFTER = (5, 7)

    def __init__(self, spec: DataSpec, width: int = 64) -> None:
        in_channels, height, w = spec.shape
        blocks: "OrderedDict[str, nn.Module]" = OrderedDict()
        channels = in_channels
        for i, factor in enumerate(self.WIDTHS):
            blocks[f"conv{i}"] = nn.Conv2d(channels, factor * width, kernel_size=3, padding=1)
            blocks[f"bn{i}"] = nn.BatchNorm2d(factor * width)
            blocks[f"relu{i}"] = nn.ReLU()
            channels = factor * width
            if i in self.POOL_AFTER:
                pool = len([p for p in self.POOL_AFTER if p <= i]) - 1
                blocks[f"pool{pool}"] = nn.MaxPool2d(3)
                height, w = height // 3, w // 3
        _check_spatial("convnet", spec, height, w)
        blocks["flatten"] = nn.Flatten()
        blocks["linear"] = nn.Linear(channels * height * w, spec.num_classes)
        super().__init__(blocks)


@register("convnet", "Inverting Gradients ConvNet (Geiping et al. 2020): 8 conv-BN-ReLU blocks, width option (default 64)")
def convnet(spec: DataSpec, *, width: int = 64) -> ConvNet:
    """Geiping et al. 2020 ConvNet, see :class:`ConvNet`."""
    return ConvNet(spec, _positive_int("convnet", "width", width))


# ----------------------------------------------------------------------------------------------
# CIFAR-style ResNets (the architecture: :mod:`.resnet`)


def _width(kind: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise FedleakError(f"{kind} option 'width' must be a positive number, got {value!r}")
    return float(value)


@register("resnet18", "CIFAR-style ResNet-18: 3x3 stem, BasicBlocks [2,2,2,2], widths 64-512 x width option")
def resnet18(spec: DataSpec, *, width: float = 1, init: str = "torch") -> ResNet:
    """CIFAR-style ResNet-18 (AWA, Song et al. 2023, §5.1; inversefed ``ResNet18``).

    Stages of [2, 2, 2, 2] blocks, widths ``round(width·(64, 128, 256, 512))``, strides 1/2/2/2.
    It has 20 convolutions and 20 BatchNorms: the stem plus 16 in the blocks (17, the count AWA
    reports as "17 conv, 17 BN, 1 FC"), plus the 3 1×1 shortcut convs and their BNs, which
    AWA's count leaves out. See :class:`ResNet` for ``init``.
    """
    factor = _width("resnet18", width)
    _choice("resnet18", "init", init, ("torch", "kaiming"))
    widths = [max(1, round(factor * w)) for w in (64, 128, 256, 512)]
    return ResNet(spec, (2, 2, 2, 2), widths, (1, 2, 2, 2), init=init)


def _resnet20(kind: str, spec: DataSpec, width: int, init: str) -> ResNet:
    width = _positive_int(kind, "width", width)
    _choice(kind, "init", init, ("torch", "kaiming"))
    base = 16 * width
    return ResNet(spec, (3, 3, 3), (base, 2 * base, 4 * base), (1, 2, 2), init=init)


@register("resnet20-4", "ResNet20-4 (AGIC, inversefed): 3x3 stem 64, 3 stages x 3 BasicBlocks, widths 64/128/256")
def resnet20_4(spec: DataSpec, *, init: str = "torch") -> ResNet:
    """ResNet20-4 as in AGIC (Xu et al., §V-A) and inversefed / breaching (``ResNet20-4``).

    Stem 3×3 conv with 64 channels (no bias) + BN + ReLU; three stages of 3 basic blocks with
    widths 64/128/256 and strides 1/2/2 (1×1 conv + BN shortcut on shape change); global average
    pool; linear head. 19 3×3 convs + 2 shortcut convs. See :class:`ResNet` for ``init``.
    """
    return _resnet20("resnet20-4", spec, 4, init)


@register("resnet20", "CIFAR ResNet-20: 3 stages x 3 BasicBlocks, widths 16/32/64 x width option")
def resnet20(spec: DataSpec, *, width: int = 1, init: str = "torch") -> ResNet:
    """ResNet-20 (He et al. 2016, CIFAR) with base width ``16·width``; ``width=4`` is ``resnet20-4``."""
    return _resnet20("resnet20", spec, width, init)


# ----------------------------------------------------------------------------------------------
# MLP baseline


class MLP(nn.Module):
    """Fully connected baseline: flatten → (``fc_i`` → ReLU)* → linear head to the classes.

    ``hidden`` is the list of hidden widths (empty: multinomial logistic regression). Layers are
    named ``fc1 … fcK``, the head being the last. PyTorch's default initialization.
    """

    def __init__(self, spec: DataSpec, hidden: Sequence[int]) -> None:
        super().__init__()
        sizes = [spec.input_numel, *hidden, spec.num_classes]
        self.num_layers = len(sizes) - 1
        for i in range(self.num_layers):
            self.add_module(f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for i in range(1, self.num_layers + 1):
            x = getattr(self, f"fc{i}")(x)
            if i < self.num_layers:
                x = F.relu(x)
        return x


@register("mlp", "Fully connected baseline with ReLU; hidden option (default one layer of 256)")
def mlp(spec: DataSpec, *, hidden=(256,)) -> MLP:
    """Small MLP baseline, see :class:`MLP`. ``hidden``: an int or a list of ints."""
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = (hidden,)
    try:
        sizes = tuple(hidden)
    except TypeError:
        raise FedleakError(f"mlp option 'hidden' must be an int or a list of ints, got {hidden!r}") from None
    for size in sizes:
        _positive_int("mlp", "hidden", size)
    return MLP(spec, sizes)
