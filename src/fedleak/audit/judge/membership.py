"""Membership of candidate documents as a finding of the honest-but-curious server (issue 46, item 2).

A server that learns which of its candidate documents a client trained on has learned something private even
where no sequence can be reconstructed (FlowerTune's 16 × 512 tokens into rank-32 adapters). The measurement
(:mod:`fedleak.audit.execute.membership`) is scored against the audit's own ground truth — which candidates were
in the client's data — so it is *estimated*, never *proved*. Its level, by one rule (:data:`RULE`):

* ``high`` — the test finds at least :data:`HIGH_TPR` of the members at 1 % false positives, the FPR resolved
  (at least 100 non-members) and the AUC's 95 % interval above 0.5;
* ``medium`` — the AUC's 95 % interval (DeLong) lies above 0.5: membership measurably better than chance;
* ``not found`` — otherwise, at this number of candidates (never "low": a test that separated nothing at 64
  candidates says little of 6,400), and always with fewer than :data:`MIN_EACH` members or non-members.

:func:`fold` puts the finding into the honest server's verdict record: ``membership`` (level, numbers,
sentence) and, where membership is the more severe finding, the verdict itself (``verdict_by``, the evidence
``estimated`` and its sentence), by :func:`fedleak.audit.judge.verdict.worst`'s order.
"""

from __future__ import annotations

from typing import Optional

from .verdict import HIGH_PERCENT, worst

HIGH_TPR = HIGH_PERCENT / 100
#: the fewest members and non-members whose AUC interval counts (DeLong's normal approximation is void below)
MIN_EACH = 10
RULE = (f"membership: high when the test finds at least {HIGH_TPR:.0%} of the member documents at 1% false "
        "positives (with at least 100 non-members, so that rate is resolved) and the AUC's 95% interval lies above "
        "0.5; medium when the AUC's 95% interval lies above 0.5; otherwise (or with fewer than 10 members or non-members) "
        "not found at this number of candidates. "
        "Scored against which candidates the client trained on: an estimate, not a proof.")


def level(entry: dict) -> str:
    """``high`` / ``medium`` / ``not found`` of one membership measurement (:data:`RULE`)."""
    if min(int(entry.get("members") or 0), int(entry.get("non_members") or 0)) < MIN_EACH:
        return "not found"
    ci = entry.get("auc_ci95")
    above = isinstance(ci, (list, tuple)) and len(ci) == 2 and ci[0] is not None and float(ci[0]) > 0.5
    if not above:
        return "not found"
    resolved = int(entry.get("non_members") or 0) >= 100
    return "high" if resolved and float(entry.get("tpr_at_1pct_fpr") or 0.0) >= HIGH_TPR else "medium"


def sentence(entry: dict, found: str) -> str:
    ci = entry.get("auc_ci95") or [None, None]
    interval = f", 95% CI {ci[0]:.2f}–{ci[1]:.2f}" if ci[0] is not None else ""
    by = entry.get("headline_statistic") or "the membership test"
    return (f"membership {found} (estimated): {by} finds {entry['tpr_at_1pct_fpr']:.0%} of "
            f"{entry['members']} member documents at 1% false positives among {entry['non_members']} non-members "
            f"(AUC {entry['auc']:.2f}{interval}); non-members: {entry.get('split', 'not stated')}")


def fold(point: dict, honest_key: str = "honest-but-curious") -> Optional[dict]:
    """Put ``point["membership"]`` into the honest server's record of ``point`` (in place); returns the finding."""
    entry = point.get("membership")
    honest = (point.get("threat_models") or {}).get(honest_key)
    if not isinstance(entry, dict) or not isinstance(honest, dict):
        return None
    found = level(entry)
    finding = {"level": found, "verdict": found, "evidence": sentence(entry, found), "rule": RULE,
               "auc": entry["auc"], "auc_ci95": entry.get("auc_ci95"), "tpr_at_1pct_fpr": entry["tpr_at_1pct_fpr"],
               "members": entry["members"], "non_members": entry["non_members"],
               "statistic": entry.get("headline_statistic"), "split": entry.get("split")}
    honest["membership"] = finding
    before = honest.get("verdict")
    if found in ("high", "medium") and before not in (None, "not run") and worst([before, found]) == found \
            and found != before:
        from .verdict import evidence_sentence

        reconstruction = evidence_sentence(honest)
        honest.update({"verdict": found, "verdict_by": "membership", "reconstruction_verdict": before,
                       "evidence": "estimated",
                       "evidence_text": f"{finding['evidence']}; reconstruction: {before} ({reconstruction})"})
    return finding
