"""``fedleak.audit(...)``: validate everything, run every sweep value, then write the outputs.

Order matters for "nothing written half": the configuration of every sweep value, the device, the
data, the model, its weights and the fit of data to model are all checked before any attack runs,
and the output folder is written only once every measurement is done (files are staged in a
temporary folder inside ``out``'s parent and moved in at the end).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from .. import data
from ..errors import FedleakError
from . import report
from . import text as text_audit
from .config import AuditConfig
from .engine import Auditor
from .model_loading import check_fits, prepare_model
from .progress import reporter

FORMAT = "fedleak.audit/2"


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


def audit(config=None, *, out="fedleak-report", progress="auto", log=print, **settings) -> dict:
    """Audit a deployment and write ``out/report.html`` and ``out/metrics.json``; returns the metrics.

    ``config``: an :class:`AuditConfig`, a mapping or a path to a YAML file with the keys of the CLI
    (``model``, ``weights``, ``data``, ``data_root``, ``samples``, ``clients``, ``algorithm``,
    ``epochs``, ``batch_size``, ``lr``, ``static_batches``, ``defense``, ``rounds``, ``sample_rate``,
    ``delta``, ``sweep``, ``attacks``, ``malicious``, ``bins``, ``iterations``, ``quick``, ``seed``,
    ``device``; for ``data="text"`` also ``seq_len``, ``lora``, ``lora_warmup``, ``text_field``,
    ``label_field``: :mod:`fedleak.audit.text`); keyword ``settings`` override it. ``progress``: ``"auto"``, ``"bar"``, ``"log"``,
    ``None`` or a callable receiving event dicts (:mod:`fedleak.audit.progress`). ``log`` prints the
    summary (``None`` for silence).
    """
    from ..config.cli_args import _device  # the one device check (names, availability); lazy: cli imports the package

    cfg = _config(config, settings)
    log = log or (lambda *_: None)
    sweep = cfg.sweep_plan()
    values = list(sweep.values) if sweep else [None]
    plans = [cfg.resolve(**({sweep.knob: v} if sweep else {})) for v in values]
    device = _device(cfg.device)
    max_samples = max(s.samples for plan in plans for s in plan.scenarios)
    needed = cfg.clients * max(plan.secagg for plan in plans)
    is_text = text_audit.is_text(cfg.data)
    if is_text:  # the model's tokenizer and task decide how the text is cut (audit/text.py)
        from .default import DEFAULT_MODEL

        model_name = text_audit.model_name(cfg.model, DEFAULT_MODEL)
        spec, pool, _, _ = text_audit.prepare(cfg, model_name, needed, max_samples)
    else:
        model_name = cfg.model
        spec, pool = data.load(cfg.data, root=cfg.data_root, num_clients=needed, samples_per_client=max_samples,
                               seed=cfg.seed)
    if len(pool) < needed:
        raise FedleakError(f"dataset {cfg.data!r} has {len(pool)} client(s) with {max_samples} samples; the audit "
                           f"needs {needed} ({cfg.clients} target(s) × secure-aggregation K)")
    short = [c.client_id for c in pool if len(c) < max_samples]
    if short:
        raise FedleakError(f"client(s) {', '.join(short[:3])} of {cfg.data!r} hold fewer than {max_samples} samples")
    text_models: dict = {}

    def model_for(plan):
        """The text model at this setting's LoRA rank (built once per rank)."""
        if plan.lora not in text_models:
            built = text_audit.build_model(model_name, spec, seed=cfg.model_seed, lora=plan.lora,
                                           lora_warmup=cfg.lora_warmup, weights=cfg.weights)
            text_audit.check_fits(built, pool[0].inputs, model_name)
            text_models[plan.lora] = built.to(device)
        return text_models[plan.lora]

    if is_text:
        model = model_for(plans[0])
    else:
        model = prepare_model(cfg.model, spec, seed=cfg.model_seed, weights=cfg.weights)
        check_fits(model, pool[0].inputs, spec, cfg.model)
        model = model.to(device)
    out = Path(out)

    show = reporter(progress)
    try:
        auditor = Auditor(cfg, spec, model, pool, device, show)
        n_params = sum(p.numel() for p in model.parameters())
        if show is not None:
            show({"stage": f"fedleak audit: {spec.name} data, {model_name} ({n_params:,} parameters), device {device}"})
        points, examples = [], []
        for value, plan in zip(values, plans):
            label = f"{sweep.knob}={value:g}" if sweep else ""
            if is_text:
                auditor.model = model_for(plan)
            point = auditor.point(plan, label)
            point.data["value"] = value
            point.data["settings"] = {"defense": plan.defense.to_text(), "secagg": plan.secagg,
                                      "protocols": {s.key: s.protocol.to_json() for s in plan.scenarios},
                                      "samples": {s.key: s.samples for s in plan.scenarios}}
            if is_text:
                point.data["settings"].update({"lora": plan.lora, "seq_len": spec.seq_len,
                                               "trainable_parameters": sum(p.numel() for p in auditor.model.parameters()
                                                                           if p.requires_grad)})
            point.data["verdicts"] = {k: v["verdict"] for k, v in point.data["threat_models"].items()}
            points.append(point.data)
            examples.append(point.examples)
        if show is not None:
            show({"stage": "writing the report"})
        result = {"format": FORMAT, "data": spec.name, "model": model_name, "seed": cfg.seed, "quick": cfg.quick,
                  "parameters": n_params, "config": cfg.to_json(),
                  "rule": text_audit.RULE if is_text else report.RULE, "modality": spec.modality,
                  "sweep": sweep.to_json(plans[0].defense if plans[0].defense.active else
                                         next((p.defense for p in plans if p.defense.active), None))
                  if sweep else None, "points": points,
                  "verdicts": points[0]["verdicts"], "threat_models": points[0]["threat_models"],
                  "scenarios": points[0]["scenarios"], "epsilon": points[0]["epsilon"]}
        result["what_to_change"] = report.what_to_change(result)
        if is_text:  # a low verdict where the exact attacks could not decide is no protection
            undecided = [p["value"] for p in points if p["threat_models"]["honest-but-curious"].get("condition_failed")
                         and p["threat_models"]["honest-but-curious"]["verdict"] != "high"]
            if undecided:
                where = (f" at {sweep.label(plans[0].defense)} = {', '.join(f'{v:g}' for v in undecided)}"
                         if sweep else "")
                result["what_to_change"].append(
                    f"Caution{where}: the exact text attacks' condition failed (more tokens in the step than the "
                    f"span limit: layer width or LoRA rank), so they could not decide; a lower verdict there is "
                    f"no evidence that the text is protected.")
        _write(out, result, examples)
    finally:
        if show is not None and hasattr(show, "close"):
            show.close()
    _log_summary(log, result, out)
    return result


def _write(out: Path, result: dict, examples: list) -> None:
    """Stage every file, then move them into ``out`` (nothing half-written if anything fails)."""
    plots = report.make_plots(result, examples)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        result["plots"] = report.save_plots(staging, plots)
        (staging / "metrics.json").write_text(json.dumps(result, indent=1, allow_nan=False))
        report.write_report(staging, result, examples, plots)
        out.mkdir(parents=True, exist_ok=True)
        for item in staging.iterdir():
            item.replace(out / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _log_summary(log, result: dict, out: Path) -> None:
    for point in result["points"]:
        if result.get("sweep"):
            log(f"\n{result['sweep']['label']} = {point['value']:g}")
        log("\n" + report.printed_table(point))
        for name, tm in point["threat_models"].items():
            log(report.verdict_sentence(name, tm))
        if "malicious" in point["scenarios"]:
            log(report.imprint_sentence(point["scenarios"]["malicious"]))
        eps = report.epsilon_text(point)
        if eps:
            log(f"DP: {eps}")
    log("\nWhat to change: " + " ".join(result["what_to_change"]))
    log(f"report: {out / 'report.html'}  metrics: {out / 'metrics.json'}")
