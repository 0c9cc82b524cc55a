"""Is the claimed DP in force? The claim test and the findings that say which setting or clients.

* **Claim test (proved).** The claim "each canary's inclusion is μ-GDP with μ = √T/σ" (what the
  accountant assumes) is tested with Mahloujifar et al.'s one-run f-DP analysis
  (:func:`fedleak.privacy.one_run.gdp_p_value`) on pre-registered one-sided guesses ("in" for the highest
  statistics): the fraction guessed is fixed from m and μ before the run (:func:`claim_design`), the one whose
  typical run finds noise ×0.1 and then noise ×0.5 best (30 % at 200 canaries, fewer at 1,000). p < ``alpha`` rejects the claim (rigorously where the mechanism is Gaussian by
  construction: :mod:`.verdict`).
* **Which setting (estimated, once the claim is rejected or a client flagged).** Canaries at the clip norm C separate by μ̂_C; under working clipping the
  canaries of raw norm s·C separate alike. μ̂_C above the claim points at the noise (the noise in force
  ≈ σ·μ/μ̂_C); μ̂_sC ≫ μ̂_C points at the clipping (updates reach the noise unclipped).
* **Which clients (estimated).** Per client node, the mean statistic of its inserted large canaries minus
  the mean of all unseen canaries is tested against :data:`MARGIN`·max(μ, μ̂_C) — more than the claim and
  more than the canaries at the clip norm show, i.e. clipping not in force there (one-sided z-test, unit
  null variance as the Gaussian mechanism gives, Bonferroni over the K nodes).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.stats import norm

from .estimate import estimate
from .one_run import gdp_p_value, guess, p_text

#: one-sided "in" guesses of the claim test, as a fraction of the canaries (the design when no other is chosen)
DETECT_FRACTION = 0.3
#: the claim test's candidate designs: the fraction of the canaries guessed "in" (one-sided: the low tail, whatever
#: a fault does to it, never enters)
DESIGNS = tuple((f, False) for f in (0.03, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3))
#: the faults the claim test's design is chosen for: noise at these factors of the claimed σ (the first must be
#: found in a typical run whenever some design can; the second as strongly as possible then)
DESIGN_NOISE_FAULTS = (0.1, 0.5)


@functools.lru_cache(maxsize=256)
def claim_design(n_in: int, n_out: int, mu_claimed: float, alpha: float = 0.01) -> tuple[float, bool]:
    """The claim test's guesses, pre-registered from m and the claim alone (never the canaries' scores, so the test
    keeps its level: Mahloujifar et al.'s analysis holds for any guesses fixed in advance). A *typical* run with the
    noise at factor f (seen canaries N(μ/f, 1) at their (i − ½)/n quantiles, unseen N(0, 1)) is scored for each
    design; the one chosen finds noise ×0.1 at p < ``alpha`` if any design does, and among those gives noise ×0.5
    the lowest p (at 200 canaries that is 30 % of them, at 1,000 fewer)."""
    if n_in < 2 or n_out < 2 or not math.isfinite(mu_claimed) or mu_claimed <= 0:
        return DETECT_FRACTION, False
    inc = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]
    unseen = norm.ppf((np.arange(n_out) + 0.5) / n_out)

    def p(design, factor):
        seen = norm.ppf((np.arange(n_in) + 0.5) / n_in) + mu_claimed / factor
        return gdp_p_value(mu_claimed, guess(np.r_[seen, unseen], inc, design[0], two_sided=design[1]))

    big, small = DESIGN_NOISE_FAULTS
    return min(DESIGNS, key=lambda d: (p(d, big) >= alpha, p(d, small), -d[0]))


def claim_guesses(scores, included, mu_claimed: float):
    """The claim test's guesses on these scores, with the design :func:`claim_design` fixes in advance."""
    included = np.asarray(included, bool)
    fraction, two_sided = claim_design(int(included.sum()), int((~included).sum()), float(mu_claimed))
    return guess(scores, included, fraction, two_sided=two_sided), fraction, two_sided
#: an estimated finding needs the separation to exceed the claim by this factor (a material violation)
MARGIN = 1.5


def diagnose(scores, included, raw_norm, node, mu_claimed: float, noise: float, clients: int,
             alpha: float = 0.01, delta: float = 1e-5) -> dict:
    scores = np.asarray(scores, float)
    included = np.asarray(included, bool)
    small = np.asarray(raw_norm) == 1.0
    g, fraction, two_sided = claim_guesses(scores, included, mu_claimed)
    p_claim = gdp_p_value(mu_claimed, g)
    est_small = estimate(scores[small], included[small], delta)["mu"] if small.sum() > 3 else math.nan
    est_large = estimate(scores[~small], included[~small], delta)["mu"] if (~small).sum() > 3 else math.nan
    out_mean = float(scores[~included].mean())
    # a node's large canaries should separate no more than the canaries at the clip norm (clipping in force)
    reference = MARGIN * max(mu_claimed, est_small if math.isfinite(est_small) else 0.0)
    nodes = []
    for k in range(clients):
        sel = (np.asarray(node) == k) & ~small & included
        n_in = int(sel.sum())
        if n_in == 0:
            continue
        diff = float(scores[sel].mean()) - out_mean
        se = math.sqrt(1.0 / n_in + 1.0 / max(1, int((~included).sum())))
        p = float(norm.sf((diff - reference) / se))
        nodes.append({"client": k, "canaries_inserted": n_in, "separation": diff, "p_value": p,
                      "flagged": p < alpha / clients})
    flagged_nodes = [n["client"] for n in nodes if n["flagged"]]
    detected = p_claim < alpha or bool(flagged_nodes)
    findings = []  # "Estimated: …" only: the claim test's outcome is the verdict's (:mod:`.verdict`)
    noise_low = detected and math.isfinite(est_small) and est_small > MARGIN * mu_claimed
    if noise_low:
        findings.append(f"Estimated: canaries at the clip norm separate as μ ≈ {est_small:.2f} where the claim allows "
                        f"{mu_claimed:.2f}: the noise in force is about σ ≈ {noise * mu_claimed / est_small:.3g}, not the "
                        f"claimed σ = {noise:g} (noise multiplier setting).")
    clipping = (detected and math.isfinite(est_large) and est_large > MARGIN * mu_claimed
                and (not math.isfinite(est_small) or est_large > 2 * max(est_small, 1e-9)))
    if clipping or flagged_nodes:
        if flagged_nodes and len(flagged_nodes) < len(nodes):
            worst = max((n for n in nodes if n["flagged"]), key=lambda n: n["p_value"])
            findings.append(f"Estimated: the inserted canaries above the clip norm sent through clients "
                            f"{', '.join(map(str, flagged_nodes))} separate by up to "
                            f"{max(n['separation'] for n in nodes if n['flagged']):.2f} (each z-test p "
                            f"{p_text(worst['p_value'], '≤')}) where clipped canaries separate by {est_small:.2f}: updates reach "
                            f"the noise unclipped on clients {', '.join(map(str, flagged_nodes))} (clipping setting).")
        else:
            findings.append(f"Estimated: canaries of raw norm above the clip norm separate as μ ≈ {est_large:.2f} "
                            f"against {est_small:.2f} for those at the clip norm: updates reach the noise unclipped "
                            "on every client (clipping missing everywhere or applied after the noise; clipping setting).")
    evidence = "proved" if p_claim < alpha else ("estimated" if detected else None)
    return {"mu_claimed": mu_claimed, "alpha": alpha,
            "claim_test": {**g.to_json(), "p_value": p_claim, "guess_fraction": fraction, "two_sided": two_sided,
                           "design": "fixed before the run from m and μ: finds noise ×0.1, then ×0.5 best (claim_design)"},
            "mu_estimated_at_clip_norm": est_small, "mu_estimated_above_clip_norm": est_large,
            "clients": nodes, "flagged_clients": flagged_nodes, "detected": evidence is not None,
            "evidence": evidence, "findings": findings}
