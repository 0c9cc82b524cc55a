"""Summaries of per-target scores: :func:`mean` over the audited targets (the image and text audits' per-attack
summaries, :mod:`fedleak.modality.image.execute` and :mod:`fedleak.audit.execute.text`)."""

from __future__ import annotations


def mean(values):
    """The mean of the values that are not ``None`` (``None`` when none is)."""
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


__all__ = ["mean"]
