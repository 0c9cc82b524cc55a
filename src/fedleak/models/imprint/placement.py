"""Where the block goes in a model (Fowl et al. 2022, §4.3 "flexible placement", App. A.4, App. A.5).

:func:`linearize_resnet` turns the ResNet layers in front of a deep block into near-identity
maps (App. A.5); :func:`_input_shape_at` / :func:`_features_at` probe what the block sees at a
submodule; :func:`_tokens` records a block placed right after a token embedding (App. A.4).
"""

from __future__ import annotations

import copy
from typing import Optional

import torch
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec
from .block import _submodule


def linearize_resnet(model: nn.Module, position: str, shift: float = 10.0, channels: int = 3) -> int:
    """Make every layer of a fedleak ResNet in front of ``position`` a near-identity map, in place.

    App. A.5: BatchNorm parameters and buffers reset to the identity, residual paths zeroed, the
    first convolution and the shortcut convolutions set to identity (Dirac) maps on the first
    ``channels`` channels (all others zero); the nonlinearities are bypassed by bias shifting
    (Goldblum et al. 2020): the BatchNorms feeding a ReLU add ``shift`` to those channels, so the
    features stay positive. Downsampling stays (stride-2 shortcuts keep every second pixel), so
    the block sees the input subsampled by the returned stride, plus ``shift``. In train mode the
    BatchNorms still standardize each channel with the batch statistics (an affine map shared by
    the whole batch).
    """
    from ..resnet import ResNet

    if not isinstance(model, ResNet):
        raise FedleakError(f"linearizing the layers in front of a deep imprint block is implemented for the "
                           f"fedleak ResNet family (resnet18, resnet20, ...), not {type(model).__name__}")
    names = [n for n, _ in model.named_modules()]
    if position not in names or position in ("", "conv1", "bn1", "relu"):
        stages = [n for n in names if n.startswith("layer") and n.count(".") <= 1] + ["avgpool"]
        raise FedleakError(f"cannot place a linearized imprint block at {position!r}; use a stage or block of "
                           f"the ResNet: {', '.join(stages)}")
    if model.conv1.in_channels < channels or model.conv1.out_channels < channels:
        raise FedleakError(f"linearization keeps {channels} channels; the stem has "
                           f"{model.conv1.in_channels}->{model.conv1.out_channels}")
    from ..resnet import BasicBlock

    index = names.index(position)
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, BasicBlock)]
    for name, _ in blocks:
        if position.startswith(name + "."):
            raise FedleakError(f"position {position!r} is inside the residual block {name!r}; "
                               f"place the block in front of a whole block or stage")
    with torch.no_grad():
        _dirac(model.conv1, channels)
        _identity_bn(model.bn1, channels, shift)
        stride = 1
        for name, block in blocks:
            if names.index(name) >= index:
                break
            block.conv1.weight.zero_()
            block.conv2.weight.zero_()
            _identity_bn(block.bn1, 0, 0.0)
            _identity_bn(block.bn2, 0, 0.0)
            if block.downsample is not None:
                conv, bn = block.downsample[0], block.downsample[1]
                _dirac(conv, channels)
                _identity_bn(bn, channels, shift)
                stride *= conv.stride[0]
    return stride


def _dirac(conv: nn.Conv2d, channels: int) -> None:
    conv.weight.zero_()
    kh, kw = conv.kernel_size
    for c in range(channels):
        conv.weight[c, c, kh // 2, kw // 2] = 1.0
    if conv.bias is not None:
        conv.bias.zero_()


def _identity_bn(bn: nn.BatchNorm2d, channels: int, shift: float) -> None:
    bn.weight.fill_(1.0)
    bn.bias.zero_()
    bn.bias[:channels] = shift
    bn.running_mean.zero_()
    bn.running_var.fill_(1.0)


def _input_shape_at(model: nn.Module, spec: DataSpec, position: str, side: str, example: Optional[torch.Tensor]):
    """Shape (without batch) of the tensor the block sees at ``position``."""
    if not position:
        return tuple(spec.shape)
    captured = {}
    target = _submodule(model, position)

    def grab(module, args, output=None):
        captured["x"] = (output if side == "after" else args[0])

    handle = target.register_forward_hook(grab) if side == "after" else target.register_forward_pre_hook(grab)
    first = next(model.parameters())
    if example is None:
        example = torch.zeros(2, *spec.shape, dtype=first.dtype, device=first.device)
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(example[:2])
    finally:
        handle.remove()
        model.train(training)
    if "x" not in captured or not isinstance(captured["x"], torch.Tensor):
        raise FedleakError(f"submodule {position!r} was not called with a tensor in the forward pass")
    return tuple(captured["x"].shape[1:])


def _features_at(model: nn.Module, position: str, side: str, inputs: torch.Tensor) -> torch.Tensor:
    """What the block would see at ``position`` for ``inputs`` (train mode, as the client trains)."""
    if not position:
        return inputs
    probe = copy.deepcopy(model)  # train-mode BatchNorm would update the model's running statistics
    captured = {}

    def grab(module, args, output=None):
        captured["x"] = (output if side == "after" else args[0]).detach()

    target = probe.get_submodule(position)
    target.register_forward_hook(grab) if side == "after" else target.register_forward_pre_hook(grab)
    probe.train()
    with torch.no_grad():
        probe(inputs)
    return captured["x"]


def _tokens(base: nn.Module, position: str, side: str) -> Optional[dict]:
    """Text placement (App. A.4): a block right after a token embedding reads embeddings back."""
    if position and side == "after" and isinstance(base.get_submodule(position), nn.Embedding):
        return {"embedding": f"base.{position}.weight"}
    return None
