"""The verdict rule (issue 27) as a property over every combination of attacks that can run, and the count
rounding it depends on, in closed form. (Pure functions: the whole file runs in about 3 s.)"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedleak.attacks.labels import plausible_counts, round_counts_eth
from fedleak.audit.judge.verdict import (BUDGET_FACTOR_FOR_LOW, MIN_TUNE_TRIALS, evidence_sentence, judge_evidence,
                                   searched)

EXACT_NAMES = ("spear", "analytic-fc", "dager")

OPTIM_NAMES = ("inverting-gradients", "tiger")
optimization = st.fixed_dictionaries({
    "kind": st.just("optimization"), "attack": st.sampled_from(OPTIM_NAMES), "rec_percent": st.sampled_from([0.0, 0.0, 10.0, 50.0]),
    "psnr": st.floats(5.0, 40.0), "threshold": st.just(20.0), "iterations": st.integers(1, 10_000),
    "budget_factor": st.sampled_from([None, 0.1, 1.0, 3.99, 4.0, 8.0]), "tuned": st.booleans(),
    "tuning_trials": st.sampled_from([0, 1, MIN_TUNE_TRIALS - 1, MIN_TUNE_TRIALS, 20])})
exact = st.fixed_dictionaries({
    "kind": st.just("exact"), "attack": st.sampled_from(EXACT_NAMES), "rec_percent": st.sampled_from([0.0, 100.0]),
    "psnr": st.floats(5.0, 150.0), "threshold": st.just(20.0), "targets": st.just(2),
    "certain_targets": st.integers(0, 2), "precondition_held_targets": st.integers(0, 2)})
analytic = st.fixed_dictionaries({"kind": st.just("analytic"), "rec_percent": st.sampled_from([0.0, 30.0]),
                                  "psnr": st.floats(5.0, 150.0), "threshold": st.just(20.0)})
attack_sets = st.dictionaries(st.text("abcdefgh", min_size=1, max_size=4), st.one_of(optimization, exact, analytic),
                              min_size=1, max_size=5)


def _conditions_for_low(scores: dict, required, required_optim=()) -> bool:
    ran = {s["attack"] for s in scores.values() if s["kind"] == "exact"}
    ran_optim = {s.get("attack") for s in scores.values() if s["kind"] == "optimization"}
    if not all(n in ran_optim for n in required_optim):
        return False
    exact_ok = all(n in ran for n in required) and all(
        s["certain_targets"] == 0 and s["precondition_held_targets"] == 0 for s in scores.values() if s["kind"] == "exact")
    optim_ok = all(s["tuned"] and s["tuning_trials"] >= MIN_TUNE_TRIALS and s["budget_factor"] is not None
                   and s["budget_factor"] >= BUDGET_FACTOR_FOR_LOW for s in scores.values() if s["kind"] == "optimization")
    return exact_ok and optim_ok


@settings(max_examples=400, deadline=None)
@given(attack_sets, st.lists(st.sampled_from(EXACT_NAMES), max_size=2, unique=True),
       st.lists(st.sampled_from(OPTIM_NAMES), max_size=2, unique=True))
def test_low_exactly_when_every_condition_of_the_rule_holds(scores, required, required_optim):
    record = judge_evidence(scores, required_exact=required, required_optimization=required_optim)
    nothing_found = all(s["rec_percent"] == 0.0 and s["psnr"] < 15.0 for s in scores.values())
    conditions = _conditions_for_low(scores, required, required_optim)
    if record["verdict"] == "low":  # low => nothing found, every required attack ran, exact failed, searches real
        assert nothing_found and conditions and record["not_tried"] == []
    if nothing_found and not any(s["kind"] == "exact" and s["certain_targets"] for s in scores.values()):
        assert record["verdict"] == ("low" if conditions else "inconclusive")
        assert (record["verdict"] == "inconclusive") == bool(record["not_tried"])


@settings(max_examples=300, deadline=None)
@given(attack_sets)
def test_proved_only_from_a_verified_recovery_and_never_low(scores):
    record = judge_evidence(scores)
    verified = [n for n, s in scores.items() if s["kind"] == "exact" and s["certain_targets"] > 0]
    assert (record["evidence"] == "proved") == bool(verified)
    if verified:
        assert record["proved_by"] in verified and record["verdict"] != "low"
    sentence = evidence_sentence(record)
    assert ("proved" in sentence) == bool(verified) and "safe" not in sentence.lower()
    # "optimization" is said of an optimization attack only; "no optimization" of an analytic readout only
    if record["evidence"] == "estimated":
        kind = scores[record["strongest"]]["kind"]
        assert ("an optimization" in sentence) == (kind == "optimization")
        assert ("no optimization" in sentence) == (kind == "analytic")


def test_a_missing_exact_attack_and_a_one_trial_tuning_are_named():
    ig = {"kind": "optimization", "rec_percent": 0.0, "psnr": 8.0, "threshold": 20.0, "iterations": 6000,
          "budget_factor": 4.0, "tuned": True, "tuning_trials": 1}
    record = judge_evidence({"IG": ig}, required_exact=["spear"])
    assert record["verdict"] == "inconclusive"
    assert any("spear" in t and "did not run" in t for t in record["not_tried"])
    assert any(f"at least {MIN_TUNE_TRIALS}" in t for t in record["not_tried"])
    assert not searched({"tuned": True, "tuning_trials": 1}) and searched({"tuned": True, "tuning_trials": 8})
    assert judge_evidence({"IG": {**ig, "tuning_trials": 8}})["verdict"] == "low"


def _reference_eth(raw, total):
    """The rounding as it was written before issue 27 (one loop per round), for small inputs."""
    raw = torch.as_tensor(raw, dtype=torch.float64)
    floor = raw.floor().clamp(min=0)
    frac = raw - floor
    counts = floor.clone()
    remainder = total - int(floor.sum())
    if remainder > 0:
        rounds, rest = divmod(remainder, raw.numel())
        counts += rounds
        if rest:
            counts[torch.argsort(frac, descending=True, stable=True)[:rest]] += 1
    elif remainder < 0:
        excess = -remainder
        candidates = floor >= 1
        frac = torch.where(candidates, frac, torch.ones_like(frac))
        first = min(excess, int(candidates.sum()))
        counts[torch.argsort(frac, stable=True)[:first]] -= 1
        left = excess - first
        while left > 0:
            positive = int((counts > 0).sum())
            take = min(left, positive)
            order = torch.argsort(torch.where(counts > 0, floor, torch.full_like(floor, -1.0)), descending=True,
                                  stable=True)
            counts[order[:take]] -= 1
            left -= take
    return counts.long()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-5.0, 60.0), min_size=1, max_size=8), st.integers(0, 40))
def test_closed_form_rounding_equals_the_loop(raw, total):
    got = round_counts_eth(torch.tensor(raw, dtype=torch.float64), total)
    assert got.tolist() == _reference_eth(raw, total).tolist()
    assert int(got.sum()) == total and int(got.min()) >= 0


def test_huge_raw_counts_round_at_once_and_are_implausible():
    import time

    raw = torch.tensor([3.5e6, -1.2e6, 2.0e6, 7.0])  # iLRG on an MLP whose weights were scaled ×7 (issue 27)
    start = time.perf_counter()
    counts = round_counts_eth(raw, 16)
    assert time.perf_counter() - start < 1.0 and int(counts.sum()) == 16 and int(counts.min()) >= 0
    assert "4× N" in plausible_counts(raw, 16) and plausible_counts(torch.tensor([9.6, 6.4]), 16) is None
    assert "not finite" in plausible_counts(torch.tensor([1.0, float("inf")]), 16)
