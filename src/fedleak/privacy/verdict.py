"""One DP verdict per audit, from which every sentence of the report follows (issue #42, item 4).

Three outcomes, decided once, here:

* ``violated (proved)`` — the rigorous 95 % lower bound exceeds the claimed ε, or the claim test rejects the claim
  at p < α *and* that test is valid for the mechanism audited. Rigorous means assumption-free (Steinke, Nasr,
  Jagielski, NeurIPS 2023, §5: the (ε, δ)-DP analysis of one run), or the Gaussian f-DP analysis (Mahloujifar,
  Melis, Chaudhuri, ICML 2025) only where the mechanism is Gaussian by construction (Gaussian noise on clipped
  sums, no subsampling: T releases compose to exactly √T/σ-GDP, Dong, Roth, Su Cor. 3.3); the assumption is
  printed beside every proved ε. A mechanism that is exactly ε-DP but not Gaussian (randomized response,
  Laplace) makes the Gaussian figure overshoot (it rejects μ-GDP, not (ε, δ)-DP); the assumption-free one
  keeps its 5 % error rate.
* ``not in force (estimated)`` — not proved, but a test resting on a fitted model says so: a one-sided z-test of
  the canaries' fitted separation against what the claim allows (:func:`z_test`), an estimated finding of
  the level's checks (which clients, which setting), or another pre-registered test of the level at p < α
  (``tests``: e.g. the noise-scale χ² test of the released aggregates, which proves less noise than claimed but
  not, by itself, an ε above the claim).
* ``consistent at this budget`` — neither; stated with the smallest fault this budget would have detected
  (:func:`smallest_noise_fault`: "noise ≤ 0.55× the claim would have been found at p < 0.01"). Never "safe".

``exceeds_claim`` is true exactly when the verdict is ``violated (proved)``. The report's sentences are built
from the verdict (:func:`verdict_lines`), so none of them can contradict it.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
from scipy.stats import norm

from .one_run import p_text

VIOLATED, NOT_IN_FORCE, CONSISTENT = "violated (proved)", "not in force (estimated)", "consistent at this budget"
ASSUMPTION_FREE = "assumption-free: Steinke, Nasr, Jagielski (NeurIPS 2023) §5 (ε, δ)-DP analysis"


def _f(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if math.isinf(x):
        return "∞"
    return "> 1000" if x > 1000 else f"{x:.2f}"


GAUSSIAN_FDP = "Gaussian f-DP (Mahloujifar et al., ICML 2025)"


def headline_bound(bound: dict, gaussian: Optional[str], analysis: str = GAUSSIAN_FDP) -> tuple[float, str]:
    """The proved ε of one threat's :func:`fedleak.privacy.one_run.lower_bounds` and the assumption it rests on:
    the f-DP figure (``epsilon_gdp``) only when ``gaussian`` (why the mechanism's curve is the one ``analysis``
    names, by construction) is given."""
    if gaussian:
        return float(bound["epsilon_gdp"]), f"{analysis}: {gaussian}"
    return float(bound["epsilon_approx_dp"]), ASSUMPTION_FREE


def z_test(scores, included, mu_null: float) -> dict:
    """One-sided z-test that the seen canaries' mean exceeds the unseen ones' by more than ``mu_null`` null
    standard deviations (Welch standard error). Estimated: it assumes the statistic's mean is what the claim
    allows (normal approximation of two sample means)."""
    s, inc = np.asarray(scores, float), np.asarray(included, bool)
    seen, unseen = s[inc], s[~inc]
    if seen.size < 2 or unseen.size < 2:
        return {"difference": math.nan, "allowed": mu_null, "z": math.nan, "p_value": 1.0}
    diff = float(seen.mean() - unseen.mean())
    se = math.sqrt(seen.var(ddof=1) / seen.size + unseen.var(ddof=1) / unseen.size)
    z = (diff - mu_null) / se if se > 0 else (math.inf if diff > mu_null else -math.inf)
    return {"difference": diff, "allowed": mu_null, "z": z, "p_value": float(norm.sf(z))}


def typical_scores(sample: Callable[[int, np.random.Generator], np.ndarray], n: int, seed: int = 0,
                   draws: int = 20_000) -> np.ndarray:
    """n scores at the (i − ½)/n quantiles of ``sample``'s distribution (a median-like run, deterministic)."""
    pool = np.sort(sample(draws, np.random.default_rng(seed)))
    return np.quantile(pool, (np.arange(n) + 0.5) / n)


def smallest_noise_fault(test: Callable[[float], float], alpha: float, low: float = 0.02) -> Optional[float]:
    """The largest noise factor f < 1 (noise f × the claim) whose typical run the claim test rejects at p < α
    (``test(f)`` → p of that run); None when even f = ``low`` is not found. Bisection on f (p falls as f does)."""
    if test(low) >= alpha:
        return None
    lo, hi = low, 1.0  # found at lo, not (or barely) at hi
    for _ in range(10):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if test(mid) < alpha else (lo, mid)
    return lo


def shift_power(n_in: int, n_out: int, shift: float, p_of: Callable[[np.ndarray, np.ndarray], float]):
    """``test(f)`` for :func:`smallest_noise_fault` where a seen canary's statistic is N(shift/f, 1) and an unseen
    one's N(0, 1) (Gaussian noise f × the claimed σ on clipped canaries): the typical run's p from ``p_of(scores,
    included)``, the level's own rigorous test."""
    included = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool)]
    null_in, null_out = norm.ppf((np.arange(n_in) + 0.5) / n_in), norm.ppf((np.arange(n_out) + 0.5) / n_out)

    def test(f: float) -> float:
        return p_of(np.r_[null_in + shift / f, null_out], included)

    return test


def dp_verdict(*, epsilon_claimed: float, claim_name: str, bound: dict, gaussian: Optional[str], claim_test: dict,
               claim_test_rigorous: bool, estimate_epsilon: float, z: Optional[dict], estimated_findings: list,
               alpha: float, budget: str, fault_test: Optional[Callable[[float], float]] = None,
               arithmetic: tuple = (), tests: Optional[dict] = None, analysis: str = GAUSSIAN_FDP,
               estimate_interval: Optional[list] = None) -> dict:
    """Decide the one verdict (module docstring). ``bound``: the headline threat's lower bounds; ``claim_test``:
    ``{"p_value", "hypothesis"}``; ``claim_test_rigorous``: its level holds for the audited mechanism (an (ε, δ)
    test, or a μ-GDP test of a Gaussian-by-construction mechanism); ``z``: :func:`z_test` or None;
    ``estimated_findings``: the level's "Estimated: …" sentences that name a fault; ``budget``: what was run
    (e.g. "1000 canaries, 10 rounds"); ``fault_test``: ``test(f)`` for :func:`smallest_noise_fault`, run only when
    the verdict is consistent; ``arithmetic``:
    reasons the claim is wrong by arithmetic on the configuration alone (proved without canaries); ``tests``: the
    level's other pre-registered tests, ``{name: p}`` (each already corrected for its own multiplicity, e.g. the
    noise-scale χ² test or the per-node tests): any p < α makes the verdict at least ``not in force (estimated)``,
    so ``consistent at this budget`` never stands beside a test that rejects; ``estimate_interval``: the estimate's
    99 % interval (:func:`.estimate.estimate`), printed beside it (a point estimate alone can read as a finding)."""
    proved_eps, assumption = headline_bound(bound, gaussian, analysis)
    p = float(claim_test["p_value"])
    bound_above = math.isfinite(epsilon_claimed) and proved_eps > epsilon_claimed
    test_rejects = p < alpha
    z_rejects = z is not None and z["p_value"] < alpha
    tests = {name: float(q) for name, q in (tests or {}).items()}
    rejecting = [f"{name} rejects at p {p_text(q)} < {alpha:g}" for name, q in tests.items() if q < alpha]
    if bound_above or (test_rejects and claim_test_rigorous) or arithmetic:
        verdict = VIOLATED
        reasons = list(arithmetic) + ([f"the proved ε ≥ {_f(proved_eps)} exceeds the claimed ε = {_f(epsilon_claimed)}"] if bound_above
                   else []) + ([f"the claim test rejects {claim_test['hypothesis']} at p {p_text(p)} < {alpha:g}"]
                               if test_rejects and claim_test_rigorous else [])
    elif test_rejects or z_rejects or estimated_findings or rejecting:
        verdict = NOT_IN_FORCE
        reasons = ([f"the claim test rejects {claim_test['hypothesis']} at p {p_text(p)} only under a Gaussian "
                    "privacy curve, which this mechanism is not by construction"] if test_rejects else []) \
            + ([f"the canaries separate by {z['difference']:.2f} null standard deviations where the claim allows "
                f"{z['allowed']:.2f} (z-test p {p_text(z['p_value'])})"] if z_rejects else []) \
            + rejecting + (["the level's checks name a fault (below)"] if estimated_findings else [])
    else:
        verdict = CONSISTENT
        reasons = [f"the proved ε ≥ {_f(proved_eps)} does not exceed the claimed ε = {_f(epsilon_claimed)}, the claim "
                   f"test gives p = {p:.2g}" + (f", the z-test p = {z['p_value']:.2g}" if z is not None else "")
                   + "".join(f", {name} p = {q:.2g}" for name, q in tests.items())]
    out = {"verdict": verdict, "exceeds_claim": verdict == VIOLATED, "epsilon_claimed": epsilon_claimed,
           "claim": claim_name, "epsilon_proved": proved_eps, "assumption": assumption, "alpha": alpha,
           "claim_test_p": p, "claim_test_rigorous": claim_test_rigorous, "z_test": z, "tests": tests,
           "epsilon_estimate": estimate_epsilon, "epsilon_estimate_interval": estimate_interval,
           "reasons": reasons, "budget": budget,
           "smallest_noise_fault": (smallest_noise_fault(fault_test, alpha)
                                    if verdict == CONSISTENT and fault_test is not None else None)}
    out["sentence"] = _sentence(out)
    return out


def _sentence(v: dict) -> str:
    why = "; ".join(v["reasons"])
    if v["verdict"] == VIOLATED:
        return (f"DP verdict: violated (proved) — {why}: the claimed ε = {_f(v['epsilon_claimed'])} ({v['claim']}) is "
                f"not in force (95 % confidence) [{v['assumption']}].")
    if v["verdict"] == NOT_IN_FORCE:
        return (f"DP verdict: not in force (estimated) — {why}. Not proved: the rigorous bound ε ≥ "
                f"{_f(v['epsilon_proved'])} stays below the claimed {_f(v['epsilon_claimed'])}.")
    f = v["smallest_noise_fault"]
    power = (f"noise ≤ {f:.2f}× the claimed σ would have been found at p < {v['alpha']:g} in a typical run"
             if f is not None else "no noise fault down to 0.02× the claimed σ would have been found at p < "
             f"{v['alpha']:g}")
    return (f"DP verdict: consistent at this budget ({v['budget']}) — {why}. This bounds nothing from above: at this "
            f"budget {power}; smaller faults can go unseen.")


def verdict_lines(v: dict, threat: str, delta: float, what: str) -> list[str]:
    """The verdict sentence, then the proved ε with its assumption and the estimate, all consistent with it."""
    return [v["sentence"],
            f"Proved (95 % confidence, {what}, {threat} threat): not ({_f(v['epsilon_proved'])}, {delta:g})-DP "
            f"[{v['assumption']}].",
            f"Estimated (Gaussian fit to the canary statistics, Andrew et al.): ε ≈ {_f(v['epsilon_estimate'])}"
            + _interval(v.get("epsilon_estimate_interval")) + f" at δ = {delta:g}."]


def _interval(interval) -> str:
    """" (99 % interval a–b)" for the estimate, or nothing when no interval was computed."""
    if not interval:
        return ""
    return f" (99 % interval {_f(interval[0])}–{_f(interval[1])}; a point estimate: the verdict rests on the tests)"
