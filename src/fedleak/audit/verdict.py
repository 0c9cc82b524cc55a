"""The verdict rule: high, medium or low leakage for one threat model.

An image counts as **recognizable** when its reconstruction's PSNR exceeds the dataset's threshold δ
(20 dB; 19 dB for CIFAR-100: the Rec% protocol of Dimitrov et al., App. A.8). For each attack the
audit takes the share of a client's images that are recognizable (Rec%), averaged over the audited
clients (or aggregates, under secure aggregation); the threat model's leakage is that of its
strongest attack:

* **high** — the strongest attack recognizably reconstructs at least 25% of a client's images;
* **medium** — it reconstructs some (more than 0%, less than 25%);
* **low** — no image is reconstructed recognizably by any attack.

The rule is stated in every report (:data:`RULE`) and stored in ``metrics.json``.
"""

from __future__ import annotations

from typing import Optional

HIGH_PERCENT = 25.0
LEVELS = ("low", "medium", "high")
COLOURS = {"high": "#b42318", "medium": "#b54708", "low": "#067647", "not run": "#59636e"}
RULE = (f"high: the strongest attack reconstructs at least {HIGH_PERCENT:.0f}% of a client's images recognizably "
        f"(PSNR above the dataset's threshold: 20 dB, 19 dB for CIFAR-100), averaged over the audited clients; "
        f"medium: it reconstructs some but fewer than {HIGH_PERCENT:.0f}%; low: no image is recognizable.")


def level(rec_percent: Optional[float]) -> str:
    """The verdict for the strongest attack's mean Rec%."""
    if rec_percent is None:
        return "not run"
    if rec_percent >= HIGH_PERCENT:
        return "high"
    if rec_percent > 0:
        return "medium"
    return "low"


def judge(attack_scores: dict) -> dict:
    """``{verdict, leakage (Rec%), psnr, strongest}`` from ``{attack display name: scores}``."""
    scored = {name: s for name, s in attack_scores.items() if s.get("rec_percent") is not None}
    if not scored:
        return {"verdict": "not run", "rec_percent": None, "psnr": None, "strongest": None}
    name, best = max(scored.items(), key=lambda kv: (kv[1]["rec_percent"], kv[1].get("psnr") or 0.0))
    return {"verdict": level(best["rec_percent"]), "rec_percent": best["rec_percent"],
            "psnr": max(s.get("psnr") or 0.0 for s in scored.values()), "strongest": name}


def worst(verdicts) -> str:
    """The most severe of several verdicts ("not run" ignored)."""
    ranked = [v for v in verdicts if v in LEVELS]
    return max(ranked, key=LEVELS.index) if ranked else "not run"
