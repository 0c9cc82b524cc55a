"""The run steps every loop of the execute stage shares, and the context value the stages pass along.

:class:`RunContext` carries what the stages share (configuration, data spec, device, progress callback,
attack budget, the tuner's surrogate clients, the sweep label) instead of parameters threaded by hand;
:func:`summarize` and :func:`example` turn the per-target scores of one attack into its ``metrics.json``
summary and the report's image grid; :func:`event` reports a stage to the progress callback.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional

import torch

from ...types import ClientData, DataSpec, Reconstruction
from ..plan.threats import AttackBudget

#: PSNR above which an imprint readout counts as verbatim (Fowl et al.: exact copies; the image modality's count)
VERBATIM_DB = 60.0
SUMMARY_KEYS = ("psnr", "ssim", "rec_percent", "iip", "label_count_error")


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


@dataclass
class Example:
    """Originals and matched reconstructions of the first target, for the report's image grid."""

    originals: torch.Tensor
    reconstructions: torch.Tensor
    psnr: list
    threshold: float


def event(progress, stage: str, **extra) -> None:
    """``progress({"stage": stage, **extra})`` when there is a progress callback."""
    if progress is not None:
        progress({"stage": stage, **extra})


def mean(values):
    """The mean of the values that are not ``None`` (``None`` when none is)."""
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summarize(per_target: list[dict], seconds: float, choice) -> dict:
    """Mean scores over the audited targets, their distribution, and every image's PSNR."""
    out = {"attack": choice.name, "title": choice.title, "options": choice.options, "seconds": seconds,
           "targets": len(per_target)}
    for key in SUMMARY_KEYS:
        out[key] = mean([s.get(key) for s in per_target])
    out["threshold"] = per_target[0]["threshold"]
    out["psnr_per_input"] = [p for s in per_target for p in s["psnr_per_input"]]
    out["per_client"] = [{"target": s["target"], "psnr": s["psnr"], "rec_percent": s["rec_percent"],
                          "num_inputs": s["num_inputs"]} for s in per_target]
    rec = [s["rec_percent"] for s in per_target]
    out["rec_percent_min"], out["rec_percent_max"] = min(rec), max(rec)
    return out


def example(rec: Reconstruction, truth: ClientData, spec: DataSpec, scores: dict) -> Example:
    """The first 16 originals and their matched reconstructions (NaN where none matched)."""
    originals = spec.denormalize(truth.inputs.detach().cpu().float())
    recs = spec.denormalize(rec.inputs.detach().cpu().float())
    matched = torch.stack([recs[i] if i is not None else torch.full_like(originals[0], float("nan"))
                           for i in scores["assignment"]])
    return Example(originals[:16], matched[:16], scores["psnr_per_input"][:16], scores["threshold"])
