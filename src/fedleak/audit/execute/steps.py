"""The run steps every loop of the execute stage shares, and the context value the stages pass along.

:class:`RunContext` carries what the stages share (configuration, data spec, device, progress callback,
attack budget, the tuner's surrogate clients, the sweep label) instead of parameters threaded by hand;
:func:`event` reports a stage to the progress callback. The image audit's :func:`summarize`, :func:`example`,
:class:`Example` and :data:`VERBATIM_DB` (one attack's ``metrics.json`` summary, the report's image grid) are the
image modality's (:mod:`fedleak.modality.image.execute`, re-exported here), so that the modality objects import
no stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from ...metrics.summary import mean  # noqa: F401  (re-exported)
from ...modality.image.execute import (SUMMARY_KEYS, VERBATIM_DB, Example, example,  # noqa: F401  (re-exported)
                                       summarize)
from ...types import DataSpec
from ..plan.threats import AttackBudget


@dataclass(frozen=True)
class RunContext:
    """What the audit's stages share for one run: made once by :func:`fedleak.audit.run.audit`.

    ``label``: the sweep point being run (``"epochs=5"``; empty without a sweep), the prefix of every
    progress stage; ``public``: the tuner's surrogate clients (``--tune``; never the audited pool)."""

    config: object  # an AuditConfig (plan stage)
    spec: DataSpec
    device: str
    progress: Optional[Callable] = None
    public: tuple = ()
    label: str = ""
    budget: AttackBudget = field(default_factory=AttackBudget)

    @property
    def modality(self):
        """The data's modality object (:mod:`fedleak.modality`): what differs between images and text."""
        from ...modality import named

        return named(self.spec)

    def at(self, label: str) -> "RunContext":
        """This context at one sweep point (``label`` prefixes its progress stages)."""
        return replace(self, label=label)

    def stage(self, text: str) -> str:
        """``text`` as a progress stage of this point (``"epochs=5: fedsgd: …"``)."""
        return f"{self.label}: {text}" if self.label else text

    def event(self, text: str, **extra) -> None:
        """Report the stage ``text`` of this point to the progress callback."""
        event(self.progress, self.stage(text), **extra)

    def seed(self, target: int, secagg: int) -> int:
        """The client-update seed of audited target ``target`` (K = ``secagg`` clients per target)."""
        return self.config.seed + target * secagg


def event(progress, stage: str, **extra) -> None:
    """``progress({"stage": stage, **extra})`` when there is a progress callback."""
    if progress is not None:
        progress({"stage": stage, **extra})
