"""Update-matching distances and image priors.

Distances compare two parameter dicts (an observed update and a simulated one) layer by layer,
with optional per-tensor weights ``weights[name]`` (missing names weigh 1):

* ``l2`` — Σ_l ω_l ‖a_l − b_l‖² (DLG, Zhu et al. 2019; Dimitrov et al.'s scripts with ω_l = e^−l,
  research note §A.4; AWA Eq. 23);
* ``l1`` — Σ_l ω_l ‖a_l − b_l‖₁;
* ``cosine`` — 1 − Σ ω_l⟨a_l, b_l⟩ / (√Σ ω_l‖a_l‖² · √Σ ω_l‖b_l‖²) (Geiping et al. 2020 Eq. 4 with
  ω = 1; AGIC Eq. 6 with layer weights).

Priors act on a batch of normalized inputs (N, C, H, W):

* :func:`total_variation` — IG's anisotropic TV: mean |Δx| over both axes (Geiping et al. §4);
* :func:`squared_circular_tv` — Dimitrov et al.'s TV: Σ (Δx)² with circular wrap plus 1e−7 per
  pixel, per image (research note §A.4);
* :func:`clip_prior` — Σ_pixels mean_images (u − clip(u, lo, hi))² on de-normalized images u
  (Dimitrov et al. §A.4; Geng et al.'s clipping regularizer).
"""

from __future__ import annotations

from typing import Mapping, Optional

import torch

from ..errors import FedleakError
from ..types import DataSpec, Params

DISTANCES = ("l2", "l1", "cosine")


def update_distance(a: Params, b: Params, kind: str = "l2", weights: Optional[Mapping[str, float]] = None,
                    names=None) -> torch.Tensor:
    """Distance between two parameter dicts over ``names`` (default: all keys of ``a``)."""
    names = list(a) if names is None else list(names)
    w = weights or {}
    if kind == "l2":
        return sum(w.get(n, 1.0) * (a[n] - b[n]).pow(2).sum() for n in names)
    if kind == "l1":
        return sum(w.get(n, 1.0) * (a[n] - b[n]).abs().sum() for n in names)
    if kind == "cosine":
        dot = sum(w.get(n, 1.0) * (a[n] * b[n]).sum() for n in names)
        na = sum(w.get(n, 1.0) * a[n].pow(2).sum() for n in names)
        nb = sum(w.get(n, 1.0) * b[n].pow(2).sum() for n in names)
        return 1 - dot / (na.sqrt() * nb.sqrt() + 1e-12)
    raise FedleakError(f"unknown distance {kind!r}; allowed: {', '.join(DISTANCES)}")


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic L1 TV, mean absolute neighbour difference (Geiping et al. 2020)."""
    dx = (x[..., :, 1:] - x[..., :, :-1]).abs().mean()
    dy = (x[..., 1:, :] - x[..., :-1, :]).abs().mean()
    return dx + dy


def squared_circular_tv(x: torch.Tensor) -> torch.Tensor:
    """Dimitrov et al.'s TV: per image Σ_{c,h,w}[(x−roll_h x)² + (x−roll_w x)² + 1e−7], averaged over images."""
    dh = (x - torch.roll(x, shifts=-1, dims=-2)).pow(2)
    dw = (x - torch.roll(x, shifts=-1, dims=-1)).pow(2)
    per_image = (dh + dw + 1e-7).flatten(1).sum(1)
    return per_image.mean()


def clip_prior(x: torch.Tensor, spec: DataSpec) -> torch.Tensor:
    """Σ over pixels of the mean over images of (u − clip(u))², u = σx + μ (Dimitrov et al. §A.4)."""
    u = spec.denormalize(x)
    lo, hi = spec.pixel_range
    return (u - u.clamp(lo, hi)).pow(2).mean(0).sum()
