"""Issue #42 item 6: the exact attack's evidence keeps the record of the target that verified, and the sentence
prints "<" only when the relative error is below the tolerance."""

from types import SimpleNamespace

from fedleak.audit.execute.engine import evidence_fields
from fedleak.audit.judge.verdict import _verification_text


def test_the_verified_targets_record_is_kept():
    failed = {"relative_error": 0.31, "tolerance": 1e-3, "matches": False}
    verified = {"relative_error": 2e-7, "tolerance": 1e-3, "matches": True}
    extras = [{"certain": False, "exactness": {"verification": failed}},
              {"certain": True, "exactness": {"verification": verified}}]
    out = evidence_fields(SimpleNamespace(name="spear", options={}), extras)
    assert out["verification"] is verified
    assert _verification_text(out["verification"]) == " (relative error 2.0e-07 < tolerance 0.001)"
    none_held = evidence_fields(SimpleNamespace(name="spear", options={}), extras[:1])
    assert none_held["verification"] is failed
    assert _verification_text(failed) == " (relative error 3.1e-01 ≥ tolerance 0.001)"
