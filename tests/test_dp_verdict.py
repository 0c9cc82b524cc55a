"""The one DP verdict (issue #42, item 4): no sentence contradicts it; "proved" only under an assumption-free bound
or a Gaussian one where the mechanism is Gaussian by construction; an exactly ε = 1 mechanism that is not Gaussian
is not reported proved ε > 1 in more than 5 % of 100 runs. Synthetic canary statistics with fixed seeds; ~5 s."""

import itertools
import math

import numpy as np
import pytest

from fedleak.privacy.gdp import epsilon_of, mu_of
from fedleak.privacy.one_run import gdp_p_value, guess, lower_bounds, steinke_p_value
from fedleak.privacy.report import _ratio
from fedleak.privacy.verdict import (ASSUMPTION_FREE, CONSISTENT, NOT_IN_FORCE, VIOLATED, dp_verdict, shift_power,
                                     smallest_noise_fault, verdict_lines, z_test)

DELTA, CLAIM_EPS = 1e-5, 4.0
MU = mu_of(CLAIM_EPS, DELTA)
GAUSS = "Gaussian noise on clipped sums, no subsampling (test)"


def _verdict(eps_gdp, eps_approx, p, z_p, findings, gaussian, claim=CLAIM_EPS, fault_test=None):
    z = {"difference": 1.0, "allowed": MU, "z": 0.0, "p_value": z_p}
    return dp_verdict(epsilon_claimed=claim, claim_name="test accountant",
                      bound={"epsilon_gdp": eps_gdp, "epsilon_approx_dp": eps_approx}, gaussian=gaussian,
                      claim_test={"p_value": p, "hypothesis": f"μ = {MU:.2f}-GDP"},
                      claim_test_rigorous=gaussian is not None, estimate_epsilon=eps_gdp, z=z,
                      estimated_findings=findings, alpha=0.01, budget="test", fault_test=fault_test)


GRID = list(itertools.product([0.0, 2.0, 3.99, 4.01, 9.0, math.inf],  # ε of the Gaussian bound
                              [0.0, 1.5, 4.5],  # ε of the assumption-free bound
                              [0.5, 0.02, 0.005, 1e-9],  # claim test p
                              [0.5, 0.001],  # z-test p
                              [[], ["Estimated: the noise in force is about σ ≈ 0.5 (noise multiplier setting)."]],
                              [GAUSS, None]))


@pytest.mark.parametrize("eps_gdp, eps_approx, p, z_p, findings, gaussian", GRID[::7] + GRID[1::11])
def test_no_sentence_contradicts_the_verdict(eps_gdp, eps_approx, p, z_p, findings, gaussian):
    v = _verdict(eps_gdp, eps_approx, p, z_p, findings, gaussian, fault_test=lambda f: 0.001 if f < 0.5 else 0.5)
    lines = verdict_lines(v, "all-iterates", DELTA, "test") + _ratio(v, eps_gdp) + findings
    proved = eps_gdp if gaussian else eps_approx
    assert v["epsilon_proved"] == proved and v["exceeds_claim"] == (v["verdict"] == VIOLATED)
    # a bound above the claim, or a rigorous claim test at p < 0.01, is a proved violation, and nothing else is
    assert (v["verdict"] == VIOLATED) == (proved > CLAIM_EPS or (p < 0.01 and gaussian is not None))
    if v["verdict"] != VIOLATED:
        assert (v["verdict"] == NOT_IN_FORCE) == (p < 0.01 or z_p < 0.01 or bool(findings))
    text = " ".join(lines)
    assert "No misconfiguration" not in text and "safe" not in text.lower()
    assert sum(s.startswith("DP verdict:") for s in lines) == 1 and v["verdict"] in lines[0]
    for other in {VIOLATED, NOT_IN_FORCE, CONSISTENT} - {v["verdict"]}:
        assert other not in text
    assert (ASSUMPTION_FREE in lines[1]) == (gaussian is None) and (GAUSS in lines[1]) == (gaussian is not None)
    if v["verdict"] == CONSISTENT:
        assert "noise ≤ 0.50× the claimed σ would have been found" in lines[0] or "0.49" in lines[0]


def test_every_grid_point_is_consistent():
    """The whole grid (1,152 cases): verdict and exceeds_claim agree, the proved ε never exceeds a claim that the
    verdict calls consistent or only estimated."""
    for eps_gdp, eps_approx, p, z_p, findings, gaussian in GRID:
        v = _verdict(eps_gdp, eps_approx, p, z_p, findings, gaussian)
        assert v["exceeds_claim"] == (v["verdict"] == VIOLATED)
        if v["verdict"] != VIOLATED:
            assert not v["epsilon_proved"] > CLAIM_EPS


def _gaussian_run(factor, m=1000, seed=0):
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < 0.5
    return inc * MU / factor + rng.standard_normal(m), inc


@pytest.mark.parametrize("factor, expected", [(1.0, CONSISTENT), (0.5, VIOLATED), (0.1, VIOLATED)])
def test_noise_fault_grid_through_the_real_bounds(factor, expected):
    """The issue's case: noise 2× too low (true ε ≈ 9–10 against a claimed 4) with 1,000 canaries was reported
    "158 % of the accountant's ε" *and* "no misconfiguration found". Now one verdict: violated (proved)."""
    scores, inc = _gaussian_run(factor)
    bound = lower_bounds(scores, inc, DELTA)
    p = gdp_p_value(MU, guess(scores, inc, 0.1))
    v = dp_verdict(epsilon_claimed=CLAIM_EPS, claim_name="exact GDP", bound=bound, gaussian=GAUSS,
                   claim_test={"p_value": p, "hypothesis": "μ-GDP"}, claim_test_rigorous=True,
                   estimate_epsilon=math.nan, z=z_test(scores, inc, MU), estimated_findings=[], alpha=0.01,
                   budget="1000 canaries",
                   fault_test=shift_power(int(inc.sum()), int((~inc).sum()), MU,
                                          lambda s, i: gdp_p_value(MU, guess(s, i, 0.1))))
    assert v["verdict"] == expected
    if expected == VIOLATED:
        assert v["exceeds_claim"] and (v["epsilon_proved"] > CLAIM_EPS or p < 0.01)
    else:  # what this budget would have found: noise ≤ 0.52× the claim, 1,000 canaries at ε = 4 (typical run)
        assert v["smallest_noise_fault"] == pytest.approx(0.52, abs=0.01)
        assert "noise ≤ 0.52× the claimed σ would have been found at p < 0.01" in v["sentence"]


def test_smallest_noise_fault_bisects():
    assert smallest_noise_fault(lambda f: 0.0 if f <= 0.3 else 1.0, 0.01) == pytest.approx(0.3, abs=0.01)
    assert smallest_noise_fault(lambda f: 1.0, 0.01) is None


def test_exactly_one_dp_mechanisms_are_not_proved_above_one():
    """Randomized response and the Laplace mechanism at exactly ε = 1: the assumption-free bound (the headline when
    the mechanism is not Gaussian by construction) says ε > 1 in at most 5 of 100 runs (measured: 5 and 4); the
    Gaussian figure, which assumes a Gaussian curve, says so in 70 of 100 (why it is never the headline here)."""
    e = math.e
    over = {"rr": 0, "laplace": 0, "rr_gdp": 0}
    for seed in range(100):
        rng = np.random.default_rng(seed)
        inc = rng.random(1000) < 0.5
        rr = (rng.random(1000) < np.where(inc, e / (1 + e), 1 / (1 + e))).astype(float)
        lap = inc + rng.laplace(0.0, 1.0, 1000)
        for name, s in (("rr", rr), ("laplace", lap)):
            g = guess(s, inc)
            over[name] += steinke_p_value(g.m, g.r, g.v, 1.0, DELTA) < 0.05  # ⇔ proved ε > 1 at 95 %
        if seed < 20:
            g = guess(rr, inc)
            over["rr_gdp"] += gdp_p_value(mu_of(1.0, DELTA), g) < 0.05
    assert over["rr"] <= 5 and over["laplace"] <= 5
    assert over["rr_gdp"] >= 10  # of 20: the Gaussian family overshoots on a non-Gaussian mechanism
    assert epsilon_of(mu_of(1.0, DELTA), DELTA) == pytest.approx(1.0, abs=1e-6)


NOISE_TEST = "the noise-scale χ² test of the released aggregates"


@pytest.mark.parametrize("tests_p", [0.5, 0.004, 1e-12])
def test_a_rejecting_test_is_never_reported_consistent(tests_p):
    """The verdict's other pre-registered tests (the noise-scale χ² test, the per-node tests, the bound's guesses):
    over the grid, ``consistent at this budget`` never stands beside any p < α (claim test, z-test or one of
    them), a bound above the claim is always ``violated (proved)`` with ``exceeds_claim``, and a rejecting test is
    named in the verdict sentence."""
    for eps_gdp, eps_approx, p, z_p, findings, gaussian in GRID[::3]:
        z = {"difference": 1.0, "allowed": MU, "z": 0.0, "p_value": z_p}
        tests = {NOISE_TEST: tests_p, "the per-node tests": 0.7}
        v = dp_verdict(epsilon_claimed=CLAIM_EPS, claim_name="test accountant",
                       bound={"epsilon_gdp": eps_gdp, "epsilon_approx_dp": eps_approx}, gaussian=gaussian,
                       claim_test={"p_value": p, "hypothesis": "μ-GDP"}, claim_test_rigorous=gaussian is not None,
                       estimate_epsilon=eps_gdp, z=z, estimated_findings=findings, alpha=0.01, budget="test",
                       tests=tests)
        if v["verdict"] == CONSISTENT:
            assert min(p, z_p, *tests.values()) >= 0.01 and not findings
        if v["epsilon_proved"] > CLAIM_EPS:
            assert v["verdict"] == VIOLATED and v["exceeds_claim"]
        assert v["exceeds_claim"] == (v["verdict"] == VIOLATED)
        assert (NOISE_TEST + " rejects") in v["sentence"] or tests_p >= 0.01 or v["verdict"] == VIOLATED
        if tests_p < 0.01:
            assert v["verdict"] in (VIOLATED, NOT_IN_FORCE)


def test_the_recorded_flower_fault_grid_never_contradicts_itself():
    """Every run of ``flower_faults`` in ``benchmarks/results/dp_audit_planted.json`` (faults planted inside Flower and
    the correct configurations, bench_dp_audit_flower.py): the verdict recomputed from the recorded statistics is the
    one reported; a proved ε above the claim is ``violated (proved)`` with ``exceeds_claim``; the combined p < 0.01
    (Bonferroni over the pre-registered tests) or any test at p < α is never ``consistent at this budget``. < 0.1 s."""
    import json
    from pathlib import Path

    from fedleak.privacy.audit import GAUSSIAN_CLIENT

    planted = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results"
                          / "dp_audit_planted.json").read_text())["flower_faults"]
    rows = planted["faults"] + planted["correct"]
    assert len(planted["faults"]) >= 7 and rows
    for row in rows:
        tests = {k: p for k, p in row["tests"].items() if k != "claim test"}
        v = dp_verdict(epsilon_claimed=row["epsilon_claimed"], claim_name="recorded",
                       bound={"epsilon_gdp": row["epsilon_gdp"], "epsilon_approx_dp": row["epsilon_approx_dp"]},
                       gaussian=GAUSSIAN_CLIENT, claim_test={"p_value": row["claim_test_p"], "hypothesis": "μ-GDP"},
                       claim_test_rigorous=True, estimate_epsilon=row["epsilon_estimate"],
                       z={"difference": 0.0, "allowed": 0.0, "z": 0.0, "p_value": row["z_test_p"]},
                       estimated_findings=[f for f in row["findings"] if f.startswith("Estimated")],
                       alpha=row["alpha"], budget="recorded", tests=tests,
                       arithmetic=tuple(r for r in row["reasons"] if "arithmetic" in r))
        where = (row["defense"], row["fault"], row["seed"])
        assert v["verdict"] == row["verdict"] and v["exceeds_claim"] == row["exceeds_claim"], where
        assert row["detected"] == (row["verdict"] != CONSISTENT), where
        if row["epsilon_lower"] > row["epsilon_claimed"]:
            assert row["verdict"] == VIOLATED and row["exceeds_claim"], where
        if row["verdict"] == CONSISTENT:
            assert row["p"] >= 0.01 and min(row["claim_test_p"], row["z_test_p"], *tests.values()) >= row["alpha"], where
        assert row["p"] == pytest.approx(min(1.0, len(row["tests"]) * min(row["tests"].values())))
    assert all(row["detected"] for row in planted["faults"])
