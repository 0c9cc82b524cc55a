"""Tables as a modality: ``fedleak audit --data adult`` / ``--data german`` / ``--data my.csv --label income``.

The object :data:`TABULAR` gives the audit what differs for records: the data (:mod:`fedleak.data.tabular`),
the default model (``tabular-mlp``), the attacks that apply and their evidence (:mod:`.execute`), the metrics
(:mod:`fedleak.metrics.tabular`), the verdict and what a recovered record is (:mod:`.judge`) and the report's
record table (:mod:`.report`). It walks the same stages as the image audit — plan (the configuration's
resolved plans, checked before any work), execute, judge, report — and writes the same ``report.html`` and
``metrics.json``, staged and moved into ``out`` only when everything is done.

The malicious server (FedSGD) imprints Robbing the Fed's block in front of the model (its distribution fitted on
records no audited client holds) and, separately, VGIA's parallel hyperplanes (offsets from the same records), whose
single-record slabs are certified by recomputation: that verdict can be proved. Not yet on tables: secure aggregation, membership, tuning; each is refused with
one line rather than silently skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ...errors import FedleakError
from ..base import Modality
from . import app, execute, flower, judge, report

SUFFIXES = (".csv", ".tsv", ".parquet", ".pq")


class TabularModality(Modality):
    name = "tabular"
    attack_package = "fedleak.attacks.tabular"
    items = "records"
    default_model = "tabular-mlp"
    rule = judge.RULE
    recovered_item = judge.RECOVERED_ITEM
    options = ("label_field",)  # --label COLUMN

    def matches(self, data) -> bool:
        text = str(data or "").strip()
        return text.lower() in ("adult", "german") or text.lower().endswith(SUFFIXES)

    # -- the Flower integration (:mod:`.flower`) ------------------------------------------------------
    def default_attack(self, algorithm: str) -> str:
        return "tableak"

    def flower_attack(self, model, protocol, samples=None) -> str:
        if hasattr(model, "imprint_secrets"):  # a malicious server's imprinted model: read its bins
            return super().flower_attack(model, protocol, samples)
        return flower.attack_for(model, protocol, samples) or "tableak"

    def truth_scores(self, rec, truth, spec, tokenizer=None) -> dict:
        return flower.truth_scores(rec, truth, spec)

    # -- fedleak.metrics.evaluate and fedleak attack on a saved update of records ------------------------
    def score(self, rec, client, spec, *, tokenizer=None, **options) -> dict:
        """:func:`fedleak.metrics.tabular.evaluate`: cells right (categorical exact, continuous within the papers'
        tolerance), whole records, the random and prior baselines, the entropy-selected quartiles when the attack
        gave a per-cell entropy (TabLeak), and the matching (``matched``: the guess row of each true row)."""
        return report.scores_of(rec, client, spec)

    def attack_outputs(self, attack: str, rec, truth, spec, scores: dict, folder) -> str:
        """``comparison.html``: each original record above its matched reconstruction, cell by cell."""
        return report.attack_page(attack, rec, truth, spec, scores, Path(folder))

    def dashboard_sections(self, records: list, spec) -> list:
        return flower.dashboard_sections(records, spec)

    # -- fedleak audit --flower-app on a federation of records (:mod:`.app`) -------------------------
    app_rule = judge.RULE
    css = app.CSS
    how_to_read = app.HOW_TO_READ

    def app_spec(self, data: str, folder, settings: dict):
        return app.spec(data, folder, settings)

    def app_threat_model(self, summaries: dict, records: list, knowledge: dict):
        return app.threat_model(summaries, records, knowledge)

    def app_examples(self, records: list, spec) -> dict:
        return app.examples(records, spec)

    def results_body(self, point: dict, examples: dict) -> list:
        return app.results_body(point, examples)

    def verdict_sentence(self, title: str, tm: dict, prefix: bool = True, quick: bool = False) -> str:
        """A threat model's verdict as :func:`.app.threat_model` states it."""
        from ...audit.report.labels import verdict_label

        if tm["verdict"] == "not run":
            return f"{title}: not evaluated ({tm.get('not_run_reason') or 'no attack of this threat model ran'})."
        return (f"{title}: {verdict_label(tm['verdict'], quick)}. " if prefix else "") + tm["sentence"]

    def truth_shape_ok(self, inputs, spec) -> bool:
        return tuple(inputs.reshape(len(inputs), -1).shape[1:]) == (spec.schema.width,)

    def load(self, cfg, needed: int, samples: int, log):
        from ...data.tabular import load

        label = None if cfg.label_field == "label" and not Path(str(cfg.data)).suffix else cfg.label_field
        return load(cfg.data, root=cfg.data_root, num_clients=needed, samples_per_client=samples, seed=cfg.seed,
                    label=label, echo=log)

    def audit(self, cfg, out, log, progress, sweep, values, plans, device, staged=None) -> dict:
        """Tables walk their own stages (``staged``, the images' and text's, is not used)."""
        from ...audit.execute.progress import reporter
        from ...audit.plan.default import DEFAULT_MODEL
        from ...audit.plan.model_loading import check_fits, prepare_model
        from ...runs.identity import FORMAT, config_hash, environment

        if cfg.budget is not None:
            raise FedleakError(f"budget: not supported for {cfg.data!r} audits (their attacks have fixed budgets)")
        if any(plan.secagg > 1 for plan in plans):
            raise FedleakError("secure aggregation is not audited on tables yet; drop the secagg defense")
        if cfg.tune or cfg.membership:
            raise FedleakError("--tune and --membership are not available for tables yet")
        samples = {s.key: _records(s) for plan in plans for s in plan.scenarios}
        spec, pool = self.load(cfg, cfg.clients, max(samples.values()), log)
        if len(pool) < cfg.clients or any(len(c) < max(samples.values()) for c in pool):
            raise FedleakError(f"{cfg.data}: not enough records for {cfg.clients} client(s) of "
                               f"{max(samples.values())} records")
        model_name = self.default_model if cfg.model == DEFAULT_MODEL else cfg.model
        self._model_name = model_name
        if cfg.malicious:  # the imprint's distribution from records no audited client holds
            per = max(samples.values())
            _, extra = self.load(cfg, cfg.clients + 1, per, None)  # iid chunks: the last is no audited client's
            width = spec.schema.width  # too few records for a disjoint part: independent unit-variance entries
            self._stats = execute.surrogate_stats(extra[-1].inputs) if len(extra) > cfg.clients else \
                {"loc": 0.0, "scale": width ** -0.5}
            self._server_records = extra[-1].inputs if len(extra) > cfg.clients else None  # VGIA's hyperplanes
        model = prepare_model(model_name, spec, seed=cfg.model_seed, weights=cfg.weights)
        check_fits(model, pool[0].inputs, spec, model_name)
        model = model.to(device)
        show = reporter(progress)
        points, tables = [], []
        try:
            for value, plan in zip(values, plans):
                point, table = self._point(cfg, plan, model, spec, pool, value, sweep, show)
                points.append(point)
                tables.append(table)
        finally:
            if show is not None and hasattr(show, "close"):
                show.close()
        verdicts = {k: v["verdict"]["verdict"] for k, v in points[0]["scenarios"].items()}
        env = environment(device)
        env["load_average"] = [round(v, 2) for v in os.getloadavg()]
        worst = max(verdicts.values(), key=lambda v: ("not run", "inconclusive", "medium", "high").index(v))
        result = {"format": FORMAT, "modality": self.name, "data": spec.name, "model": model_name,
                  "seed": cfg.seed, "quick": cfg.quick, "config": {**cfg.to_json(), "model": model_name},
                  "rule": self.rule, "recovered_item": self.recovered_item,
                  "sweep": {"knob": sweep.knob, "values": list(values)} if sweep else None, "points": points,
                  "verdicts": verdicts, "environment": env,
                  "overall": {"verdict": worst, "strongest": next(
                      s["sentence"] for s in points[0]["scenarios"].values() if s["verdict"]["verdict"] == worst)},
                  "not_run": [] if cfg.malicious else ["malicious (--no-malicious)"]}
        result["overall"].update(_overall_line(points[0], plans[0], cfg.malicious))
        result["config_hash"] = config_hash(result["config"])
        _write(out, result, tables)
        for point in points:
            for scenario in point["scenarios"].values():
                log(scenario["sentence"])
        log(f"Overall: {result['overall']['line']}")
        log(f"report: {Path(out) / 'report.html'}  metrics: {Path(out) / 'metrics.json'}")
        return result

    def _point(self, cfg, plan, model, spec, pool, value, sweep, show):
        scenarios, tables = {}, {}
        for scenario in plan.scenarios:
            n = _records(scenario)
            clients = [execute.run_client(cfg, plan, scenario, model, spec, data.subset(n), cfg.seed * 1000 + k, show)
                       for k, data in enumerate(pool[:cfg.clients])]
            verdict = judge.judge(clients)
            first = clients[0]
            best = first["attacks"][first["strongest"]]
            tables[scenario.key] = report.record_table(spec.schema, first["truth"], first["guess"], best["cells"],
                                                       best["matched"], first["entropy"])
            for c in clients:
                for key in ("guess", "truth", "entropy"):
                    c.pop(key)
            scenarios[scenario.key] = {"protocol": scenario.protocol.to_json(), "records": n, "clients": clients,
                                       "verdict": verdict,
                                       "sentence": judge.sentence(f"honest-but-curious server, {scenario.key} "
                                                                  f"({n} records)", verdict)}
            if cfg.malicious and scenario.protocol.algorithm == "fedsgd":
                key = f"malicious-{scenario.key}"
                clients = [execute.run_malicious(cfg, scenario, self._model_name, spec, data.subset(n), self._stats,
                                                 cfg.seed * 1000 + k, self._server_records)
                           for k, data in enumerate(pool[:cfg.clients])]
                verdict = judge.judge(clients)
                first = clients[0]
                best = first["attacks"][first["strongest"]]
                tables[key] = report.record_table(spec.schema, first["truth"], first["guess"], best["cells"],
                                                  best["matched"], None)
                for c in clients:
                    for field in ("guess", "truth", "entropy"):
                        c.pop(field)
                scenarios[key] = {"protocol": scenario.protocol.to_json(), "records": n, "clients": clients,
                                  "verdict": verdict,
                                  "sentence": judge.sentence(f"malicious server (imprint and VGIA slabs, "
                                                             f"{cfg.bins} bins), {scenario.key} ({n} records)",
                                                             verdict)}
        return {"value": value, "settings": {"defense": plan.defense.to_text()}, "scenarios": scenarios}, tables


def _records(scenario) -> int:
    """Records in a client's update: FedSGD's batch is all of them (a swept batch size sets how many)."""
    protocol = scenario.protocol
    if protocol.algorithm == "fedsgd" and protocol.batch_size:
        return int(protocol.batch_size)
    return int(scenario.samples)


def _write(out, result: dict, tables: list) -> None:
    """Stage report.html and metrics.json inside ``out``, then move them in (metrics.json last)."""
    from ...runs.lock import staging_dir

    out = Path(out)
    staging = staging_dir(out)
    try:
        (staging / "report.html").write_text(report.page(result, tables), encoding="utf-8")
        (staging / "metrics.json").write_text(json.dumps(_finite(result), indent=1, allow_nan=False))
        for item in sorted(staging.iterdir(), key=lambda p: p.name == "metrics.json"):
            item.replace(out / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _finite(value):
    """NaN/inf (e.g. an empty entropy quartile) as null: metrics.json is strict JSON."""
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


TABULAR = TabularModality()


def _overall_line(point: dict, plan, malicious: bool) -> dict:
    """The audit's one overall line (:func:`fedleak.audit.judge.overall.overall`, as for images and text): each
    threat model's worst scenario with its sentence as evidence; the DP part names a configured defense that no
    canary audit checked instead of saying none is configured."""
    from ...audit.judge.overall import overall

    order = ("not run", "inconclusive", "medium", "high")
    threat_models = {}
    for name, is_malicious in (("honest-but-curious", False), ("malicious", True)):
        scenarios = [s for k, s in point["scenarios"].items() if k.startswith("malicious-") == is_malicious]
        if not scenarios:
            reason = "--no-malicious" if is_malicious and not malicious else "no scenario of this threat model"
            threat_models[name] = {"verdict": "not run", "not_run_reason": reason}
            continue
        worst = max(scenarios, key=lambda s: order.index(s["verdict"]["verdict"]))
        threat_models[name] = {"verdict": worst["verdict"]["verdict"], "evidence_text": worst["sentence"]}
    line = overall({"threat_models": threat_models})
    if plan.defense.active:  # a defense ran, but no canary audit decided whether its DP claim holds
        line["parts"][-1] = {"name": "DP", "level": f"{plan.defense.to_text()} (not audited)",
                             "evidence": "the configured defense ran in the client update; no canary audit checked "
                                         "its claim (fedleak dp-audit does)"}
        line["line"] = " · ".join(f"{p['name']}: {p['level']}" for p in line["parts"])
    return line
