"""ε of DP-SGD in a federation, from Opacus's privacy accountants.

A client running DP-SGD (:class:`fedleak.fl.Defense` ``dp-sgd``: per-example clipping to C, Gaussian
noise of multiplier σ; Abadi et al. 2016, Alg. 1) takes ``local_steps`` noisy steps per round, each
on a batch whose examples are drawn with probability ``sample_rate`` q (Poisson subsampling, the
assumption of the accountants; our fixed batches of size m over N examples are accounted with
q = m/N, the usual approximation, and FedSGD's full batch with q = 1). Over ``rounds`` rounds this is
T = rounds × local_steps compositions of the subsampled Gaussian mechanism with (σ, q), per example
of that client (record-level DP).

ε(δ) is read from Opacus (``opacus.accountants``): the Rényi-DP accountant (Mironov 2017; Mironov,
Talwar and Zhang 2019, the analysis of Abadi et al.'s moments accountant) and the PRV accountant
(Gopi, Lee and Wutschitz 2021, numerical composition of privacy loss random variables, tighter).
Nothing is re-derived here: the accountants are given the history ``[(σ, q, T)]`` exactly as their
``step`` method builds it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

from ..errors import FedleakError

ACCOUNTANTS = ("rdp", "prv")


@dataclass(frozen=True)
class PrivacyParameters:
    """What the accountant needs besides the client's protocol: rounds, q and δ."""

    noise_multiplier: float
    sample_rate: float
    steps: int
    delta: float

    def __post_init__(self) -> None:
        check_privacy(self.noise_multiplier, self.sample_rate, self.delta)
        if int(self.steps) != self.steps or self.steps < 1:
            raise FedleakError(f"DP-SGD needs at least one noisy step, got {self.steps}")

    def to_json(self) -> dict:
        return asdict(self)


def check_privacy(noise_multiplier: float, sample_rate: float, delta: float) -> None:
    """Reject parameters outside the accountants' domain, one line each."""
    for name, value in (("noise multiplier σ", noise_multiplier), ("sample rate", sample_rate), ("delta", delta)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise FedleakError(f"DP-SGD {name} must be a finite number, got {value!r}")
    if noise_multiplier <= 0:
        raise FedleakError(f"DP-SGD noise multiplier σ must be positive, got {noise_multiplier}")
    if not 0 < sample_rate <= 1:
        raise FedleakError(f"DP-SGD sample rate must be in (0, 1], got {sample_rate}")
    if not 0 < delta < 1:
        raise FedleakError(f"DP-SGD delta must be in (0, 1), got {delta}")


def _accountant(name: str):
    from opacus.accountants import PRVAccountant, RDPAccountant

    if name == "rdp":
        return RDPAccountant()
    if name == "prv":
        return PRVAccountant()
    raise FedleakError(f"unknown accountant {name!r}; allowed: {', '.join(ACCOUNTANTS)}")


def epsilon(params: PrivacyParameters, accountant: str = "rdp") -> float:
    """ε(δ) after ``params.steps`` subsampled Gaussian steps, from Opacus's ``accountant`` (rdp or prv)."""
    acc = _accountant(accountant)
    # the history Opacus's own ``step`` builds after T identical calls: one (σ, q, T) entry
    acc.history = [(float(params.noise_multiplier), float(params.sample_rate), int(params.steps))]
    with warnings.catch_warnings():  # the PRV discretization logs log(0) at q = 1; the result is finite
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(acc.get_epsilon(delta=float(params.delta)))


def federation_epsilon(params: PrivacyParameters) -> dict:
    """ε from both accountants; an accountant that cannot evaluate these parameters gives ``None`` and a note."""
    out: dict = {"delta": params.delta, "noise_multiplier": params.noise_multiplier,
                 "sample_rate": params.sample_rate, "steps": params.steps}
    for name in ACCOUNTANTS:
        try:
            value = epsilon(params, name)
            out[f"epsilon_{name}"] = value if math.isfinite(value) else None
        except (ValueError, RuntimeError, OverflowError, ZeroDivisionError) as exc:
            out[f"epsilon_{name}"] = None
            out[f"epsilon_{name}_note"] = f"Opacus's {name} accountant failed: {str(exc).splitlines()[0]}"
    return out
