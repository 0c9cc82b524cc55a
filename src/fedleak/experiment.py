"""Run an experiment: settings × variants × clients, one result file per job, resumable.

For every job the pipeline of ``DESIGN.md`` runs once: the client computes its update with the one
client update (:func:`fedleak.fl.client_update`), the server is told what the threat model lets
it know (``threat.labels``), the attack reconstructs, metrics compare. Each job's result is written
atomically to ``OUT/jobs/<setting>/<variant>/<client>.json`` as soon as it finishes, so an
interrupted run resumes by running the same command again. At the end ``results.jsonl``,
``summary.json`` and ``table.md`` (ours beside the paper's numbers) are (re)written.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from . import attacks, data, metrics, models
from .attacks.optimize import progress_reporter
from .config import ExperimentConfig, Setting, Variant
from .errors import FedleakError
from .fl import Defense, batch_schedule, client_rounds, client_update
from .types import ClientData, Protocol

SUMMARY_METRICS = ("rec_percent", "psnr", "ssim", "mse", "iip", "lpips", "label_count_error", "label_accuracy",
                   "seconds")


@dataclass
class Job:
    setting: Setting
    variant: Variant
    client_index: int

    def path(self, out: Path, client_id: str) -> Path:
        return out / "jobs" / _safe(self.setting.name) / _safe(self.variant.name) / f"{_safe(client_id)}.json"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(name))


def _write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_finite(payload), indent=1, allow_nan=False, default=_jsonable))
    tmp.replace(path)


def _finite(obj):
    """``obj`` with every non-finite float (a NaN loss, an infinite PSNR) as ``None``: strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _jsonable(obj):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def threat_metadata(kind: str, client: ClientData, protocol: Protocol, seed: int, num_classes: int) -> dict:
    """What the server is told besides the update (Dimitrov et al. Table 1 known counts, Table 8 batches)."""
    if kind == "none":
        return {}
    if kind == "counts":
        return {"label_counts": torch.bincount(client.labels, minlength=num_classes).tolist()}
    if kind == "labels":
        return {"labels": client.labels.tolist()}
    # the true per-epoch batch composition: the victim's schedule, re-drawn with its seed
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    schedule = batch_schedule(len(client), protocol, generator)
    labels = client.labels.cpu()
    return {"labels": client.labels.tolist(),
            "batch_labels": [[labels[b].tolist() for b in epoch] for epoch in schedule]}


class Runner:
    """Executes an :class:`ExperimentConfig` into an output folder."""

    def __init__(self, config: ExperimentConfig, out, *, device: str = "cpu", dtype=torch.float32,
                 show_progress: bool = True, log: Callable[[str], None] = print) -> None:
        self.config = config
        self.out = Path(out)
        self.device = torch.device(device)
        self.dtype = dtype
        self.show_progress = show_progress
        self.log = log
        self._data_cache: dict = {}
        self._model_cache: dict = {}

    # -- resources ----------------------------------------------------------------------------
    def dataset(self, section: dict):
        """The first ``first_client + num_clients`` clients of the dataset's fixed order (jobs
        attack those from ``first_client`` on, by their absolute index)."""
        first, count = _client_range(section)
        key = json.dumps({**section, "first_client": 0, "num_clients": first + count}, sort_keys=True, default=str)
        if key not in self._data_cache:
            self._data_cache[key] = data.load(
                section["dataset"], root=section.get("root"), num_clients=first + count,
                samples_per_client=section.get("samples_per_client", 50), seed=int(section.get("seed", 0)),
                split=section.get("split", "train"), **(section.get("options") or {}))
        return self._data_cache[key]

    def model(self, section: dict, spec, data_section: dict):
        key = json.dumps([section, spec.to_json()], sort_keys=True, default=str)
        if key not in self._model_cache:
            model = models.build(section["name"], spec, seed=int(section.get("seed", 0)), **(section.get("options") or {}))
            rounds = int(section.get("train_rounds", 0))
            if rounds > 0:
                from .fl.training import train_fedavg

                _, pool = self.dataset({**data_section, "num_clients": max(int(data_section.get("num_clients", 10)), 100),
                                        "first_client": 0})
                train_protocol = Protocol(**{**Protocol("fedavg", 10, 5, 0.004).to_json(),
                                             **(section.get("train_protocol") or {})})
                self.log(f"training {section['name']} with FedAvg for {rounds} rounds")
                model = train_fedavg(model, pool, rounds=rounds,
                                     clients_per_round=int(section.get("train_clients_per_round", 10)),
                                     protocol=train_protocol, seed=int(section.get("seed", 0)))
            self._model_cache[key] = model.to(device=self.device, dtype=self.dtype)
        return self._model_cache[key]

    # -- running ------------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        out = []
        for setting in self.config.settings:
            variants = [v for v in self.config.variants if setting.variants is None or v.name in setting.variants]
            first, n = _client_range(self.config.resolve(setting, variants[0])["data"]) if variants else (0, 0)
            for index in range(first, first + n):
                out.extend(Job(setting, v, index) for v in variants)
        return out

    def run(self) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.json").write_text(json.dumps(_config_json(self.config), indent=1, default=str))
        for variant in self.config.variants:  # validate every variant's options before the first job
            attacks.build(variant.attack, **variant.options)
        jobs = self.jobs()
        bar = _progress_bar(len(jobs), self.show_progress, self.config.name)
        done = skipped = 0
        try:
            for job in jobs:
                result = self.run_job(job, bar)
                if result == "skipped":
                    skipped += 1
                done += 1
                if bar is not None:
                    bar.update(1)
        except KeyboardInterrupt:
            self.log(f"\ninterrupted after {done} of {len(jobs)} jobs; finished jobs are saved in {self.out / 'jobs'} "
                     "— run the same command again to resume")
            raise
        finally:
            if bar is not None:
                bar.close()
        if skipped:
            self.log(f"resumed: {skipped} finished job(s) were reused")
        return write_outputs(self.out, self.config)

    def run_job(self, job: Job, bar=None):
        sections = self.config.resolve(job.setting, job.variant)
        spec, clients = self.dataset(sections["data"])
        if job.client_index >= len(clients):
            return "skipped"
        client = clients[job.client_index]
        path = job.path(self.out, client.client_id)
        if path.exists():
            return "skipped"
        model = self.model(sections["model"], spec, sections["data"])
        protocol = Protocol(**{**Protocol().to_json(), **sections["protocol"]})
        client = client.to(self.device, self.dtype)
        labels_kind = (sections.get("threat") or {}).get("labels", "none")
        attack = attacks.build(job.variant.attack, **{"seed": self.config.attack_seed + job.client_index,
                                                      **job.variant.options})
        reconstruct = self._observed(job, sections, model, client, protocol, spec, attack)
        if bar is not None:
            bar.set_description(f"{job.setting.name}/{job.variant.name}/{client.client_id}")
        start = time.perf_counter()
        with progress_reporter(_inner_progress(bar)):
            rec = reconstruct()
        seconds = time.perf_counter() - start
        m = self.config.metrics
        scores = metrics.evaluate(rec, client, spec, threshold=m.get("threshold"), clip=bool(m.get("clip", True)),
                                  lpips=m.get("lpips", False))
        record = {"setting": job.setting.name, "variant": job.variant.name, "attack": job.variant.attack,
                  "client": client.client_id, "client_index": job.client_index, "num_samples": len(client),
                  "protocol": protocol.to_json(), "threat": labels_kind, "rounds": sections.get("rounds") or {},
                  "seconds": seconds, **scores,
                  "attack_extras": {k: v for k, v in rec.extras.items() if k != "loss_history"}}
        if m.get("save_images", True):
            _save_grid(path.with_suffix(".png"), rec, client, spec, scores)
        _write_json(path, record)
        return record

    @staticmethod
    def _observed(job: Job, sections: dict, model, client: ClientData, protocol: Protocol, spec, attack):
        """What the server observes of the client, as the call that attacks it.

        One update (the usual job), or with a ``rounds`` section of ``epochs`` > 1 the client's
        updates of every round over that many epochs (AGIC §IV-B, :func:`fedleak.fl.client_rounds`),
        attacked jointly by ``reconstruct_rounds``. The threat section decides what the server is
        told beside each update.
        """
        seed = int(sections["data"].get("seed", 0)) * 100003 + job.client_index
        labels_kind = (sections.get("threat") or {}).get("labels", "none")
        defense = Defense.parse(sections["defense"])

        def told(part: ClientData, part_seed: int) -> dict:
            return {"client_index": job.client_index,
                    **threat_metadata(labels_kind, part, protocol, part_seed, spec.num_classes)}

        rounds = sections.get("rounds") or {}
        if int(rounds.get("epochs", 1)) == 1:
            update = client_update(model, client, protocol, seed=seed, defense=defense, metadata=told(client, seed))
            return lambda: attack.reconstruct(update, model, spec)
        if not hasattr(attack, "reconstruct_rounds"):
            raise FedleakError(f"variant {job.variant.name!r}: attack {job.variant.attack!r} cannot attack the updates of "
                               "several rounds (section 'rounds'); one that can: agic")
        updates = client_rounds(model, client, protocol, epochs=int(rounds["epochs"]),
                                samples_per_round=rounds.get("samples_per_round"), seed=seed, defense=defense,
                                metadata=told)
        return lambda: attack.reconstruct_rounds(updates, model, spec)


def _client_range(section: dict) -> tuple[int, int]:
    first, count = int(section.get("first_client", 0)), int(section.get("num_clients", 10))
    if first < 0:
        raise FedleakError(f"data.first_client must be >= 0, got {first}")
    return first, count


def _inner_progress(bar):
    if bar is None:
        return None

    def report(step: int, total: int, loss: float) -> None:
        bar.set_postfix_str(f"it {step}/{total} loss {loss:.3g}", refresh=False)
        bar.refresh() if step % 50 == 0 or step == total else None

    return report


def _progress_bar(total: int, show: bool, name: str):
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit="job", dynamic_ncols=True)


def _save_grid(path: Path, rec, client: ClientData, spec, scores: dict) -> None:
    from .report import comparison_grid, save_png

    order = scores.get("assignment") or []
    originals = spec.denormalize(client.inputs.detach().cpu().float())
    recs = spec.denormalize(rec.inputs.detach().cpu().float())
    matched = torch.stack([recs[i] if i is not None else torch.zeros_like(originals[0]) for i in order]) \
        if order else recs[: len(originals)]
    count = min(len(originals), 16)
    save_png(comparison_grid(originals[:count], matched[:count], psnr=scores.get("psnr_per_input", [])[:count]), path)


def _config_json(config: ExperimentConfig) -> dict:
    return {"name": config.name, "description": config.description, "data": config.data, "model": config.model,
            "protocol": config.protocol, "defense": config.defense, "threat": config.threat, "rounds": config.rounds,
            "metrics": config.metrics,
            "settings": [{"name": s.name, **s.overrides} for s in config.settings],
            "variants": {v.name: {"attack": v.attack, "options": v.options, **v.overrides} for v in config.variants}}


def load_results(out) -> list[dict]:
    rows = []
    for path in sorted(Path(out).glob("jobs/*/*/*.json")):
        try:
            rows.append(json.loads(path.read_text()))
        except json.JSONDecodeError:
            continue  # a job interrupted while writing is re-run on resume
    return rows


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


def write_outputs(out, config: ExperimentConfig) -> dict:
    """(Re)write ``results.jsonl``, ``summary.json`` and ``table.md`` from the finished job files."""
    out = Path(out)
    rows = load_results(out)
    with open(out / "results.jsonl", "w") as fh:
        for row in rows:
            fh.write(json.dumps(row, allow_nan=False) + "\n")
    by_setting = summarize(rows)
    summary = {"experiment": config.name, "jobs": len(rows), "settings": by_setting}
    if len(by_setting) == 1:
        summary["variants"] = next(iter(by_setting.values()))
        if len(summary["variants"]) == 1:
            summary["means"] = next(iter(summary["variants"].values()))
    _write_json(out / "summary.json", summary)
    (out / "table.md").write_text(comparison_table(config, by_setting))
    return summary


def comparison_table(config: ExperimentConfig, by_setting: dict) -> str:
    """Markdown: one row per (setting, variant), our numbers beside the paper's."""
    from .report import markdown_table

    keys = ["rec_percent", "psnr", "ssim", "label_count_error"]
    present = [k for k in keys if any(k in v for s in by_setting.values() for v in s.values())
               or any(k in p for s in config.paper.values() if isinstance(s, dict) for p in s.values()
                      if isinstance(p, dict))]
    rows = []
    for setting, variants in by_setting.items():
        for variant, stats in variants.items():
            paper = ((config.paper.get(setting) or {}).get(variant) or {}) if isinstance(config.paper, dict) else {}
            row = {"setting": setting, "variant": variant, "clients": stats.get("clients")}
            for key in present:
                mean = stats.get(key)
                row[key] = None if mean is None else f"{mean:.2f} ± {stats.get(key + '_std', 0):.2f}"
                row[f"{key} (paper)"] = paper.get(key)
            rows.append(row)
    columns = ["setting", "variant", "clients"] + [c for k in present for c in (k, f"{k} (paper)")]
    title = f"# {config.name}\n\n{config.description}\n\n"
    return title + markdown_table(rows, columns) + "\n"


def run_experiment(config: ExperimentConfig, out, **kwargs) -> dict:
    """Run (or resume) ``config`` into ``out``; returns the summary dict."""
    return Runner(config, out, **kwargs).run()
