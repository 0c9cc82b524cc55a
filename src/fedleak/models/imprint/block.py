"""The imprint block and the model carrying it (Fowl et al. 2022, §3.3, §4.3, App. B).

:class:`ImprintBlock` is linear + nonlinearity (ReLU, or the :class:`Threshold` of the sparse
variant, §4.3) + a connection whose effect is the same for every row (App. B).
:class:`Imprinted` wraps a model with the block in front of it (§3.3) or in front of / after a
submodule (§4.3 "flexible placement", App. A.4), and holds the server's secrets.
"""

from __future__ import annotations

import copy
import math
from typing import Sequence

import torch
from torch import nn

from ...errors import FedleakError
from .options import CONNECTIONS, SIDES, THRESHOLDS, check_choice


class Threshold(nn.Module):
    """g(t) = min(max(t, 0), gain): the thresholding nonlinearity of the sparse variant (§4.3).

    ``hardtanh``: ``nn.Hardtanh(0, gain)``; ``two-relu``: ReLU(t) − ReLU(t − gain), the same
    function built from two ReLUs (the paper's "combination of two ReLUs").
    """

    def __init__(self, gain: float = 1.0, kind: str = "hardtanh") -> None:
        super().__init__()
        self.gain = float(gain)
        self.kind = check_choice("threshold", kind, THRESHOLDS)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        if self.kind == "hardtanh":
            return nn.functional.hardtanh(t, 0.0, self.gain)
        return nn.functional.relu(t) - nn.functional.relu(t - self.gain)

    def extra_repr(self) -> str:
        return f"gain={self.gain}, kind={self.kind}"


class ImprintBlock(nn.Module):
    """Linear (m → k) + nonlinearity + a connection back to the input shape (§3.3, App. B).

    ``connection="add"``: output = x + s·Σᵢ aᵢ (every entry of x gets the same scalar; "the sum of
    the outputs of the imprint module can be added to the next layer", §3.3), so the downstream
    network still sees the input. ``connection="linear"``: output = V·a + c reshaped to the input
    shape, with V's rows made of identical elements (App. B). In both, ∂L/∂aᵢ is the same for all
    rows i, which Eq. 4's differences of successive rows need.
    """

    def __init__(self, input_shape: Sequence[int], bins: int, nonlinearity: nn.Module,
                 connection: str = "add", connection_scale: float = 1.0) -> None:
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        numel = math.prod(self.input_shape)
        self.linear = nn.Linear(numel, bins)
        self.nonlinearity = nonlinearity
        self.connection = check_choice("connection", connection, CONNECTIONS)
        self.connection_scale = float(connection_scale)
        self.out = nn.Linear(bins, numel) if connection == "linear" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) != self.input_shape:
            raise FedleakError(f"imprint block expects inputs of shape (N, {', '.join(map(str, self.input_shape))}), "
                               f"got {tuple(x.shape)}")
        a = self.nonlinearity(self.linear(x.flatten(1)))
        if self.out is not None:
            return self.out(a).view_as(x)
        offset = self.connection_scale * a.sum(1)
        return x + offset.view(-1, *([1] * (x.dim() - 1)))


class _Before:
    """Forward pre-hook running the block on a submodule's input (deep-copies with the model)."""

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, module, args):
        return (self.block(args[0]), *args[1:])


class _After:
    """Forward hook running the block on a submodule's output."""

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, module, args, output):
        return self.block(output)


class Imprinted(nn.Module):
    """A model carrying an imprint block; parameters ``imprint.*`` then ``base.*``.

    With ``position=""`` the block runs on the model input (§3.3); otherwise in front of
    (``side="before"``) or after the submodule ``base.<position>`` (§4.3, App. A.4), wired by a
    forward hook so that the base model keeps its parameter names. :meth:`imprint_secrets` returns
    what the server knows about the block (see the module docstring).
    """

    def __init__(self, base: nn.Module, block: ImprintBlock, secrets: dict, position: str = "",
                 side: str = "before") -> None:
        super().__init__()
        self.imprint = block
        self.base = base
        self.position = position
        self.side = check_choice("side", side, SIDES)
        self._secrets = copy.deepcopy(secrets)
        if position:
            target = _submodule(base, position)
            if side == "before":
                target.register_forward_pre_hook(_Before(block))
            else:
                target.register_forward_hook(_After(block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x if self.position else self.imprint(x))

    def imprint_secrets(self) -> dict:
        """The server's secrets about the block (JSON-able; format ``fedleak.imprint/1``)."""
        return copy.deepcopy(self._secrets)


def _submodule(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise FedleakError(f"model {type(model).__name__} has no submodule {path!r}; submodules: {shown}") from None
