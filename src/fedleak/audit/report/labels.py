"""A verdict's words and colour wherever the report shows it: its label (``"LOW leakage"``), its colour, the caveat
of shortened attacks (``--quick``, ``--budget``).

Below both the page (:mod:`.page`, which re-exports these) and the modality objects' report sections
(:mod:`fedleak.modality.image.report`, :mod:`fedleak.modality.tabular`), which state a verdict in their own words.
"""

from __future__ import annotations

from ..judge.verdict import COLOURS


#: said wherever a verdict of a --quick audit is shown: its attacks ran with shortened budgets
QUICK_CAVEAT = ("The attacks ran with shortened budgets (--quick or --budget): they show a lower bound of the "
                "leakage; rerun without them before relying on a low or medium verdict.")


def shortened(result: dict) -> bool:
    """Whether the attacks ran shortened: ``--quick``, or a ``--budget`` that cut them (``time_budget``)."""
    return bool(result.get("quick") or (result.get("time_budget") or {}).get("shortened"))


def verdict_label(verdict: str, quick: bool = False) -> str:
    """``"LOW leakage"``, or with ``--quick`` ``"LOW leakage (shortened attacks)"``."""
    return f"{verdict.upper()} leakage" + (" (shortened attacks)" if quick and verdict in ("low", "medium") else "")


def verdict_colour(verdict: str, quick: bool = False) -> str:
    """The verdict's colour; a low verdict from shortened attacks is grey, never the all-clear green."""
    if quick and verdict == "low":
        return COLOURS["not run"]
    return COLOURS.get(verdict, COLOURS["not run"])
