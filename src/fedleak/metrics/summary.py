"""Summaries of per-target scores: :func:`mean` over the audited targets (the image and text audits' per-attack
summaries, :mod:`fedleak.modality.image.execute` and :mod:`fedleak.audit.execute.text`; the Flower app report's,
:mod:`fedleak.integrations.flower.app_report`; the tabular verdict's and app report's,
:mod:`fedleak.modality.tabular.judge` and :mod:`fedleak.modality.tabular.app`)."""

from __future__ import annotations


def mean(values, empty=None):
    """The mean of the values that are not ``None`` (``empty`` when none is: ``None`` unless given)."""
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else empty


__all__ = ["mean"]
