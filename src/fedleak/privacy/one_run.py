"""Privacy auditing with one training run: guesses on m canaries, each included with probability ½.

The game (Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run", NeurIPS 2023,
Alg. 1): every canary is included independently with probability ½; after the run the auditor scores
each canary, guesses "in" for the k₊ highest scores and "out" for the k₋ lowest and abstains on the
rest. r = k₊ + k₋ guesses, v of them correct. Two analyses turn (m, r, v) into a 95 % statement:

* **(ε, δ)-DP** (Steinke et al. §5, approximate DP): if the mechanism is (ε, δ)-DP in each canary,
  P[W ≥ v] ≤ β + 2mδ·α with β = P[Binomial(r, e^ε/(1+e^ε)) ≥ v] and
  α = maxᵢ (1/i)·P[v − i ≤ Binomial(r, ·) < v]; the lower bound is the largest ε whose p-value is
  below 1 − confidence. Assumption-free beyond DP itself.
* **f-DP, Gaussian family** (Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One
  Run", ICML 2025, arXiv:2410.22235): if the mechanism is μ-GDP in each canary, the probability of
  v correct out of r guesses is bounded by a recursion over the number of correct guesses that uses
  the whole trade-off curve Φ(Φ⁻¹(1 − α) − μ) instead of one (ε, δ) point. It rejects "μ-GDP" for
  every μ below μ_L; reported as ε_L = ε(μ_L, δ) (the (ε, δ) of μ_L-GDP). This is the tighter test
  when the mechanism's privacy curve is Gaussian — as for DP-FedAvg's Gaussian noise without
  subsampling — and the one whose claim (μ = √T/σ) the misconfiguration test checks.

The number of guesses is fixed **before** looking at the scores (a fraction of m on each side),
so each bound is one test at the stated confidence, with no search over thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import binom

from ..errors import FedleakError
from .gdp import epsilon_of

#: guesses on each side as a fraction of the canaries (k₊ = k₋ = ⌈fraction·m⌉), fixed in advance
GUESS_FRACTION = 0.1


@dataclass(frozen=True)
class Guesses:
    """The auditor's guesses: m canaries, r guesses (k₊ "in", k₋ "out"), v correct."""

    m: int
    r: int
    v: int
    k_in: int
    k_out: int

    def to_json(self) -> dict:
        return {"canaries": self.m, "guesses": self.r, "correct": self.v, "guess_in": self.k_in,
                "guess_out": self.k_out}


def p_text(p: float, relation: str = "=") -> str:
    """``"= 3.2e-05"`` for a p-value in a sentence; a p that underflowed to 0 (a tail beyond the smallest double)
    reads ``"< 1e-300"``, never ``"≤ 0.0e+00"`` (issue 46)."""
    return "< 1e-300" if p <= 0 else f"{relation} {p:.1e}"


def guess(scores, included, fraction: float = GUESS_FRACTION, two_sided: bool = True) -> Guesses:
    """Guess "in" for the ⌈fraction·m⌉ highest scores and (``two_sided``) "out" for as many lowest;
    abstain on the rest."""
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included, dtype=bool)
    m = scores.size
    if m < 2 or included.size != m:
        raise FedleakError(f"one-run auditing needs at least 2 canaries with a score each, got {m}")
    if not np.all(np.isfinite(scores)):
        raise FedleakError("canary scores must be finite")
    k = max(1, min(m // 2, math.ceil(fraction * m)))
    order = np.argsort(-scores, kind="stable")
    if not two_sided:
        return Guesses(m, k, int(included[order[:k]].sum()), k, 0)
    v = int(included[order[:k]].sum() + (~included[order[m - k:]]).sum())
    return Guesses(m, 2 * k, v, k, k)


# -- (ε, δ)-DP: Steinke et al. ---------------------------------------------------------------------

def steinke_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[≥ v correct of r] if the mechanism is (ε, δ)-DP in each of m canaries (Steinke et al. §5)."""
    q = 1.0 / (1.0 + math.exp(-epsilon))
    beta = float(binom.sf(v - 1, r, q))
    if delta == 0 or v == 0:
        return min(beta, 1.0)
    i = np.arange(1, v + 1)
    below = np.cumsum(binom.pmf(v - i, r, q))  # P[v − i ≤ Binomial < v]
    alpha = float(np.max(below / i))
    return min(beta + alpha * delta * 2 * m, 1.0)


def steinke_lower_bound(g: Guesses, delta: float, confidence: float = 0.95) -> float:
    """The largest ε whose (ε, δ)-DP hypothesis the guesses reject at ``confidence`` (0 if none)."""
    p = 1.0 - confidence
    if steinke_p_value(g.m, g.r, g.v, 0.0, delta) >= p:
        return 0.0
    low, high = 0.0, 1.0
    while steinke_p_value(g.m, g.r, g.v, high, delta) < p:
        low, high = high, high * 2
        if high > 1e3:
            return math.inf
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if steinke_p_value(g.m, g.r, g.v, mid, delta) < p else (low, mid)
    return low


# -- μ-GDP: Mahloujifar et al. ----------------------------------------------------------------------

def gdp_rejects(mu: float, g: Guesses, significance: float) -> bool:
    """Whether v correct of r guesses reject "μ-GDP in each canary" at level ``significance``.

    Mahloujifar et al.'s recursion for one run: starting from the mass τ·v/m of correct and τ·(r−v)/m
    of wrong guesses that a level-τ event must carry, walk down the correct-guess count i = v−1 … 0,
    raising the wrong-guess mass to what the trade-off curve f(x) = Φ(Φ⁻¹(x) − μ) forces and the
    correct-guess mass by the share i/(r − i) of that increase; the hypothesis is rejected when the two
    masses exceed the r/m that all guesses together can hold.
    """
    if math.isinf(mu):
        return False
    return tradeoff_rejects(lambda right: float(ndtr(ndtri(right) - mu)) if right < 1 else 1.0, g, significance)


def tradeoff_rejects(forced, g: Guesses, significance: float) -> bool:
    """Mahloujifar et al.'s recursion (:func:`gdp_rejects`) for any trade-off curve f: ``forced(right)`` is the
    wrong-guess mass f(1 − right) that a correct-guess mass ``right`` forces (Φ(Φ⁻¹(right) − μ) for μ-GDP)."""
    right = significance * g.v / g.m
    wrong = significance * (g.r - g.v) / g.m
    for i in range(g.v - 1, -1, -1):
        forced_wrong = forced(right)
        new_wrong = max(wrong, forced_wrong)
        if new_wrong == wrong:
            break  # nothing can change any more
        right = min(right + i / (g.r - i) * (new_wrong - wrong), 1.0)
        wrong = new_wrong
    return right + wrong > g.r / g.m


def gdp_p_value(mu: float, g: Guesses) -> float:
    """The smallest level at which the guesses reject μ-GDP (1 when they never do)."""
    if not gdp_rejects(mu, g, 1.0 - 1e-12):
        return 1.0
    low, high = -300.0, 0.0  # log10 of the level: rejected at 10**high, not at 10**low
    if gdp_rejects(mu, g, 10.0 ** low):
        return 10.0 ** low
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (low, mid) if gdp_rejects(mu, g, 10.0 ** mid) else (mid, high)
    return float(10.0 ** high)


def gdp_lower_bound(g: Guesses, confidence: float = 0.95) -> float:
    """μ_L: the largest μ whose μ-GDP hypothesis the guesses reject at ``confidence`` (0 if none)."""
    level = 1.0 - confidence
    if not gdp_rejects(1e-9, g, level):
        return 0.0
    low, high = 0.0, 0.5
    while gdp_rejects(high, g, level):
        low, high = high, high * 2
        if high > 1e4:
            return math.inf
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if gdp_rejects(mid, g, level) else (low, mid)
    return low


def lower_bounds(scores, included, delta: float, confidence: float = 0.95,
                 fraction: float = GUESS_FRACTION) -> dict:
    """Both analyses on the same pre-registered guesses."""
    g = guess(scores, included, fraction)
    mu_low = gdp_lower_bound(g, confidence)
    return {**g.to_json(), "confidence": confidence, "guess_fraction": fraction,
            "mu_gdp": mu_low, "epsilon_gdp": epsilon_of(mu_low, delta),
            "epsilon_approx_dp": steinke_lower_bound(g, delta, confidence)}
