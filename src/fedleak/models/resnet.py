"""The CIFAR-style ResNet architecture (He et al. 2016 with a 3×3 stem, as in inversefed and breaching).

:class:`BasicBlock` and :class:`ResNet`; the registered configurations (``resnet18``, ``resnet20-4``,
``resnet20``) and their option checks are in :mod:`fedleak.models.zoo`.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from ..types import DataSpec

__all__ = ["BasicBlock", "ResNet"]


class BasicBlock(nn.Module):
    """ResNet basic block (He et al. 2016): conv3×3-BN-ReLU-conv3×3-BN plus shortcut, then ReLU.

    The shortcut is the identity, or ``downsample`` = 1×1 conv (stride, no bias) + BN when the
    shape changes (torchvision's naming, which breaching's code relies on). ``downsample`` is
    registered after the main path and also run after it, so registration order = forward order.
    """

    def __init__(self, in_planes: int, planes: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(out + shortcut)


class ResNet(nn.Module):
    """CIFAR-style ResNet with basic blocks (He et al. 2016; inversefed / breaching ``ResNet``).

    Stem: 3×3 conv (stride 1, padding 1, no bias) + BN + ReLU, no max-pool. Stages
    ``layer1…layerK`` of ``blocks[k]`` :class:`BasicBlock` with ``widths[k]`` channels, the first
    block of stage k with stride ``strides[k]``; global average pool; linear head ``fc``.

    ``init="torch"`` (default) keeps PyTorch's default initialization. ``init="kaiming"`` is the
    torchvision ResNet init that inversefed and breaching inherit (their ``ResNet`` subclasses
    torchvision's): conv weights Kaiming-normal (fan_out, ReLU), BN weight 1, bias 0.
    """

    def __init__(self, spec: DataSpec, blocks: Sequence[int], widths: Sequence[int],
                 strides: Sequence[int], init: str = "torch") -> None:
        super().__init__()
        in_channels = spec.shape[0]
        self.conv1 = nn.Conv2d(in_channels, widths[0], kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU()
        planes = widths[0]
        for stage, (count, width, stride) in enumerate(zip(blocks, widths, strides), start=1):
            stage_blocks = []
            for i in range(count):
                stage_blocks.append(BasicBlock(planes, width, stride if i == 0 else 1))
                planes = width
            self.add_module(f"layer{stage}", nn.Sequential(*stage_blocks))
        self.num_stages = len(blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(planes, spec.num_classes)
        if init == "kaiming":
            for module in self.modules():
                if isinstance(module, nn.Conv2d):
                    nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(module, nn.BatchNorm2d):
                    nn.init.ones_(module.weight)
                    nn.init.zeros_(module.bias)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled penultimate features (input of ``fc``)."""
        x = self.relu(self.bn1(self.conv1(x)))
        for stage in range(1, self.num_stages + 1):
            x = getattr(self, f"layer{stage}")(x)
        return self.avgpool(x).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))
