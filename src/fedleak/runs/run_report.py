"""What a ``fedleak run`` folder says: ``results.jsonl``, ``summary.json``, ``table.md``, ``report.html``.

Everything is rebuilt from the finished job files (:func:`fedleak.runs.job_files.load_results`), so a
report of an interrupted run shows the jobs that finished and says how many of how many. The run's
``config.json`` (written before the first job) gives the experiment's name, description, the
paper's numbers and the number of planned jobs.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ..errors import FedleakError
from .job_files import load_results, write_json

#: records (:func:`fedleak.metrics.tabular.evaluate`): cells right and whole records; shown only where present
TABULAR_METRICS = ("accuracy", "categorical_accuracy", "continuous_accuracy", "exact_match_rate")
SUMMARY_METRICS = ("rec_percent", "psnr", "ssim", "mse", "iip", "lpips", "label_count_error", "label_accuracy",
                   "seconds", *TABULAR_METRICS)
TABLE_METRICS = ("rec_percent", "psnr", "ssim", "label_count_error", "accuracy", "exact_match_rate")


def summarize(rows: list[dict]) -> dict:
    """Mean, std and count of every summary metric, keyed by setting then variant."""
    grouped: dict = {}
    for row in rows:
        grouped.setdefault(row["setting"], {}).setdefault(row["variant"], []).append(row)
    out: dict = {}
    for setting, by_variant in grouped.items():
        for variant, items in by_variant.items():
            stats = {"clients": len(items)}
            for key in SUMMARY_METRICS:
                values = [r[key] for r in items if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
                if values:
                    stats[key] = statistics.fmean(values)
                    stats[f"{key}_std"] = statistics.pstdev(values) if len(values) > 1 else 0.0
            out.setdefault(setting, {})[variant] = stats
    return out


def comparison_rows(by_setting: dict, paper: dict) -> tuple[list[dict], list[str]]:
    """One row per (setting, variant): our mean ± std beside the paper's number.

    A "(paper)" column appears only for a metric the paper's section gives for some shown row; a
    user's own experiment (no ``paper:``) gets our columns alone.
    """
    paper = paper if isinstance(paper, dict) else {}

    def paper_entry(setting, variant) -> dict:
        entry = (paper.get(setting) or {}) if isinstance(paper.get(setting), dict) else {}
        entry = entry.get(variant) or {}
        return entry if isinstance(entry, dict) else {}

    present = [k for k in TABLE_METRICS if any(k in v for s in by_setting.values() for v in s.values())
               or any(k in p for s in paper.values() if isinstance(s, dict) for p in s.values()
                      if isinstance(p, dict))]
    rows = []
    for setting, variants in by_setting.items():
        for variant, stats in variants.items():
            theirs = paper_entry(setting, variant)
            row = {"setting": setting, "variant": variant, "clients": stats.get("clients")}
            for key in present:
                mean = stats.get(key)
                row[key] = None if mean is None else f"{mean:.2f} ± {stats.get(key + '_std', 0):.2f}"
                row[f"{key} (paper)"] = theirs.get(key)
            rows.append(row)
    with_paper = {k for k in present if any(r.get(f"{k} (paper)") is not None for r in rows)}
    return rows, ["setting", "variant", "clients"] + [c for k in present
                                                      for c in ((k, f"{k} (paper)") if k in with_paper else (k,))]


def has_paper(columns: list[str]) -> bool:
    """Whether a comparison table shows any of the paper's numbers."""
    return any(c.endswith(" (paper)") for c in columns)


def comparison_table(name: str, description: str, by_setting: dict, paper: dict) -> str:
    """Markdown (``table.md``): the title, the description and :func:`comparison_rows`, user text escaped."""
    from html import escape

    from ..report import markdown_table

    rows, columns = comparison_rows(by_setting, paper)
    title, text = (escape(" ".join(str(t).split()), quote=False) for t in (name, description))
    note = "" if has_paper(columns) else "(No paper numbers for these settings: our results only.)\n\n"
    return f"# {title}\n\n{text}\n\n{note}" + markdown_table(rows, columns) + "\n"


def write_outputs(out, name: str, description: str = "", paper: dict | None = None,
                  planned: int | None = None, config_hash: str | None = None) -> dict:
    """(Re)write ``results.jsonl``, ``summary.json`` and ``table.md`` from the finished job files
    (with ``config_hash``: only the jobs stamped with it, so two configurations are never mixed)."""
    out = Path(out)
    rows, _, _ = load_results(out)
    other = 0
    if config_hash is not None:
        kept = [row for row in rows if row.get("config_hash") == config_hash]
        other, rows = len(rows) - len(kept), kept
    with open(out / "results.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, allow_nan=False) + "\n")
    by_setting = summarize(rows)
    summary = {"experiment": name, "jobs": len(rows), "settings": by_setting}
    if config_hash is not None:
        summary["config_hash"] = config_hash
        if other:
            summary["jobs_of_other_configurations"] = other
    if planned is not None:
        summary["planned_jobs"] = planned
    if len(by_setting) == 1:
        summary["variants"] = next(iter(by_setting.values()))
        if len(summary["variants"]) == 1:
            summary["means"] = next(iter(summary["variants"].values()))
    write_json(out / "summary.json", summary)
    (out / "table.md").write_text(comparison_table(name, description, by_setting, paper or {}))
    return summary


def _config_model():
    """The keys of a run's ``config.json`` the report reads, strictly typed (the rest is left as written)."""
    from typing import Annotated, Optional

    from pydantic import ConfigDict, Field, create_model

    count = Annotated[int, Field(strict=True, ge=0)]
    return create_model("RunConfigJson", __config__=ConfigDict(strict=True, extra="allow"),
                        name=(Optional[str], None), description=(Optional[str], None), paper=(Optional[dict], None),
                        planned_jobs=(Optional[count], None), config_hash=(Optional[str], None))


def _run_config(run_dir: Path) -> dict:
    """The run's ``config.json`` (``{}`` when there is none); one that is unreadable, not a mapping or holds a
    key of the wrong type is refused in one line: without it the report could not keep other runs' jobs apart."""
    path = run_dir / "config.json"
    if not path.exists():
        return {}
    from ..config.boundary import validate
    from ..config.json_safe import read_json_file

    config = read_json_file(path)
    if not isinstance(config, dict):
        raise FedleakError(f"{path} must be a JSON object, got {type(config).__name__}; was it edited?")
    validate(_config_model(), config, where=str(path))
    return config


def report_run(run_dir, images_per_variant: int = 3) -> Path:
    """``run_dir/report.html`` for a ``fedleak run`` folder, finished or not.

    The tables are HTML tables (ours beside the paper's numbers, then one table per setting); the
    first ``images_per_variant`` comparison grids of each variant are embedded; every user string
    is escaped by :func:`fedleak.report.html_report`.
    """
    from PIL import Image

    from ..report import html_report

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or not ((run_dir / "jobs").is_dir() or (run_dir / "config.json").exists()):
        raise FedleakError(f"{run_dir} is not a `fedleak run` output folder (no jobs/ or config.json)")
    config = _run_config(run_dir)
    rows, located, unreadable = load_results(run_dir)
    stamp = config.get("config_hash")
    other = 0
    if isinstance(stamp, str):  # jobs of an earlier configuration in the same folder are kept apart
        other = sum(1 for r in rows if r.get("config_hash") != stamp)
        located = [(p, r) for p, r in located if r.get("config_hash") == stamp]
        rows = [r for _, r in located]
    by_setting = summarize(rows)
    planned = config.get("planned_jobs")
    status = (f"{len(rows)} of {planned} planned jobs finished." if isinstance(planned, int)
              else f"{len(rows)} finished jobs.")
    if isinstance(planned, int) and len(rows) < planned:
        status += " The run is partial: the numbers below cover the finished jobs only; run the same command again to finish it."
    if other:
        status += f" {other} job file(s) of another configuration in this folder are left out."
    if unreadable:
        status += f" {unreadable} job file(s) could not be read and are left out (a resumed run recomputes them)."
    table_rows, columns = comparison_rows(by_setting, config.get("paper") or {})
    text = "\n\n".join(t for t in (str(config.get("description") or ""), status) if t)
    sections = [{"title": "Ours vs the paper" if has_paper(columns) else "Results (mean ± std over clients)",
                 "text": text, "table": table_rows, "columns": columns}]
    metric_columns = ["variant", "clients", "rec_percent", "psnr", "ssim", "label_count_error"]
    for setting, variants in by_setting.items():
        table = [{"variant": v, **{k: s.get(k) for k in metric_columns[1:]}} for v, s in variants.items()]
        images, notes = [], []
        for variant in variants:
            pictures = [p.with_suffix(".png") for p, r in located if r["setting"] == setting and r["variant"] == variant]
            existing = [p for p in pictures if p.exists()]
            for png in existing[:images_per_variant]:
                record = next(r for p, r in located if p.with_suffix(".png") == png)
                with Image.open(png) as img:
                    images.append((f"{variant} — client {record.get('client')}", img.copy()))
            if len(existing) > images_per_variant:
                notes.append(f"{variant}: the grids of {images_per_variant} of its {len(existing)} clients are shown; "
                             f"every client's grid is in {existing[0].parent}/*.png.")
        section = {"title": f"Setting {setting}", "table": table, "columns": metric_columns, "images": images}
        if notes:
            section["text"] = "\n\n".join(notes)
        sections.append(section)
    title = f"fedleak run: {config.get('name') or run_dir.name}"
    return html_report(run_dir / "report.html", title, sections)
