"""``OUT/dashboard.html``: the live view of a Flower leakage audit, rewritten as records arrive.

One plot (matplotlib) of leakage per client per round — PSNR of the reconstruction where the
client shared its batch (evaluation mode, client-reported), the number of verbatim recoveries for
imprint attacks, the final matching loss otherwise — and, when Flower's accountant is in force,
the same leakage against the accountant's ε after each round; the table of every record
(quarantined, rejected and refused replies included, with their reason, shortened to fit its box;
``leakage.jsonl`` keeps it whole) and the latest round's reconstructions.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Optional, Sequence

from PIL import Image

from ...modality.recovered import latest_reconstructions, latest_texts  # noqa: F401  (re-exported)
from ...report import html_report
from ...types import DataSpec

#: what the plot shows, in order of preference: (record key, axis label); the panel's title says where it comes from
PANELS = (("psnr", "PSNR (dB)"), ("verbatim", "inputs recovered verbatim"), ("attack_loss", "final matching loss"),
          ("rouge1", "ROUGE-1"))
PANEL_TITLES = {"psnr": "vs the shared batch (client-reported)", "verbatim": "attacker-side",
                "attack_loss": "attacker-side", "rouge1": "vs the shared batch (client-reported)"}
#: column titles in the report's units (IIP and Rec as %, as report.html shows them)
TITLES = {"psnr": "PSNR (dB)", "rec_percent": "Rec (%)", "iip": "IIP (%)"}
COLUMNS = ["round", "client", "status", "leakage", "attack", "num_examples", "verbatim", "attack_loss", "psnr",
           "rec_percent", "iip", "rouge1", "exact_sequences", "epsilon", "reason"]
#: scores that count things: integer ticks
COUNTS = ("verbatim", "exact_sequences")
#: the longest text a table cell shows
CELL = 90


def _epsilon(record: dict):
    dp = record.get("dp")
    return dp.get("epsilon") if isinstance(dp, dict) else None


def _cell(record: dict, column: str):
    if column == "leakage":
        value = record.get("leakage")
        return value.get("level") if isinstance(value, dict) else None
    if column == "epsilon":
        value = _epsilon(record)
    elif column == "reason":
        value = record.get("reason") or record.get("truth_error") or \
            ((record.get("exactness") or {}).get("reason") if isinstance(record.get("exactness"), dict) else None)
    else:
        value = record.get(column)
    if column == "iip" and isinstance(value, (int, float)):
        value = 100.0 * value
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, str) and len(value) > CELL:
        return value[:CELL - 1] + "…"
    return value


def leakage_plot(records: Sequence[dict]) -> Optional[Image.Image]:
    """Leakage per client per round, one panel per score present; ``None`` before any score."""
    figure = leakage_figure(records)
    if figure is None:
        return None
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    buffer.seek(0)
    return Image.open(buffer).convert("RGB")


def leakage_figure(records: Sequence[dict]):
    """The matplotlib ``Figure`` of :func:`leakage_plot` (``None`` before any score)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    scored = [r for r in records if r.get("status") == "attacked"]
    panels = [(key, label, "round") for key, label in PANELS if any(r.get(key) is not None for r in scored)]
    if not panels:
        return None
    if any(_epsilon(r) is not None for r in scored):  # leakage against Flower's accountant ε
        panels.append((panels[0][0], panels[0][1], "epsilon"))
    figure = Figure(figsize=(5.0 * len(panels), 3.4), dpi=90)
    for i, (key, label, x) in enumerate(panels, start=1):
        axis = figure.add_subplot(1, len(panels), i)
        for client in sorted({str(r["client"]) for r in scored}):
            points = sorted((r["round"] if x == "round" else _epsilon(r), r[key]) for r in scored
                            if str(r["client"]) == client and r.get(key) is not None
                            and (x == "round" or _epsilon(r) is not None))
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=f"node {client}")
        if x == "round":
            axis.set_xlabel("round")
            axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            axis.set_xlabel("ε after the round (Flower's accountant)")
        if key in COUNTS:
            axis.yaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_ylabel(label)
        axis.set_title(PANEL_TITLES.get(key, ""), fontsize=9)
        if key == "attack_loss":
            axis.set_yscale("log")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure


def live_overall(records: Sequence[dict]) -> dict:
    """The overall verdict line so far (:mod:`fedleak.audit.judge.overall`'s shape), from the records alone: the
    honest (or, where the server shipped a model, malicious) server's worst per-reply level with its evidence, the
    DP in force; the final line, from the judge, replaces it when the run's report is written."""
    from ...audit.judge.verdict import worst

    attacked = [r for r in records if r.get("status") == "attacked" and isinstance(r.get("leakage"), dict)]
    shipped = any("imprint" in str(r.get("attack", "")) or r.get("attack") == "cah" for r in attacked)
    level = worst([r["leakage"]["level"] for r in attacked]) if attacked else "not run"
    evidence = next((r["leakage"]["evidence"] for r in attacked if r["leakage"]["level"] == level),
                    "no reply attacked yet")
    parts = [{"name": "malicious" if shipped else "honest", "level": level,
              "evidence": f"{evidence} (so far: {len(attacked)} repl{'y' if len(attacked) == 1 else 'ies'} attacked)"}]
    mechanisms = {str(m.get("mechanism") or m.get("wrapper") or "DP") for r in records
                  if isinstance(r.get("dp"), dict) for m in r["dp"].get("mechanisms", []) if isinstance(m, dict)}
    eps = [_epsilon(r) for r in records if _epsilon(r) is not None]
    parts.append({"name": "DP", "level": ", ".join(sorted(mechanisms)) + " in force" if mechanisms else "none seen",
                  "evidence": (f"Flower's accountant ε = {max(eps):.2f} after the last round; " if eps else "")
                  + "the DP claim is tested by the canaries when the run ends (fedleak audit --flower-app)"})
    return {"line": " · ".join(f"{p['name']}: {p['level']}" for p in parts), "parts": parts}


def write_dashboard(path, records: Sequence[dict], spec: Optional[DataSpec], title: str,
                    overall: Optional[dict] = None) -> Path:
    """Write the dashboard for ``records`` (the lines of ``leakage.jsonl``) to ``path``; ``overall``: the run's
    final verdict line (default: :func:`live_overall`)."""
    present = [c for c in COLUMNS
               if c in ("round", "client", "status") or any(_cell(r, c) is not None for r in records)]
    rows = [{TITLES.get(c, c): _cell(r, c) for c in present} for r in records]
    info = overall or live_overall(records)
    head = {"title": "Overall verdict" + ("" if overall else " so far"),
            "text": info["line"] + "\n\n" + "\n".join(f"{p['name']}: {p['level']} — {p['evidence']}"
                                                       for p in info["parts"])}
    plot = leakage_plot(records)
    attacked = sum(r.get("status") == "attacked" for r in records)
    held = sum(r.get("status") == "quarantined" for r in records)
    quarantined = f", {held} quarantined (not passed to the strategy)" if held else ""
    sections = [head, {"title": "Leakage per client per round",
                 "text": f"{len(records)} replies recorded, {attacked} attacked"
                         f"{quarantined}. Attacker-side scores need no client data; PSNR, Rec % and IIP appear only "
                         "where a client shared its batch (evaluation mode: client-reported, it can raise a reply's "
                         "leakage level, never lower it).",
                 **({"images": [("leakage per client per round", plot)]} if plot is not None else {})},
                {"title": "Records", "table": {"rows": rows, "columns": [TITLES.get(c, c) for c in present],
                                               "floatfmt": ".3g"}}]
    if spec is not None:  # what the latest round's attacks recovered, shown as the data's modality shows it
        from ...modality import named

        sections += named(spec).dashboard_sections(records, spec)
    return html_report(path, title, sections)
