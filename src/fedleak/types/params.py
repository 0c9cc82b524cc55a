"""Parameters as dicts of tensors, and the one helper that understands a module tree.

Every attack addresses parameters by their ``named_parameters()`` names. Layer weights (AGIC
Eqs. 7–8, AWA Eq. 24, Dimitrov et al.'s e^−l weights) and "the last linear layer" (label
inference) are looked up through :func:`layers` / :func:`last_linear`, never by position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..errors import FedleakError
from .limits import Params
from .update import Update

CONV_TYPES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
NORM_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm, nn.LayerNorm)
LINEAR_TYPES = (nn.Linear,)


@dataclass(frozen=True)
class Layer:
    """One parameterized module: its path, kind (conv / bn / fc / other) and parameter names."""

    module: str
    kind: str
    param_names: tuple[str, ...]


def _kind(module: nn.Module) -> str:
    if isinstance(module, CONV_TYPES):
        return "conv"
    if isinstance(module, NORM_TYPES):
        return "bn"
    if isinstance(module, LINEAR_TYPES):
        return "fc"
    return "other"


def layers(model: nn.Module) -> list[Layer]:
    """Parameterized modules in network (registration) order, each with its direct parameters."""
    result = []
    for path, module in model.named_modules():
        own = [name for name, _ in module.named_parameters(recurse=False)]
        if own:
            prefix = f"{path}." if path else ""
            result.append(Layer(path, _kind(module), tuple(prefix + n for n in own)))
    return result


def last_linear(model: nn.Module) -> Layer:
    """The last fully connected layer (the classifier head of Geng et al. / iDLG label inference)."""
    linear = [layer for layer in layers(model) if layer.kind == "fc"]
    if not linear:
        raise FedleakError(f"model {type(model).__name__} has no linear layer to infer labels from")
    return linear[-1]


def weight_and_bias(layer: Layer) -> tuple[str, str | None]:
    weight = next((n for n in layer.param_names if n.endswith("weight")), None)
    bias = next((n for n in layer.param_names if n.endswith("bias")), None)
    if weight is None:
        raise FedleakError(f"layer {layer.module!r} has no weight parameter")
    return weight, bias


def params_of(model: nn.Module, detach: bool = True) -> Params:
    """The trainable (``requires_grad``) ``named_parameters()`` as a dict (detached clones by default).

    Frozen parameters (the base weights under LoRA adapters) are not part of an update; a
    functional call takes them from the module itself.
    """
    return {k: (v.detach().clone() if detach else v) for k, v in model.named_parameters() if v.requires_grad}


def buffers_of(model: nn.Module) -> Params:
    return {k: v.detach().clone() for k, v in model.named_buffers()}


def check_finite(tensors: Params, what: str) -> None:
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise FedleakError(f"{what} contains NaN or inf values in {name!r}")


def check_update(update: Update, model: nn.Module) -> None:
    """The update must belong to this model: same names, same shapes, finite values."""
    expected = {k: tuple(v.shape) for k, v in model.named_parameters() if v.requires_grad}
    got = {k: tuple(v.shape) for k, v in update.server_params.items()}
    if set(expected) != set(got):
        missing = sorted(set(expected) - set(got))[:5]
        extra = sorted(set(got) - set(expected))[:5]
        raise FedleakError(
            f"update does not match model {type(model).__name__}: missing parameters {missing}, "
            f"unexpected parameters {extra}"
        )
    for name, shape in expected.items():
        if got[name] != shape:
            raise FedleakError(
                f"update does not match model {type(model).__name__}: parameter {name!r} has shape "
                f"{got[name]} in the update but {shape} in the model"
            )
    check_finite(update.server_params, "update (server parameters)")
    check_finite(update.client_params or update.gradient, "update")


def flatten(tensors: Params, names=None) -> torch.Tensor:
    names = list(tensors) if names is None else names
    return torch.cat([tensors[n].reshape(-1) for n in names])
