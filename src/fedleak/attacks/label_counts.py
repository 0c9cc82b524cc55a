"""Label counts only (Dimitrov et al. 2022, Table 2): RecLabels and Geng et al. at θˢ / θᶜ as attacks.

The estimators themselves live in :mod:`fedleak.attacks.labels`; this module wraps them as
registered attacks so that experiments can score label-count error like any other attack.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, register
from .labels import RECLABEL_MODES, ROUNDINGS, counts_to_labels, reclabels


@dataclass(frozen=True)
class LabelCountOptions(AttackOptions):
    """RecLabels / Geng et al. options (research note §A.6)."""

    mode: str = "avg"
    label_samples: int = 3000
    rounding: str = "eth"


class LabelCountAttack(Attack):
    """Label counts only: RecLabels (``avg``) or Geng et al. at θˢ (``start``) / θᶜ (``end``), Table 2.

    The reconstruction's ``labels`` are the restored counts expanded in class order; its
    ``inputs`` are the dataset mean image (all zeros in normalized space) for every sample, since
    this attack recovers no images (only the label metrics are meaningful).
    """

    Options = LabelCountOptions
    name = "label-counts"

    choices = {"mode": RECLABEL_MODES, "rounding": ROUNDINGS}
    positive = ("label_samples",)

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        counts = reclabels(update, model, num_dummy=o.label_samples, mode=o.mode, seed=o.seed, rounding=o.rounding,
                           input_shape=spec.shape)
        first = next(model.parameters())
        inputs = torch.zeros((update.num_samples, *spec.shape), device=first.device, dtype=first.dtype)
        extras = {"attack": getattr(self, "variant", self.name), "labels_only": True, "mode": o.mode,
                  "label_counts": counts.tolist()}
        return Reconstruction(inputs, counts_to_labels(counts.cpu()), extras=extras)


register("reclabels", LabelCountAttack, "Dimitrov et al. 2022 RecLabels: label counts only (Table 2 'Ours')", mode="avg")
register("geng-server", LabelCountAttack,
         "Geng et al. 2021 label counts with statistics at the server weights θˢ (Table 2)", mode="start")
register("geng-client", LabelCountAttack,
         "Geng et al. 2021 label counts with statistics at the client weights θᶜ (Table 2; the authors' code)",
         mode="end")
