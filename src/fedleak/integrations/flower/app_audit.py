"""``fedleak audit --flower-app PATH``: the user's own Flower app, run in Flower's simulation, audited.

The app is loaded as Flower loads it (:mod:`.app_loading`), then run by Flower 1.42's own simulation runtime
(``flwr.simulation.run_simulation._run_simulation``, the function ``flwr-simulation`` calls for ``flwr run`` in
simulation: the ServerApp in a thread of this process, each ClientApp — the user's, with its mods, model, data
and train function — in Ray actors). No SuperLink is started, so none can be stale, and no FAB is built, so Flower
installs no dependencies at run time (``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION`` does not apply; the app's
dependencies must be installed in this environment, as for ``run_simulation``).

While the app runs (:mod:`.app_runtime`), ``flwr.serverapp.strategy.Strategy.start`` is wrapped: whatever
strategy the ServerApp starts (FedAvg, FedProx, Flower's DP wrappers, …) runs inside
:class:`.audit.LeakageAudit`, which attacks every reply as the server received it; where the strategy chain holds
one of Flower's server-side DP wrappers and canaries are asked for, :class:`.canary.CanaryAudit` adds Andrew et
al.'s canary clients to that wrapper's aggregation (the wrapper's own clipping and noise). A strategy the app
already wrapped in ``LeakageAudit`` is adopted, not wrapped twice. Ray is shut down afterwards, whatever happened.

**What it cannot see** (said in the report): the clients' data, unless simulated clients opt in to share their
batch (:func:`.client.share_truth`; ``--share-truth`` sets ``FEDLEAK_NODE_CONFIG="share-truth=true"`` for the
apps that read it, as ``examples/flower-app`` does); the server-side canaries see the aggregate the DP wrapper
releases, not what a client-side mod does inside a ClientApp.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ...errors import FedleakError
from . import app_canary_nodes, app_loading
from .app_runtime import Watch, simulate


def supernodes_of(app: app_loading.FlowerApp, given: Optional[int]) -> int:
    value = given if given is not None else app.settings.get("supernodes", app.run_config.get("num-clients", 2))
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
        raise FedleakError(f"--supernodes must be an integer from 1 to 64 (simulated nodes on this machine), "
                           f"got {value!r}")
    return value


def canaries_of(app: app_loading.FlowerApp, given: Optional[int]) -> int:
    value = given if given is not None else app.run_config.get("fedleak-canaries", app.settings.get("canaries", 0))
    if isinstance(value, bool) or not isinstance(value, int) or not (value == 0 or 2 <= value <= 100_000):
        raise FedleakError(f"canaries (--canaries, run config fedleak-canaries, [tool.fedleak] canaries) must be 0 "
                           f"(off) or an integer from 2 to 100000, got {value!r}")
    return value


def canary_nodes_of(app: app_loading.FlowerApp, given: Optional[int]) -> int:
    """Canary nodes asked for: ``--canary-nodes``, else the run config's ``fedleak-canary-nodes``, else
    ``[tool.fedleak] canary-nodes``, else 0 (off); checked against the node count by :func:`.app_canary_nodes.plan`."""
    return given if given is not None else app.run_config.get("fedleak-canary-nodes",
                                                               app.settings.get("canary-nodes", 0))


def _protocol(settings: dict):
    from ...types import Protocol

    try:
        return Protocol(str(settings.get("algorithm", "fedavg")), epochs=int(settings.get("local-epochs", 1)),
                        batch_size=settings.get("batch-size"), lr=float(settings.get("lr", 0.01)), reshuffle=False)
    except (FedleakError, TypeError, ValueError) as exc:
        raise FedleakError(f"[tool.fedleak] of the app: {exc}") from None


def _budget(audits) -> tuple:
    """``(iterations, budget_factor)`` of the optimization attack the audits built (``(None, None)`` if none)."""
    for audit in audits:
        for attack in [audit.attack, *getattr(audit, "_attacks", {}).values()]:
            options = getattr(attack, "options", None)
            iterations = getattr(options, "iterations", None)
            if isinstance(iterations, int):
                try:
                    return iterations, iterations / type(options)().iterations
                except Exception:  # noqa: BLE001 - an options class without defaults: the factor stays unknown
                    return iterations, None
    return None, None


def _one_run(path, run_config, *, supernodes, canaries, model, data, share_truth, flower_out, log,
             canary_nodes=None) -> dict:
    """Load the app afresh, run it audited, return what the run recorded."""
    import time

    from ...modality import of as modality_of
    from ...audit.plan.model_loading import prepare_model
    from .audit import LeakageAudit

    app = app_loading.load(path, run_config)
    try:
        nodes, count = supernodes_of(app, supernodes), canaries_of(app, canaries)
        asked = canary_nodes_of(app, canary_nodes)
        planted = app_canary_nodes.plan(nodes, asked) if asked != 0 else None
        share = bool(app.settings.get("share-truth", False)) if share_truth is None else bool(share_truth)
        name = str(data or app.settings.get("data", "digits"))
        spec = modality_of(name).app_spec(name, app.path, app.settings)  # a dataset name, or records of a file
        reference = model or app.settings.get("model")
        net = prepare_model(str(reference), spec) if reference else None  # the app folder is on sys.path (load_app)
        iterations = app.settings.get("iterations")
        attack = str(app.settings.get("attack", "auto"))

        def make_audit(strategy):
            if net is None:
                raise FedleakError(f"--flower-app {path}: fedleak needs the model the federation trains to attack a "
                                   "reply: set [tool.fedleak] model = \"MODULE:FACTORY\" in the app's pyproject.toml "
                                   "(or --model)")
            return LeakageAudit(strategy, net, flower_out, spec=spec, protocol=_protocol(app.settings), attack=attack,
                                attack_options={"iterations": int(iterations)} if iterations else None)

        watch = Watch(make_audit, count, out=flower_out, canary_nodes=planted, nodes=nodes)
        extra = int(planted.included.sum()) if planted is not None else 0
        log(f"fedleak: running {app.name} ({app.server_ref}, {app.client_ref}) in Flower's simulation: {nodes} "
            f"node(s){', DP canaries: ' + str(count) if count else ''}"
            f"{f', {extra} canary nodes ({asked} drawn) running the nodes’ own mods' if extra else ''}"
            f"{', clients share their batch' if share else ''}")
        started = time.monotonic()
        simulate(app, watch, nodes, share)
        errors = [r.error for r in watch.recorders if r.error]
        if errors:
            raise FedleakError(f"--flower-app {path}: {errors[0]}")
        found = app_canary_nodes.result(watch.recorders[-1], time.monotonic() - started) if watch.recorders \
            else None
        if planted is not None and found is None:
            raise FedleakError(f"--flower-app {path}: canary nodes asked for ({asked}) but the ServerApp started "
                               "no strategy to record them")
        audits = watch.audits + watch.adopted
        if not audits:
            raise FedleakError(f"--flower-app {path}: the ServerApp started no Message-API strategy "
                               "(flwr.serverapp.strategy.Strategy.start was never called), so fedleak could not wrap "
                               "it; a legacy flwr.server strategy is audited with LeakageRecorder instead")
        records = [r for a in audits for r in a.records]
        if records and not any(r.get("status") in ("attacked", "recorded", "failed") for r in records) \
                and any(r.get("status") == "rejected" for r in records):
            first = next(r for r in records if r.get("status") == "rejected")
            raise FedleakError(f"--flower-app {path}: no reply could be read as an update of the model "
                               f"{reference or type(audits[0].model).__name__} (first: "
                               f"{' '.join(str(first.get('reason', '?')).split())[:240]})")
        if records and all(r.get("status") == "error" for r in records):
            reason = str(records[0].get("reason", "?"))
            reason = reason.split("Message:", 1)[-1].strip() if "Message:" in reason else reason
            raise FedleakError(f"--flower-app {path}: every ClientApp reply was an error (first: "
                               f"{' '.join(reason.split())[:240]})")
        canary = None
        for c in watch.canary_audits:
            if c.rounds:
                canary = c.report()
        first = audits[0]
        iterations, factor = _budget(audits)
        return {"records": records, "canary": canary, "canary_nodes": found, "notes": watch.notes,
                "strategies": watch.strategies,
                "spec": first.spec or spec, "model": first.model, "model_name": str(reference or
                                                                                  type(first.model).__name__),
                "supernodes": nodes, "canaries": count, "shipped": any(a.ship is not None for a in audits),
                "run_config": dict(app.run_config), "iterations": iterations, "budget_factor": factor, "app": app.name,
                "outs": sorted({str(a.out) for a in audits})}
    finally:
        app_loading.forget_modules(app)


def audit_flower_app(path, *, out="fedleak-report", run_config: Optional[str] = None,
                     malicious_run_config: Optional[str] = None, supernodes: Optional[int] = None,
                     canaries: Optional[int] = None, model: Optional[str] = None, data: Optional[str] = None,
                     share_truth: Optional[bool] = None, canary_nodes: Optional[int] = None, log=print) -> dict:
    """Run the Flower app at ``path`` in Flower's simulation with its strategy audited; write ``out/report.html``
    and ``out/metrics.json`` (the audit's format) and return the metrics (module docstring).

    ``run_config``: ``"key=value …"`` overrides, as ``flwr run --run-config``. ``malicious_run_config``: overrides
    under which the app's own ServerApp ships a malicious model (``examples/flower-app``: ``"malicious=true"``;
    default ``[tool.fedleak] malicious-run-config``), audited in a second run; without it the malicious server is
    not run (fedleak does not change the model the app's ClientApp builds). ``supernodes``, ``canaries``,
    ``model``, ``data``, ``share_truth`` override the app's ``[tool.fedleak]`` (:mod:`.app_loading`).
    """
    import time

    from ...runs.lock import OutLock
    from ...runs.outdir import prepare_out_dir
    from . import app_report

    out = prepare_out_dir(out, "--out")
    log = log or (lambda *_: None)
    checked = app_loading.load(path, run_config)  # not an app, a component that does not import, bad --run-config:
    app_loading.forget_modules(checked)          # one line before anything is written
    asked = canary_nodes_of(checked, canary_nodes)  # a canary-node count that does not fit: one line too
    if asked != 0:
        app_canary_nodes.plan(supernodes_of(checked, supernodes), asked)
    if malicious_run_config is None:
        malicious_run_config = app_loading.read(path).settings.get("malicious-run-config")
    out.mkdir(parents=True, exist_ok=True)
    with OutLock(out, "fedleak audit --flower-app"):
        start = time.monotonic()
        common = dict(supernodes=supernodes, canaries=canaries, model=model, data=data, share_truth=share_truth,
                      log=log)
        honest = _one_run(path, run_config, flower_out=out / "flower", canary_nodes=canary_nodes, **common)
        malicious, reason = None, ("fedleak does not change the model the app's ClientApp builds; give the run config "
                                   "under which the app's ServerApp ships a malicious model (--malicious-run-config, "
                                   "or [tool.fedleak] malicious-run-config) to audit that threat")
        if malicious_run_config:
            both = " ".join(x for x in (run_config, str(malicious_run_config)) if x)
            malicious = _one_run(path, both, flower_out=out / "flower-malicious",
                                 **{**common, "canaries": 0, "canary_nodes": 0})
            if not malicious["shipped"]:
                raise FedleakError(f"--malicious-run-config {malicious_run_config!r}: the app's ServerApp shipped no "
                                   "malicious model under it (its LeakageAudit has no ship=)")
        if honest["shipped"]:  # the app ships a malicious model by default: its run is the malicious one
            malicious, honest = honest, {**honest, "records": [], "outs": []}  # DP canaries stay: DP is not a threat
            reason = "the app's ServerApp ships a malicious model under this run config"
        result = app_report.build(path, honest, malicious, time.monotonic() - start, reason)
        spec = honest["spec"]
        shown = app_report.examples(honest["records"] + (malicious["records"] if malicious else []), spec)
        app_report.write(out, result, shown)
        for run in (honest, malicious):  # each dashboard ends with the run's final verdict line
            for folder in (run or {}).get("outs", []):
                app_report.final_dashboard(Path(folder), run["records"], spec, result["overall"])
    log(f"{result['overall']['line']}")
    for part in result["overall"]["parts"]:
        log(f"  {part['name']}: {part['level']} — {part['evidence']}")
    log(f"Not seen: {app_report.CANNOT_SEE}.")
    log(f"report: {out / 'report.html'}  metrics: {out / 'metrics.json'}  records: "
        f"{', '.join(result['flower']['records'])}")
    return result


#: the keywords ``fedleak.audit(flower_app=…)`` passes on
API_KEYS = ("run_config", "malicious_run_config", "supernodes", "canaries", "model", "data", "share_truth",
            "canary_nodes")


def api_audit(flower_app, config=None, *, out="fedleak-report", log=print, **settings) -> dict:
    """``fedleak.audit(flower_app=PATH, …)``: arguments checked, naming the one that is wrong."""
    if config is not None:
        raise FedleakError("fedleak.audit(flower_app=…): config describes another deployment; pass None")
    unknown = sorted(set(settings) - set(API_KEYS))
    if unknown:
        raise FedleakError(f"fedleak.audit(flower_app=…): unknown argument(s) {', '.join(unknown)} (allowed: "
                           f"{', '.join(API_KEYS)})")
    if not isinstance(flower_app, (str, os.PathLike)):
        raise FedleakError(f"fedleak.audit(): flower_app must be a folder path, got {type(flower_app).__name__}")
    for key in ("run_config", "malicious_run_config", "model", "data"):
        if settings.get(key) is not None and not isinstance(settings[key], str):
            raise FedleakError(f"fedleak.audit(): {key} must be a string, got {type(settings[key]).__name__}")
    if settings.get("share_truth") is not None and not isinstance(settings["share_truth"], bool):
        raise FedleakError("fedleak.audit(): share_truth must be True, False or None")
    if log is not None and not callable(log):
        raise FedleakError(f"fedleak.audit(): log must be a callable (e.g. print) or None, got {type(log).__name__}")
    return audit_flower_app(flower_app, out=out, log=log, **settings)
