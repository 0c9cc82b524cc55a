"""Post-processing of per-epoch reconstructions: MatchEpoch (Dimitrov et al. §4.4, App. C, Alg. 3).

SimUpdate optimizes one image per input *and epoch*; epoch e's k-th variable need not show the
same client image as epoch 1's k-th. :func:`match_epochs` aligns every epoch to the first and
averages (research note §A.7):

1. split the E·N images into epochs X_1..X_E;
2. for e = 2..E pair X_e with X_1 by linear sum assignment on −PSNR between de-normalized,
   *unclipped* images with peak 1 (the pixel range width) — the one matching routine of the
   project, :func:`fedleak.metrics.match_by_psnr`;
3. average the aligned epochs in normalized space.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import FedleakError
from ..metrics import match_by_psnr
from ..types import DataSpec


@dataclass
class EpochMatch:
    """The averaged reconstructions (N, C, H, W), the aligned epochs (E, N, C, H, W) and the
    permutations (E, N): ``aligned[e] = epochs[e][orders[e]]`` (``orders[0]`` is the identity)."""

    inputs: torch.Tensor
    aligned: torch.Tensor
    orders: torch.Tensor


def match_epochs(inputs: torch.Tensor, epochs: int, spec: DataSpec) -> EpochMatch:
    """MatchEpoch on ``inputs`` (E·N, C, H, W) holding E consecutive blocks of N normalized images."""
    if inputs.dim() != 4 or int(epochs) < 1 or inputs.shape[0] % int(epochs):
        raise FedleakError(f"MatchEpoch needs (E·N, C, H, W) inputs with E={epochs}, got shape {tuple(inputs.shape)}")
    x = inputs.detach().reshape(int(epochs), -1, *inputs.shape[1:])
    finite = torch.isfinite(x)
    if not bool(finite.all()):
        raise FedleakError("MatchEpoch: the per-epoch reconstructions contain NaN or infinite values")
    lo, hi = spec.pixel_range
    pixels = spec.denormalize(x)
    reference = pixels[0]
    orders = [torch.arange(x.shape[1], device=x.device)]
    for e in range(1, x.shape[0]):
        assignment = match_by_psnr(pixels[e], reference, data_range=float(hi - lo))
        orders.append(torch.as_tensor(assignment, dtype=torch.long, device=x.device))
    order = torch.stack(orders)
    aligned = torch.stack([x[e].index_select(0, order[e]) for e in range(x.shape[0])])
    return EpochMatch(aligned.mean(0), aligned, order)
