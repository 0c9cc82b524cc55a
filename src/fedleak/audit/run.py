"""``fedleak.audit(...)``: validate everything, run every sweep value, then write the outputs.

Order matters for "nothing written half": the configuration of every sweep value, the device, the
data, the model, its weights and the fit of data to model are all checked before any attack runs,
and the output folder is written only once every measurement is done (files are staged in a
folder inside ``out`` itself, so the final moves are renames on one file system even when ``out``
is a link to another, then moved in). ``out`` is locked for the run (:mod:`fedleak.runs.lock`: a
second audit on it refuses naming this one's PID); a run that fails before writing leaves no
folder; a rerun removes the plots of the previous audit that it no longer makes; ``metrics.json``
carries the configuration's hash, and a rerun with another configuration says what it replaces.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

from ..errors import FedleakError
from ..runs.identity import FORMAT, config_hash, environment  # noqa: F401  (re-exported: fedleak.audit.run.FORMAT)
from . import report
from .execute import malicious
from .execute.engine import Auditor
from .execute.progress import reporter
from .execute.steps import RunContext
from .execute.tuning import surrogate_clients
from .judge.verdict import evidence_sentence
from .plan import threats
from .plan.combinations import check_plans
from .plan.config import AuditConfig
from .plan.points import attack_runs, configured_value, with_configured


def _config(config, settings: dict) -> AuditConfig:
    if config is None:
        base = AuditConfig()
    elif isinstance(config, AuditConfig):
        base = config
    elif isinstance(config, dict):
        base = AuditConfig.from_mapping(config)
    else:
        base = AuditConfig.from_yaml(config)
    if settings:
        overrides = AuditConfig.from_mapping(settings, "fedleak.audit() arguments")
        base = base.merged({k: getattr(overrides, k) for k in settings if k != "no_malicious"}
                           | ({"malicious": overrides.malicious} if "no_malicious" in settings else {}))
    return base


def audit(config=None, *, out="fedleak-report", progress="auto", log=print, threads: int = 1, flower_app=None,
          **settings) -> dict:
    """Audit a deployment and write ``out/report.html`` and ``out/metrics.json``; returns the metrics.

    ``flower_app``: the folder of a Flower app, run in Flower's simulation with its own strategy audited
    (:func:`fedleak.integrations.flower.app_audit.audit_flower_app`, whose keywords — ``run_config``,
    ``malicious_run_config``, ``supernodes``, ``canaries``, ``model``, ``data``, ``share_truth`` — go in
    ``settings``); ``config`` must then be ``None``.

    Runs on ``threads`` torch CPU threads (default 1, as ``fedleak audit``; restored afterwards):
    the unrolled FedAvg attacks' results depend on the thread count (measured: Dimitrov et al.'s
    reconstruction at seed 0 differs between 1 and 2 threads, Inverting Gradients on FedSGD does
    not), so the API and the CLI give the same numbers. ``metrics.json``'s ``environment`` says what
    else they depend on. See :func:`_audit` for the arguments.
    """
    import torch

    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1024:
        raise FedleakError(f"threads must be an integer from 1 to 1024, got {threads!r}")
    if flower_app is not None:
        from ..integrations.flower.app_audit import api_audit

        return api_audit(flower_app, config, out=out, log=log, **settings)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _audit(config, out=out, progress=progress, log=log, **settings)
    finally:
        torch.set_num_threads(before)


def _audit(config=None, *, out="fedleak-report", progress="auto", log=print, **settings) -> dict:
    """Audit a deployment and write ``out/report.html`` and ``out/metrics.json``; returns the metrics.

    ``config``: an :class:`AuditConfig`, a mapping or a path to a YAML file with the keys of the CLI
    (``model``, ``weights``, ``data``, ``data_root``, ``samples``, ``clients``, ``algorithm``,
    ``epochs``, ``batch_size``, ``lr``, ``static_batches``, ``defense``, ``rounds``, ``sample_rate``,
    ``delta``, ``sweep``, ``attacks``, ``malicious``, ``bins``, ``iterations``, ``quick``, ``seed``,
    ``device``; for ``data="text"`` also ``seq_len``, ``lora``, ``lora_warmup``, ``text_field``,
    ``label_field``: :mod:`fedleak.audit.plan.text`); keyword ``settings`` override it. ``progress``: ``"auto"``, ``"bar"``, ``"log"``,
    ``None`` or a callable receiving event dicts (:mod:`fedleak.audit.execute.progress`). ``log`` prints the
    summary (``None`` for silence).
    """
    from ..config.cli_args import check_device  # the one device check (names, availability); lazy: cli imports the package

    from ..runs.outdir import prepare_out_dir

    cfg = _config(config, settings)
    cfg.extra = dict(cfg.extra)  # this run's own (the preset and the candidate documents go here)
    if cfg.flowertune:  # the FlowerTune client where the user gave no value (audit/plan/flowertune.py)
        from .plan import flowertune

        cfg, preset = flowertune.apply(cfg, cfg.device)
        cfg.extra["flowertune"] = preset
    if log is not None and not callable(log):
        raise FedleakError(f"fedleak.audit(): log must be a callable (e.g. print) or None, got {type(log).__name__}")
    out = prepare_out_dir(out, "fedleak.audit(): out")
    if not callable(progress) and progress not in (None, False, "quiet", "none", "auto", "bar", "log"):
        reporter(progress)  # an unknown progress mode fails here (one line listing the modes), before any work
    log = log or (lambda *_: None)
    sweep = cfg.sweep_plan()
    if sweep:  # the headline is the configured deployment: its value is always one of the sweep's points
        sweep = with_configured(sweep, configured_value(cfg, sweep.knob))
    values = list(sweep.values) if sweep else [None]
    plans = [cfg.resolve(**({sweep.knob: v} if sweep else {})) for v in values]
    check_plans(cfg, plans)
    device = check_device(cfg.device)

    from ..runs.lock import OutLock

    lock = OutLock(out, "fedleak audit").acquire()  # a second audit on this --out refuses before any work
    try:
        return _locked(cfg, out, log, progress, sweep, values, plans, device)
    finally:
        lock.release()


def _locked(cfg, out: Path, log, progress, sweep, values, plans, device) -> dict:
    """The audit once its configuration is valid and ``out`` is locked: the data's modality runs it
    (:mod:`fedleak.modality`; images and text through :func:`staged`, handed to it: the modality imports no stage)."""
    from ..modality import of as modality_of

    return modality_of(cfg.data).audit(cfg, out, log, progress, sweep, values, plans, device, staged)


def staged(modality, cfg, out: Path, log, progress, sweep, values, plans, device) -> dict:
    """The audit's shared stages for ``modality`` (images, text): data, model, attacks, outputs. Whatever differs
    between modalities is the modality object's (:class:`fedleak.modality.Modality`)."""
    started = time.perf_counter()
    max_samples = max(s.samples for plan in plans for s in plan.scenarios)
    needed = cfg.clients * max(plan.secagg for plan in plans)
    model_name, spec, pool = modality.prepare(cfg, needed, max_samples)
    if len(pool) < needed:
        raise FedleakError(f"dataset {cfg.data!r} has {len(pool)} client(s) with {max_samples} samples; the audit "
                           f"needs {needed} ({cfg.clients} target(s) × secure-aggregation K)")
    short = [c.client_id for c in pool if len(c) < max_samples]
    if short:
        raise FedleakError(f"client(s) {', '.join(short[:3])} of {cfg.data!r} hold fewer than {max_samples} samples")
    outside = modality.outside_pool(cfg, model_name, needed, max_samples)
    show = reporter(progress)
    model_for = modality.models(cfg, model_name, spec, pool, plans, device, show)
    model = model_for(plans[0])
    try:
        public = surrogate_clients(cfg, pool, max_samples, modality, model_name) if cfg.tune else ()
        context = RunContext(cfg, spec, device, show, tuple(public), budget=threats.AttackBudget.of(cfg))
        auditor = Auditor(context, model, pool)
        n_params = sum(p.numel() for p in model.parameters())
        if show is not None:
            show({"stage": f"fedleak audit: {spec.name} data, {model_name} ({n_params:,} parameters), device {device}"})
        time_budget = None
        if cfg.budget is not None:  # --budget: time each optimization attack, scale them to fit (plan/time_budget.py)
            from .execute.calibration import fit
            from .plan.time_budget import parse_budget

            fitted, time_budget = fit(auditor, plans, parse_budget(cfg.budget), started)
            auditor.context = context = replace(context, budget=fitted)
            show({"stage": time_budget["line"]}) if show is not None else log(time_budget["line"])
        if show is not None:
            runs = attack_runs(cfg, plans, model)
            show({"stage": f"plan: {runs} attack run(s) ({len(plans)} setting(s) x {cfg.clients} client(s) or "
                  f"aggregate(s)){' with --quick attacks (shortened budgets)' if cfg.quick else ''}; a time estimate "
                  "follows once the first iterations are measured", "plan": {"attacks": runs}})
        points, examples = [], []
        for value, plan in zip(values, plans):
            label = f"{sweep.knob}={value:g}" if sweep else ""
            auditor.model = model_for(plan)
            point = auditor.point(plan, label)  # execute: the honest-but-curious server, then the malicious one
            if cfg.malicious:
                malicious.threat_model(auditor, plan, context.at(label), point)
                report.state_malicious(point.data["scenarios"]["malicious"])
            point.data["value"] = value
            point.data["settings"] = {"defense": plan.defense.to_text(), "secagg": plan.secagg,
                                      "protocols": {s.key: s.protocol.to_json() for s in plan.scenarios},
                                      "samples": {s.key: s.samples for s in plan.scenarios}}
            modality.point_extras(cfg, auditor.model, spec, pool, outside, plan, show, point.data)
            point.data["verdicts"] = {k: v["verdict"] for k, v in point.data["threat_models"].items()}
            points.append(point.data)
            examples.append(point.examples)
        if show is not None:
            show({"stage": "writing the report"})
        result = {"format": FORMAT, "data": spec.name, "model": model_name, "seed": cfg.seed, "quick": cfg.quick,
                  "parameters": n_params, "config": {**cfg.to_json(), "model": model_name},  # the model that ran
                  "model_weights": modality.weights_note(cfg, model_name),
                  "rule": modality.rule, "modality": spec.modality,
                  "sweep": sweep.to_json(plans[0].defense if plans[0].defense.active else
                                         next((p.defense for p in plans if p.defense.active), None))
                  if sweep else None, "points": points}
        configured = configured_value(cfg, sweep.knob) if sweep else None
        head = values.index(configured) if sweep and configured in values else 0
        if sweep:
            result["sweep"]["configured"] = configured
        result.update({"headline": head, "verdicts": points[head]["verdicts"],
                       "threat_models": points[head]["threat_models"], "scenarios": points[head]["scenarios"],
                       "epsilon": points[head]["epsilon"], "environment": environment(device)})
        if time_budget is not None:  # with what the attacks took: whether the estimate held, measured
            result["time_budget"] = {**time_budget, "seconds_until_report": round(time.perf_counter() - started, 1)}
        result.update(modality.result_entries(cfg, points))
        result["what_to_change"] = report.what_to_change(result) + modality.cautions(points, sweep, plans)
        from .judge.overall import overall

        result["overall"] = overall(result)  # the one line: console, report, metrics.json
        result["config_hash"] = config_hash(result["config"])
        _write(out, result, examples, log)
    finally:
        if show is not None and hasattr(show, "close"):
            show.close()
    _log_summary(log, result, out)
    return result


def _previous(out: Path) -> dict:
    from ..config.json_safe import read_json_file

    try:
        return read_json_file(out / "metrics.json") if (out / "metrics.json").is_file() else {}
    except FedleakError:
        return {}


def _write(out: Path, result: dict, examples: list, log=None) -> None:
    """Stage every file inside ``out``, then move them in (nothing half-written if anything fails)."""
    from ..runs.lock import staging_dir

    plots = report.make_plots(result, examples)
    previous = _previous(out)
    staging = staging_dir(out)
    try:
        result["plots"] = report.save_plots(staging, plots)
        (staging / "metrics.json").write_text(json.dumps(result, indent=1, allow_nan=False))
        report.write_report(staging, result, examples, plots)
        for item in sorted(staging.iterdir(), key=lambda p: p.name == "metrics.json"):  # metrics.json last
            item.replace(out / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    old_plots = previous.get("plots") if isinstance(previous.get("plots"), list) else []
    for name in set(map(str, old_plots)) - set(result["plots"]):  # a rerun keeps no stale plot beside the report
        if Path(name).name == name and name.endswith(".png"):
            (out / name).unlink(missing_ok=True)
    old_hash = previous.get("config_hash")
    if log is not None and previous and old_hash != result["config_hash"]:
        log(f"note: {out} held an audit of another configuration ({old_hash or 'unstamped'}); it is replaced by "
            f"this one ({result['config_hash']})")


def _log_summary(log, result: dict, out: Path) -> None:
    for point in result["points"]:
        if result.get("sweep"):
            log(f"\n{result['sweep']['label']} = {point['value']:g}")
        log("\n" + report.printed_table(point))
        for name, tm in point["threat_models"].items():
            log(report.verdict_sentence(name, tm, quick=report.shortened(result)))
            if tm.get("evidence"):
                log(f"  Evidence — {tm.get('evidence_text') or evidence_sentence(tm)}.")
        if "malicious" in point["scenarios"]:
            log(report.imprint_sentence(point["scenarios"]["malicious"]))
        eps = report.epsilon_text(point)
        if eps:
            log(f"DP: {eps}")
    if result.get("overall"):
        log("\nOverall: " + result["overall"]["line"])
    log("\nWhat to change: " + " ".join(result["what_to_change"]))
    log(f"report: {out / 'report.html'}  metrics: {out / 'metrics.json'}")


