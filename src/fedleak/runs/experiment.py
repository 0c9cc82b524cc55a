"""Run an experiment: settings × variants × clients, one result file per job, resumable.

For every job the pipeline of ``DESIGN.md`` runs once: the client computes its update with the one
client update (:func:`fedleak.fl.client_update`), the server is told what the threat model lets
it know (``threat.labels``), the attack reconstructs, metrics compare. Jobs run on an executor
(:mod:`fedleak.runs.execution`: in this process or as Ray tasks); this process writes each job's
result to ``OUT/jobs/<setting>/<variant>/<client>.json`` (:mod:`fedleak.runs.job_files`) as soon as it
arrives, so an interrupted run resumes by running the same command again: a job file is reused only
if it is complete and carries the hash of the job's fully resolved configuration; any other file is
kept aside as ``*.stale`` and the job recomputed. At the end ``results.jsonl``, ``summary.json`` and
``table.md`` (ours beside the paper's numbers) are (re)written (:mod:`fedleak.runs.run_report`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from .. import attacks, data, metrics, models
from ..config import ExperimentConfig, Setting, Variant
from ..errors import FedleakError
from .execution import LocalExecutor
from ..fl import batch_schedule, client_rounds, client_update
from .job_files import RECORD_METRICS, data_digest, job_hash, job_path, keep_aside, reusable, sealed, write_json
from .naming import check_distinct
from .progress import _Progress, interrupted_message
from .run_report import write_outputs
from ..types import ClientData, Protocol

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class Job:
    setting: Setting
    variant: Variant
    client_index: int


@dataclass(frozen=True)
class PlannedJob:
    """One job as shipped to an executor: names, the client, its file and its configuration hash."""

    setting: str
    variant: str
    client_index: int
    client_id: str
    path: Path
    hash: str

    def __str__(self) -> str:
        return f"{self.setting}/{self.variant}/{self.client_id}"


@dataclass(frozen=True)
class RunContext:
    """What every job of a run shares (shipped once to a Ray cluster)."""

    config: ExperimentConfig
    device: str
    dtype: str

    @property
    def key(self) -> str:
        text = json.dumps([dataclasses.asdict(self.config), self.device, self.dtype], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()


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
    """Executes an :class:`ExperimentConfig` into an output folder, on a local or Ray executor."""

    def __init__(self, config: ExperimentConfig, out=None, *, device: str = "cpu", dtype=torch.float32,
                 show_progress: bool = True, log: Callable[[str], None] = print, executor=None,
                 progress: Optional[Callable[[dict], None]] = None) -> None:
        self.config = config
        self.out = None if out is None else Path(out)
        self.device = torch.device(device)
        self.dtype = DTYPES[dtype] if isinstance(dtype, str) else dtype
        self.show_progress = show_progress
        self.log = log
        self.executor = executor or LocalExecutor()
        self.progress = progress  # API callback: event dicts (plan, step, job, heartbeat); see _Progress
        self._data_cache: dict = {}
        self._model_cache: dict = {}

    @property
    def context(self) -> RunContext:
        name = next(k for k, v in DTYPES.items() if v == self.dtype)
        return RunContext(self.config, str(self.device), name)

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
                from ..fl.training import train_fedavg

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

    def check_names(self) -> None:
        """Every job's dataset and model (zoo name, model folder, GGUF file; the names of its options) checked
        before any data is read."""
        from ..data.registry import canonical

        for setting in self.config.settings:
            for variant in self.config.variants:
                sections = self.config.resolve(setting, variant)
                canonical(sections["data"]["dataset"])
                models.check(sections["model"]["name"], sections["model"].get("options"))

    # -- planning -----------------------------------------------------------------------------
    def jobs(self) -> list[Job]:
        check_distinct([s.name for s in self.config.settings], "setting")
        check_distinct([v.name for v in self.config.variants], "variant")
        out = []
        for setting in self.config.settings:
            variants = [v for v in self.config.variants if setting.variants is None or v.name in setting.variants]
            if not variants:
                self.log(f"warning: setting {setting.name!r} runs no job: none of its variants "
                         f"{list(setting.variants or [])} is among {[v.name for v in self.config.variants]}")
            first, n = _client_range(self.config.resolve(setting, variants[0])["data"]) if variants else (0, 0)
            for index in range(first, first + n):
                out.extend(Job(setting, v, index) for v in variants)
        return out

    def plan(self) -> list[PlannedJob]:
        """Every job with its file and the hash of its fully resolved configuration."""
        planned, dtype = [], self.context.dtype
        for job in self.jobs():
            sections = self.config.resolve(job.setting, job.variant)
            spec, clients = self.dataset(sections["data"])
            if job.client_index >= len(clients):
                continue  # the dataset has fewer clients than asked for
            check_distinct([c.client_id for c in clients], "client id")
            client = clients[job.client_index]
            selection = {k: v for k, v in sections["data"].items() if k not in ("num_clients", "first_client", "root")}
            identity = {"sections": {**sections, "data": selection}, "setting": job.setting.name,
                        "variant": job.variant.name, "attack": job.variant.attack, "options": job.variant.options,
                        "attack_seed": self.config.attack_seed + job.client_index, "client_index": job.client_index,
                        "client": client.client_id, "data": data_digest(client.inputs, client.labels),
                        "metrics": {k: self.config.metrics.get(k) for k in RECORD_METRICS}, "dtype": dtype}
            planned.append(PlannedJob(job.setting.name, job.variant.name, job.client_index, client.client_id,
                                      job_path(self.out, job.setting.name, job.variant.name, client.client_id),
                                      job_hash(identity)))
        return planned

    # -- running ------------------------------------------------------------------------------
    def run(self) -> dict:
        if self.out is None:
            raise FedleakError("Runner.run needs an output folder")
        from .lock import OutLock

        with OutLock(self.out, f"fedleak run {self.config.name}"):
            return self._run_locked()

    def _run_locked(self) -> dict:
        quick = (self.config.quick or {}).get("variant_options") or {}
        for variant in self.config.variants:  # validate every variant's options before the first job
            attacks.build(variant.attack, **variant.options)
            if quick:  # and with quick's, so that a file whose --quick would fail is refused either way
                attacks.build(variant.attack, **{**variant.options, **quick})
        self.check_names()
        planned = self.plan()
        stamp = config_hash(self.config)
        previous = _previous_hash(self.out)
        if previous and previous != stamp:
            self.log(f"note: {self.out} holds results of another configuration ({previous}); they are kept apart: "
                     f"only jobs of this one ({stamp}) enter results.jsonl, summary.json and table.md")
        write_json(self.out / "config.json", {**_config_json(self.config), "planned_jobs": len(planned),
                                              "config_hash": stamp})
        pending = []
        for job in planned:
            record, why = reusable(job.path, job.hash)
            if record is not None:
                if record.get("config_hash") != stamp:  # the same job, claimed by this configuration too
                    write_json(job.path, sealed({**record, "config_hash": stamp}))
                continue
            if why:
                kept = keep_aside(job.path)
                self.log(f"job {job}: existing result {why}; kept aside as {kept.name}, recomputing")
            pending.append(job)
        reused = len(planned) - len(pending)
        _RUNNERS.clear()
        _RUNNERS[self.context.key] = self  # the local executor computes with this runner's caches
        progress = _Progress(len(planned), reused, pending, self.show_progress, self.config.name, self.log,
                             local=getattr(self.executor, "name", "local") == "local", callback=self.progress)
        try:  # from the plan line on, an interrupt says what is on disk
            progress.planned(planned, self.config.variants)
            for index, result in self.executor.map(compute_job, self.context, pending, progress=progress.inner):
                job = pending[index]
                if result["image"] is not None:
                    job.path.parent.mkdir(parents=True, exist_ok=True)
                    result["image"].save(job.path.with_suffix(".png"))
                write_json(job.path, sealed({**result["record"], "config_hash": stamp}))
                progress.finished(job, result["record"])
        except KeyboardInterrupt as exc:
            progress.close()
            self.log("\n" + interrupted_message(self.out, len(planned)))
            exc.explained = True  # the CLI adds no hint of its own beside this one (it would repeat or contradict it)
            raise
        finally:
            progress.close()
            _RUNNERS.clear()
        if reused:
            self.log(f"resumed: {reused} finished job(s) were reused")
        return write_outputs(self.out, self.config.name, self.config.description, self.config.paper, len(planned),
                             config_hash=stamp)

    def compute(self, job: PlannedJob) -> dict:
        """Run one job: ``{"record": dict, "image": PIL.Image or None}`` (nothing is written here)."""
        setting = next(s for s in self.config.settings if s.name == job.setting)
        variant = next(v for v in self.config.variants if v.name == job.variant)
        sections = self.config.typed(setting, variant)
        spec, clients = self.dataset(sections["data"])
        client = clients[job.client_index]
        model = self.model(sections["model"], spec, sections["data"])
        protocol = sections["protocol"]
        client = client.to(self.device, self.dtype)
        labels_kind = sections["threat"]
        attack = attacks.build(variant.attack, **{"seed": self.config.attack_seed + job.client_index,
                                                  **variant.options})
        reconstruct = self._observed(Job(setting, variant, job.client_index), sections, model, client, protocol,
                                     spec, attack)
        start = time.perf_counter()
        rec = reconstruct()
        seconds = time.perf_counter() - start
        m = self.config.metrics
        scores = metrics.evaluate(rec, client, spec, threshold=m.get("threshold"), clip=bool(m.get("clip", True)),
                                  lpips=m.get("lpips", False))
        record = {"setting": job.setting, "variant": job.variant, "attack": variant.attack,
                  "client": client.client_id, "client_index": job.client_index, "num_samples": len(client),
                  "protocol": protocol.to_json(), "threat": labels_kind, "rounds": sections["rounds"],
                  "seconds": seconds, **scores,
                  "attack_extras": {k: v for k, v in rec.extras.items() if k != "loss_history"},
                  "job_hash": job.hash}
        from ..modality import named

        image = named(spec).picture(rec, client, spec, scores, 16) if m.get("save_images", True) else None
        return {"record": record, "image": image}

    @staticmethod
    def _observed(job: Job, sections: dict, model, client: ClientData, protocol: Protocol, spec, attack):
        """What the server observes of the client, as the call that attacks it.

        One update (the usual job), or with a ``rounds`` section of ``epochs`` > 1 the client's
        updates of every round over that many epochs (AGIC §IV-B, :func:`fedleak.fl.client_rounds`),
        attacked jointly by ``reconstruct_rounds``. The threat section decides what the server is
        told beside each update.
        """
        seed = int(sections["data"].get("seed", 0)) * 100003 + job.client_index
        labels_kind, defense = sections["threat"], sections["defense"]

        def told(part: ClientData, part_seed: int) -> dict:
            return {"client_index": job.client_index,
                    **threat_metadata(labels_kind, part, protocol, part_seed, spec.num_classes)}

        rounds = sections["rounds"]
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


#: the runner a process computes jobs with, by run context (one entry: the current run)
_RUNNERS: dict = {}


def compute_job(context: RunContext, job: PlannedJob) -> dict:
    """An executor's unit of work: compute ``job`` with this process's runner for ``context``."""
    runner = _RUNNERS.get(context.key)
    if runner is None:  # a Ray worker: build (and keep) a runner with its own data and model caches
        _RUNNERS.clear()
        runner = _RUNNERS[context.key] = Runner(context.config, device=context.device, dtype=context.dtype,
                                                show_progress=False, log=lambda *_: None)
    return runner.compute(job)


def _config_json(config: ExperimentConfig) -> dict:
    return {"name": config.name, "description": config.description, "data": config.data, "model": config.model,
            "protocol": config.protocol, "defense": config.defense, "threat": config.threat, "rounds": config.rounds,
            "metrics": config.metrics, "attack_seed": config.attack_seed, "paper": config.paper,
            "settings": [{"name": s.name, **s.overrides} for s in config.settings],
            "variants": {v.name: {"attack": v.attack, "options": v.options, **v.overrides} for v in config.variants}}


def config_hash(config: ExperimentConfig) -> str:
    """A short hash of the experiment's configuration, without the client range (``--clients``,
    ``--first-client``: machines sharing one run folder split the clients of one configuration)."""
    described = _config_json(config)
    described["data"] = {k: v for k, v in described["data"].items() if k not in ("num_clients", "first_client")}
    text = json.dumps(described, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _previous_hash(out: Path):
    from ..config.json_safe import read_json_file

    try:
        return read_json_file(out / "config.json").get("config_hash") if (out / "config.json").is_file() else None
    except FedleakError:
        return None


def run_experiment(config: ExperimentConfig, out, *, executor=None, **kwargs) -> dict:
    """Run (or resume) ``config`` into ``out`` on ``executor`` (default: this process); returns the summary."""
    runner = Runner(config, out, executor=executor, **kwargs)
    try:
        return runner.run()
    finally:
        runner.executor.close()
