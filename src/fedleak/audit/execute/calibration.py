"""Measure what an optimization attack's iteration costs here, to fit an audit into ``--budget``.

Each optimization attack of the plan runs :data:`ITERATIONS` iterations on the first target's update at the
first setting; the optimization loop reports every iteration (:mod:`fedleak.attacks.progress`), so the time
between the first and the last report over the iterations between them is its seconds per iteration, and the
time before the first report its set-up (label inference, initialization), which no budget shortens.
:func:`fedleak.audit.plan.time_budget.scale` turns these into one factor.
"""

from __future__ import annotations

import dataclasses
import time

from ...attacks.progress import progress_reporter
from ..plan import threats
from ..plan.time_budget import scale

#: iterations of each optimization attack timed by the calibration
ITERATIONS = 6


def fit(auditor, plans: list, budget_s: float, started: float):
    """``(AttackBudget with the shortened iterations, record for metrics.json)`` for ``budget_s`` seconds of audit
    that began at ``time.perf_counter() == started``."""
    cfg, ctx, model = auditor.config, auditor.context, auditor.model
    override = threats.honest_override(cfg.attacks)
    plan = plans[0]
    work = []
    for scenario in plan.scenarios:
        choices = (threats.honest_attacks(scenario.key, ctx.budget, auditor.modality, override=override)
                   if (override or not cfg.attacks) else [])
        choices = [c for c in choices if threats.kind(c.name) == "optimization"]
        if not choices:
            continue
        group = auditor.targets(plan, scenario.samples)[0]
        update = auditor.observe(model, group, scenario, plan, ctx.seed(0, plan.secagg))
        for choice in choices:
            iterations, unit, _ = threats.budget_of(choice)
            if not iterations:
                continue
            ctx.event(f"{scenario.key}: timing {ITERATIONS} {unit} of {choice.title} for --budget")
            short = dataclasses.replace(choice, options={**choice.options, unit: min(ITERATIONS, iterations)})
            ticks = []
            start = time.perf_counter()
            with progress_reporter(lambda step, total, loss: ticks.append(time.perf_counter())):
                threats.build(short).reconstruct(update, model, auditor.spec)
            end = time.perf_counter()
            if len(ticks) >= 2:
                per, setup = (ticks[-1] - ticks[0]) / (len(ticks) - 1), ticks[0] - start
            else:  # a loop that does not report: the whole run over its iterations (errs long)
                per, setup = (end - start) / min(ITERATIONS, iterations), 0.0
            work.append({"name": f"{scenario.key}: {choice.name}", "attack": choice.name, "iterations": iterations,
                         "seconds_per_iteration": per, "setup_seconds": setup, "runs": cfg.clients * len(plans)})
    record = scale(budget_s, time.perf_counter() - started, work)
    scaled = {w["attack"]: record["attacks"][w["name"]]["to"] for w in work
              if record["attacks"][w["name"]]["to"] < w["iterations"]}
    return dataclasses.replace(ctx.budget, scaled=tuple(scaled.items())), record
