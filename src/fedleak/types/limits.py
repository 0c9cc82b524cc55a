"""Shared aliases, size limits and number checks of the value types (where values enter, before memory is spent)."""

from __future__ import annotations

import math
import numbers

import torch

from ..errors import FedleakError

Params = dict[str, torch.Tensor]

ALGORITHMS = ("fedsgd", "fedavg")

#: Bounds that stop absurd sizes where values enter (before any memory is spent): :mod:`fedleak.bounds`.
from ..bounds import MAX_CLASSES, MAX_EPOCHS, MAX_INPUT_NUMEL, MAX_SAMPLES, MAX_SIDE  # noqa: E402,F401


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(value: object, what: str) -> tuple:
    """A list/tuple of finite numbers as a tuple of floats, else an error naming ``what``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(_is_real(v) for v in value):
        raise FedleakError(f"{what} must be a list of finite numbers, got {value!r}")
    return tuple(float(v) for v in value)
