"""The verdict rule: high, medium or low leakage for one threat model (images and text alike).

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


#: text: the mean ROUGE-1 at which a text attack's recovery counts as partial (half the words show)
PARTIAL_ROUGE = 0.5
TEXT_RULE = (f"high: the strongest attack recovers at least {HIGH_PERCENT:.0f}% of a client's sequences exactly "
             f"(every token at its position), averaged over the audited clients; medium: it recovers some exactly but "
             f"fewer than {HIGH_PERCENT:.0f}%, or none but with a mean ROUGE-1 of at least {PARTIAL_ROUGE} (half the "
             f"words show); low: no sequence is recovered exactly and every attack's mean ROUGE-1 is below "
             f"{PARTIAL_ROUGE}.")


def level(rec_percent: Optional[float], psnr: Optional[float] = None, threshold: float = 20.0, *,
          rouge1: Optional[float] = None) -> str:
    """The verdict for the strongest attack's mean Rec% (images: recognizable; text: exact sequences) and the
    best partial score: mean PSNR (dB) within :data:`PARTIAL_DB` of ``threshold``, or a text attack's mean
    ROUGE-1 of at least :data:`PARTIAL_ROUGE` — one rule for both modalities (:data:`RULE`, :data:`TEXT_RULE`)."""
    if rec_percent is None:
        return "not run"
    if rec_percent >= HIGH_PERCENT:
        return "high"
    partial = ((psnr is not None and psnr >= threshold - PARTIAL_DB)
               or (rouge1 is not None and rouge1 >= PARTIAL_ROUGE))
    if rec_percent > 0 or partial:
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


def judge_text(attack_scores: dict) -> dict:
    """``{verdict, rec_percent (exact %), rouge1, psnr: None, strongest}`` of a text audit from ``{attack: scores}``:
    a sequence counts as recovered when every one of its tokens is (``exact_sequences``)."""
    scored = {name: s for name, s in attack_scores.items() if s.get("rec_percent") is not None}
    if not scored:
        return {"verdict": "not run", "rec_percent": None, "rouge1": None, "psnr": None, "strongest": None}
    name, best = max(scored.items(), key=lambda kv: (kv[1]["rec_percent"], kv[1].get("rouge1") or 0.0))
    rouge1 = max(s.get("rouge1") or 0.0 for s in scored.values())
    failed = [s["exactness"].get("reason") for s in scored.values()
              if isinstance(s.get("exactness"), dict) and s["exactness"].get("holds") is False]
    return {"verdict": level(best["rec_percent"], rouge1=rouge1), "rec_percent": best["rec_percent"],
            "rouge1": rouge1, "psnr": None, "strongest": name, "modality": "text",
            "condition_failed": failed[0] if failed else None}


def worst(verdicts) -> str:
    """The most severe of several verdicts ("not run" ignored; ``inconclusive`` ranks above ``low``)."""
    ranked = [v for v in verdicts if v in RANKED]
    return max(ranked, key=RANKED.index) if ranked else "not run"


# ----------------------------------------------------------------------------------------------
# Evidence (issues 20 and 27): what kind of result backs each threat model's verdict, decided by ONE function
# (:func:`judge_evidence`) from what actually ran.
#
# * ``proved``    — an exact attack's recovery was verified: the update recomputed from the recovered inputs
#                   (and labels) through the one client-update function (:mod:`fedleak.fl.client`) matches the
#                   update that was sent, within the tolerance stated beside it (``verification``);
# * ``estimated`` — an optimization attack, or an analytic readout not verified against the update, reconstructed
#                   data recognizably or partially (Rec% / PSNR, exact share / ROUGE);
# * ``not-found`` — no attack succeeded at the stated budget.
#
# ``low`` needs more than "not found": every exact attack applicable to the model and protocol ran (the audit
# adds them whatever ``--attacks`` says) and its precondition failed on every target, AND the threat model's
# optimization attacks ran (``--attacks`` cannot leave them out to earn ``low``), each tuned by a real search
# (at least :data:`MIN_TUNE_TRIALS` Optuna trials) and run at ≥ 4× its default budget. Otherwise the verdict is
# ``inconclusive`` and ``not_tried`` says what is missing.

EVIDENCE = ("proved", "estimated", "not-found")
#: the kinds of attack the rule distinguishes (``kind`` in each attack's summary)
KINDS = ("exact", "analytic", "optimization")
BUDGET_FACTOR_FOR_LOW = 4.0
#: the fewest Optuna trials that count as a search (the default settings are trial 0; one trial is no search)
MIN_TUNE_TRIALS = 8
RANKED = ("low", "inconclusive", "medium", "high")
COLOURS["inconclusive"] = "#6941c6"
EVIDENCE_RULE = (
    f"evidence: {EVIDENCE[0]} when the update recomputed from an exact attack's recovered inputs and labels "
    "through the client-update function matches the one sent, within the stated tolerance; "
    f"{EVIDENCE[1]} when an optimization attack, or an analytic readout not recomputed against the update, "
    f"succeeded; {EVIDENCE[2]} otherwise, with the budget. low only when every exact attack applicable to the model and protocol "
    "ran and its precondition failed, and the threat model's optimization attacks ran, each tuned by a search of "
    "at least "
    f"{MIN_TUNE_TRIALS} trials and run at ≥ {BUDGET_FACTOR_FOR_LOW:.0f}× its default budget; otherwise a "
    "not-found result is inconclusive. A verdict is never a statement that a deployment is safe.")

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


def kind_of(summary: dict) -> str:
    """An attack summary's kind (:data:`KINDS`): its ``kind``, else ``exact`` from the older flag, else by budget."""
    kind = summary.get("kind")
    if kind in KINDS:
        return kind
    if summary.get("exact"):
        return "exact"
    return "optimization" if summary.get("iterations") is not None or summary.get("budget_factor") is not None \
        else "analytic"


def searched(budget: dict) -> bool:
    """A real search: tuned with at least :data:`MIN_TUNE_TRIALS` trials."""
    return bool(budget.get("tuned")) and int(budget.get("tuning_trials") or 0) >= MIN_TUNE_TRIALS


def judge_evidence(attack_scores: dict, *, knowledge: Optional[dict] = None, base: Optional[dict] = None,
                   required_exact=(), required_optimization=(), chosen_by: str = "--attacks") -> dict:
    """The verdict and the evidence behind it, from ``{display name: summary}`` of the attacks that ran.

    Each summary carries ``attack`` (registry name), ``kind`` (:data:`KINDS`), and per kind: exact —
    ``certain_targets`` (targets whose recovery verified), ``precondition_held_targets``, ``targets``,
    ``precondition`` (the attack's ``extras["exactness"]``: ``holds`` — its precondition held, nothing more —
    and ``reason``), ``verification`` (relative error, tolerance, ``matches``); optimization —
    ``iterations`` (or text ``steps``), ``budget_factor`` (its budget / the default), ``tuned``,
    ``tuning_trials``, ``converged``. ``required_exact``: registry names of the exact attacks applicable to this
    model and protocol (:func:`fedleak.audit.plan.threats.required_exact`); ``required_optimization``: the threat
    model's default optimization attacks (:func:`fedleak.audit.plan.threats.required_optimization`); one of either
    that did not run makes ``low`` impossible. ``knowledge`` is copied into ``assumptions``; ``base``: the modality's :func:`judge` result.
    ``chosen_by``: who chose the attacks that ran (``--attacks``, or a preset that did), named where one is missing.
    """
    base = base if base is not None else judge(attack_scores)
    exact = {n: s for n, s in attack_scores.items() if kind_of(s) == "exact"}
    optim = {n: s for n, s in attack_scores.items() if kind_of(s) == "optimization" and s.get("rec_percent") is not None}
    analytic = {n: s for n, s in attack_scores.items() if kind_of(s) == "analytic"}
    proved = {n: s for n, s in exact.items() if (s.get("certain_targets") or 0) > 0}
    budgets = {n: {"iterations": s.get("iterations"), "unit": s.get("budget_unit", "iterations"),
                   "restarts": s.get("restarts"), "budget_factor": s.get("budget_factor"), "tuned": bool(s.get("tuned")),
                   "tuning_trials": int(s.get("tuning_trials") or 0), "converged": s.get("converged")}
               for n, s in optim.items()}
    out = {**base, "assumptions": dict(knowledge or {}), "budgets": budgets,
           "exact_attacks": {n: {"attack": s.get("attack"), "precondition_held": bool(s.get("precondition_held_targets",
                                                                          s.get("certain_targets"))),
                                 "precondition_held_targets": s.get("precondition_held_targets",
                                                                    s.get("certain_targets", 0)),
                                 "certain_targets": s.get("certain_targets", 0), "targets": s.get("targets"),
                                 "reason": (s.get("precondition") or {}).get("reason"),
                                 "verification": s.get("verification")} for n, s in exact.items()},
           "analytic_attacks": sorted(analytic), "required_exact": list(required_exact),
           "required_optimization": list(required_optimization),
           "min_tune_trials": MIN_TUNE_TRIALS, "budget_factor_for_low": BUDGET_FACTOR_FOR_LOW, "not_tried": []}
    if base["verdict"] == "not run":
        out["evidence"] = None
        return out
    strongest = attack_scores.get(base.get("strongest")) or {}
    out["strongest_kind"] = kind_of(strongest) if strongest else None
    if proved:
        name = max(proved, key=lambda n: proved[n]["certain_targets"])
        out.update({"evidence": "proved", "proved_by": name})
        if base["verdict"] == "low":
            out["verdict"] = "medium"  # a verified recovery of some target is never low leakage
        return out
    if base["verdict"] in ("high", "medium"):
        out["evidence"] = "estimated"
        return out
    out["evidence"] = "not-found"
    ran = {s.get("attack") for s in exact.values()}
    for name in required_exact:
        if name not in ran:
            out["not_tried"].append(f"{name}: an exact attack applicable to this model and protocol did not run")
    ran_optim = {s.get("attack") for s in optim.values()}
    for name in required_optimization:
        if name not in ran_optim:
            out["not_tried"].append(f"{name}: the threat model's optimization attack did not run (left out by "
                                    f"{chosen_by})")
    for n, s in exact.items():
        if int(s.get("precondition_held_targets") or 0) > 0:
            out["not_tried"].append(f"{n}: its precondition held on {s['precondition_held_targets']} target(s) but "
                                    f"the recovery did not verify against the update")
    for n, b in budgets.items():
        if not searched(b):
            out["not_tried"].append(f"{n}: tuned with {b['tuning_trials']} trial(s), low requires a search of at "
                                    f"least {MIN_TUNE_TRIALS} (--tune {MIN_TUNE_TRIALS})")
        factor = b["budget_factor"]
        if factor is None or factor < BUDGET_FACTOR_FOR_LOW:
            shown = "an unknown multiple of" if factor is None else f"{factor:g}×"
            out["not_tried"].append(f"{n}: run at {shown} the default budget, low requires ≥ "
                                    f"{BUDGET_FACTOR_FOR_LOW:.0f}×")
    if out["not_tried"]:
        out["verdict"] = "inconclusive"
    return out


def _verification_text(v) -> str:
    if not isinstance(v, dict) or v.get("relative_error") is None:
        return ""
    error = min(v["relative_error"], v.get("relative_error_after_scale", v["relative_error"]))
    holds = error < v.get("tolerance", 0)  # "<" only when it holds (issue #42 item 6)
    return f" (relative error {error:.1e} {'<' if holds else '≥'} tolerance {v.get('tolerance', 0):g})"


def evidence_sentence(record: dict) -> str:
    """One line for the report: the verdict's evidence, budget and what was not tried (never "safe").

    Every word about proof, exactness or optimization is derived from the record: ``proved`` only from a
    verified recovery, "optimization" only for an optimization attack, "no optimization" for an analytic one.
    """
    kind = record.get("evidence")
    if kind == "proved":
        ex = record["exact_attacks"][record["proved_by"]]
        return (f"{kind}: {record['proved_by']} recovered {ex['certain_targets']} of {ex['targets']} target(s); the "
                f"update recomputed from the recovered inputs and labels through the client-update function matches "
                f"the one sent{_verification_text(ex.get('verification'))}")
    if kind == "estimated":
        strongest = record.get("strongest")
        b = record.get("budgets", {}).get(strongest)
        if record.get("strongest_kind") == "optimization" and b:
            factor = f", {b['budget_factor']:g}× the default budget" if b.get("budget_factor") is not None else ""
            return (f"estimated: {strongest} at {b['iterations']} {b['unit']}{factor} "
                    f"(an optimization, not a proof)")
        if record.get("strongest_kind") == "exact":
            return (f"estimated: {strongest}'s recovery was scored against the data but did not verify against the "
                    f"update (not a proof)")
        return (f"estimated: {strongest}, an analytic readout with no optimization, scored against the data; no "
                f"recomputation of the update checked it (not a proof)")
    if kind == "not-found":
        parts = [f"{n} at {b['iterations']} {b['unit']}" for n, b in record.get("budgets", {}).items()]
        parts += [f"{n} (analytic, no budget)" for n in record.get("analytic_attacks", [])]
        parts += [f"{n} (an exact attack whose precondition failed)" for n, e in record.get("exact_attacks", {}).items()
                  if not e.get("precondition_held_targets")]
        text = "not found at budget " + (", ".join(parts) if parts else "(no attack)")
        if record.get("not_tried"):
            text += "; low requires: " + "; ".join(record["not_tried"])
        return text
    return "no attack ran"
