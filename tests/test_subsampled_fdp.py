"""The f-DP one-run bound of the Poisson-subsampled Gaussian's own family (fedleak.privacy.subsampled_fdp): the
curve built from a privacy profile reproduces the μ-GDP recursion where the profile is Gaussian, and on simulated
runs of DP-SGD's canary view (q = ¼, 20 steps, σ from Opacus's PRV at ε = 4) the bound stays below the claim for
the claimed noise and proves the claim wrong for half of it. Fixed seeds; ~5 s of CPU."""

import math

import numpy as np
import pytest

from fedleak.privacy.gdp import delta_of
from fedleak.privacy.one_run import Guesses, gdp_rejects, guess, steinke_lower_bound, tradeoff_rejects

pytest.importorskip("opacus")

from fedleak.privacy.subsampled_fdp import (accountant_epsilon, family_lower_bound,  # noqa: E402
                                            profile, tradeoff)

SIGMA, Q, T, DELTA = 1.5625, 0.25, 20, 1e-5  # Opacus's PRV multiplier for ε = 4 at q = ¼, 20 steps


def test_curve_from_a_gaussian_profile_rejects_where_gdp_does():
    eps = np.arange(0.0, 8.0, 0.01)
    for mu in (0.3, 0.5, 0.56, 0.58, 0.8, 1.2):
        forced = tradeoff(eps, np.array([delta_of(e, mu) for e in eps]))
        for g in (Guesses(1000, 60, 55, 30, 30), Guesses(1000, 100, 82, 50, 50), Guesses(200, 40, 36, 20, 20)):
            assert tradeoff_rejects(forced, g, 0.05) == gdp_rejects(mu, g, 0.05), (g, mu)


def test_profile_is_the_accountants():
    eps, delta = profile(SIGMA, Q, T)
    assert np.all(np.diff(delta) <= 1e-12) and delta[0] < 1
    # δ(ε) at the claim's ε is the δ the accountant was asked for (within its error bounds)
    assert np.interp(accountant_epsilon(SIGMA, Q, T, DELTA), eps, delta) == pytest.approx(DELTA, rel=0.5)
    assert accountant_epsilon(SIGMA, Q, T, DELTA) == pytest.approx(3.97, abs=0.03)


def _run(factor: float, seed: int, m: int = 1000):
    """All-iterates LLR scores of m canaries (fair coins) when the noise is ``factor`` × the claimed σ."""
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    mu = 1 / SIGMA
    x = (rng.random((T, m)) < Q) * included * mu + factor * rng.standard_normal((T, m))
    return np.logaddexp(math.log1p(-Q), math.log(Q) + mu * x - mu * mu / 2).sum(0), included


def test_family_bound_below_the_claim_when_correct_and_above_it_when_noise_halved():
    scores, included = _run(1.0, seed=4)
    g = guess(scores, included, 0.05)  # the fraction pre_registered_fraction picks for this claim and m = 1000
    honest = family_lower_bound(g, SIGMA, Q, T, DELTA)
    # seed 4: ε_L 2.18 (0.55× the claim's 3.97), above the assumption-free 1.39 on the same guesses
    assert 2.0 < honest["epsilon"] < 3.97 and honest["noise_lower"] > SIGMA
    assert honest["epsilon"] > steinke_lower_bound(g, DELTA) + 0.5
    scores, included = _run(0.5, seed=4)
    halved = family_lower_bound(guess(scores, included, 0.05), SIGMA, Q, T, DELTA)
    assert halved["epsilon"] > 5.0 and halved["noise_lower"] < SIGMA  # seed 4: 5.30


def test_search_stops_at_a_quarter_of_the_claimed_noise():
    """A claim far above what ran (σ = 20 claimed, the canaries all but noiseless): the search stops at σ/4, where
    the bound is that member's ε (valid, marked ``floor_reached``), instead of the PRV of ever smaller σ."""
    scores, included = _run(0.001, seed=4)
    r = family_lower_bound(guess(scores, included, 0.05), 20.0, Q, T, DELTA)
    assert r["floor_reached"] and r["noise_lower"] == pytest.approx(5.0, rel=0.01)
    assert r["epsilon"] == pytest.approx(accountant_epsilon(r["noise_lower"], Q, T, DELTA))
