"""One audit at one setting: clients' updates (or their secure aggregate), every threat model's
attacks, scores, verdicts and ε.

The pipeline of ``DESIGN.md``: each audited target (one client, or K clients under ``secagg:K``)
computes its update with the one client update (:func:`fedleak.fl.client_update`, defenses inside
it); the attacks of each threat model (:mod:`.threats`) reconstruct from what the server sees;
:func:`fedleak.metrics.evaluate` scores each reconstruction against the target's own images; the
verdict rule (:mod:`.verdict`) turns the strongest attack's Rec% into high / medium / low.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from .. import metrics
from ..attacks.imprint import expected_recovered
from ..attacks.optimize import progress_reporter
from ..fl import client_update
from ..fl.accounting import PrivacyParameters, federation_epsilon
from ..fl.secagg import concatenate, secure_aggregate
from ..types import ClientData, DataSpec, Reconstruction
from . import text as text_audit
from . import threats
from .config import AuditConfig, Plan, Scenario
from .default import describe
from .progress import optimizer_callback
from .verdict import judge

#: PSNR above which an imprint readout counts as verbatim (Fowl et al.: exact copies)
VERBATIM_DB = 60.0
MALICIOUS_NAMES = ("imprint", "imprint-sparse", "imprint-one-shot", "cah")
SUMMARY_KEYS = ("psnr", "ssim", "rec_percent", "iip", "label_count_error")


@dataclass
class Example:
    """Originals and matched reconstructions of the first target, for the report's image grid."""

    originals: torch.Tensor
    reconstructions: torch.Tensor
    psnr: list
    threshold: float


@dataclass
class PointResult:
    """Everything measured at one setting: JSON-able ``data`` and the images for the report."""

    data: dict
    examples: dict = field(default_factory=dict)  # (scenario, attack display) -> Example


def _event(progress, stage: str) -> None:
    if progress is not None:
        progress({"stage": stage})


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _summarize(per_target: list[dict], seconds: float, choice) -> dict:
    """Mean scores over the audited targets, their distribution, and every image's PSNR."""
    out = {"attack": choice.name, "title": choice.title, "options": choice.options, "seconds": seconds,
           "targets": len(per_target)}
    for key in SUMMARY_KEYS:
        out[key] = _mean([s.get(key) for s in per_target])
    out["threshold"] = per_target[0]["threshold"]
    out["psnr_per_input"] = [p for s in per_target for p in s["psnr_per_input"]]
    out["per_client"] = [{"target": s["target"], "psnr": s["psnr"], "rec_percent": s["rec_percent"],
                          "num_inputs": s["num_inputs"]} for s in per_target]
    rec = [s["rec_percent"] for s in per_target]
    out["rec_percent_min"], out["rec_percent_max"] = min(rec), max(rec)
    return out


def _example(rec: Reconstruction, truth: ClientData, spec: DataSpec, scores: dict) -> Example:
    originals = spec.denormalize(truth.inputs.detach().cpu().float())
    recs = spec.denormalize(rec.inputs.detach().cpu().float())
    matched = torch.stack([recs[i] if i is not None else torch.full_like(originals[0], float("nan"))
                           for i in scores["assignment"]])
    return Example(originals[:16], matched[:16], scores["psnr_per_input"][:16], scores["threshold"])


class Auditor:
    """Runs :meth:`point` for each setting of one :class:`AuditConfig` (model and data prepared once)."""

    def __init__(self, config: AuditConfig, spec: DataSpec, model, pool: list, device: str, progress=None):
        self.config, self.spec, self.model, self.pool = config, spec, model, pool
        self.device, self.progress = device, progress
        self.text = getattr(spec, "modality", "image") == "text"

    # -- modality ------------------------------------------------------------------------------
    def _evaluate(self, rec: Reconstruction, truth: ClientData, model=None) -> dict:
        tokenizer = getattr(model if model is not None else self.model, "tokenizer", None)
        if self.text and tokenizer is None:
            tokenizer = getattr(getattr(model, "base", None), "tokenizer", None)
        return metrics.evaluate(rec, truth, self.spec, tokenizer=tokenizer) if self.text \
            else metrics.evaluate(rec, truth, self.spec)

    def _example(self, rec: Reconstruction, truth: ClientData, scores: dict):
        if self.text:
            return text_audit.example(rec, truth, self.spec, scores, getattr(self.model, "tokenizer", None))
        return _example(rec, truth, self.spec, scores)

    def _summarize(self, per_target: list, seconds: float, choice, rec: Optional[Reconstruction] = None) -> dict:
        if self.text:
            exactness = rec.extras.get("exactness") if rec is not None else None
            return text_audit.summarize(per_target, seconds, choice, exactness)
        return _summarize(per_target, seconds, choice)

    def _judge(self, scores: dict) -> dict:
        return text_audit.judge(scores) if self.text else judge(scores)

    # -- targets -----------------------------------------------------------------------------
    def targets(self, plan: Plan, samples: int) -> list[list[ClientData]]:
        """``clients`` groups of ``secagg`` clients each, every client cut to its first ``samples`` images."""
        pool, k = self.pool, plan.secagg
        return [[c.subset(samples).to(self.device) for c in pool[t * k:(t + 1) * k]] for t in range(self.config.clients)]

    def observe(self, model, group: list[ClientData], scenario: Scenario, plan: Plan, seed: int):
        """What the server receives from the group: one client's update or the secure aggregate."""
        if plan.secagg == 1:
            return client_update(model, group[0], scenario.protocol, seed=seed, defense=plan.defense)
        return secure_aggregate(model, group, scenario.protocol, seed=seed, defense=plan.defense)

    # -- one setting ---------------------------------------------------------------------------
    def point(self, plan: Plan, label: str = "") -> PointResult:
        cfg = self.config
        override = [a for a in (cfg.attacks or ()) if a not in MALICIOUS_NAMES]
        malicious_override = [a for a in (cfg.attacks or ()) if a in MALICIOUS_NAMES]
        result = PointResult({"scenarios": {}, "threat_models": {}, "epsilon": {}})
        honest_scores = {}
        prefix = f"{label}: " if label else ""
        for scenario in plan.scenarios:
            groups = self.targets(plan, scenario.samples)
            choices = (threats.honest_attacks(scenario.key, override=override, quick=cfg.quick,
                                              iterations=cfg.iterations, seed=cfg.seed, text=self.text)
                       if (override or not cfg.attacks) else [])
            entry = {"text": describe(scenario.protocol, scenario.samples, plan.secagg),
                     "protocol": scenario.protocol.to_json(), "num_samples": scenario.samples,
                     "clients_per_target": plan.secagg, "targets": len(groups), "attacks": {}}
            if self.text:
                entry["text"] = entry["text"].replace("images", f"sequences of {self.spec.seq_len} tokens")
            updates = []
            for t, group in enumerate(groups):
                _event(self.progress, f"{prefix}{scenario.key}: client update {t + 1}/{len(groups)}")
                updates.append((self.observe(self.model, group, scenario, plan, cfg.seed + t * plan.secagg),
                                concatenate(group)))
            for choice in choices:
                per_target, seconds, first_rec = [], 0.0, None
                for t, (update, truth) in enumerate(updates):
                    stage = f"{prefix}{scenario.key}: {choice.title}" + (f", target {t + 1}/{len(updates)}"
                                                                         if len(updates) > 1 else "")
                    _event(self.progress, stage)
                    start = time.perf_counter()
                    with progress_reporter(optimizer_callback(self.progress, stage)):
                        rec = threats.build(choice).reconstruct(update, self.model, self.spec)
                    seconds += time.perf_counter() - start
                    scores = self._evaluate(rec, truth)
                    scores["target"] = truth.client_id
                    per_target.append(scores)
                    if t == 0:
                        first_rec = rec
                        result.examples[(scenario.key, choice.title)] = self._example(rec, truth, scores)
                summary = self._summarize(per_target, seconds, choice, first_rec)
                entry["attacks"][choice.name] = summary
                honest_scores[f"{scenario.key}: {choice.title} [{choice.name}]"] = summary
            if plan.dp:
                result.data["epsilon"][scenario.key] = self.epsilon(plan, scenario)
            result.data["scenarios"][scenario.key] = entry
        result.data["threat_models"][threats.HONEST] = {"description": threats.THREAT_MODELS[threats.HONEST],
                                                        **self._judge(honest_scores)}
        if cfg.malicious:
            mal = self.malicious(plan, malicious_override[0] if malicious_override else None, prefix, result)
            result.data["scenarios"]["malicious"] = mal
            result.data["threat_models"][threats.MALICIOUS] = {
                "description": threats.THREAT_MODELS[threats.MALICIOUS],
                **self._judge({f"{mal['title']} [{mal['attack']}]": mal})}
        return result

    def epsilon(self, plan: Plan, scenario: Scenario) -> dict:
        """ε(δ) of the DP-SGD client over the federation's rounds (Opacus's RDP and PRV accountants)."""
        protocol, n = scenario.protocol, scenario.samples
        q = plan.sample_rate if plan.sample_rate is not None else protocol.batch_size_for(n) / n
        steps = plan.rounds * protocol.num_steps(n)
        out = federation_epsilon(PrivacyParameters(plan.defense.scale, q, steps, plan.delta))
        out.update({"rounds": plan.rounds, "clip": plan.defense.clip,
                    "sample_rate_source": "given" if plan.sample_rate is not None else "batch size / samples"})
        return out

    # -- malicious server ------------------------------------------------------------------------
    def malicious(self, plan: Plan, attack_name: Optional[str], prefix: str, result: PointResult) -> dict:
        """Robbing the Fed: an imprint block in front of the model, inputs read back from the update.

        The clients run the first scenario's protocol on as many samples as the largest scenario;
        FedSGD uses the cumulative block (§3), FedAvg the sparse one (§4.3, small rows so the
        lr-scaled update stays above float32 rounding).
        """
        from ..models.imprint import imprint

        scenario = plan.scenarios[0]
        samples = max(s.samples for s in plan.scenarios)
        scenario = Scenario(scenario.key, scenario.protocol, samples)
        structure = "cumulative" if scenario.protocol.algorithm == "fedsgd" else "sparse"
        name = attack_name or ("imprint" if structure == "cumulative" else "imprint-sparse")
        base = copy.deepcopy(self.model).cpu()
        placement = text_audit.imprint_placement(base, self.spec) if self.text else {}
        shipped = imprint(base, self.spec, bins=self.config.bins, structure=structure, linfunc="randn",
                          gain=1.0 if structure == "cumulative" else 1e-3, seed=self.config.seed,
                          **placement).to(self.device)
        choice = threats.choose(name, quick=self.config.quick, iterations=self.config.iterations, seed=self.config.seed)
        per_target, seconds, verbatim, total = [], 0.0, 0, 0
        for t, group in enumerate(self.targets(plan, samples)):
            stage = f"{prefix}malicious: {choice.title}" + (f", target {t + 1}" if self.config.clients > 1 else "")
            _event(self.progress, stage)
            update = self.observe(shipped, group, scenario, plan, self.config.seed + t * plan.secagg)
            truth = concatenate(group)
            start = time.perf_counter()
            rec = threats.build(choice).reconstruct(update, shipped, self.spec)
            seconds += time.perf_counter() - start
            scores = self._evaluate(rec, truth, shipped)
            scores["target"] = truth.client_id
            per_target.append(scores)
            if self.text:  # verbatim = recovered token for token
                verbatim += int(round(scores["exact_sequences"] * scores["num_inputs"]))
            else:
                verbatim += sum(1 for p in scores["psnr_per_input"] if p is not None and p > VERBATIM_DB)
            total += len(truth)
            if t == 0:
                result.examples[("malicious", choice.title)] = self._example(rec, truth, scores)
        summary = self._summarize(per_target, seconds, choice)
        per_target_n = total // len(per_target)
        summary.update({
            "protocol": scenario.protocol.to_json(), "structure": structure, "bins": self.config.bins,
            "added_parameters": int(sum(p.numel() for p in shipped.imprint.parameters())),
            "num_inputs": total, "verbatim_count": verbatim, "verbatim_db": VERBATIM_DB,
            "verbatim_percent": 100.0 * verbatim / total,
            "expected_count": len(per_target) * expected_recovered(per_target_n, self.config.bins),
            "expected_percent": 100.0 * expected_recovered(per_target_n, self.config.bins) / per_target_n,
        })
        return summary
