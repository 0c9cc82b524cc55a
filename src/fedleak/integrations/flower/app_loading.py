"""A user's Flower app folder, read and loaded by Flower's own code (``fedleak audit --flower-app PATH``).

Flower 1.42's simulation process (``flwr.simulation.app``) reads an app with
``flwr.common.config.get_project_config`` (``pyproject.toml``, its fields validated), takes the components of
``[tool.flwr.app.components]``, fuses ``[tool.flwr.app.config]`` with the run's overrides
(``get_fused_config_from_dir``; ``--run-config "k=v …"`` parsed by ``parse_config_args``, as ``flwr run`` does)
and loads ``serverapp`` / ``clientapp`` with ``flwr.supercore.object_ref.load_app`` (the app folder on
``sys.path``). :func:`load` does exactly that, in this process, so that an app which is not one, or whose
ServerApp or ClientApp does not import, fails here with one line naming it — before any simulation starts.

What Flower does *not* read, fedleak reads from the app's own ``[tool.fedleak]`` table (all optional):

* ``model`` — ``MODULE:FACTORY`` (relative to the app folder) building the ``nn.Module`` the federation trains,
  needed to turn a reply into an update; ``data`` — a fedleak dataset name whose :class:`~fedleak.DataSpec`
  (shape, classes, normalization) the attacks use (default ``digits``), or a CSV/Parquet file of records (relative
  to the app folder) whose schema the data's modality infers, with ``label`` its label column;
* ``supernodes`` — simulated nodes (default: the run config's ``num-clients``, else Flower's 2);
* ``canaries`` — canary clients of the DP check (:class:`.canary.CanaryAudit`, default 0: off) — the run
  config key ``fedleak-canaries`` overrides it, so an app's run config can switch them on;
* ``canary-nodes`` — canary *nodes* that run each node's own ClientApp mods (:mod:`.app_canary_nodes`, default
  0: off; run config key ``fedleak-canary-nodes``);
* ``lr``, ``local-epochs``, ``batch-size``, ``algorithm`` — the clients' training where the train config the
  strategy sends does not say it; ``attack``, ``iterations`` — what attacks each reply;
* ``share-truth`` — simulated clients share their batch (for apps whose ClientApp calls
  :func:`.client.share_truth` when its node settings say so); ``malicious-run-config`` — the run config overrides
  under which the app's own ServerApp ships a malicious model (audited in a second run).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...errors import FedleakError

#: the keys of ``[tool.fedleak]`` (anything else is refused, naming the key)
SETTINGS = ("model", "data", "supernodes", "canaries", "lr", "local-epochs", "batch-size", "algorithm", "attack",
            "iterations", "share-truth", "malicious-run-config", "canary-nodes", "label")


@dataclass
class FlowerApp:
    """One loaded app: its folder, components, fused run config, ``[tool.fedleak]`` and the loaded objects."""

    path: Path
    name: str
    server_ref: str
    client_ref: str
    run_config: dict
    settings: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)  # the run's own overrides (Flower gives them to every node too)
    server_app: object = None
    client_app: object = None


def describe_error(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line (at most 300 characters)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


def read(path, run_config: Optional[str] = None) -> FlowerApp:
    """The app's configuration (no import yet): one line naming what is wrong otherwise."""
    from flwr.common.config import get_fused_config_from_dir, get_project_config, parse_config_args

    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise FedleakError(f"--flower-app {path}: not a folder")
    if not (folder / "pyproject.toml").is_file():
        raise FedleakError(f"--flower-app {path}: not a Flower app (no pyproject.toml)")
    try:
        config = get_project_config(folder)
    except Exception as exc:  # noqa: BLE001 - Flower's own validation, any failure is the app's
        raise FedleakError(f"--flower-app {path}: not a Flower app ({describe_error(exc)})") from None
    components = config["tool"]["flwr"]["app"]["components"]
    try:
        overrides = parse_config_args([run_config]) if run_config else {}
        fused = dict(get_fused_config_from_dir(folder.resolve(), overrides))
    except Exception as exc:  # noqa: BLE001 - an unknown key or bad syntax in --run-config
        raise FedleakError(f"--run-config {run_config!r}: {describe_error(exc)}") from None
    settings = dict(config.get("tool", {}).get("fedleak", {}) or {})
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise FedleakError(f"{folder / 'pyproject.toml'}: [tool.fedleak] has unknown key(s) {', '.join(unknown)} "
                           f"(allowed: {', '.join(SETTINGS)})")
    return FlowerApp(folder.resolve(), str(config.get("project", {}).get("name", folder.name)),
                     str(components["serverapp"]), str(components["clientapp"]), fused, settings, dict(overrides))


def load(path, run_config: Optional[str] = None) -> FlowerApp:
    """:func:`read`, then import the ServerApp and ClientApp with Flower's ``load_app`` (one line if either fails)."""
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp

    app = read(path, run_config)
    try:
        for role, ref, kind in (("ServerApp", app.server_ref, ServerApp), ("ClientApp", app.client_ref, ClientApp)):
            setattr(app, "server_app" if role == "ServerApp" else "client_app", _load_one(path, role, ref, kind, app))
    except BaseException:  # a half-imported package must not stay in sys.modules for the next app of that name
        forget_modules(app)
        raise
    return app


def _load_one(path, role: str, ref: str, kind: type, app: FlowerApp):
    from flwr.supercore.object_ref import load_app

    try:
        loaded = load_app(ref, FedleakError, app.path)
    except FedleakError as exc:
        raise FedleakError(f"--flower-app {path}: the {role} {ref!r} cannot be loaded: {exc}".split("\n")[0]) \
            from None
    except BaseException as exc:  # noqa: BLE001 - the user's module: any error (even SystemExit) is theirs
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise FedleakError(f"--flower-app {path}: the {role} {ref!r} does not import ({describe_error(exc)})") \
            from None
    if not isinstance(loaded, kind):
        raise FedleakError(f"--flower-app {path}: {ref!r} is a {type(loaded).__name__}, not a Flower {role}")
    return loaded


def forget_modules(app: FlowerApp) -> None:
    """Drop the app's own modules from ``sys.modules`` (a second app of the same package names loads fresh)."""
    roots = {app.server_ref.split(":")[0].split(".")[0], app.client_ref.split(":")[0].split(".")[0]}
    for name in [n for n in sys.modules if n.split(".")[0] in roots]:
        sys.modules.pop(name, None)
    if str(app.path) in sys.path:
        sys.path.remove(str(app.path))
