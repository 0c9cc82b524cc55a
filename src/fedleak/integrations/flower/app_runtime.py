"""The simulation side of ``fedleak audit --flower-app``: Flower's own runtime, with the strategy's start wrapped.

:func:`simulate` runs a loaded app (:mod:`.app_loading`) in Flower 1.42's simulation runtime
(``flwr.simulation.run_simulation._run_simulation``, what ``flwr-simulation`` calls for ``flwr run``: the ServerApp
in a thread of this process, the ClientApps in Ray actors), with a ``Run`` carrying the run config overrides to
every node (:func:`flower_run`), Ray started with retries (:func:`start_ray`) and always stopped, runtime
installation and Flower's telemetry off (:func:`environment`). :func:`wrapped_start` wraps
``flwr.serverapp.strategy.Strategy.start`` for the run: the strategy the ServerApp starts runs inside
:class:`.audit.LeakageAudit` (an app's own audit is adopted), with :class:`.canary.CanaryAudit` around its
server-side DP wrapper when canaries are asked for.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...errors import FedleakError
from . import app_loading
from .app_chains import chain

@dataclass
class Watch:
    """What the wrapped ``Strategy.start`` saw: the audits and canary wrappers of the run."""

    make_audit: object  # (strategy) -> LeakageAudit
    canaries: int = 0
    audits: list = field(default_factory=list)
    adopted: list = field(default_factory=list)
    canary_audits: list = field(default_factory=list)
    strategies: list = field(default_factory=list)
    out: Optional[Path] = None  # where an adopted audit writes (under --out)
    emptied: list = field(default_factory=list)  # empty folders an adopted audit made elsewhere (removed after)
    notes: list = field(default_factory=list)
    local: threading.local = field(default_factory=threading.local)
    canary_nodes: object = None  # the canaries of canary nodes (app_canary_nodes.plan), or None: off
    nodes: int = 0  # the app's own nodes (partitions 0…nodes−1; canary nodes beyond)
    partitions: dict = field(default_factory=dict)  # Flower's node id → partition id of the simulation
    recorders: list = field(default_factory=list)  # the canary nodes' recorders (app_canary_nodes.NodeRecorder)
    client_app: object = None  # the ClientApp the simulation runs with canary nodes (app_canary_nodes.CanaryNodeApp)


def _add_canaries(top, watch: Watch):
    """``top`` with a :class:`CanaryAudit` around the outermost server-side DP wrapper of its chain (or unchanged)."""
    from . import dp as flower_dp
    from .canary import CanaryAudit

    nodes = chain(top)
    if any(isinstance(n, CanaryAudit) for n in nodes):
        return top
    for index, node in enumerate(nodes):
        if flower_dp.is_wrapper(node) and hasattr(node, "noise_multiplier"):
            if getattr(node, "accountant", None) is not None:  # Flower then refuses any other number of replies
                watch.notes.append(f"DP canaries asked for ({watch.canaries}) but not inserted: "
                                   f"{type(node).__name__} keeps Flower's accountant, which refuses a round whose "
                                   f"reply count differs from num_sampled_clients ({node.num_sampled_clients}), so "
                                   "canaries would stop the federation's aggregation")
                return top
            canary = CanaryAudit(node, watch.canaries, out=None)
            watch.canary_audits.append(canary)
            if index == 0:
                return canary
            nodes[index - 1].strategy = canary
            return top
    watch.notes.append(f"DP canaries asked for ({watch.canaries}) but the strategy "
                       f"({' > '.join(type(n).__name__ for n in nodes)}) holds no Flower server-side DP wrapper")
    return top


@contextmanager
def wrapped_start(watch: Watch):
    """Within the block, every Message-API ``Strategy.start`` runs audited (module docstring)."""
    from flwr.serverapp.strategy import Strategy

    from .audit import LeakageAudit

    original = Strategy.start

    def start(self, grid, initial_arrays, *args, **kwargs):
        if getattr(watch.local, "active", False):  # our own wrapper's start reaching Strategy.start
            return original(self, grid, initial_arrays, *args, **kwargs)
        watch.local.active = True
        try:
            watch.strategies.append(" > ".join(type(n).__name__ for n in chain(self)))
            top = _add_canaries(self, watch) if watch.canaries else self
            found = [n for n in chain(top) if isinstance(n, LeakageAudit)]
            if found:  # the app's own audit: adopted, its files moved under --out before it writes any record
                if watch.out is not None and not found[0].records:
                    if found[0].out.is_dir() and not any(found[0].out.iterdir()):
                        watch.emptied.append(found[0].out)
                    found[0].out = watch.out
                    watch.out.mkdir(parents=True, exist_ok=True)
                watch.adopted.append(found[0])
            else:
                top = watch.make_audit(top)
                watch.audits.append(top)
            if watch.canary_nodes is not None:  # canary nodes: their replies recorded, going around the audit
                from .app_canary_nodes import attach

                top = attach(top, found[0] if found else top, watch.canary_nodes, watch.nodes, watch.partitions,
                             watch.client_app)
                watch.recorders.append(top)
            return top.start(grid, initial_arrays, *args, **kwargs)
        finally:
            watch.local.active = False

    Strategy.start = start
    try:
        yield watch
    finally:
        Strategy.start = original


@contextmanager
def environment(share_truth: bool):
    """The simulation's environment: runtime installs, Flower's telemetry and Ray's usage stats off (no network at
    run time), the node settings of a sharing simulation."""
    import flwr.supercore.telemetry as telemetry

    from .client import NODE_CONFIG_ENV

    saved = {k: os.environ.get(k) for k in ("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", NODE_CONFIG_ENV,
                                            "RAY_DEDUP_LOGS", "FLWR_TELEMETRY_ENABLED", "PYTHONPATH",
                                            "RAY_USAGE_STATS_ENABLED", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO")}
    saved_telemetry = telemetry.FLWR_TELEMETRY_ENABLED
    telemetry.FLWR_TELEMETRY_ENABLED = os.environ["FLWR_TELEMETRY_ENABLED"] = "0"  # read per event; Ray actors too
    os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    os.environ["RAY_DEDUP_LOGS"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # Ray's usage report: no network at run time
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # Ray's future default (silences its warning)
    if share_truth:
        current = os.environ.get(NODE_CONFIG_ENV, "")
        if "share-truth" not in current:
            os.environ[NODE_CONFIG_ENV] = (current + " share-truth=true").strip()
    try:
        yield
    finally:
        telemetry.FLWR_TELEMETRY_ENABLED = saved_telemetry
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: Ray's own wait for its node to register (hard-coded in ray._private.node): on a loaded machine it can pass
RAY_START_TRIES = 3


def start_ray(num_cpus: int, tries: int = RAY_START_TRIES) -> None:
    """Start Ray as Flower's ``RayBackend.init_ray`` would (its arguments, this process's ``sys.path`` for the
    actors), retrying when Ray's node did not register within its fixed 30 s (an overloaded machine); Flower's
    backend then finds it started. One line if it never starts."""
    import logging

    import ray

    pythonpath = os.pathsep.join(sys.path + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    os.environ["PYTHONPATH"] = pythonpath  # as Flower's backend sets it (restored by environment())
    for attempt in range(1, tries + 1):
        try:
            ray.init(runtime_env={"env_vars": {"PYTHONPATH": pythonpath}}, num_cpus=num_cpus, include_dashboard=False,
                     logging_level=logging.WARNING, log_to_driver=True)
            return
        except Exception as exc:  # noqa: BLE001 - Ray's startup failures are plain Exceptions
            stop_ray()
            if "timed out during startup" not in str(exc) or attempt == tries:
                raise FedleakError(f"Ray (Flower's simulation backend) did not start after {attempt} tr"
                                   f"{'y' if attempt == 1 else 'ies'}: {app_loading.describe_error(exc)}") from None


def stop_ray() -> None:
    """Shut Ray down if this process started it (nothing left running)."""
    try:
        import ray
    except ImportError:  # pragma: no cover - Flower's simulation extra absent
        return
    if ray.is_initialized():
        ray.shutdown()


def flower_run(overrides: dict):
    """The ``Run`` Flower's ``_run_simulation`` makes when given none, with the run config overrides in it: the
    simulated nodes' contexts fuse them with the app's defaults (as ``flwr run --run-config`` reaches them)."""
    from flwr.common.constant import RUN_ID_NUM_BYTES, SUPERLINK_NODE_ID, TASK_ID_NUM_BYTES
    from flwr.server.superlink.linkstate.utils import generate_rand_int_from_bytes
    from flwr.supercore.constant import NOOP_FEDERATION_ID
    from flwr.supercore.run import Run
    from flwr.supercore.task_identity import TaskIdentity

    run = Run.create_empty(run_id=generate_rand_int_from_bytes(RUN_ID_NUM_BYTES))
    run.primary_task_id = generate_rand_int_from_bytes(TASK_ID_NUM_BYTES)
    run.federation_id = NOOP_FEDERATION_ID
    run.override_config = dict(overrides)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run.run_id, SUPERLINK_NODE_ID
    return run


class SimulationEnded(RuntimeError):
    """Raised inside a ServerApp still running after its simulation ended (no nodes will ever answer)."""


def stop_serverapp(grid, thread, wait: float = 30.0) -> None:
    """A ServerApp thread that outlived its simulation (Ray did not start, the runtime crashed) waits for nodes
    forever and would keep the process alive: its grid is made to raise on the next call, then it is joined."""
    if thread is None or not thread.is_alive():
        return

    def ended(*_args, **_kwargs):
        raise SimulationEnded("the Flower simulation ended")

    if grid is not None:
        for name in ("get_node_ids", "push_messages", "pull_messages", "send_and_receive"):
            setattr(grid, name, ended)
    thread.join(wait)


def simulate(app: app_loading.FlowerApp, watch: Watch, supernodes: int, share_truth: bool) -> None:
    """Run the app in Flower's simulation runtime, audited; Ray is stopped afterwards, whatever happened."""
    from flwr.app import Context, RecordDict
    from flwr.simulation.run_simulation import _run_simulation
    run = flower_run(app.overrides)
    context = Context(run_id=run.run_id, node_id=0, node_config={}, state=RecordDict(),
                      run_config=dict(app.run_config))
    cpus = max(1, min(supernodes, os.cpu_count() or 1))
    backend = {"init_args": {"num_cpus": cpus, "include_dashboard": False},
               "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}
    from flwr.supercore.telemetry import EventType as Telemetry

    runtime = sys.modules["flwr.simulation.run_simulation"]  # the module (its package exports a function by that name)

    launch = runtime.run_serverapp_th
    servers: list = []
    vce = importlib.import_module("flwr.server.superlink.fleet.vce.vce_api")
    register = vce._register_nodes  # noqa: SLF001 - Flower's node → partition map, read for the canary nodes
    client = {"client_app_attr": app.client_ref}
    if watch.canary_nodes is not None:
        from .app_canary_nodes import CanaryNodeApp

        watch.client_app = CanaryNodeApp(app.client_app, supernodes, watch.canary_nodes, dict(app.run_config))
        client = {"client_app": watch.client_app}
        supernodes += int(watch.canary_nodes.included.sum())

    def registered(*args, **kwargs):
        mapping = register(*args, **kwargs)
        watch.partitions.update(mapping)
        return mapping

    def serverapp_thread(*args, **kwargs):  # Flower's own launcher, its grid and thread kept to stop them
        thread = launch(*args, **kwargs)
        servers.append((kwargs.get("grid"), thread))
        return thread

    try:
        with environment(share_truth), wrapped_start(watch):
            start_ray(cpus)
            runtime.run_serverapp_th, vce._register_nodes = serverapp_thread, registered
            _run_simulation(num_supernodes=supernodes, exit_event=Telemetry.PYTHON_API_RUN_SIMULATION_LEAVE,
                            server_app_attr=app.server_ref, **client,
                            backend_config=backend, app_dir=str(app.path), is_app=True, run=run,
                            server_app_context=context)
    except FedleakError:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever ended the user's run is named, in one line
        if isinstance(exc, KeyboardInterrupt):
            raise
        cause = exc.__cause__ or exc
        raise FedleakError(f"the Flower run of {app.path.name} ended: {app_loading.describe_error(cause)}") from None
    finally:
        runtime.run_serverapp_th, vce._register_nodes = launch, register
        stop_ray()
        for grid, thread in servers:
            stop_serverapp(grid, thread)
        for audit in watch.audits + watch.adopted:
            try:
                audit.close()
            except Exception:  # noqa: BLE001 - closing an audit's pool never masks the run's outcome
                pass
        for folder in watch.emptied:  # nothing left outside --out: the empty folders the app's audit made
            for empty in (folder, folder.parent):
                try:
                    empty.rmdir()
                except OSError:
                    break
