"""ε estimated from canary statistics by two fitted Gaussians (Andrew et al., ICLR 2024).

Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for Federated
Learning" (§3): fit a Gaussian to the statistics of the canaries that took part and one to those that
did not (or use the closed-form null), and report the ε at δ of the mechanism whose output *is* one of
those two Gaussians. It is an estimate, not a bound: it has no confidence level and assumes the
statistics are Gaussian (they are, for the Gaussian mechanism in high dimension).

Two fits are reported: equal variances (pooled; the pair is then exactly μ-GDP with μ = Δmean/sd, ε
from :func:`fedleak.privacy.gdp.epsilon_of`) and separate variances, whose privacy curve is computed
here exactly: the privacy-loss region {x : log p(x) − log q(x) > ε} of two normals is where a
quadratic is positive, so δ(ε) = P(region) − e^ε Q(region) in closed form with normal CDFs, taken in
both directions.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from .gdp import epsilon_of


def _region_mass(loc: float, scale: float, intervals) -> float:
    return float(sum(norm.cdf(b, loc, scale) - norm.cdf(a, loc, scale) for a, b in intervals))


def _loss_region(m1: float, s1: float, m0: float, s0: float, eps: float):
    """Intervals where log N(x; m1, s1²) − log N(x; m0, s0²) > eps."""
    a = 1 / (2 * s0 ** 2) - 1 / (2 * s1 ** 2)
    b = m1 / s1 ** 2 - m0 / s0 ** 2
    c = m0 ** 2 / (2 * s0 ** 2) - m1 ** 2 / (2 * s1 ** 2) + math.log(s0 / s1) - eps
    if abs(a) < 1e-15:  # equal variances: a half-line
        if b == 0:
            return [(-math.inf, math.inf)] if c > 0 else []
        root = -c / b
        return [(root, math.inf)] if b > 0 else [(-math.inf, root)]
    disc = b * b - 4 * a * c
    if disc <= 0:
        return [(-math.inf, math.inf)] if a > 0 else []
    r1, r2 = sorted(((-b - math.sqrt(disc)) / (2 * a), (-b + math.sqrt(disc)) / (2 * a)))
    return [(-math.inf, r1), (r2, math.inf)] if a > 0 else [(r1, r2)]


def delta_two_gaussians(m1: float, s1: float, m0: float, s0: float, eps: float) -> float:
    """δ(ε) of the mechanism whose neighbouring outputs are N(m1, s1²) and N(m0, s0²) (both directions)."""
    out = 0.0
    for (pa, sa, qa, qs) in ((m1, s1, m0, s0), (m0, s0, m1, s1)):
        region = _loss_region(pa, sa, qa, qs, eps)
        out = max(out, _region_mass(pa, sa, region) - math.exp(eps) * _region_mass(qa, qs, region))
    return max(out, 0.0)


def epsilon_two_gaussians(m1: float, s1: float, m0: float, s0: float, delta: float) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for the pair N(m1, s1²), N(m0, s0²)."""
    if delta_two_gaussians(m1, s1, m0, s0, 0.0) <= delta:
        return 0.0
    high = 1.0
    while delta_two_gaussians(m1, s1, m0, s0, high) > delta:
        high *= 2
        if high > 512:  # e^ε overflows a float beyond ε ≈ 709: the fitted pair is as good as not private
            return math.inf
    return float(brentq(lambda e: delta_two_gaussians(m1, s1, m0, s0, e) - delta, 0.0, high, xtol=1e-8))


def _separate(m1: float, s1: float, m0: float, s0: float, delta: float) -> float:
    """:func:`epsilon_two_gaussians`, with a degenerate fit (an sd at float resolution of the spread, e.g. canaries
    that saw no noise) read as what it is: a point mass beside anything else is not private (∞); two equal point
    masses are (0)."""
    floor = 1e-12 * max(1.0, abs(m1), abs(m0))
    if min(s1, s0) <= floor:
        return 0.0 if max(s1, s0) <= floor and abs(m1 - m0) <= floor else math.inf
    return epsilon_two_gaussians(m1, s1, m0, s0, delta)


def estimate(scores, included, delta: float, null_sd=None) -> dict:
    """Andrew et al.'s estimate from the canaries that took part (``included``) and those that did not, with its
    99 % interval (``mu_interval``, ``epsilon_interval``): the estimate is a point, and with few canaries the
    interval says how far it may lie from the truth.

    ``null_sd`` (optional): the closed-form standard deviation of a non-included canary's statistic,
    reported beside the fitted one as a check of the null.
    """
    scores = np.asarray(scores, dtype=float)
    included = np.asarray(included, dtype=bool)
    seen, unseen = scores[included], scores[~included]
    m1, m0 = float(seen.mean()), float(unseen.mean())
    s1, s0 = float(seen.std(ddof=1)), float(unseen.std(ddof=1))
    pooled = math.sqrt(((seen.size - 1) * s1 ** 2 + (unseen.size - 1) * s0 ** 2) / (scores.size - 2))
    mu = (m1 - m0) / pooled if pooled > 0 else math.inf
    # 99 % interval of μ: the standardized difference's large-sample standard error (Hedges & Olkin 1985, §5.B:
    # var = (n₁ + n₀)/(n₁n₀) + μ²/(2(n₁ + n₀))), mapped through the monotone μ ↦ ε(μ-GDP, δ). 99 %, as the
    # verdict's tests are at α = 0.01: with this (wider) error the interval clears the claim only where the z-test
    # of the same difference rejects too (unless the canaries' spread is not the null's: the noise-scale test's case)
    n1, n0 = seen.size, unseen.size
    half = (2.575829 * math.sqrt((n1 + n0) / (n1 * n0) + mu ** 2 / (2 * (n1 + n0)))
            if math.isfinite(mu) else 0.0)
    low, high = mu - half, mu + half
    out = {"seen": {"count": int(seen.size), "mean": m1, "sd": s1},
           "unseen": {"count": int(unseen.size), "mean": m0, "sd": s0},
           "mu": mu, "epsilon": epsilon_of(max(mu, 0.0), delta), "mu_interval": [low, high],
           "epsilon_interval": [epsilon_of(max(low, 0.0), delta), epsilon_of(max(high, 0.0), delta)],
           "epsilon_separate_variances": _separate(m1, s1, m0, s0, delta)}
    if null_sd is not None:
        out["null_sd_closed_form"] = float(null_sd)
    return out
