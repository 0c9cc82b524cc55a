"""Modalities as values: one object per kind of data that the audit's stages call (DESIGN.md, "Modalities: a
value, not a branch").

A modality says which data names are its own (:meth:`Modality.matches`), and provides the data loading, the
zoo's default model, the attacks that apply, the metrics, the report section and the verdict's notion of a
recovered item. :func:`of` returns the modality of an audit's ``data``; adding a modality adds a module here
and touches no stage module. Tables (:mod:`.tabular`) are the first modality written this way; images and text
still run the audit's original stages (``of`` returns ``None`` for them).
"""

from __future__ import annotations

from typing import Optional

from .base import Modality
from .tabular import TABULAR

#: every modality that runs through this interface, in the order they are asked
MODALITIES: tuple[Modality, ...] = (TABULAR,)


def of(data) -> Optional[Modality]:
    """The modality whose data ``data`` names (``None``: the image/text stages of :mod:`fedleak.audit`)."""
    return next((m for m in MODALITIES if m.matches(data)), None)


__all__ = ["MODALITIES", "Modality", "of"]
