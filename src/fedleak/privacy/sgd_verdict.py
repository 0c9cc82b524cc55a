"""The one DP verdict of an example-level (DP-SGD) audit (:mod:`.verdict`), for fedleak's DP-SGD and the real Opacus.

DP-SGD adds Gaussian noise to the sum of clipped per-example gradients. Without subsampling (q = 1) T steps are
exactly √T/σ-GDP per example (Dong, Roth, Su Cor. 3.3): Gaussian by construction, so the Gaussian f-DP bound and
the μ-GDP claim test prove. With q < 1 the subsampled Gaussian's privacy curve is not Gaussian: only Steinke et
al.'s assumption-free (ε, δ) analysis proves, and the claim test is the (ε, δ) test of the accountant's ε itself.

The smallest noise fault this budget detects is computed from the claim alone (never from the run's canaries):
a typical run (quantiles of the statistic's distribution under noise f·σ) through the same claim test.
"""

from __future__ import annotations

import math

import numpy as np

from .one_run import gdp_p_value, guess, steinke_p_value
from .sgd_diagnose import CLAIM_FRACTION, DETECT_FRACTION
from .verdict import dp_verdict, shift_power, typical_scores, z_test

GAUSSIAN_SGD = ("Gaussian noise on clipped per-example gradients, every example in every step (q = 1): T steps "
                "compose to exactly √T/σ-GDP (Dong, Roth, Su Cor. 3.3)")


def llr_sampler(noise: float, q: float, steps: int, factor: float, seen: bool = True):
    """Draws of the all-iterates LLR statistic Σ_t log(1 − q + q·exp(x_t/σ − 1/(2σ²))) of a canary clipped to C
    when the noise in force is ``factor`` × the claimed σ (x_t in claimed σC units: b_t/σ + N(0, factor²), b_t the
    step's Poisson coin for a ``seen`` canary, 0 for an unseen one)."""
    mu1 = 1.0 / noise

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        out = np.zeros(n)
        for _ in range(steps):
            x = seen * (rng.random(n) < q) * mu1 + factor * rng.standard_normal(n)
            out += np.logaddexp(math.log1p(-q), math.log(q) + mu1 * x - mu1 * mu1 / 2)
        return out

    return sample


def sgd_verdict(*, scores: np.ndarray, mean_shift: np.ndarray, included: np.ndarray, test_set: np.ndarray,
                bound: dict, check: dict, noise: float, q: float, steps: int, claimed: float, claim_name: str,
                estimate_epsilon: float, delta: float, budget: str, alpha: float = 0.01,
                family: str | None = None, estimate_interval: list | None = None) -> dict:
    """The verdict from the all-iterates ``scores`` (claim test on ``test_set``, the pre-registered canaries),
    the ``mean_shift`` z-test against the claim's q√T/σ, and the headline threat's ``bound``. ``family``: for
    q < 1, the assumption under which ``bound["epsilon_gdp"]`` is an f-DP bound of the mechanism's own family
    (:mod:`.subsampled_fdp`); without it only the assumption-free bound proves."""
    gaussian = GAUSSIAN_SGD if q == 1 else family
    n_in, n_out = int((included & test_set).sum()), int((~included & test_set).sum())
    if q == 1:
        mu = math.sqrt(steps) / noise

        def p_of(s, inc):
            return gdp_p_value(mu, guess(s, inc, DETECT_FRACTION))

        fault_test = shift_power(n_in, n_out, mu, p_of)
    else:
        inc = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]

        def fault_test(f: float) -> float:
            seen = typical_scores(llr_sampler(noise, q, steps, f), n_in, draws=5_000)
            unseen = typical_scores(llr_sampler(noise, q, steps, f, seen=False), n_out, draws=5_000)
            g = guess(np.r_[seen, unseen], inc, CLAIM_FRACTION, two_sided=True)
            return steinke_p_value(g.m, g.r, g.v, claimed, delta)
    hypothesis = check["claim_test"].get("hypothesis", "the claim")
    analysis = {} if q == 1 else {"analysis": "f-DP of the Poisson-subsampled Gaussian (Mahloujifar et al., "
                                              "ICML 2025, on its own trade-off curve)"}
    return dp_verdict(epsilon_claimed=claimed, claim_name=claim_name, bound=bound, gaussian=gaussian, **analysis,
                      claim_test={"p_value": check["claim_test"]["p_value"], "hypothesis": hypothesis},
                      claim_test_rigorous=True, estimate_epsilon=estimate_epsilon, estimate_interval=estimate_interval,
                      z=z_test(mean_shift, included, q * math.sqrt(steps) / noise),
                      estimated_findings=[f for f in check["findings"] if f.startswith("Estimated")],
                      alpha=alpha, budget=budget, fault_test=fault_test)


#: candidate guess fractions for a subsampled claim (q < 1), one picked before the run from the claim alone
FRACTIONS = (0.02, 0.03, 0.05, 0.075, 0.1)


def pre_registered_fraction(noise: float, q: float, steps: int, n_in: int, n_out: int, delta: float) -> float:
    """The guess fraction whose typical run under the *claimed* mechanism (LLR statistics, :func:`llr_sampler`)
    gives the highest assumption-free bound: chosen from σ, q, T and the canary counts only, never from the
    canaries' statistics or their coins, so the bound keeps its 95 % confidence."""
    from .one_run import steinke_lower_bound

    if q >= 1 or n_in < 2 or n_out < 2:
        return 0.1
    seen = typical_scores(llr_sampler(noise, q, steps, 1.0), n_in, draws=10_000)
    unseen = typical_scores(llr_sampler(noise, q, steps, 1.0, seen=False), n_out, draws=10_000)
    inc = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]
    scores = np.r_[seen, unseen]
    return max(FRACTIONS, key=lambda f: (steinke_lower_bound(guess(scores, inc, f), delta), f))
