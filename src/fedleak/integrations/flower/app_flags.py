"""The ``fedleak audit`` flags of a Flower app (``--flower-app`` and the flags that only mean something with it).

``fedleak audit`` comes here only when one of them is given (``commands.cmd_audit``).
"""

from __future__ import annotations

from ...errors import FedleakError

#: flag destinations that only apply with --flower-app
APP_FLAGS = ("run_config", "malicious_run_config", "supernodes", "canaries", "share_truth", "canary_nodes")


def refuse_without_app(args) -> None:
    """One line naming a Flower-app flag given without ``--flower-app``."""
    given = [f"--{k.replace('_', '-')}" for k in APP_FLAGS if getattr(args, k, None) not in (None, False)]
    if given:
        raise FedleakError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to a Flower app: add "
                           "--flower-app PATH")


def from_args(args) -> dict:
    """``fedleak audit --flower-app PATH …``: the flags of :func:`audit_flower_app` (the other audit flags that
    describe a deployment do not apply and are refused, naming them)."""
    if getattr(args, "flower_app", None) is None:
        refuse_without_app(args)
    ignored = [f"--{k.replace('_', '-')}" for k in ("weights", "algorithm", "epochs", "batch_size", "defense",
                                                     "sweep", "attacks", "samples", "clients", "config")
               if getattr(args, k, None) not in (None, False)]
    if ignored:
        raise FedleakError(f"--flower-app runs the app as it is: {', '.join(ignored)} describe(s) another deployment "
                           "and cannot be combined with it")
    quiet = bool(getattr(args, "quiet", False) or getattr(args, "no_progress", False))
    from .app_audit import audit_flower_app

    return audit_flower_app(args.flower_app, out=args.out, run_config=args.run_config,
                            malicious_run_config=args.malicious_run_config, supernodes=args.supernodes,
                            canaries=args.canaries, model=args.model, data=args.data, share_truth=args.share_truth,
                            canary_nodes=getattr(args, "canary_nodes", None), log=None if quiet else print)
