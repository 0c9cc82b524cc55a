"""Fishing (Wen et al., ICML 2022): invert the target class's inputs out of a large-batch gradient.

On a model built by :func:`fedleak.models.fishing.fishing` the server reads from the aggregate
FedSGD gradient ḡ of N inputs (§3.2):

* the number k of target-class inputs: each contributes (p_c − 1)/N ≈ −1/N to ∂L/∂b_c, so
  k = round(−N·∂L/∂b_c);
* their summed gradient, exactly, for every layer below the classifier (N·ḡ: non-target inputs send
  no gradient there) and for the classifier itself: row c is N·ḡ_c; every non-target row j equals
  −row c/(C − 1), since pⱼ = (1 − p_c)/(C − 1) for each input (the non-target logits are all 0).

It then runs Inverting Gradients (Geiping et al. 2020; :mod:`fedleak.attacks.gradient_inversion`)
on that k-input gradient with the labels known (all c). FedSGD only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec, Protocol, Reconstruction, Update
from .base import Attack, AttackOptions, register


@dataclass(frozen=True)
class FishingOptions(AttackOptions):
    """Inverting Gradients' options for the fished inputs (see :class:`GradientInversionOptions`)."""

    iterations: int = 2000
    lr: float = 0.1
    tv: float = 1e-4
    restarts: int = 1
    max_targets: int = 8


def fishing_secrets(update: Update, model: nn.Module) -> dict:
    secrets = update.metadata.get("fishing") if isinstance(update.metadata, dict) else None
    secrets = secrets if secrets is not None else getattr(model, "fishing_secrets", None)
    if not isinstance(secrets, dict) or secrets.get("format") != "fedleak.fishing/1":
        raise FedleakError("the fishing attack needs a model built with fedleak.models.fishing.fishing "
                           "(its fishing_secrets) or the secrets in update.metadata['fishing']")
    return secrets


def target_gradient(update: Update, secrets: dict) -> tuple[int, dict]:
    """(k, the summed gradient of the k target-class inputs) from the aggregate (module docstring)."""
    if not update.is_fedsgd:
        raise FedleakError("the fishing attack reads a FedSGD gradient (got a FedAvg update)")
    n, c, classes = update.num_samples, secrets["target_class"], secrets["num_classes"]
    g = {k: v * n for k, v in update.gradient.items()}
    w, b = secrets["weight"], secrets["bias"]
    count = int(round(float(-g[b][c])))
    row_w, row_b = g[w][c].clone(), g[b][c].clone()
    g[w] = (-row_w / (classes - 1)).expand_as(g[w]).clone()
    g[b] = (-row_b / (classes - 1)).expand_as(g[b]).clone()
    g[w][c], g[b][c] = row_w, row_b
    return count, g


class FishingAttack(Attack):
    """Class fishing + Inverting Gradients on the fished inputs (Wen et al. 2022 §3.2)."""

    Options = FishingOptions
    name = "fishing"
    positive = ("iterations", "lr", "restarts", "max_targets")
    non_negative = ("tv",)

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        from .gradient_inversion import GradientInversion

        start = time.perf_counter()
        o = self.options
        secrets = fishing_secrets(update, model)
        count, summed = target_gradient(update, secrets)
        extras = {"attack": "fishing", "target_class": secrets["target_class"], "target_count": count}
        if count < 1 or count > o.max_targets:
            extras.update(seconds=time.perf_counter() - start,
                          skipped=f"{count} inputs of the target class (inverting 1 to {o.max_targets})")
            first = next(iter(update.gradient.values()))
            return Reconstruction(first.new_zeros(0, *spec.shape), None, extras=extras)
        mean = {k: v / count for k, v in summed.items()}
        fished = Update(update.server_params, Protocol("fedsgd"), count, gradient=mean, buffers=update.buffers,
                        metadata={"labels": [secrets["target_class"]] * count})
        inversion = GradientInversion(labels="known", iterations=o.iterations, lr=o.lr, tv=o.tv, restarts=o.restarts,
                                      seed=o.seed)
        rec = inversion.reconstruct(fished, model, spec)
        extras.update(rec.extras, attack="fishing", seconds=time.perf_counter() - start)
        return Reconstruction(rec.inputs, rec.labels, extras=extras)


register("fishing", FishingAttack,
         "Fishing (Wen et al., ICML 2022): class fishing magnifies one target class in a large batch; its inputs "
         "are counted and inverted with Inverting Gradients (FedSGD)")
