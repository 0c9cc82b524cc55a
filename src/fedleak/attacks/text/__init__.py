"""Honest-server text attacks on transformer updates: ``dager`` (exact span recovery), ``tiger`` (its
continuous variant) and ``tag`` (gradient matching baseline)."""

from . import dager, tag, tiger  # noqa: F401  (registers)
