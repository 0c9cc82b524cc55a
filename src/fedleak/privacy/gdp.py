"""Gaussian differential privacy: the closed forms the audit compares against.

Dong, Roth and Su, "Gaussian Differential Privacy" (JRSS-B 2022; arXiv:1905.02383):

* a mechanism is μ-GDP when distinguishing neighbours is no easier than telling N(0, 1) from N(μ, 1);
  the Gaussian mechanism with sensitivity C and noise standard deviation σC is 1/σ-GDP (Thm. 2.7);
* μ-GDP ⇔ (ε, δ(ε))-DP for every ε ≥ 0 with δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Cor. 2.13);
* T adaptive compositions of μᵢ-GDP mechanisms are √(Σμᵢ²)-GDP, exactly (Cor. 3.3): T rounds of
  DP-FedAvg with every client in every round (no subsampling) are √T/σ-GDP per client.

Here ε(δ) of μ-GDP is the *exact* privacy curve of that Gaussian release, the number the PRV/PLD
accountants approximate numerically.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import norm


def delta_of(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP (Dong, Roth, Su, Cor. 2.13), computed in the log domain for large ε."""
    if mu <= 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    first = norm.logcdf(-epsilon / mu + mu / 2)
    second = epsilon + norm.logcdf(-epsilon / mu - mu / 2)
    if second >= first:
        return 0.0
    return float(math.exp(first) * -math.expm1(second - first))


def epsilon_of(mu: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for μ-GDP (0 when even ε = 0 meets δ; inf for μ = inf)."""
    if mu <= 0 or delta_of(0.0, mu) <= delta:
        return 0.0
    if math.isinf(mu):
        return math.inf
    high = max(1.0, mu * mu)
    while delta_of(high, mu) > delta:
        high *= 2
    return float(brentq(lambda e: delta_of(e, mu) - delta, 0.0, high, xtol=1e-10))


def mu_of(epsilon: float, delta: float) -> float:
    """The μ whose privacy curve passes through (ε, δ): the μ-GDP a claimed (ε, δ) corresponds to."""
    if epsilon <= 0:
        return 0.0
    high = 1.0
    while delta_of(epsilon, high) < delta:
        high *= 2
    return float(brentq(lambda m: delta_of(epsilon, m) - delta, 1e-12, high, xtol=1e-12))


def composed_mu(noise_multiplier: float, rounds: int) -> float:
    """μ of ``rounds`` Gaussian releases with noise σC at sensitivity C: √T/σ (Dong, Roth, Su, Cor. 3.3)."""
    if noise_multiplier <= 0:
        return math.inf
    return math.sqrt(rounds) / noise_multiplier
