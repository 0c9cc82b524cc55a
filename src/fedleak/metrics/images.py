"""The image modality's metrics (:func:`evaluate_images`: PSNR, SSIM, Rec %, IIP, LPIPS, label counts; the protocol of
:func:`fedleak.metrics.evaluate`) and the checks every modality's scores start with (:func:`check_pair`).

Below both :func:`fedleak.metrics.evaluate` (the entry point, which asks the spec's modality) and the modality
objects (:mod:`fedleak.modality`), which score with these directly.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import torch

from ..errors import FedleakError
from ..types import ClientData, DataSpec, Reconstruction
from .labels import label_accuracy, label_count_error
from .matching import identity_assignment, iip, match_by_psnr
from .perceptual import lpips as lpips_distance
from .pixel import PSNR_CAP, mse, psnr, ssim, work_dtype

#: Rec% thresholds δ of Dimitrov et al. (App. A.8, ``--delta``) by dataset; 20 dB otherwise.
DEFAULT_THRESHOLDS = {"femnist": 20.0, "cifar100": 19.0}
DEFAULT_THRESHOLD = 20.0


def default_threshold(spec: DataSpec) -> float:
    """δ for ``spec``: 19 dB for CIFAR100 datasets, else 20 dB (FEMNIST; Dimitrov et al. App. A.8)."""
    name = "".join(ch for ch in spec.name.lower() if ch.isalnum())
    for prefix, value in DEFAULT_THRESHOLDS.items():
        if name.startswith(prefix):
            return value
    return DEFAULT_THRESHOLD


def _num(x, cap: Optional[float] = None) -> Optional[float]:
    """A JSON-safe float: ±inf → ±cap (``None`` without a cap), NaN → None."""
    x = float(x)
    if math.isnan(x):
        return None
    if math.isinf(x):
        return None if cap is None else math.copysign(cap, x)
    return x


def _check_images(t, spec: DataSpec, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise FedleakError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    c, h, w = spec.shape
    if t.dim() != 4 or tuple(t.shape[1:]) != tuple(spec.shape):
        raise FedleakError(
            f"{what} have shape {tuple(t.shape)}, expected (N, {c}, {h}, {w}) for dataset {spec.name!r}"
        )
    if not t.is_floating_point():
        raise FedleakError(f"{what} must be floating point (normalized inputs), got {t.dtype}")
    return t


def check_pair(rec, client) -> None:
    """What :func:`fedleak.metrics.evaluate` checks before any modality scores: a :class:`Reconstruction` and
    :class:`ClientData` (:class:`FedleakError` naming the wrong type otherwise)."""
    if not isinstance(rec, Reconstruction):
        raise FedleakError(f"evaluate needs a Reconstruction, got {type(rec).__name__}")
    if not isinstance(client, ClientData):
        raise FedleakError(f"evaluate needs ClientData, got {type(client).__name__}")


def evaluate_images(rec: Reconstruction, client: ClientData, spec: DataSpec, *,
                    threshold: float | None = None, clip: bool = True, match: bool = True,
                    lpips: bool | str | os.PathLike = False, iip_pool: torch.Tensor | None = None) -> dict:
    """:func:`fedleak.metrics.evaluate` for images (the image modality's metrics: the steps listed there)."""
    originals = _check_images(client.inputs, spec, f"client {client.client_id!r} inputs")
    recs = rec.inputs
    if isinstance(recs, torch.Tensor) and recs.dim() == 4 and tuple(recs.shape[1:]) != tuple(originals.shape[1:]):
        raise FedleakError(
            f"reconstruction inputs have per-image shape (C, H, W) = {tuple(recs.shape[1:])} but client "
            f"{client.client_id!r} inputs have {tuple(originals.shape[1:])}"
        )
    recs = _check_images(recs, spec, "reconstruction inputs")

    device = originals.device
    dtype = work_dtype(originals, recs)
    originals = originals.detach().to(dtype=dtype)
    recs = recs.detach().to(device=device, dtype=dtype)
    if not bool(torch.isfinite(originals).all()):
        raise FedleakError(f"client {client.client_id!r} inputs contain NaN or infinite values")
    bad = ~torch.isfinite(recs).flatten(1).all(dim=1)
    nan_inputs = int(bad.sum())
    if nan_inputs:
        recs = torch.where(bad.view(-1, 1, 1, 1), torch.zeros_like(recs), recs)

    lo, hi = (float(v) for v in spec.pixel_range)
    data_range = hi - lo
    if not data_range > 0:
        raise FedleakError(f"DataSpec pixel_range must be increasing, got {spec.pixel_range}")

    def to_pixels(x: torch.Tensor) -> torch.Tensor:
        u = spec.denormalize(x)
        return u.clamp(lo, hi) if clip else u

    orig_px = to_pixels(originals)
    rec_px = to_pixels(recs)
    mean_px = to_pixels(torch.zeros_like(originals[:1]))
    n, n_rec = orig_px.shape[0], rec_px.shape[0]

    assignment = match_by_psnr(rec_px, orig_px, data_range) if match else identity_assignment(n, n_rec)
    matched = torch.tensor([j is not None for j in assignment], device=device)
    # Partner of each original: its reconstruction, or the mean image (index n_rec) if unmatched.
    index = torch.tensor([n_rec if j is None else j for j in assignment], device=device)
    partner = torch.cat([rec_px, mean_px])[index]

    mse_i = mse(partner, orig_px)
    psnr_i = psnr(partner, orig_px, data_range)
    ssim_i = ssim(partner, orig_px, data_range)
    psnr_capped = psnr_i.clamp(-PSNR_CAP, PSNR_CAP)
    delta = default_threshold(spec) if threshold is None else float(threshold)
    if not (lpips is False or lpips is None or lpips is True or isinstance(lpips, (str, os.PathLike))):
        raise FedleakError(f"lpips must be False, True or a path to a weights file, got {lpips!r}")
    if not math.isfinite(delta):
        raise FedleakError(f"threshold must be a finite PSNR in dB, got {threshold}")
    recovered = matched & (psnr_i > delta)

    pool_px = None
    if iip_pool is not None:
        pool = _check_images(iip_pool, spec, "iip_pool images")
        pool = pool.detach().to(device=device, dtype=dtype)
        if not bool(torch.isfinite(pool).all()):
            raise FedleakError("iip_pool contains NaN or infinite values")
        pool_px = to_pixels(pool)
    iip_value = iip(rec_px, orig_px, pool_px, assignment)

    lpips_value = None
    lpips_note = None
    if lpips is True or isinstance(lpips, (str, os.PathLike)):
        weights = None if lpips is True else lpips
        to_unit = (lambda u: (u - lo) / data_range)
        distances, lpips_note = lpips_distance(to_unit(partner), to_unit(orig_px), weights)
        if distances is not None:
            lpips_value = _num(distances.mean())

    label_err = label_acc = None
    if rec.labels is not None:
        label_err = label_count_error(client.labels, rec.labels, spec.num_classes)
        label_acc = label_accuracy(client.labels, rec.labels, spec.num_classes)

    result = {
        "mse": _num(mse_i.mean()),
        "psnr": _num(psnr_capped.mean(), PSNR_CAP),
        "ssim": _num(ssim_i.mean()),
        "lpips": lpips_value,
    }
    if lpips_note is not None:
        result["lpips_note"] = lpips_note
    result.update({
        "iip": iip_value,
        "rec_percent": 100.0 * float(recovered.double().mean()),
        "threshold": delta,
        "label_count_error": label_err,
        "label_accuracy": label_acc,
        "num_inputs": n,
        "num_reconstructed": n_rec,
        "nan_inputs": nan_inputs,
        "clip": bool(clip),
        "match": bool(match),
        "psnr_per_input": [_num(v, PSNR_CAP) for v in psnr_capped.tolist()],
        "ssim_per_input": [_num(v) for v in ssim_i.tolist()],
        "assignment": [None if j is None else int(j) for j in assignment],
    })
    return result
