"""One audit at one setting, honest-but-curious server: clients' updates (or their secure aggregate), the
threat model's attacks, scores, verdict and ε.

The pipeline of ``DESIGN.md``: each audited target (one client, or K clients under ``secagg:K``)
computes its update with the one client update (:func:`fedleak.fl.client_update`, defenses inside
it); the attacks of the threat model (:mod:`fedleak.audit.plan.threats`) reconstruct from what the server
sees; :func:`fedleak.metrics.evaluate` scores each reconstruction against the target's own data; the
judge stage (:mod:`fedleak.audit.judge.verdict`) turns the strongest attack's Rec% into a verdict. The
malicious server's runs are :mod:`.malicious`'s, on the same :class:`Auditor`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

from ...attacks.optimize import progress_reporter
from ...errors import FedleakError
from ...fl import client_update
from ...fl.accounting import PrivacyParameters, federation_epsilon
from ...fl.secagg import concatenate, secure_aggregate
from ...runs.interrupt import responsive
from ...types import ClientData, Reconstruction
from ..judge.verdict import SOK_THREAT_MODELS, converged, judge_evidence, sok_letter
from ..plan import threats
from ..plan.config import Plan, Scenario
from ..plan.default import describe
from .progress import optimizer_callback
from .steps import RunContext, event
from .tuning import tuned_choice


@dataclass
class PointResult:
    """Everything measured at one setting: JSON-able ``data`` and the images for the report."""

    data: dict
    examples: dict = field(default_factory=dict)  # (scenario, attack display) -> Example


def evidence_fields(choice, extras: list[dict], tuned: bool = False, trials: int = 0) -> dict:
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
                        1 for e in extras if e.get("certain") or e.get("exactness", {}).get("holds")),
                    "precondition": first,
                    # the record of a target that verified (issue #42 item 6), else the first one checked
                    "verification": next((v for v in verifications if v and v.get("matches")),
                                         next((v for v in verifications if v), None))})
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



class Auditor:
    """Runs the audit's settings (:meth:`point`) for one :class:`~.steps.RunContext` (model and data prepared
    once; ``model`` may be swapped between settings, e.g. a text model per LoRA rank)."""

    def __init__(self, context: RunContext, model, pool: list):
        self.context, self.model, self.pool = context, model, pool

    @property
    def config(self):
        return self.context.config

    @property
    def spec(self):
        return self.context.spec

    @property
    def modality(self):
        return self.context.modality

    # -- modality ------------------------------------------------------------------------------
    def evaluate(self, rec: Reconstruction, truth: ClientData, model=None) -> dict:
        """The reconstruction's scores against ``truth`` (the modality's metrics; ``model``: the attacked model)."""
        return self.modality.evaluate(rec, truth, self.spec, model, self.model)

    def example(self, rec: Reconstruction, truth: ClientData, scores: dict):
        """What the report shows of the first target (an image grid, sequences token by token)."""
        return self.modality.example(rec, truth, self.spec, scores, self.model)

    def summarize(self, per_target: list, seconds: float, choice, rec: Optional[Reconstruction] = None) -> dict:
        """One attack's summary over the targets (``metrics.json``'s keys for the modality)."""
        return self.modality.summarize(per_target, seconds, choice, rec)

    def judge(self, scores: dict, knowledge: Optional[dict] = None, required=(), optimization=()) -> dict:
        """The verdict and its evidence (:func:`~fedleak.audit.judge.verdict.judge_evidence`), on the modality's
        notion of a recovered item (text: exact sequences)."""
        preset = self.config.extra.get("flowertune") or {}  # a preset that chose the attacks says so
        return judge_evidence(scores, knowledge=knowledge, base=self.modality.judge_base(scores),
                              required_exact=list(dict.fromkeys(required)),
                              required_optimization=list(dict.fromkeys(optimization)),
                              chosen_by=preset.get("attacks_chosen_by") or "--attacks")

    # -- targets -----------------------------------------------------------------------------
    def targets(self, plan: Plan, samples: int) -> list[list[ClientData]]:
        """``clients`` groups of ``secagg`` clients each, every client cut to its first ``samples`` images."""
        pool, k, device = self.pool, plan.secagg, self.context.device
        return [[c.subset(samples).to(device) for c in pool[t * k:(t + 1) * k]] for t in range(self.config.clients)]

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
        """The honest-but-curious server at one setting (``label``: the sweep point, prefixing progress)."""
        cfg, ctx = self.config, self.context.at(label)
        override = threats.honest_override(cfg.attacks)
        result = PointResult({"scenarios": {}, "threat_models": {}, "epsilon": {}})
        honest_scores, required_all, optimization_all = {}, {}, {}
        for scenario in plan.scenarios:
            groups = self.targets(plan, scenario.samples)
            choices = (threats.honest_attacks(scenario.key, ctx.budget, self.modality, override=override)
                       if (override or not cfg.attacks) else [])
            # every exact attack applicable here runs, whatever --attacks says (low needs each; issue 27)
            required = self.modality.required_exact(self.model, scenario.protocol, scenario.samples)
            named = {c.name for c in choices}
            choices = choices + [c for c in threats.exact_attacks(required, seed=cfg.seed) if c.name not in named]
            required_all.setdefault(scenario.key, required)
            optimization_all.setdefault(scenario.key, self.modality.required_optimization(scenario.key))
            tuning_records = self.tune(choices, scenario, plan, ctx) if cfg.tune else {}
            choices = [tuned_choice(c, tuning_records[c.name]) if c.name in tuning_records else c for c in choices]
            entry = {"text": self.modality.scenario_text(describe(scenario.protocol, scenario.samples, plan.secagg),
                                                         self.spec),
                     "protocol": scenario.protocol.to_json(), "num_samples": scenario.samples,
                     "clients_per_target": plan.secagg, "targets": len(groups), "attacks": {}}
            updates = []
            for t, group in enumerate(groups):
                ctx.event(f"{scenario.key}: client update {t + 1}/{len(groups)}")
                updates.append((self.observe(self.model, group, scenario, plan, ctx.seed(t, plan.secagg)),
                                concatenate(group)))
            for choice in choices:
                record = tuning_records.get(choice.name)
                summary = self.attack(choice, updates, scenario, ctx, result, record)
                if record is not None:
                    summary["tuning"] = record
                entry["attacks"][choice.name] = summary
                honest_scores[f"{scenario.key}: {choice.title} [{choice.name}]"] = summary
            if plan.dp:
                result.data["epsilon"][scenario.key] = self.epsilon(plan, scenario)
            result.data["scenarios"][scenario.key] = entry
        result.data["threat_models"][threats.HONEST] = {"description": threats.THREAT_MODELS[threats.HONEST],
                                                        **self.judge(honest_scores, self.knowledge(plan, False),
                                                                     [n for r in required_all.values() for n in r],
                                                                     [n for r in optimization_all.values() for n in r])}
        return result

    def attack(self, choice, updates: list, scenario: Scenario, ctx: RunContext, result: PointResult,
               tuning: Optional[dict] = None) -> dict:
        """One attack on every target's update: reconstruct, score, keep the first target's example, summarize."""
        per_target, seconds, recs, first_rec = [], 0.0, [], None
        for t, (update, truth) in enumerate(updates):
            stage = ctx.stage(f"{scenario.key}: {choice.title}" + (f", target {t + 1}/{len(updates)}"
                                                                   if len(updates) > 1 else ""))
            event(ctx.progress, stage, attack=True)
            start = time.perf_counter()
            with progress_reporter(optimizer_callback(ctx.progress, stage)):  # Ctrl-C answers at once
                rec = responsive(threats.build(choice).reconstruct, update, self.model, self.spec)
            seconds += time.perf_counter() - start
            scores = self.evaluate(rec, truth)
            scores["target"] = truth.client_id
            per_target.append(scores)
            recs.append(rec.extras)
            if t == 0:
                first_rec = rec
                result.examples[(scenario.key, choice.title)] = self.example(rec, truth, scores)
        summary = self.summarize(per_target, seconds, choice, first_rec)
        summary.update(evidence_fields(choice, recs, tuned=tuning is not None,
                                       trials=len(tuning["trials"]) if tuning else 0))
        return summary

    def tune(self, choices, scenario: Scenario, plan: Plan, ctx: RunContext) -> dict:
        """Tune each optimization attack on surrogate clients (:mod:`.tuning`); never on the audited pool."""
        from .tuning import tune

        public = [c.subset(scenario.samples).to(ctx.device) for c in ctx.public]
        records = {}
        for choice in choices:
            if threats.kind(choice.name) != "optimization":
                continue
            records[choice.name] = tune(choice, self.model, self.spec, scenario.protocol, public,
                                        trials=self.config.tune, seed=self.config.seed, defense=plan.defense,
                                        progress=lambda text: ctx.event(f"{scenario.key}: {text}"))
        return records

    def knowledge(self, plan: Plan, malicious: bool) -> dict:
        """The assumptions behind a verdict: threat model (SoK letter), BatchNorm mode, labels, protocol."""
        from ...fl.client import has_batchnorm

        first = plan.scenarios[0].protocol
        bn = ("train" if first.train_mode else "eval") if has_batchnorm(self.model) else "no BatchNorm"
        # surrogate data: the tuner's public clients (honest); the public text a text imprint's bins are fitted to
        auxiliary = (bool(self.config.tune) and not malicious) or (malicious and self.modality.malicious_uses_auxiliary)
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
