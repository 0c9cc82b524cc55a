"""Modalities as values: one object per kind of data that the audit's stages call (DESIGN.md, "Modalities: a
value, not a branch").

A modality says which data names are its own (:meth:`Modality.matches`), and provides the data loading, the
zoo's default model, the attacks that apply, the metrics, the report section and the verdict's notion of a
recovered item (:mod:`.base`). :func:`of` returns the modality of an audit's ``data``, :func:`named` the one a
:class:`~fedleak.types.DataSpec` or a result names; adding a modality adds a package here and touches no stage
module. Images (:mod:`.image`) and text (:mod:`.text`) walk the audit's shared stages; tables (:mod:`.tabular`)
walk their own.

Layering: the stages that ask this registry (:mod:`fedleak.audit.run`, the execute/plan/report drivers,
:func:`fedleak.metrics.evaluate`, :mod:`fedleak.integrations.flower`) sit above the modality objects, and the
objects import only what sits below them — the audit's helper modules that ask no modality (e.g.
:mod:`fedleak.audit.plan.threats`, :mod:`fedleak.audit.report.labels`, :mod:`fedleak.audit.plan.malicious`),
:mod:`fedleak.metrics.images`, :mod:`fedleak.runs.identity` — never a module that asks the registry, so the import
graph holds no circle through here; the shared stages reach a modality by being handed to it
(:meth:`Modality.audit`'s ``staged``).
"""

from __future__ import annotations

from .base import Modality
from .image import IMAGE
from .tabular import TABULAR
from .text import TEXT

#: every modality, in the order a data name is asked (images last: they take every name no other claims)
MODALITIES: tuple[Modality, ...] = (TABULAR, TEXT, IMAGE)
_BY_NAME = {m.name: m for m in MODALITIES}


def of(data) -> Modality:
    """The modality whose data ``data`` (a name or a path) names."""
    return next(m for m in MODALITIES if m.matches(data))


def named(name) -> Modality:
    """The modality called ``name`` (a :attr:`DataSpec.modality <fedleak.types.DataSpec.modality>`, a result's
    ``"modality"``; images when absent), or of ``name``'s own ``modality`` attribute or key."""
    if isinstance(name, dict):
        name = name.get("modality")
    elif name is not None and not isinstance(name, str):
        name = getattr(name, "modality", None)
    return _BY_NAME.get(name or "image", IMAGE)


def attack_owner(module: str) -> Modality:
    """The modality whose attack package (:attr:`Modality.attack_package`, the longest that fits) defines an attack
    class in ``module``."""
    return max((m for m in MODALITIES if module.startswith(m.attack_package)), key=lambda m: len(m.attack_package),
               default=IMAGE)


__all__ = ["IMAGE", "MODALITIES", "Modality", "TABULAR", "TEXT", "attack_owner", "named", "of"]
