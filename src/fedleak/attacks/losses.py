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
    return UpdateDistance(a, kind, weights, names)(b)


class UpdateDistance:
    """``update_distance(observed, ·)`` for a fixed observed update, its constants computed once.

    An attack calls it every iteration with the simulated update; the observed side's weighted
    norm √Σ ω_l‖a_l‖² of the cosine distance does not change, so it is computed here, not per call
    (when ``weights`` is a plain dict or ``None``; weights that change during the attack, such as
    AWA's enhanced weights, are read on every call).
    """

    def __init__(self, observed: Params, kind: str = "l2", weights: Optional[Mapping[str, float]] = None,
                 names=None) -> None:
        if kind not in DISTANCES:
            raise FedleakError(f"unknown distance {kind!r}; allowed: {', '.join(DISTANCES)}")
        self.observed, self.kind = observed, kind
        self.names = list(observed) if names is None else list(names)
        self.static = weights is None or type(weights) is dict
        self.weights = dict(weights or {}) if self.static else weights
        self._observed_norm = None
        if kind == "cosine" and self.static:
            with torch.no_grad():
                self._observed_norm = self._norm(observed, self.weights).sqrt()

    def _norm(self, params: Params, w: Mapping[str, float]) -> torch.Tensor:
        return sum(w.get(n, 1.0) * params[n].pow(2).sum() for n in self.names)

    def __call__(self, simulated: Params) -> torch.Tensor:
        a, b, w, names = self.observed, simulated, self.weights, self.names
        if self.kind == "l2":
            return sum(w.get(n, 1.0) * (a[n] - b[n]).pow(2).sum() for n in names)
        if self.kind == "l1":
            return sum(w.get(n, 1.0) * (a[n] - b[n]).abs().sum() for n in names)
        dot = sum(w.get(n, 1.0) * (a[n] * b[n]).sum() for n in names)
        norm_a = self._observed_norm if self._observed_norm is not None else self._norm(a, w).sqrt()
        return 1 - dot / (norm_a * self._norm(b, w).sqrt() + 1e-12)


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


# ----------------------------------------------------------------------------------------------
# Dimitrov et al.'s epoch order-invariant prior

EPOCH_PRIORS = tuple(f"{d}_{g}{c}" for d in ("l1", "l2") for g in ("mean", "max") for c in ("", "_conv"))


class EpochOrderPrior:
    """The epoch order-invariant prior L_inv (Dimitrov et al. §4.4, Eq. 3; research note §A.5).

    Every input is processed exactly once per epoch, so any function g that is invariant to the
    order of the N inputs of an epoch takes the same value on every epoch:

        L_inv(X) = 1/E² · Σ_{e1} Σ_{e2} D_inv(g(X_{e1}), g(X_{e2}))

    over all ordered pairs of epochs. ``kind`` is ``"{D}_{A}[_conv]"``: D ∈ {l1, l2} the mean
    absolute / squared element difference; A ∈ {mean, max} the element-wise aggregation over the
    N images of an epoch; ``_conv`` first projects the (normalized) images with a fixed random
    3×3 convolution with ``channels`` outputs (96 in the paper), SAME padding, LeCun-normal kernel
    and zero bias like Flax's defaults, drawn once from ``seed`` and never trained.

    Call it on the E·N dummy inputs ``(E·N, C, H, W)``, epoch e holding rows ``[e·N, (e+1)·N)``.
    """

    def __init__(self, kind: str, epochs: int, in_channels: int, channels: int = 96, seed: int = 0,
                 device=None, dtype=torch.float32) -> None:
        if kind not in EPOCH_PRIORS:
            raise FedleakError(f"unknown epoch prior {kind!r}; allowed: {', '.join(EPOCH_PRIORS)}")
        if int(epochs) < 1:
            raise FedleakError(f"the epoch prior needs at least one epoch, got {epochs}")
        parts = kind.split("_")
        self.kind = kind
        self.distance, self.aggregate = parts[0], parts[1]
        self.epochs = int(epochs)
        self.weight: Optional[torch.Tensor] = None
        self.bias: Optional[torch.Tensor] = None
        if kind.endswith("_conv"):
            if int(channels) < 1:
                raise FedleakError(f"the random convolution needs at least one channel, got {channels}")
            from ..models import lecun_normal_  # the one LeCun-normal initializer (Flax defaults)

            weight = torch.empty(int(channels), int(in_channels), 3, 3)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(seed))
                lecun_normal_(weight, int(in_channels) * 9)
            self.weight = weight.to(device=device, dtype=dtype)
            self.bias = torch.zeros(int(channels), device=device, dtype=dtype)

    def summaries(self, inputs: torch.Tensor) -> torch.Tensor:
        """g(X_e) for every epoch: (E, C', H, W)."""
        if inputs.dim() != 4 or inputs.shape[0] % self.epochs:
            raise FedleakError(f"the epoch prior needs (E·N, C, H, W) inputs with E={self.epochs}, "
                               f"got shape {tuple(inputs.shape)}")
        x = inputs
        if self.weight is not None:
            weight = self.weight.to(device=x.device, dtype=x.dtype)
            bias = self.bias.to(device=x.device, dtype=x.dtype)
            x = torch.nn.functional.conv2d(x, weight, bias, padding=1)
        x = x.reshape(self.epochs, -1, *x.shape[1:])
        return x.mean(1) if self.aggregate == "mean" else x.amax(1)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        s = self.summaries(inputs).flatten(1)
        diff = s[:, None, :] - s[None, :, :]
        per_pair = diff.pow(2).mean(-1) if self.distance == "l2" else diff.abs().mean(-1)
        return per_pair.mean()
