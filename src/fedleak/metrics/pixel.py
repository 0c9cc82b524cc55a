"""Pixel-space image similarity: MSE, PSNR and SSIM, per image and vectorized in torch.

All functions take images in *pixel space* (de-normalized, e.g. ``spec.denormalize(x)``), as
batches ``(N, C, H, W)`` or single images ``(C, H, W)``, on any device and floating dtype.
Half-precision inputs are scored in float32; float64 inputs stay float64.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..errors import FedleakError

#: PSNR reported in JSON results when a reconstruction is pixel-exact (MSE 0, PSNR +inf).
PSNR_CAP = 200.0


def work_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """The dtype metrics compute in: the promoted input dtype, at least float32."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if not dtype.is_floating_point or torch.finfo(dtype).bits < 32:
        return torch.float32
    return dtype


def _batched(t: torch.Tensor, what: str) -> tuple[torch.Tensor, bool]:
    if not isinstance(t, torch.Tensor):
        raise FedleakError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() == 3:
        return t.unsqueeze(0), True
    if t.dim() != 4:
        raise FedleakError(f"{what} must have shape (N, C, H, W) or (C, H, W), got {tuple(t.shape)}")
    return t, False


def _pair(a: torch.Tensor, b: torch.Tensor, what: str) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """Check that ``a`` and ``b`` are image batches of one shape; bring them to one device/dtype."""
    a, single = _batched(a, f"{what}: first argument")
    b, _ = _batched(b, f"{what}: second argument")
    if a.shape != b.shape:
        raise FedleakError(f"{what}: image shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    dtype = work_dtype(a, b)
    return a.detach().to(dtype=dtype), b.detach().to(device=a.device, dtype=dtype), single


def _check_range(data_range: float) -> float:
    data_range = float(data_range)
    if not (math.isfinite(data_range) and data_range > 0):
        raise FedleakError(f"data_range must be a positive finite number, got {data_range}")
    return data_range


def mse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image: a tensor of shape ``(N,)`` (0-dim for single images)."""
    a, b, single = _pair(a, b, "mse")
    out = (a - b).pow(2).flatten(1).mean(1)
    return out[0] if single else out


def _psnr_from_mse(m: torch.Tensor, data_range: float) -> torch.Tensor:
    # 10·log10(R² / MSE); MSE 0 gives +inf (division by zero is inf in torch).
    return 10.0 * torch.log10(data_range**2 / m)


def psnr(a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio per image, ``10·log10(data_range² / MSE)`` in dB.

    Same definition as scikit-image's ``peak_signal_noise_ratio`` with ``data_range=1`` used by
    Dimitrov et al. (App. A.8). Pixel-exact pairs give ``+inf`` here; :func:`fedleak.metrics.evaluate`
    replaces it by :data:`PSNR_CAP` (200 dB) so that its results stay finite JSON numbers.
    """
    data_range = _check_range(data_range)
    a, b, single = _pair(a, b, "psnr")
    out = _psnr_from_mse((a - b).pow(2).flatten(1).mean(1), data_range)
    return out[0] if single else out


def psnr_matrix(a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0,
                max_chunk_elements: int = 1 << 24) -> torch.Tensor:
    """PSNR between every image of ``a`` (N images) and every image of ``b`` (M images): ``(N, M)``.

    Computed from exact pixel differences (not the ``|a|²+|b|²−2ab`` expansion, whose cancellation
    would turn identical images into a finite PSNR), in row chunks of at most
    ``max_chunk_elements`` elements so memory stays bounded.
    """
    data_range = _check_range(data_range)
    a, _ = _batched(a, "psnr_matrix: first argument")
    b, _ = _batched(b, "psnr_matrix: second argument")
    if a.shape[1:] != b.shape[1:]:
        raise FedleakError(
            f"psnr_matrix: per-image shapes differ: {tuple(a.shape[1:])} vs {tuple(b.shape[1:])}"
        )
    dtype = work_dtype(a, b)
    a = a.detach().to(dtype=dtype).flatten(1)
    b = b.detach().to(device=a.device, dtype=dtype).flatten(1)
    per_row = max(1, b.shape[0] * b.shape[1])
    step = max(1, max_chunk_elements // per_row)
    rows = [
        (a[i:i + step, None, :] - b[None, :, :]).pow(2).mean(-1)
        for i in range(0, a.shape[0], step)
    ]
    m = torch.cat(rows, 0) if rows else a.new_zeros(0, b.shape[0])
    return _psnr_from_mse(m, data_range)


def gaussian_window(sigma: float = 1.5, truncate: float = 3.5, max_size: int | None = None,
                    device=None, dtype=torch.float32) -> torch.Tensor:
    """The normalized 1-D Gaussian taps SSIM uses (as ``scipy.ndimage.gaussian_filter``).

    Radius ``int(truncate·σ + 0.5)`` (5 for σ = 1.5, i.e. the 11-tap window of Wang et al. 2004);
    cut to the largest odd size ``≤ max_size`` when given.
    """
    radius = int(truncate * sigma + 0.5)
    if max_size is not None:
        radius = min(radius, (int(max_size) - 1) // 2)
    x = torch.arange(-radius, radius + 1, device=device, dtype=dtype)
    g = torch.exp(-0.5 * (x / sigma) ** 2)
    return g / g.sum()


def ssim(a: torch.Tensor, b: torch.Tensor, data_range: float = 1.0, *, sigma: float = 1.5,
         k1: float = 0.01, k2: float = 0.03) -> torch.Tensor:
    """Structural similarity per image (Wang et al. 2004, "Image quality assessment: from error
    visibility to structural similarity", IEEE TIP 13(4)).

    Gaussian-weighted local statistics with an 11×11 window (σ = 1.5, truncated at 3.5σ),
    population (not sample) covariances, ``C1 = (k1·R)²``, ``C2 = (k2·R)²`` with ``R = data_range``.
    The SSIM map is kept only where the window lies fully inside the image (a "valid"
    convolution), averaged per channel, then over channels. This equals scikit-image's
    ``structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
    data_range=R, channel_axis=0)`` — which filters with reflect padding and then crops the
    5-pixel border, so the padding never reaches the kept region.

    Images smaller than the window (under 11 px on a side; scikit-image refuses them) use the
    largest odd window that fits; such values are not comparable with the standard SSIM.
    Implemented as depthwise ``conv2d`` with the separable window: no loops over pixels.
    """
    data_range = _check_range(data_range)
    a, b, single = _pair(a, b, "ssim")
    n, c, h, w = a.shape
    g = gaussian_window(sigma, max_size=min(h, w), device=a.device, dtype=a.dtype)
    taps = g.numel()
    # Filter the five maps (a, b, a², b², ab) of every channel in one depthwise pass.
    stack = torch.cat([a, b, a * a, b * b, a * b], dim=1)  # (N, 5C, H, W)
    groups = stack.shape[1]
    stack = F.conv2d(stack, g.view(1, 1, taps, 1).expand(groups, 1, taps, 1), groups=groups)
    stack = F.conv2d(stack, g.view(1, 1, 1, taps).expand(groups, 1, 1, taps), groups=groups)
    ux, uy, uxx, uyy, uxy = stack.split(c, dim=1)
    vx = uxx - ux * ux
    vy = uyy - uy * uy
    vxy = uxy - ux * uy
    c1 = (k1 * data_range) ** 2
    c2 = (k2 * data_range) ** 2
    s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
    out = s.mean(dim=(2, 3)).mean(dim=1)
    return out[0] if single else out
