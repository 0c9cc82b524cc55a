"""The analytic imprint attack and its registered variants (Fowl et al. 2022, §3.3, §4.2-4.3, App. A.8).

:class:`ImprintAttack` keeps x̂ = ΔW_bin/Δb_bin for every non-empty bin (Eq. 2, Eq. 4) and, when
there are more candidates than inputs, the N with the largest mean |ΔW| (§4). Registered as
``imprint``, ``imprint-sparse`` (§4.3), ``imprint-one-shot`` (§4.2) and ``cah`` (App. A.8).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec, Reconstruction, Update
from ..base import Attack, AttackOptions, register
from .readout import _dedupe, _single_checks, _to_model_inputs, bin_sums, block_update, resolve_secrets

STRUCTURES = ("auto", "cumulative", "sparse", "one-shot", "cah")
REDUCTIONS = ("weight", "bias", "none")


@dataclass(frozen=True)
class ImprintOptions(AttackOptions):
    """Options of the analytic imprint readout.

    ``structure``: the block the attack expects (``auto``: whatever the secrets say).
    ``reduction``: which candidates to keep when there are more than N (``weight``: the largest
    mean |ΔW| row, the paper's choice; ``bias``: the largest |Δb|; ``none``: keep all).
    ``tolerance``: a bin counts as empty when |Δb| ≤ tolerance·max|Δb| (0: 1000·machine eps).
    ``clip``: clamp recovered images to the valid pixel range. ``levels``: quantization levels of
    the data (255 for 8-bit images; 0 disables the on-grid check).
    """

    structure: str = "auto"
    reduction: str = "weight"
    tolerance: float = 0.0
    clip: bool = False
    levels: int = 255


class ImprintAttack(Attack):
    """Analytic recovery of the inputs that fell alone into an imprint bin (Fowl et al. 2022)."""

    Options = ImprintOptions
    name = "imprint"

    choices = {"structure": STRUCTURES, "reduction": REDUCTIONS}
    non_negative = ("tolerance", "levels")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        start = time.perf_counter()
        o = self.options
        secrets = resolve_secrets(update, model)
        structure = secrets["structure"]
        if o.structure != "auto" and o.structure != structure:
            raise FedleakError(f"attack {getattr(self, 'variant', self.name)!r} expects a {o.structure!r} imprint "
                               f"block, the model carries a {structure!r} one")
        weight, bias = block_update(update, secrets)
        sums_w, sums_b = bin_sums(weight, bias, structure, secrets["nonlinearity"])
        eps = torch.finfo(sums_b.dtype).eps
        tolerance = o.tolerance if o.tolerance > 0 else 1000 * eps
        scale = float(bias.abs().max()) if bias.numel() else 0.0
        nonempty = (sums_b.abs() > tolerance * scale).nonzero().flatten() if scale > 0 else sums_b.new_zeros(0, dtype=torch.long)
        candidates = sums_w[nonempty] / sums_b[nonempty, None]
        if structure == "cah":
            candidates, nonempty = _dedupe(candidates, nonempty)
        checks = _single_checks(candidates, nonempty, update, secrets, spec, o.levels)
        single = checks["single"]
        score = (sums_w[nonempty].abs().mean(1) if o.reduction != "bias" else sums_b[nonempty].abs())
        keep = torch.arange(nonempty.numel(), device=nonempty.device)
        if o.reduction != "none" and nonempty.numel() > update.num_samples:
            # prefer candidates that pass the single-input checks, then the largest score
            rank = torch.argsort(score + single.to(score.dtype) * (score.max() + 1), descending=True)
            keep = rank[: update.num_samples].sort().values
        inputs = _to_model_inputs(candidates[keep], update, secrets, spec)
        if o.clip and secrets.get("box") is not None:
            lo, hi = spec.pixel_range
            inputs = spec.normalize(spec.denormalize(inputs).clamp(lo, hi))
        bins = nonempty[keep].tolist()
        extras = {
            "attack": getattr(self, "variant", self.name),
            "structure": structure,
            "num_bins": int(weight.shape[0]),
            "nonempty_bins": nonempty.tolist(),
            "candidate_bins": bins,
            "single_bins": [b for b, s in zip(nonempty.tolist(), single.tolist()) if s],
            "single_candidates": [bool(single[i]) for i in keep.tolist()],
            "checks": {key: [value[i] for i in keep.tolist()] for key, value in checks.items() if key != "single"},
            "source": "gradient" if update.is_fedsgd else "weight difference",
            "seconds": time.perf_counter() - start,
        }
        return Reconstruction(inputs.detach(), None, extras=extras)



register("imprint", ImprintAttack,
         "Robbing the Fed (Fowl et al. 2022): malicious imprint block, analytic readout of the inputs alone in "
         "their bin (Eq. 4); FedSGD gradients and FedAvg weight differences")
register("imprint-sparse", ImprintAttack,
         "Robbing the Fed, sparse FedAvg variant (§4.3): thresholded bins read row by row", structure="sparse")
register("imprint-one-shot", ImprintAttack,
         "Robbing the Fed, one-shot (§4.2): two rows isolating single inputs from huge aggregates",
         structure="one-shot")
register("cah", ImprintAttack,
         "Curious Abandon Honesty (Boenisch et al. 2021) trap weights, read row by row (Fowl et al. App. A.8)",
         structure="cah")
