"""Summarize a finished (or partly finished) ``fedleak run`` folder beside the paper, for docs/.

For every (setting, variant): the number of clients and images, client mean ± std (population
std over clients) of Rec % / PSNR / SSIM, the image-weighted Rec % and PSNR (every reconstructed
image counts once: a 4-sample client weighs 4/50 of a full one), seconds per job, and the paper's
numbers from the run's ``config.json``. ``--reference NAME=FILE.jsonl:VARIANT`` adds a row for a
setting measured earlier (e.g. Table 7's round 1 is Table 1's E10-m5 row) restricted to the same
clients, so both rows compare the same people.

    python benchmarks/summarize_run.py runs/t7 --out benchmarks/results/dimitrov_table7_femnist.json \
        --reference round-1=benchmarks/results/dimitrov_table1_femnist_E10-m5.jsonl:dimitrov
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from pathlib import Path

from fedleak.job_files import load_results

METRICS = ("rec_percent", "psnr", "ssim", "label_count_error")


def _mean_std(values: list[float]) -> list[float] | None:
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return None
    return [statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0]


def _weighted(rows: list[dict], key: str) -> float | None:
    pairs = [(r[key], r.get("num_inputs") or r.get("n") or r.get("num_samples") or 1) for r in rows
             if isinstance(r.get(key), (int, float))]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def summarize_rows(rows: list[dict]) -> dict:
    """Client-mean ± std and image-weighted scores of one (setting, variant) group."""
    out = {"clients": len(rows), "images": sum(r.get("num_inputs") or r.get("n") or 0 for r in rows)}
    for key in METRICS:
        stats = _mean_std([r.get(key) for r in rows])
        if stats is not None:
            out[key] = stats
    out["rec_percent_images"] = _weighted(rows, "rec_percent")
    out["psnr_images"] = _weighted(rows, "psnr")
    out["seconds_per_job"] = _mean_std([r.get("seconds") for r in rows])
    out["per_client"] = {r.get("client"): {k: r.get(k) for k in ("rec_percent", "psnr")} for r in rows}
    return out


def _reference(spec: str, clients: set[str]) -> tuple[str, dict]:
    name, _, rest = spec.partition("=")
    path, _, variant = rest.rpartition(":")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("variant") == variant and r.get("client") in clients]
    return name, {"source": f"{path} ({variant}, the same clients)", **summarize_rows(rows)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", required=True, help="results JSON to write")
    parser.add_argument("--reference", action="append", default=[], help="NAME=FILE.jsonl:VARIANT")
    parser.add_argument("--command", default="", help="the command that made the run (recorded)")
    args = parser.parse_args(argv)

    rows, _, unreadable = load_results(args.run_dir)
    config = json.loads((Path(args.run_dir) / "config.json").read_text())
    groups: dict = {}
    for row in rows:
        groups.setdefault(row["setting"], {}).setdefault(row["variant"], []).append(row)
    paper = (config.get("experiment") or config).get("paper") or {}
    summary = {setting: {variant: {**summarize_rows(items), "paper": (paper.get(setting) or paper.get("default") or {})
                                   .get(variant)} for variant, items in by_variant.items()}
               for setting, by_variant in groups.items()}
    clients = {r.get("client") for r in rows}
    references = dict(_reference(spec, clients) for spec in args.reference)
    result = {"run": str(args.run_dir), "experiment": (config.get("experiment") or config).get("name"),
              "command": args.command, "jobs_finished": len(rows), "jobs_unreadable": unreadable,
              "threads_per_job": 1, "loadavg_end": list(os.getloadavg()), "summary": summary,
              "references": references, "rows": rows}
    Path(args.out).write_text(json.dumps(result, indent=1, default=str) + "\n")

    print("| setting | variant | clients | Rec % | PSNR | Rec % (images) | PSNR (images) | paper Rec % | paper PSNR |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for setting, by_variant in {**{k: {"ref": v} for k, v in references.items()}, **summary}.items():
        for variant, s in by_variant.items():
            rec, psnr, p = s.get("rec_percent") or [math.nan] * 2, s.get("psnr") or [math.nan] * 2, s.get("paper") or {}
            print(f"| {setting} | {variant} | {s['clients']} | {rec[0]:.1f} ± {rec[1]:.1f} | {psnr[0]:.2f} ± {psnr[1]:.2f} "
                  f"| {s['rec_percent_images'] or math.nan:.1f} | {s['psnr_images'] or math.nan:.2f} "
                  f"| {p.get('rec_percent', '—')} | {p.get('psnr', '—')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
