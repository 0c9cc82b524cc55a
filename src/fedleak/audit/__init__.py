"""The deployment audit: ``fedleak audit`` and :func:`fedleak.audit`.

What a server could reconstruct from the clients of *your* federation: your model (zoo name or
``MODULE:FACTORY``, optionally a trained checkpoint), your data, your protocol (FedSGD / FedAvg,
E, m, η), your defenses (per-example noise, pruning, DP-SGD with Opacus's ε, secure aggregation),
attacked under the honest-but-curious and the malicious threat models, with a verdict per threat
model, plots, and an optional sweep over one knob.

Laid out by its stages (``docs/architecture.md``): :mod:`.plan` (what the user asked, the threat models
and the attacks that fit), :mod:`.execute` (clients → updates → attacks, per threat model), :mod:`.judge`
(verdict and evidence), :mod:`.report` (page, tables, plots); :mod:`.run` is the entry that walks them.
"""

from .judge.verdict import RULE
from .plan.config import AuditConfig, Sweep
from .run import audit

__all__ = ["RULE", "AuditConfig", "Sweep", "audit"]


class _CallablePackage(__import__("types").ModuleType):
    """``fedleak.audit(...)`` runs the audit while ``fedleak.audit.AuditConfig`` etc. stay reachable."""

    def __call__(self, *args, **kwargs):
        return audit(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallablePackage
