"""The verdict of a text audit (issue 27): DAGER's "proved" is the update recomputed from the recovered
sequences, a span that noise fills fails the precondition, --tune scores text, the report names the model.

gpt2-tiny, FedSGD, 2 sequences of 16 tokens; ``--attacks tiger`` (DAGER is added by the audit). Measured on one
loaded CPU thread: about 60 s for the file.
"""

import re

import pytest

import fedleak
from fedleak.audit.judge.verdict import evidence_sentence

BASE = {"data": "text", "model": "gpt2-tiny", "algorithm": "fedsgd", "samples": 2, "malicious": False,
        "attacks": ["tiger"], "iterations": 5, "progress": None, "log": None}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    out = tmp_path_factory.mktemp("text") / "clean"
    return out, fedleak.audit(out=out, **BASE)


def test_dager_is_added_and_proved_by_recomputing_the_update(clean):
    out, result = clean
    attacks = result["scenarios"]["fedsgd"]["attacks"]
    assert set(attacks) == {"tiger", "dager"}
    dager = attacks["dager"]
    check = dager["verification"]
    assert dager["certain_targets"] == 1 and check["matches"] and check["relative_error"] < check["tolerance"] <= 1e-3
    assert check["tolerance"] == max(100 * check["float_error"], 1e-12)  # derived from the float error (issue #42)
    assert "local_training" in check["method"] and len(check["labels"]) == 2  # the targets after the sequences
    tm = result["threat_models"]["honest-but-curious"]
    assert tm["evidence"] == "proved" and tm["required_exact"] == ["dager"]
    assert "relative error" in evidence_sentence(tm)


def test_the_text_report_names_the_model_that_ran_and_every_budget(clean):
    out, result = clean
    page = (out / "report.html").read_text()
    setup = page[page.index('id="setup"'):page.index("</section>", page.index('id="setup"'))]
    assert "Model: gpt2-tiny (untrained: built from its configuration" in setup and "femnist-cnn" not in setup
    assert result["config"]["model"] == result["model"] == "gpt2-tiny"
    assert "Fine-tuning: full" in setup
    assert "None iterations" not in page and "?×" not in page and "None steps" not in page
    tiger = result["scenarios"]["fedsgd"]["attacks"]["tiger"]
    assert tiger["iterations"] == 5 and tiger["budget_unit"] == "steps" and tiger["budget_factor"] == 0.025
    limits = set(re.findall(r"span limit (\d+)", page))
    assert len(limits) == 1, limits  # one span limit for one run


def test_noise_filling_the_span_fails_the_precondition_and_text_tune_scores_text(tmp_path):
    """σ = 0.01 per-example noise (2.5× the gradient's RMS): the precondition used to read "held"."""
    result = fedleak.audit(out=tmp_path / "noise", defense=["gaussian:0.01"], tune=1, tune_clients=1, **BASE)
    dager = result["scenarios"]["fedsgd"]["attacks"]["dager"]
    assert dager["exactness"]["holds"] is False and dager["exactness"]["noise_filled"] is True
    assert dager["exactness"]["reason"].startswith("noise fills the span")
    assert dager["certain_targets"] == 0 and dager["precondition_held_targets"] == 0
    page = (tmp_path / "noise" / "report.html").read_text()
    assert "failed: noise fills the span" in page and "held: " not in page
    tuning = result["scenarios"]["fedsgd"]["attacks"]["tiger"]["tuning"]
    assert tuning["metric"].startswith("100 × exact-sequence share") and len(tuning["trials"]) == 1
    assert result["threat_models"]["honest-but-curious"]["verdict"] != "low"
