"""The verdict's evidence rule on synthetic scores: proved / estimated / not-found, and low only when every
exact attack failed its precondition and every optimization attack was tuned at ≥ 4× its default budget."""

from fedleak.audit.judge.verdict import (COLOURS, RULE, converged, evidence_sentence, judge, judge_evidence, level,
                                   sok_letter, worst)


def _optim(rec=0.0, psnr=8.0, factor=1.0, tuned=False, its=1500):
    return {"rec_percent": rec, "psnr": psnr, "threshold": 20.0, "exact": False, "iterations": its,
            "restarts": 1, "budget_factor": factor, "tuned": tuned, "tuning_trials": 8 if tuned else 0,
            "converged": True}


def _exact(certain=0, targets=1, rec=0.0, psnr=10.0, reason="rank(∇W) = 9 ≠ batch size 8"):
    return {"rec_percent": rec, "psnr": psnr, "threshold": 20.0, "exact": True, "certain_targets": certain,
            "targets": targets, "precondition": {"holds": bool(certain), "reason": reason}}


def test_an_exact_recovery_is_proved_evidence_and_never_low():
    record = judge_evidence({"IG": _optim(), "SPEAR": _exact(certain=1, rec=100.0, psnr=150.0)})
    assert record["evidence"] == "proved" and record["verdict"] == "high" and record["proved_by"] == "SPEAR"
    assert "proved" in evidence_sentence(record)


def test_an_optimization_success_is_estimated():
    record = judge_evidence({"IG": _optim(rec=40.0, psnr=24.0), "SPEAR": _exact()})
    assert record["evidence"] == "estimated" and record["verdict"] == "high"


def test_nothing_found_at_the_default_budget_is_inconclusive_not_low():
    record = judge_evidence({"IG": _optim(factor=1.0), "SPEAR": _exact()})
    assert record["evidence"] == "not-found" and record["verdict"] == "inconclusive"
    text = evidence_sentence(record)
    assert "not found at budget IG at 1500 iterations" in text and "4×" in text and "--tune" in text
    assert "safe" not in text.lower()


def test_low_needs_tuned_attacks_at_four_times_the_budget_and_failed_preconditions():
    assert judge_evidence({"IG": _optim(factor=4.0, tuned=True), "SPEAR": _exact()})["verdict"] == "low"
    assert judge_evidence({"IG": _optim(factor=3.9, tuned=True)})["verdict"] == "inconclusive"
    assert judge_evidence({"IG": _optim(factor=8.0, tuned=False)})["verdict"] == "inconclusive"
    partial = judge_evidence({"IG": _optim(psnr=16.0, factor=4.0, tuned=True)})
    assert partial["verdict"] == "medium" and partial["evidence"] == "estimated"


def test_public_functions_keep_working_and_rank_inconclusive_above_low():
    assert level(30.0) == "high" and level(0.0, 10.0) == "low" and judge({})["verdict"] == "not run"
    assert worst(["low", "inconclusive"]) == "inconclusive" and worst(["inconclusive", "medium"]) == "medium"
    assert worst(["not run"]) == "not run" and "inconclusive" in COLOURS and "safe" not in RULE.lower()


def test_plateau_and_sok_letters():
    assert converged([10, 5, 2, 1, 1.0, 1.0, 1.0, 1.0]) is True
    assert converged([10, 8, 6, 4, 2, 1]) is False and converged([1.0, 2.0]) is None
    assert sok_letter(False, False, True) == "C" and sok_letter(True, False, True) == "F"
    assert sok_letter(False, False, False) == "B" and sok_letter(False, True) == "D" and sok_letter(True, True) == "G"


def test_flower_leakage_level_reads_holds_as_the_precondition_and_certain_as_the_proof():
    """Issue 32: ``exactness["holds"]`` is the precondition alone; only ``certain`` makes a reply ``high``, and a
    reason that already says why the recovery is no proof is not told twice."""
    from fedleak.integrations.flower.scoring import leakage_level

    proved = leakage_level({"exactness": {"holds": True, "reason": "fits"}, "certain": True})
    assert proved["level"] == "high" and proved["evidence"].startswith("proved by the attacker")
    held = leakage_level({"exactness": {"holds": True, "reason": "fits the span limit"}, "certain": False})
    assert held["level"] == "inconclusive" and held["evidence"].endswith("not verified against the update")
    for reason in ("rank 1; but the gradient recomputed ... does not match the update",
                   "relative residual 3e-02 ≥ 0.001: ..., counts are an estimate", "uncertain: the raw label counts"):
        said = leakage_level({"exactness": {"holds": True, "reason": reason}, "certain": False})
        assert said == {"level": "inconclusive", "evidence": reason}
    imprint = leakage_level({"verbatim": 3})  # high, but "proved" keeps its one meaning: the update recomputed
    assert imprint["level"] == "high" and "not checked by recomputing" in imprint["evidence"] and \
        not imprint["evidence"].startswith("proved")
    failed = leakage_level({"exactness": {"holds": False, "reason": "rank(∇W) = 9 ≠ batch size 8"}, "certain": False})
    assert failed == {"level": "inconclusive", "evidence": "rank(∇W) = 9 ≠ batch size 8"}
