"""The verdict rule: high, medium or low leakage for one threat model.

An image counts as **recognizable** when its reconstruction's PSNR exceeds the dataset's threshold δ
(20 dB; 19 dB for CIFAR-100: the Rec% protocol of Dimitrov et al., App. A.8). For each attack the
audit takes the share of a client's images that are recognizable (Rec%), averaged over the audited
clients (or aggregates, under secure aggregation); the threat model's leakage is that of its
strongest attack:

* **high** — the strongest attack recognizably reconstructs at least 25% of a client's images;
* **medium** — it reconstructs some (more than 0%, less than 25%), or none recognizably but with a
  mean PSNR within 5 dB of δ (partial reconstructions: shapes, colours, classes show);
* **low** — no image is recognizable and every attack's mean PSNR is more than 5 dB below δ.

The rule is stated in every report (:data:`RULE`) and stored in ``metrics.json``.
"""

from __future__ import annotations

from typing import Optional

HIGH_PERCENT = 25.0
PARTIAL_DB = 5.0
LEVELS = ("low", "medium", "high")
COLOURS = {"high": "#b42318", "medium": "#b54708", "low": "#067647", "not run": "#59636e"}
RULE = (f"high: the strongest attack reconstructs at least {HIGH_PERCENT:.0f}% of a client's images recognizably "
        f"(PSNR above the dataset's threshold: 20 dB, 19 dB for CIFAR-100), averaged over the audited clients; "
        f"medium: it reconstructs some but fewer than {HIGH_PERCENT:.0f}%, or none but with a mean PSNR within "
        f"{PARTIAL_DB:.0f} dB of the threshold (partial reconstructions); low: no image is recognizable and every "
        f"attack's mean PSNR is more than {PARTIAL_DB:.0f} dB below the threshold.")


def level(rec_percent: Optional[float], psnr: Optional[float] = None, threshold: float = 20.0) -> str:
    """The verdict for the strongest attack's mean Rec% and the best mean PSNR (dB)."""
    if rec_percent is None:
        return "not run"
    if rec_percent >= HIGH_PERCENT:
        return "high"
    if rec_percent > 0 or (psnr is not None and psnr >= threshold - PARTIAL_DB):
        return "medium"
    return "low"


def judge(attack_scores: dict) -> dict:
    """``{verdict, leakage (Rec%), psnr, strongest}`` from ``{attack display name: scores}``."""
    scored = {name: s for name, s in attack_scores.items() if s.get("rec_percent") is not None}
    if not scored:
        return {"verdict": "not run", "rec_percent": None, "psnr": None, "strongest": None}
    name, best = max(scored.items(), key=lambda kv: (kv[1]["rec_percent"], kv[1].get("psnr") or 0.0))
    psnr = max(s.get("psnr") or 0.0 for s in scored.values())
    return {"verdict": level(best["rec_percent"], psnr, best.get("threshold", 20.0)),
            "rec_percent": best["rec_percent"], "psnr": psnr, "strongest": name}


def worst(verdicts) -> str:
    """The most severe of several verdicts ("not run" ignored; ``inconclusive`` ranks above ``low``)."""
    ranked = [v for v in verdicts if v in RANKED]
    return max(ranked, key=RANKED.index) if ranked else "not run"


# ----------------------------------------------------------------------------------------------
# Evidence (issue 20): what kind of result backs each threat model's verdict.
#
# * ``proved``    — an exact attack (SPEAR, the row/bias ratio) whose precondition held: its recoveries were
#                   verified by recomputing the update from them, so they are certain, not estimated;
# * ``estimated`` — an optimization attack reconstructed images recognizably or partially (Rec% / PSNR);
# * ``not-found`` — no attack succeeded at the stated budget.
#
# ``low`` needs more than "not found": every exact attack's precondition must have failed (or no exact
# attack applies) AND every optimization attack must have been tuned and run at ≥ 4× its default budget.
# Otherwise the verdict is ``inconclusive`` and the evidence lists what was not tried.

EVIDENCE = ("proved", "estimated", "not-found")
BUDGET_FACTOR_FOR_LOW = 4.0
RANKED = ("low", "inconclusive", "medium", "high")
COLOURS["inconclusive"] = "#6941c6"
EVIDENCE_RULE = (
    "evidence: proved when an exact attack's precondition held and its recovery was verified (the update "
    "recomputed from the recovered inputs and labels matches the one sent); estimated when an optimization "
    "attack succeeded; not-found otherwise, with the budget. low only when every exact attack's precondition "
    f"fails and every optimization attack was tuned and run at ≥ {BUDGET_FACTOR_FOR_LOW:.0f}× its default budget; "
    "otherwise a not-found result is inconclusive. A verdict is never a statement that a deployment is safe.")

#: the threat models A–H of the SoK of Carletti et al. (USENIX Security 2025, "SoK: Gradient Inversion Attacks in
#: Federated Learning", Table of threat models): cumulative knowledge of an eavesdropping server — A model updates;
#: B + basic knowledge (architecture); C + training details (batch size, epochs, lr); D + surrogate data; E + the
#: clients' data distribution — and of a manipulating one: F active manipulation (with training details), G + surrogate
#: data, H + client selection.
SOK_THREAT_MODELS = {"A": "Eavesdropper", "B": "Informed Eavesdropper", "C": "Parameter-Aware Eavesdropper",
                     "D": "Data-Enhanced Eavesdropper", "E": "Statistical-Informed Eavesdropper",
                     "F": "Active Manipulator", "G": "Data-Enhanced Manipulator", "H": "Active Client Manipulator"}
SOK_DIMENSIONS = ("modifies the model", "uses auxiliary data", "knows training details")


def sok_letter(malicious: bool, auxiliary: bool, knows_training: bool = True) -> str:
    """The SoK's letter (:data:`SOK_THREAT_MODELS`) of a server that knows the architecture (always, in fedleak).

    Honest-but-curious: B without the training details, C with them, D with surrogate data too (``--tune``).
    Malicious (ships a modified model; the SoK's manipulators know the training details): F, or G when it also
    uses surrogate data (e.g. imprint bins fitted to public inputs). fedleak never selects clients (H).
    """
    if malicious:
        return "G" if auxiliary else "F"
    if auxiliary:
        return "D"
    return "C" if knows_training else "B"


def converged(losses, window: float = 0.25, rel: float = 0.01) -> "Optional[bool]":
    """Loss plateau: over the last ``window`` of the logged losses the loss fell by at most ``rel`` (relative).

    ``None`` when fewer than four losses were logged (nothing to judge).
    """
    values = [float(v) for v in (losses or []) if v is not None and v == v]
    if len(values) < 4:
        return None
    tail = values[-max(2, int(len(values) * window)):]
    drop = tail[0] - min(tail)
    return bool(drop <= rel * max(abs(tail[0]), 1e-12))


def judge_evidence(attack_scores: dict, *, knowledge: Optional[dict] = None, base: Optional[dict] = None) -> dict:
    """:func:`judge` plus the evidence behind it, from ``{display name: summary}``.

    Each summary may carry ``exact`` (an exact attack), ``certain_targets`` / ``targets``, ``precondition``
    (``{"holds", "reason"}``), ``budget_factor`` (iterations / default), ``tuned``, ``converged`` and
    ``iterations``. ``knowledge`` (labels known or inferred, BatchNorm mode, SoK letter) is copied into
    ``assumptions``. ``base``: the modality's own :func:`judge` result (text: exact sequences), if not images'.
    """
    base = base if base is not None else judge(attack_scores)
    exact = {n: s for n, s in attack_scores.items() if s.get("exact")}
    optim = {n: s for n, s in attack_scores.items() if not s.get("exact") and s.get("rec_percent") is not None}
    proved = {n: s for n, s in exact.items() if s.get("certain_targets")}
    budgets = {n: {"iterations": s.get("iterations"), "restarts": s.get("restarts"),
                   "budget_factor": s.get("budget_factor"), "tuned": bool(s.get("tuned")),
                   "converged": s.get("converged")} for n, s in optim.items()}
    out = {**base, "assumptions": dict(knowledge or {}), "budgets": budgets,
           "exact_attacks": {n: {"precondition_held": bool(s.get("certain_targets")),
                                 "certain_targets": s.get("certain_targets", 0), "targets": s.get("targets"),
                                 "reason": (s.get("precondition") or {}).get("reason")} for n, s in exact.items()},
           "not_tried": []}
    if base["verdict"] == "not run":
        out["evidence"] = None
        return out
    if proved:
        name = max(proved, key=lambda n: proved[n]["certain_targets"])
        out.update({"evidence": "proved", "proved_by": name})
        if base["verdict"] in ("low",):
            out["verdict"] = "medium"  # a certain recovery of some target is never low leakage
        return out
    if base["verdict"] in ("high", "medium"):
        out["evidence"] = "estimated"
        return out
    out["evidence"] = "not-found"
    for n, b in budgets.items():
        if not b["tuned"]:
            out["not_tried"].append(f"{n}: not tuned (run with --tune)")
        if (b["budget_factor"] or 0.0) < BUDGET_FACTOR_FOR_LOW:
            factor = b["budget_factor"]
            out["not_tried"].append(f"{n}: run at {factor if factor is not None else '?'}× the default budget, "
                                    f"low requires ≥ {BUDGET_FACTOR_FOR_LOW:.0f}×")
    if out["not_tried"]:
        out["verdict"] = "inconclusive"
    return out


def evidence_sentence(record: dict) -> str:
    """One line for the report: the verdict's evidence, budget and what was not tried (never "safe")."""
    kind = record.get("evidence")
    if kind == "proved":
        ex = record["exact_attacks"][record["proved_by"]]
        return (f"proved: {record['proved_by']} recovered {ex['certain_targets']} of {ex['targets']} target(s) "
                f"exactly and verified them against the update")
    if kind == "estimated":
        return f"estimated: {record.get('strongest')} at its stated budget (optimization, not a proof)"
    if kind == "not-found":
        parts = [f"{n} at {b['iterations']} iterations" for n, b in record.get("budgets", {}).items()]
        text = "not found at budget " + (", ".join(parts) if parts else "(no optimization attack)")
        if record.get("not_tried"):
            text += "; low requires: " + "; ".join(record["not_tried"])
        return text
    return "no attack ran"
