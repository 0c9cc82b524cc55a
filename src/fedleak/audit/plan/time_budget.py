"""A wall-clock budget for an audit (``--budget 5m``): parse it, and scale the optimization attacks to fit.

The audit measures each optimization attack's seconds per iteration on the first client's update (a short
calibration run, :mod:`fedleak.audit.execute.calibration`), estimates the plan's optimization work (seconds
per iteration × iterations × targets × settings) and, when that exceeds what is left of the budget, scales
every optimization attack's iteration budget by one factor, never below :data:`FLOOR` iterations. Exact and
analytic attacks (the row/bias ratio, SPEAR, DAGER, the imprint read-back) are never shortened; their time
is not in the estimate. A shortened audit is reported as ``--quick`` is: a low or medium verdict is a lower
bound ("shortened attacks").
"""

from __future__ import annotations

import math
import re
from typing import Optional

from ...errors import FedleakError

#: the fewest iterations (or text steps) a budget shortens an optimization attack to
FLOOR = 20
#: the share of the remaining budget the optimization attacks are planned to fill (the rest: client updates,
#: exact attacks, the report)
SHARE = 0.8
_FORM = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_budget(text) -> Optional[int]:
    """Seconds of ``"90s"``, ``"5m"``, ``"1h"`` or ``"1h30m"`` (``None`` stays ``None``); anything else refused."""
    if text is None:
        return None
    form = "a duration such as 90s, 5m, 1h or 1h30m"
    if not isinstance(text, str):
        raise FedleakError(f"budget must be {form}, got {text!r}")
    match = _FORM.match(text.strip().lower())
    if not text.strip() or match is None:
        raise FedleakError(f"budget must be {form}, got {text!r}")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    total = 3600 * hours + 60 * minutes + seconds
    if total <= 0 or total > 30 * 86400:
        raise FedleakError(f"budget must be more than 0 s and at most 30 days, got {text!r}")
    return total


def scale(budget_s: float, spent_s: float, work: list[dict]) -> dict:
    """The one factor every optimization attack's iterations are scaled by, and what it does.

    ``work``: one entry per optimization attack of the plan, ``{"name", "iterations", "seconds_per_iteration",
    "setup_seconds", "runs"}`` (runs: targets × settings; set-up is paid per run and never shortened). Returns
    the record ``metrics.json`` keeps (``shortened``, ``factor``, per attack ``iterations`` from → to, the
    estimate, whether it fits) and the plan line. ``spent_s``: the audit's seconds before its attacks (loading,
    this calibration)."""
    setup = sum(w.get("setup_seconds", 0.0) * w["runs"] for w in work)
    iterating = sum(w["seconds_per_iteration"] * w["iterations"] * w["runs"] for w in work)
    estimate = setup + iterating
    left = max(0.0, budget_s - spent_s) * SHARE
    factor = 1.0 if estimate <= left or iterating == 0 else max(0.0, left - setup) / iterating
    attacks = {}
    for w in work:
        wanted = w["iterations"]
        to = wanted if factor >= 1 else max(min(FLOOR, wanted), int(math.floor(wanted * factor)))
        attacks[w["name"]] = {"from": wanted, "to": to, "seconds_per_iteration": round(w["seconds_per_iteration"], 5),
                              "setup_seconds": round(w.get("setup_seconds", 0.0), 3)}
    shortened = any(a["to"] < a["from"] for a in attacks.values())
    after = setup + sum(w["seconds_per_iteration"] * attacks[w["name"]]["to"] * w["runs"] for w in work)
    record = {"seconds": budget_s, "seconds_before_attacks": round(spent_s, 2), "shortened": shortened,
              "factor": round(min(factor, 1.0), 4), "floor": FLOOR, "attacks": attacks,
              "estimated_optimization_seconds": round(estimate, 1),
              "estimated_optimization_seconds_after": round(after, 1), "fits": after <= left,
              "covers": "optimization attacks only: exact and analytic attacks are never shortened"}
    record["line"] = plan_line(record)
    return record


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v) or "0s"


def plan_line(record: dict) -> str:
    """``budget 5m: optimization attacks shortened to N iterations (from M)`` or that nothing needed it."""
    head = f"budget {_duration(record['seconds'])}"
    cut = {n: a for n, a in record["attacks"].items() if a["to"] < a["from"]}
    if not record["attacks"]:
        return f"{head}: no optimization attack in the plan; nothing shortened"
    if not cut:
        return (f"{head}: nothing shortened (optimization attacks estimated at "
                f"{_duration(record['estimated_optimization_seconds'])})")
    tos = sorted({a["to"] for a in cut.values()})
    froms = sorted({a["from"] for a in cut.values()})
    if len(tos) == 1 and len(froms) == 1:
        what = f"shortened to {tos[0]} iterations (from {froms[0]})"
    else:
        what = "shortened to " + ", ".join(f"{n} {a['to']} iterations (from {a['from']})" for n, a in cut.items())
    floor = " (the floor)" if any(a["to"] == FLOOR for a in cut.values()) else ""
    over = "" if record["fits"] else ", more than the budget leaves even at the floor"
    return (f"{head}: optimization attacks {what}{floor}, estimated "
            f"{_duration(record['estimated_optimization_seconds_after'])} of optimization{over}; a low or medium "
            "verdict is a lower bound (shortened attacks)")
