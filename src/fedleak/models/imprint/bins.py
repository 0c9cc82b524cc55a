"""The rows and biases of the block: bin edges and the per-structure designs (Fowl et al. 2022).

* :func:`bin_edges`: equal-mass bin edges cᵢ = F⁻¹(i/k), outer edges at the support of h over
  valid inputs (§3.3).
* :func:`cumulative_rows`: ReLU rows gain·(h − cᵢ) (§3.3, Eq. 4).
* :func:`sparse_rows`: thresholded rows gain·(h − cᵢ)/δᵢ (§4.3).
* :func:`_design`: the above per structure, including the one-shot block's two fused rows
  (§4.2) and the CAH trap weights (:func:`_trap_weights`; Boenisch et al., App. A.8).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch

from ...errors import FedleakError
from ...types import DataSpec
from .distribution import Distribution
from .options import check_positive


def bin_box(spec: DataSpec, shape: tuple, dtype=torch.float64) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """Per-entry bounds of valid normalized images of ``spec`` (``None`` for other inputs)."""
    if tuple(shape) != tuple(spec.shape):
        return None
    lo, hi = spec.pixel_range
    mean = torch.tensor(spec.mean, dtype=dtype).view(-1, 1, 1)
    std = torch.tensor(spec.std, dtype=dtype).view(-1, 1, 1)
    low = ((lo - mean) / std).expand(*shape).reshape(-1)
    high = ((hi - mean) / std).expand(*shape).reshape(-1)
    return low, high


def bin_support(w: torch.Tensor, box) -> Optional[tuple[float, float]]:
    """min and max of h = ⟨w, x⟩ over the box of valid inputs."""
    if box is None:
        return None
    low, high = box
    a, b = w * low, w * high
    return float(torch.minimum(a, b).sum()), float(torch.maximum(a, b).sum())


def bin_edges(dist: Distribution, masses: Sequence[float], support) -> np.ndarray:
    """Bin edges e₀ < … < e_k with the given bin masses (Σ = 1); outer edges at the support."""
    cum = np.cumsum(np.asarray(masses, dtype=np.float64))[:-1]
    inner = dist.quantile(np.clip(cum, 1e-15, 1 - 1e-15))
    low = support[0] if support is not None else dist.far(-1)
    high = support[1] if support is not None else dist.far(+1)
    low, high = min(low, inner[0] - 1e-9 * abs(inner[0]) - 1e-12), max(high, inner[-1] + 1e-9 * abs(inner[-1]) + 1e-12)
    edges = np.concatenate([[low], inner, [high]])
    if not np.all(np.diff(edges) > 0):
        raise FedleakError("the bin edges are not increasing (too many bins for the fitted distribution of h?)")
    return edges


def _design(structure, bins, w, dist, support, gain, one_shot, target, spec, shape, box, generator,
            cah_sigma, cah_scale, cah_bias):
    """Rows (in bin order), their biases, per-bin secrets and design masses for ``structure``."""
    if structure == "cah":
        return _trap_weights(bins, spec, shape, box, generator, cah_sigma, cah_scale, cah_bias)
    if structure == "one-shot":
        target = float(target)
        if not 0 < target < 1:
            raise FedleakError(f"one-shot target must be a quantile in (0, 1), got {target}")
        m = 1.0 / bins
        if one_shot == "sparse":
            if not (m < target < 1 - m):
                raise FedleakError(f"one-shot target {target} leaves no room for two bins of mass 1/{bins}")
            edges = dist.quantile([target - m, target, target + m])
            pairs = [(edges[0], edges[1]), (edges[1], edges[2])]
            return sparse_rows(w, pairs, gain) + ([m, m],)
        if not target + m < 1:
            raise FedleakError(f"one-shot target {target} + 1/{bins} must stay below 1")
        edges = dist.quantile([target, target + m])
        upper = support[1] if support is not None else dist.far(+1)
        pairs = [(edges[0], edges[1]), (edges[1], upper)]
        return cumulative_rows(w, pairs, gain) + ([m, 1.0 - target - m],)
    masses = [1.0 / bins] * bins
    edges = bin_edges(dist, masses, support)
    pairs = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    if structure == "cumulative":
        return cumulative_rows(w, pairs, gain) + (masses,)
    return sparse_rows(w, pairs, gain) + (masses,)


def cumulative_rows(w, pairs, gain):
    lows = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    rows = gain * w.expand(len(pairs), -1).clone()
    biases = -gain * lows
    info = [{"low": float(a), "high": float(b), "row_scale": gain} for a, b in pairs]
    return rows, biases, info


def sparse_rows(w, pairs, gain):
    lows = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    widths = torch.tensor([p[1] - p[0] for p in pairs], dtype=torch.float64)
    if not bool((widths > 0).all()):
        raise FedleakError("sparse imprint bins need positive widths")
    scales = gain / widths
    rows = scales[:, None] * w[None, :]
    biases = -scales * lows
    info = [{"low": float(a), "high": float(b), "row_scale": float(s)} for (a, b), s in zip(pairs, scales)]
    return rows, biases, info


def _trap_weights(bins, spec, shape, box, generator, sigma, scale, bias):
    """CAH trap weights (Boenisch et al. 2021, §4; breaching PR #15's sign sampling).

    In pixel space u = x·std + mean (u ≥ 0 for images), each row has a random half of negative
    entries −|N(0, σ²)| and the rest scale·|N(0, σ²)|; as a layer on normalized inputs this is
    W·diag(std) with bias b + W·mean.
    """
    sigma = check_positive("cah_sigma", sigma)
    scale = check_positive("cah_scale", scale)
    numel = math.prod(shape)
    mags = torch.randn(bins, numel, generator=generator, dtype=torch.float64).abs() * sigma
    negative = torch.rand(bins, numel, generator=generator, dtype=torch.float64).argsort(1) < numel // 2
    rows = torch.where(negative, -mags, scale * mags)
    biases = torch.full((bins,), float(bias), dtype=torch.float64)
    if box is not None:
        mean = torch.tensor(spec.mean, dtype=torch.float64).view(-1, 1, 1).expand(*shape).reshape(-1)
        std = torch.tensor(spec.std, dtype=torch.float64).view(-1, 1, 1).expand(*shape).reshape(-1)
        biases = biases + rows @ mean
        rows = rows * std
    info = [{"low": None, "high": None, "row_scale": None} for _ in range(bins)]
    return rows, biases, info, [None] * bins
