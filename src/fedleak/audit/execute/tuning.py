"""Automatic attack tuning, as a real attacker would do it: Optuna on clients the server simulates.

Before attacking, the server tunes each optimization attack's hyperparameters — learning rate, the TV prior's
weight, restarts and the budget (iterations, or a text attack's steps: 1×, 2× or 4× the audit's) — on
**surrogate clients** it simulates from public data (a disjoint split of the dataset: the other split, e.g. the
test images when the victims hold training images), with the same model, protocol and defense as the
deployment. Each trial runs the attack on the simulated clients' updates and scores it against the surrogate
data (the attacker knows it: it is its own): images by the mean PSNR, text by the share of sequences recovered
exactly plus the mean ROUGE-1 (:func:`score`). The best trial's settings are then used against the victims.

A search counts towards a ``low`` verdict only with at least
:data:`fedleak.audit.judge.verdict.MIN_TUNE_TRIALS` trials (the default settings are trial 0).

**The victim's data never reaches the tuner, by construction**: :func:`tune` takes only the surrogate
clients, and :func:`check_disjoint` (called by the audit before tuning) fails if any surrogate image equals a
victim image. The search is deterministic (Optuna's TPE sampler seeded with the audit seed). This is the
hyperparameter search LeakPro runs for every attack (Optuna), placed where the issue's threat model allows it.

Requires the ``[tune]`` extra (``optuna``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional

from ...attacks.base import ATTACKS, ensure_loaded
from ...errors import FedleakError
from ...fl import client_update
from ...types import ClientData, DataSpec
from ..plan.threats import AttackChoice, build

#: search space: option -> (low, high) on a log scale; only options the attack has are searched
LOG_RANGES = {"lr": (1e-3, 1.0), "tv": (1e-6, 1e-1)}
RESTARTS = (1, 2)
BUDGET_MULTIPLES = (1, 2, 4)


def _options_of(name: str) -> set[str]:
    ensure_loaded()
    return {f.name for f in dataclasses.fields(ATTACKS[name].cls.Options)}


def check_disjoint(public: list[ClientData], victims: list[ClientData]) -> None:
    """Fail if any surrogate image is also a victim image (the tuner must never see the victims' data)."""
    def keys(clients):
        return {hash(x.detach().cpu().float().numpy().tobytes()) for c in clients for x in c.inputs}

    shared = keys(public) & keys(victims)
    if shared:
        raise FedleakError(f"tuning data overlaps the audited clients' data ({len(shared)} image(s)); "
                           f"the tuner must use a disjoint split")


def search_space(name: str) -> list[str]:
    """The options of ``name`` the tuner searches (``lr``, ``tv``, ``restarts``, ``iterations`` or ``steps``)."""
    have = _options_of(name)
    return [k for k in (*LOG_RANGES, "restarts", "iterations", "steps") if k in have]


def score(rec, truth: ClientData, spec: DataSpec, model) -> float:
    """A trial's score on one surrogate client: images, the mean PSNR (dB); text, the share of sequences
    recovered exactly (× 100) plus the mean ROUGE-1 — exact recoveries first, ROUGE-1 breaking ties."""
    from ...modality import named

    return named(spec).tuning_score(rec, truth, spec, model)


def metric_name(spec: DataSpec) -> str:
    """What :func:`score` measures, for the record and the report."""
    from ...modality import named

    return named(spec).tuning_metric


def tune(choice: AttackChoice, model, spec: DataSpec, protocol, public: list[ClientData], *, trials: int,
         seed: int = 0, defense=None, progress: Optional[Callable[[str], None]] = None) -> dict:
    """Tune ``choice`` with ``trials`` Optuna trials on ``public`` surrogate clients; returns the record.

    ``{"options": best options, "metric", "default_score", "best_score", "trials": [...], "seconds", "space",
    "clients"}`` (images: also ``default_psnr`` / ``best_psnr``, the same numbers).
    The default options are always trial 0 (enqueued, one of the ``trials``), so the chosen settings are never
    worse than the default on the surrogate clients.
    """
    try:
        import optuna
    except ImportError:
        raise FedleakError("--tune needs Optuna: pip install 'fedleak[tune]'") from None
    if trials < 1:
        raise FedleakError(f"tune: the number of trials must be at least 1, got {trials}")
    if not public:
        raise FedleakError("tune: no surrogate clients to tune on")
    updates = [(client_update(model, c, protocol, seed=seed + 7919 + i, defense=defense), c)
               for i, c in enumerate(public)]
    space = search_space(choice.name)
    budget_key = "steps" if "steps" in space and "steps" in choice.options else "iterations"
    space = [k for k in space if k not in ("iterations", "steps") or k == budget_key]
    base_iterations = int(choice.options.get(budget_key) or 0)
    defaults = {k: choice.options[k] for k in space if k in choice.options}
    for key in space:
        if key not in defaults:
            default = getattr(ATTACKS[choice.name].cls.Options, key, None)
            if isinstance(default, (int, float)) and not isinstance(default, bool):
                defaults[key] = default
    if budget_key in space and base_iterations:
        defaults[budget_key] = base_iterations

    def evaluate(options: dict) -> float:
        trial_choice = AttackChoice(choice.name, {**choice.options, **options}, choice.title)
        scores = []
        for update, truth in updates:
            rec = build(trial_choice).reconstruct(update, model, spec)
            scores.append(score(rec, truth, spec, model))
        return float(sum(scores) / len(scores))

    def objective(trial) -> float:
        options = {}
        for key, (low, high) in LOG_RANGES.items():
            if key in space and defaults.get(key):
                options[key] = trial.suggest_float(key, low, high, log=True)
        if "restarts" in space:
            options["restarts"] = trial.suggest_categorical("restarts", RESTARTS)
        if budget_key in space and base_iterations:
            options[budget_key] = base_iterations * trial.suggest_categorical("budget_multiple", BUDGET_MULTIPLES)
        return evaluate(options)

    start = time.perf_counter()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    first = {k: v for k, v in defaults.items() if k in LOG_RANGES and v}
    if "restarts" in space:
        first["restarts"] = int(defaults.get("restarts", 1)) if int(defaults.get("restarts", 1)) in RESTARTS else 1
    if budget_key in space and base_iterations:
        first["budget_multiple"] = 1
    study.enqueue_trial(first)
    for index in range(trials):  # the enqueued default is the first
        study.optimize(objective, n_trials=1)
        if progress is not None:
            progress(f"tuning {choice.title}: trial {index + 1}/{trials}, best {metric_name(spec)} "
                     f"{study.best_value:.2f}")
    best = dict(study.best_params)
    if "budget_multiple" in best:
        best[budget_key] = base_iterations * best.pop("budget_multiple")
    record = {
        "attack": choice.name, "options": best, "space": space, "clients": len(public),
        "surrogate": [c.client_id for c in public], "metric": metric_name(spec),
        "default_score": study.trials[0].value, "best_score": study.best_value,
        "trials": [{"number": t.number, "params": t.params, "score": t.value} for t in study.trials],
        "seconds": time.perf_counter() - start, "sampler": f"TPE(seed={seed})",
    }
    from ...modality import named

    return named(spec).tuning_record(record)


def tuned_choice(choice: AttackChoice, record: dict) -> AttackChoice:
    """``choice`` with the tuned options."""
    return AttackChoice(choice.name, {**choice.options, **record["options"]}, choice.title)


def surrogate_clients(cfg, pool: list, samples: int, modality, model_name: str) -> list:
    """The tuner's clients (issue 20), checked disjoint from the audited pool: the modality's
    (:meth:`fedleak.modality.Modality.surrogates`: images, the dataset's *other* split; text, the sequences after
    the audited clients', cut with the model's own tokenizer and task)."""
    more = modality.surrogates(cfg, pool, samples, model_name)
    public = [c for c in more if len(c) >= samples][: cfg.tune_clients]
    if not public:
        raise FedleakError(f"--tune: {cfg.data!r} has no surrogate client with {samples} {modality.items} outside "
                           f"the {len(pool)} audited one(s)")
    check_disjoint(public, pool)
    return public
