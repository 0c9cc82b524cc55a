"""``fedleak audit``: the default job, on data that ships inside a dependency.

What a server could recover from one client in a typical deployment, end to end on CPU in a few
minutes: scikit-learn's handwritten digits rendered FEMNIST-style, the FEMNIST CNN of Dimitrov
et al. (untrained, as in their Table 1), and

1. an honest-but-curious server against a **FedSGD** client (one gradient of N images):
   Inverting Gradients with label counts inferred from the update;
2. an honest-but-curious server against a **FedAvg** client (E epochs × several batches): the
   simulation attack of Dimitrov et al. with the epoch prior, against the ``shared``-image
   simulation baseline (IG's FedAvg attack), labels restored by RecLabels;
3. a **malicious** server (Robbing the Fed): an imprint block in front of the same model, inputs
   read back analytically from a FedSGD gradient.

Writes ``OUT/report.html`` (original-vs-reconstruction grids), ``OUT/metrics.json`` and one PNG
grid per attack, and prints a table.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import attacks, data, metrics, models
from .attacks.optimize import progress_reporter
from .fl import client_update
from .report import comparison_grid, html_report, markdown_table, save_png
from .types import ClientData, Protocol, Reconstruction

TABLE_COLUMNS = ["scenario", "attack", "psnr", "ssim", "rec_percent", "iip", "label_count_error", "seconds"]


@dataclass
class Scenario:
    """One client, one protocol, the attacks a server would run against its update."""

    key: str
    title: str
    text: str
    protocol: Protocol
    client_index: int
    samples: int
    attacks: dict = field(default_factory=dict)  # display name -> (attack name, options)


def scenarios(quick: bool) -> list[Scenario]:
    """The audit's honest-server scenarios; ``quick`` cuts iterations for a smoke test."""
    ig_iters, sim_iters = (150, 40) if quick else (1500, 400)
    return [
        Scenario("fedsgd", "FedSGD client (one gradient of 4 images)",
                 "The client sends the gradient of its mean loss over 4 private images. The server infers the "
                 "label counts from the last layer (Geng et al.) and runs Inverting Gradients (Geiping et al. 2020).",
                 Protocol("fedsgd"), 0, 4,
                 {"inverting-gradients": ("inverting-gradients", {"iterations": ig_iters, "tv": 1e-3})}),
        Scenario("fedavg", "FedAvg client (5 epochs × 2 batches of 5 images, lr 0.004)",
                 "The client trains locally for 10 SGD steps and sends its new weights. The server restores the "
                 "label counts with RecLabels and simulates the local training on dummy images (Dimitrov et al. "
                 "2022); the baseline shares one image set across epochs (Inverting Gradients' FedAvg attack).",
                 Protocol("fedavg", epochs=5, batch_size=5, lr=0.004), 1, 10,
                 {"dimitrov (ours-prior)": ("dimitrov", {"iterations": sim_iters, "labels": "reclabels"}),
                  "shared (IG simulation)": ("dimitrov-shared", {"iterations": sim_iters, "labels": "reclabels"})}),
    ]


def _score_row(scenario: str, attack: str, scores: dict, seconds: float) -> dict:
    row = {"scenario": scenario, "attack": attack, "seconds": seconds}
    row.update({k: scores.get(k) for k in TABLE_COLUMNS if k in scores})
    return row


def _grid(rec: Reconstruction, client: ClientData, spec, scores: dict):
    originals = spec.denormalize(client.inputs.detach().cpu().float())
    recs = spec.denormalize(rec.inputs.detach().cpu().float())
    order = scores.get("assignment") or []
    matched = torch.stack([recs[i] if i is not None else torch.zeros_like(originals[0]) for i in order])
    return comparison_grid(originals[:16], matched[:16], psnr=scores["psnr_per_input"][:16])


def _progress(show: bool):
    if not show:
        return None, None
    from tqdm import tqdm

    bar = tqdm(total=0, unit="it", dynamic_ncols=True, bar_format="{desc} {percentage:3.0f}%|{bar}| {n}/{total} {postfix}")

    def report(step: int, total: int, loss: float) -> None:
        if bar.total != total:
            bar.reset(total=total)
        bar.n = step
        bar.set_postfix_str(f"loss {loss:.3g}", refresh=False)
        bar.refresh()

    return bar, report


def run_audit(out="fedleak-report", *, device: str = "cpu", seed: int = 0, quick: bool = False,
              malicious: bool = True, show_progress: bool = True, log=print) -> dict:
    """Run the audit and write its report; returns the metrics dict written to ``metrics.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plan = scenarios(quick)
    spec, clients = data.load("digits", num_clients=len(plan) + 1, samples_per_client=max(s.samples for s in plan),
                              seed=seed)
    model = models.build("femnist-cnn", spec, seed=seed).to(device)
    log(f"fedleak audit: {spec.name} data, femnist-cnn ({sum(p.numel() for p in model.parameters()):,} parameters), "
        f"device {device}")
    bar, report = _progress(show_progress)
    results: dict = {"data": spec.name, "model": "femnist-cnn", "seed": seed, "quick": quick, "scenarios": {}}
    rows, sections = [], []
    try:
        for scenario in plan:
            client = clients[scenario.client_index].subset(scenario.samples).to(device)
            update = client_update(model, client, scenario.protocol, seed=seed)
            section = {"title": scenario.title, "text": scenario.text, "images": []}
            entry = {"protocol": scenario.protocol.to_json(), "num_samples": len(client), "attacks": {}}
            for display, (name, options) in scenario.attacks.items():
                if bar is not None:
                    bar.set_description_str(f"{scenario.key}: {display}")
                attack = attacks.build(name, seed=seed, **options)
                start = time.perf_counter()
                with progress_reporter(report):
                    rec = attack.reconstruct(update, model, spec)
                seconds = time.perf_counter() - start
                scores = metrics.evaluate(rec, client, spec)
                entry["attacks"][display] = {"attack": name, "options": options, "seconds": seconds, **scores}
                rows.append(_score_row(scenario.key, display, scores, seconds))
                grid = _grid(rec, client, spec, scores)
                save_png(grid, out / f"{scenario.key}-{name}.png")
                section["images"].append((f"{display}: originals (top) vs reconstructions (bottom), "
                                          f"mean PSNR {scores['psnr']:.1f} dB", grid))
            results["scenarios"][scenario.key] = entry
            sections.append(section)
        if malicious:
            sections.append(_malicious_section(spec, clients, seed, device, results, rows, out))
    finally:
        if bar is not None:
            bar.close()
    table = markdown_table(rows, TABLE_COLUMNS)
    log("\n" + table)
    (out / "metrics.json").write_text(json.dumps(results, indent=1, allow_nan=False))
    intro = {"title": "Summary", "text": _summary_text(rows), "table": rows, "columns": TABLE_COLUMNS}
    html_report(out / "report.html", "fedleak audit: what a server can reconstruct from client updates",
                [intro, *sections, _method_section()])
    log(f"report: {out / 'report.html'}  metrics: {out / 'metrics.json'}")
    return results


def _malicious_section(spec, clients, seed, device, results, rows, out) -> dict:
    from .attacks.imprint import audit_section

    client = clients[-1].subset(16).to(device)
    model = models.build("femnist-cnn", spec, seed=seed).to(device)
    found = audit_section(spec, [client], seed=seed, model=model, bins=64)
    rec = found.pop("reconstruction")
    scores = found["metrics"]
    rows.append(_score_row("malicious", f"{found['attack']} ({found['bins']} bins)", scores, found["recovery_seconds"]))
    results["scenarios"]["malicious"] = found
    grid = _grid(rec, client, spec, scores)
    save_png(grid, out / "malicious-imprint.png")
    text = (f"{found['threat_model'].capitalize()}. The server adds a {found['bins']}-bin imprint block "
            f"({found['added_parameters']:,} parameters) in front of the model; from one FedSGD gradient of "
            f"{found['num_inputs']} images it reads back {found['verbatim_percent']:.0f}% of them verbatim "
            f"(PSNR > {found['verbatim_db']:.0f} dB; Proposition 1 expects {found['expected_percent']:.0f}%), "
            f"without any optimization, in {found['recovery_seconds']:.3f} s.")
    return {"title": found["title"], "text": text, "images": [("originals (top) vs recovered inputs (bottom)", grid)]}


def _summary_text(rows: list[dict]) -> str:
    best = max((r for r in rows if r.get("psnr") is not None), key=lambda r: r["psnr"], default=None)
    if best is None:
        return "No attack produced a reconstruction."
    return (f"Strongest attack: {best['attack']} on the {best['scenario']} client, mean PSNR {best['psnr']:.1f} dB. "
            "Rec% is the share of a client's images reconstructed above 20 dB PSNR; IIP the share whose "
            "reconstruction is closer to its original than to any other client image.")


def _method_section() -> dict:
    return {"title": "How to read this report",
            "text": "Each grid shows the client's private images (top row of each pair) above what the server "
                    "reconstructed from the update alone (bottom row), after matching reconstructions to originals "
                    "by PSNR (Hungarian assignment). PSNR above ~20 dB is visually recognizable for these images. "
                    "Run `fedleak run --preset NAME` to reproduce the papers' tables on real data."}


def report_run(run_dir) -> Path:
    """An HTML report for an experiment folder written by ``fedleak run``."""
    from PIL import Image

    from .errors import FedleakError

    run_dir = Path(run_dir)
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        raise FedleakError(f"{run_dir} has no summary.json; is it a `fedleak run` output folder?")
    summary = json.loads(summary_path.read_text())
    sections = []
    for setting, variants in summary.get("settings", {}).items():
        rows = [{"variant": v, **{k: s.get(k) for k in ("clients", "rec_percent", "psnr", "ssim", "label_count_error")}}
                for v, s in variants.items()]
        images = []
        for variant in variants:
            for png in sorted((run_dir / "jobs").glob(f"{setting}/{variant}/*.png"))[:3]:
                with Image.open(png) as img:
                    images.append((f"{variant} — {png.stem}", img.copy()))
        sections.append({"title": f"Setting {setting}", "table": rows,
                         "columns": ["variant", "clients", "rec_percent", "psnr", "ssim", "label_count_error"],
                         "images": images})
    table = (run_dir / "table.md").read_text() if (run_dir / "table.md").exists() else ""
    sections.insert(0, {"title": "Ours vs the paper", "text": table})
    return html_report(run_dir / "report.html", f"fedleak run: {summary.get('experiment', run_dir.name)}", sections)
