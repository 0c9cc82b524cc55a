"""Analytic recovery through a fully connected layer: one input from a weight-gradient row over its bias entry.

Phong, Aono, Hayashi, Wang, Moriai, "Privacy-Preserving Deep Learning via Additively Homomorphic
Encryption" (IEEE TIFS 2018; ATIS 2017), §III-B: for ``z = W x + b`` and one sample, row j of the weight
gradient is ``∂ℓ/∂W_j = (∂ℓ/∂z_j) x`` and the bias entry ``∂ℓ/∂b_j = ∂ℓ/∂z_j``, so **x = ∇W_j / ∇b_j** for
every row with ∇b_j ≠ 0. For a batch, row j mixes the samples that activate output j; it equals one sample
exactly when only that sample activates it (behind a ReLU, a row is active for a given sample with
probability about ½, so a batch of B has about m·B·2^-B such rows).

What this attack returns and claims:

* **one sample** (rank ∇W = 1): x as the least-squares ratio over all rows, Σ_j ∇b_j ∇W_j / Σ_j ∇b_j² —
  exact, and *certain* once the gradient recomputed from x and the label read from ∇b matches the update
  (:func:`fedleak.attacks.fc_exact.verify`);
* **a batch**: the ratios of all rows with ∇b_j ≠ 0 are compared; two or more rows giving the **same** ratio
  (relative distance below ``match_tol``) are rows activated by one sample only (a mixture of several
  samples with different per-row weights agrees with another row only by accident), so each such group is
  one recovered input. The batch is certain only if every sample is found this way and the recomputed
  gradient matches; otherwise the groups found are returned and the precondition is reported as not met.

No hyperparameters are tuned; the tolerances only decide what counts as numerically equal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, register
from .fc_exact import TOLERANCE, fc_gradients, fc_layer, finish, numerical_rank, single_step


@dataclass(frozen=True)
class AnalyticFCOptions(AttackOptions):
    """Which layer, and what counts as numerically equal."""

    layer: str = ""
    match_tol: float = 1e-4
    rank_tol: float = 1e-5
    tolerance: float = TOLERANCE


def single_sample(grad_w: torch.Tensor, grad_b: torch.Tensor) -> torch.Tensor:
    """x = Σ_j ∇b_j ∇W_j / Σ_j ∇b_j² (one sample: every active row gives the same ratio)."""
    return (grad_b @ grad_w / grad_b.pow(2).sum())[None]


def unique_rows(grad_w: torch.Tensor, grad_b: torch.Tensor, match_tol: float) -> list[torch.Tensor]:
    """Inputs found as groups of ≥ 2 rows with the same ratio ∇W_j / ∇b_j (rows activated by one sample)."""
    active = grad_b.abs() > 1e-9 * grad_b.abs().max()
    ratios = grad_w[active] / grad_b[active, None]
    if ratios.shape[0] < 2:
        return []
    norms = ratios.norm(dim=1)
    distance = torch.cdist(ratios, ratios) / torch.maximum(norms[:, None], norms[None, :]).clamp_min(1e-300)
    same = distance < match_tol
    taken = torch.zeros(ratios.shape[0], dtype=torch.bool)
    found = []
    for j in range(ratios.shape[0]):
        if taken[j]:
            continue
        group = same[j] & ~taken
        if int(group.sum()) >= 2:
            weights = grad_b[active][group]
            found.append(weights @ grad_w[active][group] / weights.pow(2).sum())
        taken |= group
    return found


class AnalyticFC(Attack):
    """Inputs of a linear layer read from its gradient (Phong et al. 2017, §III-B), then verified."""

    Options = AnalyticFCOptions
    name = "analytic-fc"
    positive = ("match_tol", "rank_tol", "tolerance")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        o = self.options
        start = time.perf_counter()
        layer, first = fc_layer(model, o.layer or None)
        batch = update.num_samples
        extras = {"attack": getattr(self, "variant", self.name), "batch": batch}
        exactness = {"holds": False, "batch": batch, "method": "Phong et al. 2017 §III-B (row / bias ratio)"}
        x = None
        why = single_step(update)
        if why is None:
            grad_w, grad_b = fc_gradients(update, layer)
            rank, _ = numerical_rank(torch.cat([grad_w, grad_b[:, None]], dim=1), o.rank_tol)
            exactness["rank"] = rank
            if rank == 0:
                why = "the layer's gradient is zero"
            elif not bool((grad_b != 0).any()):
                why = "the bias gradient is zero (a filter or pruning removed it): no row ratio exists"
            elif batch == 1 or rank == 1:
                x = single_sample(grad_w, grad_b)
                if batch != 1:
                    why = f"rank 1 but {batch} samples: identical inputs or a single active sample"
            else:
                found = unique_rows(grad_w, grad_b, o.match_tol)
                exactness["inputs_found"] = len(found)
                x = torch.stack(found) if found else None
                if len(found) != batch:
                    why = (f"{len(found)} of {batch} inputs activate some output alone (≥ 2 rows with the same "
                           f"ratio); the rest are mixed in every row — use spear for whole batches")
        exactness["seconds"] = time.perf_counter() - start
        if why is None:
            exactness["holds"] = True
            exactness["reason"] = ("one sample: every active row's ratio ∇W_j/∇b_j is that input" if batch == 1 else
                                   f"all {batch} inputs each activate at least two outputs alone")
        else:
            exactness["reason"] = why
        return finish(model, update, spec, layer, first, x, None, exactness, extras, o.tolerance)


register("analytic-fc", AnalyticFC,
         "Phong et al. 2017: inputs of a linear layer from weight-row / bias gradient ratios (exact at batch 1); each recovery recomputed against the update")
