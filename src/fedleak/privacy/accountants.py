"""The accountants' ε for the audited federation: what the audit's numbers are put beside.

DP-FedAvg with every client in every round (no subsampling) and noise σC on the sum of updates clipped
to C is T compositions of the Gaussian mechanism with noise multiplier σ, per client:

* ``gdp_exact`` — μ = √T/σ-GDP, ε(δ) in closed form (Dong, Roth, Su 2022, Cor. 2.13 and 3.3): exact for
  this mechanism; the PLD/PRV accountants approximate it.
* ``opacus_rdp``, ``opacus_prv`` — Opacus's RDP and PRV accountants with sample rate 1 and T steps
  (:func:`fedleak.fl.accounting.epsilon`).
* ``flower_rdp`` — Flower's own ``RdpAccountant`` (``flwr.serverapp``, backend ``dp-accounting``) with
  ``SamplingMethod.NO_AMPLIFICATION``, as :func:`fedleak.fl.update_filters.central_epsilon` calls it;
  ``None`` with the reason when it is not installed.
"""

from __future__ import annotations

from ..fl.accounting import PrivacyParameters, epsilon
from ..fl.update_filters import central_epsilon
from .gdp import composed_mu, epsilon_of


def _opacus_epsilons(params: PrivacyParameters) -> dict:
    """Opacus's RDP and PRV ε of ``params``; an accountant that cannot answer (PRV at σ ≪ 1) gives None and a note."""
    out: dict = {}
    for name in ("rdp", "prv"):
        try:
            out[f"opacus_{name}"] = epsilon(params, name)
        except (ValueError, RuntimeError, OverflowError, ZeroDivisionError, MemoryError) as exc:  # PRV: σ ≪ 1
            out[f"opacus_{name}"] = None
            out[f"opacus_{name}_note"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return out


def accountant_epsilons(noise: float, rounds: int, delta: float) -> dict:
    """ε(δ) of T rounds of the Gaussian mechanism with multiplier σ, from every accountant we have."""
    out = {"gdp_exact": epsilon_of(composed_mu(noise, rounds), delta)}
    params = PrivacyParameters(float(noise), 1.0, int(rounds), float(delta))
    out.update(_opacus_epsilons(params))
    flower = central_epsilon(float(noise), int(rounds), float(delta))
    out["flower_rdp"] = flower.get("epsilon_flower")
    if flower.get("flower_note"):
        out["flower_rdp_note"] = flower["flower_note"]
    return out


def dpsgd_epsilons(noise: float, sample_rate: float, steps: int, delta: float) -> dict:
    """ε(δ) of T DP-SGD steps (σ, q): Opacus's RDP and PRV accountants (:func:`fedleak.fl.accounting.epsilon`,
    the numbers fedleak reports for a DP-SGD client) and, without subsampling (q = 1), the exact √T/σ-GDP curve."""
    out: dict = {}
    if sample_rate == 1:
        out["gdp_exact"] = epsilon_of(composed_mu(noise, steps), delta)
    else:
        out["gdp_exact"] = None
        out["gdp_exact_note"] = "Poisson-subsampled (q < 1): no closed form; the PRV accountant is the tight one"
    params = PrivacyParameters(float(noise), float(sample_rate), int(steps), float(delta))
    out.update(_opacus_epsilons(params))
    return out
