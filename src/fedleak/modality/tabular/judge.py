"""The verdict of a tabular audit: what a recovered record is, the level, and the evidence behind it.

A record is **recognizable** when its reconstruction gets every column right (categories equal, numbers within
0.319·σ of the column — TabLeak's tolerance): every quasi-identifier (age, sex, race, native country, occupation,
…) matches, so the record can be linked to its person. Levels, as for images and text (one rule, stated in
every report):

* **high** — the strongest attack recognizably recovers at least 25 % of a client's records (mean over clients);
* **medium** — it recovers some (> 0 %, < 25 %), or none whole but its cell accuracy beats the prior (marginal)
  baseline by at least 10 points (attributes leak though no row is whole);
* **inconclusive** — neither, at the stated budget: nothing was found, which is not evidence of protection (a
  tabular audit never says "low" without the exhaustive search the image rule asks for).

Evidence: *proved* when an exact attack's recovery was verified by recomputing the update; *estimated* for an
optimization attack at its budget; *not-found* otherwise.
"""

from __future__ import annotations

from ...metrics.summary import mean

HIGH_PERCENT = 25.0
PARTIAL_POINTS = 10.0
RECOVERED_ITEM = ("a record whose every column is right (categories equal, numbers within 0.319 sigma of the "
                  "column): all its quasi-identifiers match")
RULE = (f"high: the strongest attack recovers at least {HIGH_PERCENT:.0f}% of a client's records recognizably ("
        f"{RECOVERED_ITEM}), averaged over the audited clients; medium: it recovers some but fewer than "
        f"{HIGH_PERCENT:.0f}%, or none whole but its cell accuracy beats the prior (marginal) baseline by at least "
        f"{PARTIAL_POINTS:.0f} points; inconclusive: neither at the stated budget (not evidence of protection).")


def level(recognizable_percent: float, accuracy=None, prior_accuracy=None) -> str:
    """The rule's level for a share of records recovered whole (and, where measured, the cell accuracy beside the
    prior baseline's)."""
    if recognizable_percent >= HIGH_PERCENT:
        return "high"
    if recognizable_percent > 0 or (accuracy is not None and prior_accuracy is not None
                                    and accuracy - prior_accuracy >= PARTIAL_POINTS / 100):
        return "medium"
    return "inconclusive"


def judge(clients: list[dict]) -> dict:
    """The verdict over the audited clients' results (each ``{"attacks": {name: scores}}``)."""
    names = list(clients[0]["attacks"]) if clients else []
    per_attack = {}
    for name in names:
        scores = [c["attacks"][name] for c in clients]
        per_attack[name] = {
            "recognizable_percent": 100 * mean((s["exact_match_rate"] for s in scores), empty=0.0),
            "accuracy": mean((s["accuracy"] for s in scores), empty=0.0),
            "prior_accuracy": mean((s["prior"]["accuracy"] for s in scores), empty=0.0),
            "random_accuracy": mean((s["random"]["accuracy"] for s in scores), empty=0.0),
            "proved": all(s["evidence"] == "proved" for s in scores),
            "evidence": "proved" if all(s["evidence"] == "proved" for s in scores) else scores[0]["evidence"],
        }
        if all("certified" in s for s in scores):  # VGIA: records proved one by one (their share of the update)
            per_attack[name]["certified_percent"] = 100 * mean((s["certified"] / c["records"]
                                                                 for s, c in zip(scores, clients)), empty=0.0)
    if not per_attack:
        return {"verdict": "not run", "evidence": "not-found", "strongest": None, "attacks": {}}
    strongest = max(per_attack, key=lambda k: (per_attack[k]["recognizable_percent"], per_attack[k]["proved"],
                                               per_attack[k]["accuracy"]))
    best = per_attack[strongest]
    verdict = level(best["recognizable_percent"], best["accuracy"], best["prior_accuracy"])
    evidence = best["evidence"] if verdict != "inconclusive" else "not-found"
    return {"verdict": verdict, "evidence": evidence, "strongest": strongest, "leakage": best["recognizable_percent"],
            "accuracy": best["accuracy"], "attacks": per_attack}


def sentence(threat: str, result: dict) -> str:
    """The verdict in one sentence, derived from the result (never a literal "safe")."""
    if result["verdict"] == "not run":
        return f"{threat}: not run."
    best = result["attacks"][result["strongest"]]
    proved = ("proved (the update recomputed from the recovered records matches the one sent)"
              if "certified_percent" not in best else
              f"proved for the {best['certified_percent']:.0f}% of records certified alone in their slab (each "
              f"record's share of the update recomputed from it matches the one sent)")
    how = {"proved": proved,
           "estimated": "estimated: measured against the true records, not proved by recomputing the update",
           "not-found": "nothing recovered at the stated budget; not evidence of protection"}[result["evidence"]]
    return (f"{threat}: leakage {result['verdict']} — {result['strongest']} recovers "
            f"{best['recognizable_percent']:.0f}% of a client's records whole and {100 * best['accuracy']:.1f}% of "
            f"the cells (prior baseline {100 * best['prior_accuracy']:.1f}%, random {100 * best['random_accuracy']:.1f}%); "
            f"{how}.")
