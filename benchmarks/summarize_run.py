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
import sys
from pathlib import Path

from fedleak.runs.job_files import load_results
from fedleak.runs.run_report import summarize


def summarize_rows(rows: list[dict]) -> dict:
    """One (setting, variant) group: fedleak's own client mean and std of every summary metric
    (:func:`fedleak.runs.run_report.summarize`), plus the image-weighted Rec % / PSNR and per-client scores."""
    (stats,) = (v for by_variant in summarize([{**r, "setting": "-", "variant": "-"} for r in rows]).values()
                for v in by_variant.values())
    stats["images"] = sum(_images(r) for r in rows)
    stats["rec_percent_images"] = _weighted(rows, "rec_percent")
    stats["psnr_images"] = _weighted(rows, "psnr")
    stats["per_client"] = {r.get("client"): {k: r.get(k) for k in ("rec_percent", "psnr")} for r in rows}
    return stats


def _images(row: dict) -> int:
    return int(row.get("num_inputs") or row.get("n") or row.get("num_samples") or 1)


def _weighted(rows: list[dict], key: str) -> float | None:
    pairs = [(r[key], _images(r)) for r in rows if isinstance(r.get(key), (int, float))]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


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
            p = s.get("paper") or {}
            mean_std = lambda key, f: f"{s.get(key, math.nan):{f}} ± {s.get(key + '_std', math.nan):{f}}"
            print(f"| {setting} | {variant} | {s['clients']} | {mean_std('rec_percent', '.1f')} | "
                  f"{mean_std('psnr', '.2f')} | {s['rec_percent_images'] or math.nan:.1f} | "
                  f"{s['psnr_images'] or math.nan:.2f} | {p.get('rec_percent', '—')} | {p.get('psnr', '—')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
