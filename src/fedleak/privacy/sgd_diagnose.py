"""Is the DP-SGD a client claims in force? The claim test and the findings of the example-level audit.

* **Claim test (proved)**, on the canaries of raw norm ``scale``·C (three in four, fixed in advance: under the
  claim they are clipped to C like the rest, so the test keeps its level; where clipping is missing they
  separate most). Without subsampling (q = 1) T DP-SGD steps are exactly √T/σ-GDP per canary
  (Dong, Roth, Su 2022, Cor. 3.3), and the claim is tested with Mahloujifar et al.'s one-run f-DP analysis
  (ICML 2025; :func:`fedleak.privacy.one_run.gdp_p_value`) on two-sided guesses ("in" for the
  ⌈0.1·m⌉ highest statistics, "out" for as many lowest), as the client-level audit does. With q < 1 the privacy curve of the
  subsampled Gaussian is not Gaussian, so the claim tested is the accountant's (ε, δ) point itself
  (Opacus PRV, else RDP), with Steinke et al.'s (ε, δ)-DP analysis (NeurIPS 2023, §5) on two-sided guesses
  (:data:`CLAIM_FRACTION` of the tested canaries highest "in", as many lowest "out"): assumption-free; with all r
  guesses right it rejects ε up to about ln(r/4.6) (≈ 4.9 at m = 1,000: r = 600) — enough for σ = 0 (noise off) or clipping
  missing at a claimed ε below that, not for a noise multiplier 2× low.
  p < ``alpha`` rejects the claim rigorously: the lower bound exceeds the claimed ε.
* **Which setting (estimated).** ``mean_shift`` (Σ_t x_t/√T) of an included canary at the clip norm is
  q√T/σ in expectation; canaries of raw norm s·C shift alike under working clipping, s times more without
  it. A large-canary shift above twice the clip-norm one points at the clipping, otherwise at the noise
  (the noise in force ≈ q√T/μ̂_C).
"""

from __future__ import annotations

import math

import numpy as np

from .estimate import estimate
from .one_run import gdp_p_value, guess, steinke_p_value

#: two-sided guesses of the GDP claim test (q = 1) on each side, as a fraction of the canaries (fixed in advance)
DETECT_FRACTION = 0.1
#: guesses on each side of the (ε, δ) claim test (q < 1): 0.4 of the tested canaries, five coin standard deviations
#: inside half of them at m = 1,000, so that a perfectly separating run can get every guess right
CLAIM_FRACTION = 0.4
#: an estimated finding needs the separation to exceed the claim by this factor
MARGIN = 1.5


def diagnose_sgd(scores, mean_shift, included, raw_norm, *, noise: float, steps: int, sample_rate: float,
                 epsilon_claimed: float, delta: float, alpha: float = 0.01) -> dict:
    scores, shift = np.asarray(scores, float), np.asarray(mean_shift, float)
    included, small = np.asarray(included, bool), np.asarray(raw_norm) == 1.0
    q = float(sample_rate)
    mu_claimed = math.sqrt(steps) / noise if q == 1 else None
    # the claim is tested on the canaries of raw norm above C (pre-registered): under the claim they are clipped to
    # C like the others, so the test is valid; where clipping is missing they separate most
    test_set = ~small if (~small).sum() >= 2 else np.ones_like(small)
    if q == 1:
        g = guess(scores[test_set], included[test_set], DETECT_FRACTION)
        p_claim = gdp_p_value(mu_claimed, g)
        claim = f"μ = {mu_claimed:.2f}-GDP"
        test = "one-run f-DP test of the claim (Mahloujifar et al.)"
    else:
        g = guess(scores[test_set], included[test_set], CLAIM_FRACTION, two_sided=True)
        p_claim = steinke_p_value(g.m, g.r, g.v, epsilon_claimed, delta)
        claim = f"({epsilon_claimed:.2f}, {delta:g})-DP"
        test = "one-run (ε, δ)-DP test of the accountant's ε (Steinke et al. §5)"
    est_small = estimate(shift[small], included[small], delta)["mu"] if small.sum() > 3 else math.nan
    est_large = estimate(shift[~small], included[~small], delta)["mu"] if (~small).sum() > 3 else math.nan
    expected = q * math.sqrt(steps) / noise  # the mean shift of a clip-norm canary under the claim
    detected = p_claim < alpha
    findings = []  # "Estimated: …" only: the claim test's outcome is the verdict's (:mod:`.verdict`)
    clipping = (math.isfinite(est_large) and est_large > MARGIN * expected
                and (not math.isfinite(est_small) or est_large > 2 * max(est_small, 1e-9)))
    if detected and clipping:
        findings.append(f"Estimated: canaries of raw norm above the clip norm shift by μ ≈ {est_large:.2f} against "
                        f"{est_small:.2f} for those at the clip norm: example gradients reach the noise unclipped "
                        "(clipping setting).")
    elif detected and math.isfinite(est_small) and est_small > 0:
        in_force = q * math.sqrt(steps) / est_small
        findings.append(f"Estimated: canaries at the clip norm shift by μ ≈ {est_small:.3g} where the claim gives "
                        f"{expected:.2f}: the noise in force is "
                        + (f"about σ ≈ {in_force:.3g}" if in_force > 1e-3 * noise else "≈ 0 (noise off)")
                        + f", not the claimed σ = {noise:g} (noise multiplier setting).")
    elif detected:
        findings.append("Estimated: canaries at the clip norm and above it separate alike; the setting at fault "
                        "is not singled out.")
    return {"mu_claimed": mu_claimed, "epsilon_claimed": epsilon_claimed, "alpha": alpha,
            "claim_test": {**g.to_json(), "p_value": p_claim, "hypothesis": claim, "test": test},
            "shift_claimed": expected, "mu_estimated_at_clip_norm": est_small,
            "mu_estimated_above_clip_norm": est_large, "clients": [], "flagged_clients": [],
            "detected": detected, "evidence": "proved" if detected else None, "findings": findings}
