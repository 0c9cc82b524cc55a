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
    """The most severe of several verdicts ("not run" ignored)."""
    ranked = [v for v in verdicts if v in LEVELS]
    return max(ranked, key=LEVELS.index) if ranked else "not run"
