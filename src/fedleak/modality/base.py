"""The interface every modality object provides to the audit's stages."""

from __future__ import annotations

from typing import Callable


class Modality:
    """One kind of data: its names, data loading, default model, attacks, metrics, report section, verdict."""

    #: the modality's name, as :attr:`fedleak.types.DataSpec.modality` says it
    name: str = ""
    #: the zoo model an audit builds when the user names none
    default_model: str = ""
    #: the verdict rule in words, and what counts as one recovered item
    rule: str = ""
    recovered_item: str = ""
    #: audit options (AuditConfig names) this modality takes besides the common ones
    options: tuple = ()

    def matches(self, data) -> bool:
        """Whether the data name or path ``data`` is this modality's."""
        raise NotImplementedError

    def audit(self, cfg, out, log: Callable, progress, sweep, values, plans, device) -> dict:
        """Plan → execute → judge → report for this modality (the stages of :mod:`fedleak.audit`)."""
        raise NotImplementedError
