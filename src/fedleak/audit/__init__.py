"""The deployment audit: ``fedleak audit`` and :func:`fedleak.audit`.

What a server could reconstruct from the clients of *your* federation: your model (zoo name or
``MODULE:FACTORY``, optionally a trained checkpoint), your data, your protocol (FedSGD / FedAvg,
E, m, η), your defenses (per-example noise, pruning, DP-SGD with Opacus's ε, secure aggregation),
attacked under the honest-but-curious and the malicious threat models, with a verdict per threat
model, plots, and an optional sweep over one knob.

Modules, one job each: :mod:`.config` (what the user brings, validated), :mod:`.model_loading`,
:mod:`.threats` (threat models and their attacks), :mod:`.engine` (one setting), :mod:`.run`
(sweep, outputs), :mod:`.verdict` (the rule), :mod:`.report` and :mod:`.figures` (HTML and plots),
:mod:`.default` (the embedded default), :mod:`.progress`, :mod:`.arguments` (CLI flags).
"""

from .config import AuditConfig, Sweep
from .run import audit
from .verdict import RULE

__all__ = ["RULE", "AuditConfig", "Sweep", "audit"]


class _CallablePackage(__import__("types").ModuleType):
    """``fedleak.audit(...)`` runs the audit while ``fedleak.audit.AuditConfig`` etc. stay reachable."""

    def __call__(self, *args, **kwargs):
        return audit(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallablePackage
