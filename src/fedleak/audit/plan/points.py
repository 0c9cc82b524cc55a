"""The settings an audit runs: the sweep's points with the configured deployment among them, and how many
attack runs they make (the plan's count, shown before any work)."""

from __future__ import annotations

from ...errors import FedleakError
from . import threats
from .config import AuditConfig


def configured_value(cfg: AuditConfig, knob: str):
    """The value the configured deployment (no sweep) has for ``knob``: the headline of a sweep (issue 27)."""
    plan = cfg.resolve()
    first = plan.scenarios[0]
    if knob == "defense":
        return _strength(plan.defense)
    if knob == "secagg":
        return plan.secagg
    if knob == "lora":
        return plan.lora
    if knob == "samples":
        return first.samples
    if knob == "batch_size":
        return first.protocol.batch_size if first.protocol.batch_size is not None else first.samples
    return {"epochs": first.protocol.epochs, "lr": first.protocol.lr}[knob]


def _strength(defense):
    """The configured strength of ``defense`` on the ``--sweep defense=`` axis (0 when off): its σ / b / p, or for
    an update filter the one parameter its ``with_strength`` moves (found by moving it, not by a second map)."""
    params = getattr(defense, "params", None)
    if not isinstance(params, dict):  # a per-example defense (its ``active`` says whether it acts at all)
        return float(defense.scale) if defense.active and defense.kind != "none" else 0.0
    for probe in (0.37, 3.7):
        try:
            moved = defense.with_strength(probe).params
        except FedleakError:
            continue
        keys = [k for k in params if moved.get(k) != params.get(k)]
        if len(keys) == 1:
            return float(params[keys[0]])
    return None


def with_configured(sweep, value):
    """``sweep`` with the configured value among its points (inserted in order when the user left it out)."""
    if value is None or any(v == value for v in sweep.values):
        return sweep
    values = list(sweep.values) + [value]
    if list(sweep.values) == sorted(sweep.values):
        values.sort()
    return type(sweep)(sweep.knob, tuple(values))


def attack_runs(cfg: AuditConfig, plans: list, model=None) -> int:
    """How many attacks the audit will run (the engine's choice of attacks per scenario, per target), the exact
    attacks it adds whatever ``--attacks`` says included when ``model`` is given."""
    from ...modality import of as modality_of

    modality = modality_of(cfg.data)
    override = threats.honest_override(cfg.attacks)
    budget = threats.AttackBudget.of(cfg)
    per_target = 0
    for plan in plans:
        for s in plan.scenarios:
            names = [c.name for c in threats.honest_attacks(s.key, budget, modality, override=override)
                     ] if (override or not cfg.attacks) else []
            if model is not None:
                names += [n for n in modality.required_exact(model, s.protocol, s.samples) if n not in names]
            per_target += len(names)
    return cfg.clients * (per_target + (len(plans) if cfg.malicious else 0))
