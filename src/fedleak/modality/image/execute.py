"""The image audit's run steps: one attack's summary over the audited targets and the report's image grid.

* :func:`summarize` — mean PSNR, SSIM, Rec %, IIP and label-count error over the targets, their distribution and
  every image's PSNR (``metrics.json``'s keys for images);
* :class:`Example` / :func:`example` — the first target's originals beside their matched reconstructions;
* :data:`VERBATIM_DB` — the PSNR above which an imprint readout counts as verbatim.

The text audit's counterparts are :mod:`fedleak.audit.execute.text`; the stages reach both through the modality
object (:meth:`fedleak.modality.Modality.summarize`, :meth:`~fedleak.modality.Modality.example`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...types import ClientData, DataSpec, Reconstruction
from ...metrics.summary import mean

#: PSNR above which an imprint readout counts as verbatim (Fowl et al.: exact copies; the image modality's count)
VERBATIM_DB = 60.0
SUMMARY_KEYS = ("psnr", "ssim", "rec_percent", "iip", "label_count_error")


@dataclass
class Example:
    """Originals and matched reconstructions of the first target, for the report's image grid."""

    originals: torch.Tensor
    reconstructions: torch.Tensor
    psnr: list
    threshold: float


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


__all__ = ["Example", "SUMMARY_KEYS", "VERBATIM_DB", "example", "summarize"]
