"""Command-line values: option parsing, the device and dtype names, argparse ``type`` functions with
bounds (absurd sizes stop before any memory is spent), and the parser whose errors are one line.

Used by :mod:`fedleak.cli` and by the audit's own flags (:mod:`fedleak.audit.plan.arguments`).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Optional, Sequence

from ..errors import FedleakError


def parse_options(pairs: Optional[Sequence[str]]) -> dict:
    """``--option KEY=VALUE`` pairs (repeatable) through the one reader, :func:`fedleak.config.specs.parse_pairs`."""
    from .specs import parse_pairs

    return parse_pairs(pairs, "--option")


def check_device(name: str) -> str:
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise FedleakError(f"unknown device {name!r}; use e.g. cpu, cuda, cuda:1, mps") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FedleakError(f"device {name!r} requested but CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise FedleakError(f"device {name!r} requested but MPS is not available on this machine")
    return str(device)


def show_progress(args) -> bool:
    """Progress bars on an interactive terminal unless --no-progress."""
    return not args.no_progress and sys.stderr.isatty()


def set_threads(args) -> None:
    import torch

    threads = args.threads if args.threads is not None else (1 if args.command == "audit" else None)
    if threads is not None:
        if threads < 1:
            raise FedleakError(f"--threads must be at least 1, got {threads}")
        torch.set_num_threads(threads)


def parse_dtype(name: str):
    import torch

    return {"float32": torch.float32, "float64": torch.float64}[name]


# -- argument types (bounds stop absurd sizes before any memory is spent) -------------------------

from ..bounds import MAX_CLIENTS, MAX_RATE, MAX_SAMPLES, MAX_SEED  # noqa: E402  (one set of bounds)

MAX_FLOAT = MAX_RATE  # the largest value of a positive float flag (--lr 1e308 would overflow the update)


def int_type(minimum: int, maximum: int):
    """An argparse ``type`` accepting integers in ``[minimum, maximum]`` with a one-line message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"expected an integer from {minimum} to {maximum}, got {text!r}")
        return value

    return parse


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_FLOAT):
        raise argparse.ArgumentTypeError(f"expected a positive finite number up to {MAX_FLOAT:g}, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number from 0 to :data:`MAX_CLIENTS` (GPUs per job may be a fraction; NaN and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_CLIENTS):
        raise argparse.ArgumentTypeError(f"expected a finite number from 0 to {MAX_CLIENTS}, got {text!r}")
    return value


def nonempty(text: str) -> str:
    if not text.strip() or "\x00" in text:
        raise argparse.ArgumentTypeError(f"expected a non-empty value, got {text!r}")
    return text


SEED = int_type(0, MAX_SEED)


class UsageError(FedleakError):
    """A command line argparse refused (unknown option, bad value); reported in one line."""


class Parser(argparse.ArgumentParser):
    """argparse's parser with errors raised as one-line :class:`UsageError`, not usage + exit."""

    def error(self, message):
        raise UsageError(f"{message} (see `{self.prog} --help`)")
