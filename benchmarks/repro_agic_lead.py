"""Summarize AGIC's lead over Inverting Gradients per image, from one or more `fedleak run` folders.

AGIC Table IV (FedSGD, batch 1, untrained ResNet20-4) compares AGIC with Inverting Gradients (InvG)
on the same images. Our `agic` and `inverting-gradients` share the optimizer, seed and initial
image, so per image the PSNR difference AGIC − InvG is the effect of the layer weights alone
(Eqs. 6–8). This script pairs the two by (setting, client) and writes, per setting (budget):
mean ± std of each attack's PSNR and SSIM, the paired difference mean ± std, its standard error,
how many images AGIC wins, and seconds per iteration.

    fedleak --threads 1 run --preset agic-table4-cifar100 --data-root ../shared/data --out /tmp/fidelity/agic-c100
    python benchmarks/repro_agic_lead.py /tmp/fidelity/agic-c100 --out benchmarks/results/agic_table4_cifar100.json

A variant named ``<attack>-<iterations>`` (``invg-200``, ``agic-200``) is paired within its setting;
``--reference`` adds an earlier summary with a ``per_client`` block (benchmarks/results/
agic_table4_batch1.json, CIFAR-10, 1,000 iterations) under the same statistics.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path
from typing import Optional


def _stats(values: list[float]) -> dict:
    n = len(values)
    mean = statistics.fmean(values) if values else math.nan
    std = statistics.stdev(values) if n > 1 else 0.0
    return {"mean": round(mean, 3), "std": round(std, 3), "n": n}


def paired(agic: dict[str, dict], invg: dict[str, dict]) -> dict:
    """Statistics of AGIC vs InvG over the clients both have: {client: {psnr, ssim, seconds, iterations}}."""
    clients = sorted(set(agic) & set(invg), key=lambda c: int(c.rsplit("-", 1)[-1]) if c[-1].isdigit() else c)
    diff = [agic[c]["psnr"] - invg[c]["psnr"] for c in clients]
    out = {
        "images": len(clients),
        "agic_psnr": _stats([agic[c]["psnr"] for c in clients]),
        "invg_psnr": _stats([invg[c]["psnr"] for c in clients]),
        "agic_ssim": _stats([agic[c]["ssim"] for c in clients]),
        "invg_ssim": _stats([invg[c]["ssim"] for c in clients]),
        "lead_psnr": _stats(diff),
        "lead_psnr_sem": round(statistics.stdev(diff) / math.sqrt(len(diff)), 3) if len(diff) > 1 else None,
        "agic_wins": sum(d > 0 for d in diff),
        "per_image": [{"client": c, "agic_psnr": round(agic[c]["psnr"], 3), "invg_psnr": round(invg[c]["psnr"], 3),
                       "lead": round(d, 3)} for c, d in zip(clients, diff)],
    }
    iters = [r["iterations"] for r in (*agic.values(), *invg.values()) if r.get("iterations")]
    secs = [r["seconds"] / r["iterations"] for r in (*agic.values(), *invg.values()) if r.get("iterations")]
    if secs:
        out["iterations"] = max(iters)
        out["seconds_per_iteration"] = _stats(secs)
    return out


def from_run(folder: Path, iterations: Optional[int] = None, prefix: str = "") -> dict[str, dict]:
    """Paired statistics per setting of a `fedleak run` folder (its jobs/*/*/*.json); settings are
    named ``prefix + setting``; ``iterations`` for variants whose name carries no count."""
    rows: dict[str, dict[str, dict[str, dict]]] = {}
    iterations_default = iterations
    for path in sorted(folder.glob("jobs/*/*/*.json")):
        job = json.loads(path.read_text())
        attack, _, iterations = job["variant"].rpartition("-")
        kind = "agic" if job["attack"] == "agic" else "invg" if job["attack"] == "inverting-gradients" else None
        if kind is None:
            continue
        rows.setdefault(job["setting"], {}).setdefault(kind, {})[job["client"]] = {
            "psnr": job["psnr"], "ssim": job["ssim"], "seconds": job["seconds"],
            "iterations": int(iterations) if iterations.isdigit() else iterations_default}
    return {prefix + setting: paired(kinds.get("agic", {}), kinds.get("invg", {})) for setting, kinds in rows.items()}


def from_reference(path: Path) -> dict:
    data = json.loads(path.read_text())
    per = data["per_client"]
    iterations = int(data.get("iterations", 0)) or None
    rows = {k: {r["client"]: {**r, "iterations": iterations} for r in per[k]} for k in ("agic", "invg")}
    return {"source": str(path), "command": data.get("command"), **paired(rows["agic"], rows["invg"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", help="fedleak run output folders, each as FOLDER or PREFIX=FOLDER "
                        "or PREFIX=FOLDER:ITERATIONS (prefix for its setting names; iterations where the "
                        "variant names carry none)")
    parser.add_argument("--reference", type=Path, help="earlier summary with per_client rows")
    parser.add_argument("--command", default="", help="the command that produced the runs (recorded)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    result = {"command": args.command, "settings": {}}
    for run in args.runs:
        prefix, _, folder = run.rpartition("=")
        folder, _, iterations = folder.partition(":")
        result["settings"].update(from_run(Path(folder), int(iterations) if iterations else None,
                                           f"{prefix}/" if prefix else ""))
    if args.reference:
        result["reference"] = from_reference(args.reference)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for name, row in result["settings"].items():
        print(f"{name}: {row['images']} images, AGIC {row['agic_psnr']['mean']} ± {row['agic_psnr']['std']}, "
              f"InvG {row['invg_psnr']['mean']} ± {row['invg_psnr']['std']}, lead {row['lead_psnr']['mean']} ± "
              f"{row['lead_psnr']['std']} dB, AGIC wins {row['agic_wins']}/{row['images']}")


if __name__ == "__main__":
    main()
