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
from ..errors import FedleakError
from ..fl import client_update
from ..fl.accounting import PrivacyParameters, federation_epsilon
from ..fl.secagg import concatenate, secure_aggregate
from ..runs.interrupt import responsive
from ..types import ClientData, DataSpec, Reconstruction
from . import text as text_audit
from . import threats
from .config import AuditConfig, Plan, Scenario
from .default import describe
from .progress import optimizer_callback
from .tuning import tuned_choice
from .verdict import SOK_THREAT_MODELS, converged, judge, judge_evidence, sok_letter

#: PSNR above which an imprint readout counts as verbatim (Fowl et al.: exact copies)
VERBATIM_DB = 60.0
MALICIOUS_NAMES = ("imprint", "imprint-sparse", "imprint-one-shot", "cah", "loki")
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


def _event(progress, stage: str, **extra) -> None:
    if progress is not None:
        progress({"stage": stage, **extra})


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


def evidence_fields(choice, extras: list[dict], iterations=None, tuned: bool = False, trials: int = 0) -> dict:
    """Per attack, what the verdict rule reads (:func:`.verdict.judge_evidence`): its kind, and for an exact
    attack the targets whose recovery verified against the update and those where its precondition held; for
    an optimization attack its budget as run (iterations, or a text attack's steps) over the default, whether
    and how widely it was tuned, and convergence."""
    kind = threats.kind(choice.name)
    out = {"kind": kind, "exact": kind == "exact", "labels": extras[0].get("label_strategy") if extras else None}
    if kind == "exact":
        first = dict(extras[0].get("exactness", {})) if extras else {}
        first.pop("singular_values", None)
        verifications = [e.get("exactness", {}).get("verification") for e in extras]
        out.update({"certain_targets": sum(1 for e in extras if e.get("certain")),
                    "precondition_held_targets": sum(
                        1 for e in extras if e.get("certain") or e.get("exactness", {}).get(
                            "precondition_held", e.get("exactness", {}).get("holds"))),
                    "precondition": first,
                    "verification": next((v for v in verifications if v), None)})
        return out
    if kind == "analytic":
        return out
    budget, unit, standard = threats.budget_of(choice)
    flags = [converged(e.get("loss_history")) for e in extras]
    known = [f for f in flags if f is not None]
    out.update({"iterations": budget, "budget_unit": unit or "iterations",
                "restarts": choice.options.get("restarts", 1),
                "budget_factor": round(budget / standard, 3) if budget and standard else None, "tuned": tuned,
                "tuning_trials": int(trials), "converged": (all(known) if known else None)})
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

    def _judge(self, scores: dict, knowledge: Optional[dict] = None, required=(), optimization=()) -> dict:
        """The verdict and its evidence (:func:`.verdict.judge_evidence`); text is judged by exact sequences."""
        return judge_evidence(scores, knowledge=knowledge, base=text_audit.judge(scores) if self.text else None,
                              required_exact=list(dict.fromkeys(required)),
                              required_optimization=list(dict.fromkeys(optimization)))

    # -- targets -----------------------------------------------------------------------------
    def targets(self, plan: Plan, samples: int) -> list[list[ClientData]]:
        """``clients`` groups of ``secagg`` clients each, every client cut to its first ``samples`` images."""
        pool, k = self.pool, plan.secagg
        return [[c.subset(samples).to(self.device) for c in pool[t * k:(t + 1) * k]] for t in range(self.config.clients)]

    def observe(self, model, group: list[ClientData], scenario: Scenario, plan: Plan, seed: int):
        """What the server receives from the group: one client's update or the secure aggregate.

        An update that overflows (NaN/Inf, e.g. a huge learning rate) is reported naming the settings
        that produced it, not a tensor."""
        try:
            if plan.secagg == 1:
                return client_update(model, group[0], scenario.protocol, seed=seed, defense=plan.defense)
            return secure_aggregate(model, group, scenario.protocol, seed=seed, defense=plan.defense)
        except FedleakError as exc:
            if "non-finite" not in str(exc) and "NaN" not in str(exc):
                raise
            p = scenario.protocol
            raise FedleakError(f"the {p.algorithm} client's update overflowed to NaN/Inf with lr={p.lr:g}, "
                               f"epochs={p.epochs}, defense {plan.defense.to_text()}: lower --lr (or the defense's "
                               "strength)") from None

    # -- one setting ---------------------------------------------------------------------------
    def point(self, plan: Plan, label: str = "") -> PointResult:
        cfg = self.config
        override = [a for a in (cfg.attacks or ()) if a not in MALICIOUS_NAMES]
        malicious_override = [a for a in (cfg.attacks or ()) if a in MALICIOUS_NAMES]
        result = PointResult({"scenarios": {}, "threat_models": {}, "epsilon": {}})
        honest_scores, required_all, optimization_all = {}, {}, {}
        prefix = f"{label}: " if label else ""
        for scenario in plan.scenarios:
            groups = self.targets(plan, scenario.samples)
            choices = (threats.honest_attacks(scenario.key, override=override, quick=cfg.quick,
                                              iterations=cfg.iterations, seed=cfg.seed, text=self.text)
                       if (override or not cfg.attacks) else [])
            # every exact attack applicable here runs, whatever --attacks says (low needs each; issue 27)
            required = threats.required_exact(self.model, scenario.protocol, scenario.samples, text=self.text)
            named = {c.name for c in choices}
            choices = choices + [c for c in threats.exact_attacks(self.model, scenario.protocol, scenario.samples,
                                                                  seed=cfg.seed, text=self.text)
                                 if c.name not in named]
            required_all.setdefault(scenario.key, required)
            optimization_all.setdefault(scenario.key, threats.required_optimization(scenario.key, text=self.text))
            tuning_records = self.tune(choices, scenario, plan, prefix) if cfg.tune else {}
            choices = [tuned_choice(c, tuning_records[c.name]) if c.name in tuning_records else c for c in choices]
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
                per_target, seconds, recs, first_rec = [], 0.0, [], None
                for t, (update, truth) in enumerate(updates):
                    stage = f"{prefix}{scenario.key}: {choice.title}" + (f", target {t + 1}/{len(updates)}"
                                                                         if len(updates) > 1 else "")
                    _event(self.progress, stage, attack=True)
                    start = time.perf_counter()
                    with progress_reporter(optimizer_callback(self.progress, stage)):  # Ctrl-C answers at once
                        rec = responsive(threats.build(choice).reconstruct, update, self.model, self.spec)
                    seconds += time.perf_counter() - start
                    scores = self._evaluate(rec, truth)
                    scores["target"] = truth.client_id
                    per_target.append(scores)
                    recs.append(rec.extras)
                    if t == 0:
                        first_rec = rec
                        result.examples[(scenario.key, choice.title)] = self._example(rec, truth, scores)
                summary = self._summarize(per_target, seconds, choice, first_rec)
                record = tuning_records.get(choice.name)
                summary.update(evidence_fields(choice, recs, cfg.iterations, tuned=record is not None,
                                               trials=len(record["trials"]) if record else 0))
                if choice.name in tuning_records:
                    summary["tuning"] = tuning_records[choice.name]
                entry["attacks"][choice.name] = summary
                honest_scores[f"{scenario.key}: {choice.title} [{choice.name}]"] = summary
            if plan.dp:
                result.data["epsilon"][scenario.key] = self.epsilon(plan, scenario)
            result.data["scenarios"][scenario.key] = entry
        result.data["threat_models"][threats.HONEST] = {"description": threats.THREAT_MODELS[threats.HONEST],
                                                        **self._judge(honest_scores, self.knowledge(plan, False),
                                                                      [n for r in required_all.values() for n in r],
                                                                      [n for r in optimization_all.values() for n in r])}
        if cfg.malicious:
            mal = self.malicious(plan, malicious_override[0] if malicious_override else None, prefix, result)
            mal["kind"] = threats.kind(mal["attack"])
            result.data["scenarios"]["malicious"] = mal
            result.data["threat_models"][threats.MALICIOUS] = {
                "description": threats.THREAT_MODELS[threats.MALICIOUS],
                **self._judge({f"{mal['title']} [{mal['attack']}]": mal}, self.knowledge(plan, True))}
        return result

    def tune(self, choices, scenario: Scenario, plan: Plan, prefix: str) -> dict:
        """Tune each optimization attack on surrogate clients (:mod:`.tuning`); never on the audited pool."""
        from .tuning import tune

        public = [c.subset(scenario.samples).to(self.device) for c in getattr(self, "public", [])]
        records = {}
        for choice in choices:
            if threats.kind(choice.name) != "optimization":
                continue
            records[choice.name] = tune(choice, self.model, self.spec, scenario.protocol, public,
                                        trials=self.config.tune, seed=self.config.seed, defense=plan.defense,
                                        progress=lambda text: _event(self.progress, f"{prefix}{scenario.key}: {text}"))
        return records

    def knowledge(self, plan: Plan, malicious: bool) -> dict:
        """The assumptions behind a verdict: threat model (SoK letter), BatchNorm mode, labels, protocol."""
        from ..fl.client import has_batchnorm

        first = plan.scenarios[0].protocol
        bn = ("train" if first.train_mode else "eval") if has_batchnorm(self.model) else "no BatchNorm"
        # surrogate data: the tuner's public clients (honest); the public text a text imprint's bins are fitted to
        auxiliary = (bool(self.config.tune) and not malicious) or (malicious and self.text)
        letter = sok_letter(malicious, auxiliary, True)
        return {"threat_model_sok": letter, "threat_model_sok_name": SOK_THREAT_MODELS[letter],
                "sok_dimensions": {"modifies the model": malicious, "uses auxiliary data": auxiliary,
                                   "knows training details": True},
                "batchnorm": bn, "labels": "inferred from the update (never the truth)",
                "secure_aggregation_clients": plan.secagg}

    def epsilon(self, plan: Plan, scenario: Scenario) -> dict:
        """ε(δ) of the DP-SGD client over the federation's rounds (Opacus's RDP and PRV accountants)."""
        protocol, n = scenario.protocol, scenario.samples
        q = plan.sample_rate if plan.sample_rate is not None else protocol.batch_size_for(n) / n
        steps = plan.rounds * protocol.num_steps(n)
        if plan.defense.scale == 0:  # clipping only (dp-sgd:clip=C,noise=0): no DP guarantee to account
            out = {"delta": plan.delta, "noise_multiplier": 0.0, "sample_rate": q, "steps": steps,
                   "epsilon_rdp": None, "epsilon_prv": None, "note": "noise 0: clipping only, no DP guarantee (ε = ∞)"}
        else:
            out = federation_epsilon(PrivacyParameters(plan.defense.scale, q, steps, plan.delta))
        out.update({"rounds": plan.rounds, "clip": plan.defense.clip,
                    "sample_rate_source": "given" if plan.sample_rate is not None else "batch size / samples"})
        return out

    # -- malicious server ------------------------------------------------------------------------
    def malicious(self, plan: Plan, attack_name: Optional[str], prefix: str, result: PointResult) -> dict:
        """The malicious server's strongest attack that fits the protocol and K (:mod:`.malicious`).

        ``--attacks`` naming malicious attacks (``loki``, ``imprint``, ``cah``, ...): those; none named: the
        imprint block, and under ``secagg:K`` (K ≥ 2) also LOKI; with several, the strongest is kept.
        """
        from . import malicious as loki_audit

        names = [a for a in (self.config.attacks or ()) if a in MALICIOUS_NAMES] or [attack_name]
        if len(names) > 1 and plan.secagg < 2:
            names = [n for n in names if n != "loki"]  # LOKI needs an aggregate of K >= 2 clients
        if names == [None] and loki_audit.fits(plan, self.spec, self.config.bins):
            names.append("loki")
        summaries = [loki_audit.loki_summary(self, plan, prefix, result) if name == "loki"
                     else self.imprint_malicious(plan, name, prefix, result) for name in names]
        return summaries[0] if len(summaries) == 1 else loki_audit.strongest(summaries, result)

    def imprint_malicious(self, plan: Plan, attack_name: Optional[str], prefix: str, result: PointResult) -> dict:
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
            _event(self.progress, stage, attack=True)
            update = self.observe(shipped, group, scenario, plan, self.config.seed + t * plan.secagg)
            truth = concatenate(group)
            start = time.perf_counter()
            rec = responsive(threats.build(choice).reconstruct, update, shipped, self.spec)
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
