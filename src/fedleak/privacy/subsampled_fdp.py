"""One-run f-DP bound for Poisson-subsampled DP-SGD: the family of the mechanism the accountant claims.

With Poisson sampling at rate q (q < 1), T steps of Gaussian noise σC on clipped per-example sums are **by
construction** the T-fold composition of the q-subsampled Gaussian mechanism; its privacy curve is not Gaussian, so
the μ-GDP analysis of :mod:`.one_run` does not apply, but it is one member of a family indexed by σ that Opacus's
PRV accountant computes with error bounds (Gopi, Lee, Wutschitz, NeurIPS 2021):

* ``profile`` — δ(ε) of the composed mechanism, an upper bound δ_est(ε − ε_err) + δ_err from Opacus's own
  discretized PRV (Gopi et al. Thm 5.5), on a grid of ε ≥ 0;
* ``tradeoff`` — the trade-off curve every (ε, δ(ε)) pair implies, f(α) = max_ε max(0, 1 − δ(ε) − e^ε α,
  e^{−ε}(1 − δ(ε) − α)) (Dong, Roth, Su 2022, Prop. 2.12 and 2.13: the curve of an (ε, δ(ε))-DP profile): a lower
  bound on the true curve, symmetric, so rejecting it rejects the mechanism;
* ``family_lower_bound`` — Mahloujifar, Melis, Chaudhuri (ICML 2025) one-run test of "f_σ'-DP in each canary"
  (:func:`.one_run.tradeoff_rejects`) for σ' on the family; the smallest rejected σ' is σ_L and the bound is the
  accountant's ε of σ_L (its lower error bound). It rests on one assumption, printed beside it: the mechanism's
  privacy curve is a Poisson-subsampled Gaussian's (what DP-SGD with Poisson sampling is by construction; a fault
  in the sampler breaks it, which is why the Opacus audit uses it only when the batch sizes are Poisson).
"""

from __future__ import annotations

import math
import warnings
from functools import lru_cache

import numpy as np

from .one_run import Guesses, tradeoff_rejects

SUBSAMPLED_GAUSSIAN = ("on the subsampled Gaussian's own curve, not μ-GDP: Poisson-subsampled Gaussian noise on "
                       "clipped per-example gradients composes over T steps to the q-subsampled Gaussian's trade-off "
                       "curve, computed by Opacus's PRV accountant with its error bounds (Gopi et al. 2021); the "
                       "batch sizes were tested Poisson")
#: the PRV's discretization errors: δ(ε) ≤ δ_est(ε − EPS_ERROR) + DELTA_ERROR
EPS_ERROR, DELTA_ERROR = 0.01, 1e-9
#: the ε grid of a profile stops here (the curve is a sup over the grid's (ε, δ(ε)): fewer points, a lower curve)
MAX_EPSILON = 40.0


@lru_cache(maxsize=256)
def profile(noise: float, q: float, steps: int, step: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """(ε grid, δ upper bound at each ε) of ``steps`` q-subsampled Gaussian steps with multiplier ``noise``."""
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(float(noise), float(q), int(steps))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dprv = acc._get_dprv(eps_error=EPS_ERROR, delta_error=DELTA_ERROR)
    t, p = np.asarray(dprv.domain.ts, float), np.asarray(dprv.pmf, float)
    keep = t >= -1.0  # δ(ε ≥ 0) reads only t ≥ −ε_err; e^{−t} below would overflow for small σ
    t, p = t[keep], p[keep]
    tail = np.flip(np.flip(p).cumsum())  # P[t' ≥ t_i]
    tail_e = np.flip(np.flip(p * np.exp(-t)).cumsum())  # E[e^{−t'}; t' ≥ t_i]
    top = min(float(t[p > 0].max()) if np.any(p > 0) else 0.0, MAX_EPSILON)  # a sup over fewer ε: still a bound
    eps = np.arange(0.0, max(top, step) + step, step)
    i = np.minimum(np.searchsorted(t, eps - EPS_ERROR, side="left"), t.size - 1)
    inside = (eps - EPS_ERROR) <= t[-1]
    delta = np.where(inside, tail[i] - np.exp(eps - EPS_ERROR) * tail_e[i], 0.0)
    delta = np.clip(delta + DELTA_ERROR, 0.0, 1.0)
    return eps, delta


def tradeoff(eps: np.ndarray, delta: np.ndarray):
    """The forced wrong-guess mass f(1 − right) of the curve the (ε, δ(ε)) profile implies (module docstring)."""
    e_pos, e_neg = np.exp(eps), np.exp(-eps)

    def forced(right: float) -> float:
        if right >= 1:
            return 1.0
        alpha = 1.0 - right
        f = np.maximum(1.0 - delta - e_pos * alpha, e_neg * (1.0 - delta - alpha))
        return float(max(0.0, f.max()))

    return forced


def family_rejects(noise: float, q: float, steps: int, g: Guesses, significance: float) -> bool:
    """Whether the guesses reject "the T-step q-subsampled Gaussian with multiplier ``noise``" at ``significance``."""
    return tradeoff_rejects(tradeoff(*profile(round(float(noise), 6), float(q), int(steps))), g, significance)


def accountant_epsilon(noise: float, q: float, steps: int, delta: float) -> float:
    """The PRV accountant's lower error bound on ε(δ) of the family member (what a bound may claim)."""
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = [(float(noise), float(q), int(steps))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dprv = acc._get_dprv(eps_error=EPS_ERROR, delta_error=delta / 1000)
        return max(0.0, float(dprv.compute_epsilon(delta, delta / 1000, EPS_ERROR)[0]))


def family_lower_bound(g: Guesses, noise: float, q: float, steps: int, delta: float,
                       confidence: float = 0.95, tolerance: float = 0.01) -> dict:
    """σ_L (the smallest multiplier on the grid σ·(1 + tolerance)^k that the guesses reject at ``confidence``;
    every larger one is rejected too, the family being ordered) and ε_L = the accountant's ε(δ) of σ_L: the
    mechanism is less private than any member with ε < ε_L. ``noise`` (the claim's σ) anchors the grid only.
    ε_L = 0 when no member up to 64 σ is rejected. The search goes down to σ/4 at most (below it the PRV of the
    family grows huge while the verdict is already "violated"): rejected there too, ε_L is that member's ε, a
    valid but not the largest bound (``floor_reached``)."""
    level, limit = 1.0 - confidence, int(math.ceil(math.log(64) / math.log1p(tolerance)))
    floor = int(math.ceil(math.log(4) / math.log1p(tolerance)))

    def sigma(k: int) -> float:
        return float(noise) * (1.0 + tolerance) ** k

    def rejected(k: int) -> bool:
        return family_rejects(sigma(k), q, steps, g, level)

    if rejected(0):  # the claim itself is rejected: walk down to a member that is not
        low, high, width = -1, 0, 1
        while rejected(low):
            if low == -floor:
                return {"noise_lower": sigma(low), "epsilon": accountant_epsilon(sigma(low), q, steps, delta),
                        "assumption": SUBSAMPLED_GAUSSIAN, "floor_reached": True}
            high, width = low, width * 2
            low = max(-width, -floor)
    else:
        low, high, width = 0, 1, 1
        while not rejected(high):
            low, width = high, width * 2
            high = width
            if high > limit:
                return {"noise_lower": math.inf, "epsilon": 0.0, "assumption": SUBSAMPLED_GAUSSIAN}
    while high - low > 1:  # not rejected at low, rejected at high
        mid = (low + high) // 2
        low, high = (low, mid) if rejected(mid) else (mid, high)
    return {"noise_lower": sigma(high), "epsilon": accountant_epsilon(sigma(high), q, steps, delta),
            "assumption": SUBSAMPLED_GAUSSIAN}


#: candidate guess fractions (each side) for the family bound, one picked before the run from the claim alone
FAMILY_FRACTIONS = (0.03, 0.05, 0.1, 0.2)


def pre_registered_fraction(noise: float, q: float, steps: int, m: int, delta: float) -> float:
    """The guess fraction whose typical run under the *claimed* mechanism (the all-iterates LLR statistics of
    :func:`.sgd_verdict.llr_sampler`, m/2 canaries in and m/2 out) gives the highest family bound: from σ, q, T
    and m only — never from the canaries' scores or coins (not even how many coins came up "in")."""
    from .one_run import guess
    from .sgd_verdict import llr_sampler
    from .verdict import typical_scores

    n_out = m // 2
    seen = typical_scores(llr_sampler(noise, q, steps, 1.0), m - n_out, draws=10_000)
    unseen = typical_scores(llr_sampler(noise, q, steps, 1.0, seen=False), n_out, draws=10_000)
    scores, inc = np.r_[seen, unseen], np.r_[np.ones(m - n_out, bool), np.zeros(n_out, bool)]
    return max(FAMILY_FRACTIONS, key=lambda f: (family_lower_bound(guess(scores, inc, f), noise, q, steps,
                                                                   delta)["epsilon"], f))


def family_bound(scores, included, noise: float, q: float, steps: int, delta: float,
                 confidence: float = 0.95) -> dict:
    """The family bound of one run's all-iterates ``scores`` on guesses pre-registered from the claim."""
    from .one_run import guess

    fraction = pre_registered_fraction(noise, q, steps, int(np.asarray(scores).size), delta)
    g = guess(scores, included, fraction)
    return {**g.to_json(), "guess_fraction": fraction, "confidence": confidence,
            **family_lower_bound(g, noise, q, steps, delta, confidence)}
