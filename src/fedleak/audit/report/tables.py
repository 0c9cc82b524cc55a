"""The one table builder of the audit's report, for images and text alike.

A :class:`Table` is a configuration: its columns (JSON key → title for people), the cells one attack's summary
gives, the columns shown only when some row fills them, and those the printed table leaves out. The rows are
one per (scenario, attack), the malicious server's attack under ``malicious``; :data:`IMAGE` and :data:`TEXT`
are the two configurations the audit uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...report import html_table, markdown_table


@dataclass(frozen=True)
class Table:
    columns: dict  # JSON key -> column title
    cells: Callable[[dict], dict]  # an attack's summary -> {key: value}
    optional: tuple = ()  # keys shown only when some row has a value there
    not_printed: tuple = ()  # keys the printed (terminal) table leaves out

    def rows(self, point: dict) -> list[dict]:
        """One row per (scenario, attack) with the human column titles."""
        out = []
        for key, scenario in point["scenarios"].items():
            attacks = {scenario["attack"]: scenario} if key == "malicious" else scenario["attacks"]
            for name, s in attacks.items():
                label = f"{s['title']} [{name}]" + (f", {s['bins']} bins" if key == "malicious" else "")
                row = {**self.cells(s), "scenario": key, "attack": label}
                if s.get("targets", 1) > 1:
                    row["rec_range"] = f"{s['rec_percent_min']:.0f}–{s['rec_percent_max']:.0f}"
                out.append({self.columns[k]: row.get(k) for k in self.columns})
        return out

    def shown(self, table: list[dict]) -> list[str]:
        """Every column title, the optional ones only when some row fills them."""
        optional = [self.columns[k] for k in self.optional]
        return [c for c in self.columns.values() if c not in optional or any(r.get(c) for r in table)]

    def printed(self, point: dict) -> str:
        """The Markdown table the audit prints."""
        table = self.rows(point)
        left_out = [self.columns[k] for k in self.not_printed]
        return markdown_table(table, [c for c in self.shown(table) if c not in left_out])

    def html(self, point: dict) -> str:
        """The table of the report page."""
        table = self.rows(point)
        return html_table(table, self.shown(table), ".2f")


def _image_cells(s: dict) -> dict:
    row = {k: s.get(k) for k in IMAGE_COLUMNS if k in s}
    if row.get("iip") is not None:
        row["iip"] = 100.0 * row["iip"]
    return row


def _condition(s: dict) -> str:
    """A text attack's stated exactness condition and whether it held."""
    ex = s.get("exactness")
    if not isinstance(ex, dict):
        return ""
    held = ex.get("holds", ex.get("held"))
    text = ex.get("condition") or ex.get("reason") or ""
    mark = "" if held is None else ("held: " if held else "failed: ")
    return f"{mark}{text}"  # whole: a cell is never cut mid-word (the table wraps it)


def _text_cells(s: dict) -> dict:
    row = {"seconds": s.get("seconds"), "condition": _condition(s)}
    for k in ("rouge1", "rouge2", "rougeL"):
        row[k] = s.get(k)
    for k in ("exact_sequences", "token_accuracy"):
        row[k] = None if s.get(k) is None else 100.0 * s[k]
    return row


#: JSON key -> column title (images)
IMAGE_COLUMNS = {"scenario": "Client protocol", "attack": "Attack", "psnr": "Mean PSNR (dB)", "ssim": "SSIM",
                 "rec_percent": "Recognizable images (%)", "rec_range": "Per-client range (%)",
                 "iip": "Identified images (IIP, %)", "label_count_error": "Label-count error",
                 "seconds": "Attack time (s)"}
#: JSON key -> column title (text)
TEXT_COLUMNS = {"scenario": "Client protocol", "attack": "Attack", "exact_sequences": "Exact sequences (%)",
                "rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L", "token_accuracy": "Token accuracy (%)",
                "rec_range": "Per-client range (%)", "condition": "Exactness condition", "seconds": "Attack time (s)"}
IMAGE = Table(IMAGE_COLUMNS, _image_cells, optional=("rec_range",), not_printed=("seconds",))
TEXT = Table(TEXT_COLUMNS, _text_cells, optional=("rec_range", "condition"), not_printed=("seconds", "condition"))


def attack_series(points: list, metric: str) -> dict:
    """Each attack's ``metric`` at every point of a sweep, keyed ``"scenario: title"``: the leakage curves' lines."""
    out = {}
    for key, scenario in points[0]["scenarios"].items():
        attacks = {scenario["attack"]: scenario} if key == "malicious" else scenario["attacks"]
        for name, s in attacks.items():
            out[f"{key}: {s['title']}"] = [
                (p["scenarios"][key] if key == "malicious" else p["scenarios"][key]["attacks"][name]).get(metric)
                for p in points]
    return out


def threat_series(points: list, threat_titles: dict) -> dict:
    """Each threat model's share of recovered items (``rec_percent``) at every point of a sweep."""
    return {threat_titles[n]: [p["threat_models"][n]["rec_percent"] for p in points] for n in points[0]["threat_models"]}
