"""The measured quantity h and the server's belief about its distribution (Fowl et al. 2022, §3.3, App. A.2).

:func:`linear_function` gives the weights of h(x) = ⟨w, x⟩ (mean brightness, a DCT-II basis
vector, a Gaussian random direction); :class:`Distribution` is the CDF the server places its bin
edges with (Gaussian, unit-variance Laplacian, or an empirical CDF fitted on surrogate inputs,
Fig. 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ...errors import FedleakError
from .options import CDFS, LINFUNCS, check_choice, check_positive


def linear_function(kind: str, numel: int, *, mode: int = 32,
                    generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The weights ``w`` (float64, ``numel``) of the linear measurement h(x) = ⟨w, x⟩ (App. A.2).

    * ``mean``: average brightness, w = 1/m (§3.3).
    * ``dct``: the DCT-II basis vector of frequency ``mode`` over the flattened input (a cosine
      wave, as the paper's "32nd DCT coefficient" and breaching's ``fourier``), unit norm.
    * ``randn``: a Gaussian random direction, standardized to mean 0 and std 1/√m, so h is close
      to N(0, 1) for unit-variance inputs (App. A.2, Fig. 6 right).
    """
    check_choice("linfunc", kind, LINFUNCS)
    numel = check_positive("input size", numel, integer=True)
    if kind == "mean":
        return torch.full((numel,), 1.0 / numel, dtype=torch.float64)
    if kind == "dct":
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 < mode < numel:
            raise FedleakError(f"imprint option 'mode' must be an integer in 1..{numel - 1}, got {mode!r}")
        j = torch.arange(numel, dtype=torch.float64)
        w = torch.cos(math.pi / numel * (j + 0.5) * mode)
        return w / w.norm()
    if numel < 2:
        raise FedleakError("a random linear function needs at least 2 input features")
    r = torch.randn(numel, generator=generator, dtype=torch.float64)
    return (r - r.mean()) / r.std() / math.sqrt(numel)


@dataclass(frozen=True)
class Distribution:
    """The server's model of the distribution of h (§3.3: "some information about the CDF").

    ``gaussian``: N(loc, scale²). ``laplace``: Laplace with mean ``loc`` and standard deviation
    ``scale`` (b = scale/√2; App. A.2 uses b = 1/√2 for unit variance). ``empirical``: the CDF of
    the surrogate values ``samples`` smoothed by a Gaussian kernel of width ``bandwidth``
    (Silverman's rule), so that quantiles of any mass exist (App. A.2, Fig. 5: a small amount of
    surrogate data suffices). ``loc``/``scale`` default to 0/1, the paper's assumption for
    normalized data.
    """

    kind: str = "gaussian"
    loc: float = 0.0
    scale: float = 1.0
    samples: tuple = ()
    bandwidth: float = 0.0

    def __post_init__(self) -> None:
        check_choice("cdf", self.kind, CDFS)
        if not (math.isfinite(self.loc) and math.isfinite(self.scale) and self.scale > 0):
            raise FedleakError(f"distribution loc/scale must be finite with scale > 0, got {self.loc}, {self.scale}")
        if self.kind == "empirical" and (len(self.samples) < 2 or not self.bandwidth > 0):
            raise FedleakError("an empirical CDF needs at least 2 distinct surrogate values")

    @classmethod
    def fit(cls, kind: str, values) -> "Distribution":
        """Fit ``kind`` to surrogate values of h (mean/std, or the kernel-smoothed empirical CDF)."""
        check_choice("cdf", kind, CDFS)
        h = np.sort(np.asarray(torch.as_tensor(values).detach().double().cpu(), dtype=np.float64).ravel())
        if h.size < 2 or not np.isfinite(h).all():
            raise FedleakError(f"fitting the distribution of h needs at least 2 finite surrogate values, got {h.size}")
        loc, scale = float(h.mean()), float(h.std())
        if not scale > 0:
            raise FedleakError("the surrogate values of h are all equal; cannot fit a distribution")
        if kind != "empirical":
            return cls(kind, loc, scale)
        iqr = float(np.subtract(*np.percentile(h, [75, 25])))
        spread = min(scale, iqr / 1.349) if iqr > 0 else scale
        bandwidth = 0.9 * spread * h.size ** -0.2
        return cls(kind, loc, scale, tuple(h.tolist()), bandwidth)

    def cdf(self, x) -> np.ndarray:
        x = torch.as_tensor(np.asarray(x, dtype=np.float64))
        if self.kind == "gaussian":
            return torch.special.ndtr((x - self.loc) / self.scale).numpy()
        if self.kind == "laplace":
            z = (x - self.loc) * math.sqrt(2.0) / self.scale
            return torch.where(z < 0, 0.5 * torch.exp(z), 1 - 0.5 * torch.exp(-z)).numpy()
        samples = torch.tensor(self.samples, dtype=torch.float64)
        return torch.special.ndtr((x[..., None] - samples) / self.bandwidth).mean(-1).numpy()

    def quantile(self, q) -> np.ndarray:
        """F⁻¹(q) for masses ``q`` in (0, 1)."""
        q = np.asarray(q, dtype=np.float64)
        if np.any((q <= 0) | (q >= 1)):
            raise FedleakError("quantiles are defined for masses strictly between 0 and 1")
        p = torch.as_tensor(q)
        if self.kind == "gaussian":
            return (self.loc + self.scale * torch.special.ndtri(p)).numpy()
        if self.kind == "laplace":
            b = self.scale / math.sqrt(2.0)
            return (self.loc - b * torch.sign(p - 0.5) * torch.log1p(-2 * (p - 0.5).abs())).numpy()
        samples = np.asarray(self.samples)
        lo = np.full(q.shape, samples[0] - 40 * self.bandwidth)
        hi = np.full(q.shape, samples[-1] + 40 * self.bandwidth)
        for _ in range(100):  # bisection on the smooth, strictly increasing CDF
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    def far(self, side: int) -> float:
        """A value of h beyond which the distribution has (numerically) no mass."""
        if self.kind == "empirical":
            spread = self.samples[-1] - self.samples[0] + self.scale
            return float(self.samples[-1] + spread) if side > 0 else float(self.samples[0] - spread)
        return self.loc + side * 40.0 * self.scale

    def to_json(self) -> dict:
        return {"kind": self.kind, "loc": self.loc, "scale": self.scale,
                "surrogates": len(self.samples), "bandwidth": self.bandwidth}
