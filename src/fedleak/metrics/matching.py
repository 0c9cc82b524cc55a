"""Pairing reconstructions with originals, Rec% at a PSNR threshold, and IIP."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ..errors import FedleakError
from .pixel import PSNR_CAP, _batched, psnr_matrix, work_dtype

Assignment = list[Optional[int]]


def identity_assignment(num_originals: int, num_reconstructions: int) -> Assignment:
    """Reconstruction ``i`` for original ``i`` (no matching); originals beyond N' get ``None``."""
    return [i if i < num_reconstructions else None for i in range(num_originals)]


def match_by_psnr(recs: torch.Tensor, originals: torch.Tensor, data_range: float = 1.0) -> Assignment:
    """Pair reconstructions with originals so the total PSNR is largest (Dimitrov et al., App. A.8).

    Solves ``scipy.optimize.linear_sum_assignment`` on the cost ``−PSNR(original_i, rec_j)``
    (pixel space, ``data_range`` peak; ``+inf`` capped at :data:`PSNR_CAP`). With N originals and
    N' reconstructions, ``min(N, N')`` pairs are formed; every reconstruction is used at most once.

    Returns, for each original in order, the index of its reconstruction or ``None`` when
    N' < N left it unmatched. Inputs must be finite (``evaluate`` replaces NaN reconstructions
    by the mean image first).
    """
    from scipy.optimize import linear_sum_assignment

    recs, _ = _batched(recs, "match_by_psnr: reconstructions")
    originals, _ = _batched(originals, "match_by_psnr: originals")
    for name, t in (("reconstructions", recs), ("originals", originals)):
        if not bool(torch.isfinite(t).all()):
            raise FedleakError(f"match_by_psnr: {name} contain NaN or infinite values")
    n = originals.shape[0]
    if n == 0 or recs.shape[0] == 0:
        return [None] * n
    p = psnr_matrix(originals, recs, data_range).clamp(-PSNR_CAP, PSNR_CAP)
    rows, cols = linear_sum_assignment((-p).double().cpu().numpy())
    assignment: Assignment = [None] * n
    for r, c in zip(rows.tolist(), cols.tolist()):
        assignment[r] = c
    return assignment


def rec_percent(psnr_per_input: Sequence[float] | torch.Tensor, threshold: float,
                matched: Sequence[bool] | torch.Tensor | None = None) -> float:
    """"Recovered %" (Dimitrov et al., App. A.8): percent of originals whose matched reconstruction
    has PSNR strictly above ``threshold`` δ (20 dB on FEMNIST, 19 dB on CIFAR100 in the paper).

    ``matched`` (one flag per original) marks originals that have a reconstruction at all; the
    others never count as recovered, whatever their PSNR against the stand-in image.
    """
    values = torch.as_tensor(psnr_per_input, dtype=torch.float64).flatten()
    if values.numel() == 0:
        raise FedleakError("rec_percent: no PSNR values given")
    hit = values > float(threshold)
    if matched is not None:
        mask = torch.as_tensor(matched, dtype=torch.bool, device=values.device).flatten()
        if mask.numel() != values.numel():
            raise FedleakError(
                f"rec_percent: {mask.numel()} matched flags for {values.numel()} PSNR values"
            )
        hit = hit & mask
    return 100.0 * float(hit.double().mean())


def iip(recs: torch.Tensor, originals: torch.Tensor, pool: torch.Tensor | None = None,
        assignment: Assignment | None = None) -> float:
    """Image identifiability precision (Yin et al. 2021, "See through gradients", CVPR), pixel L2.

    For each original ``i`` with a reconstruction ``r = recs[assignment[i]]``: ``i`` is identified
    when, among the candidates ``originals ∪ pool``, original ``i`` is a nearest neighbour of ``r``
    in pixel-space L2 distance (ties count as identified, so duplicate images do not penalize).
    Returns identified / N; originals without a reconstruction are not identified.

    ``assignment`` defaults to pairing reconstruction ``i`` with original ``i``. All images are
    in pixel space. Breaching restricts candidates to the dataset images of the same label; here
    the candidate set is the client's own data plus the optional ``pool``.
    """
    recs, _ = _batched(recs, "iip: reconstructions")
    originals, _ = _batched(originals, "iip: originals")
    if recs.shape[1:] != originals.shape[1:]:
        raise FedleakError(
            f"iip: reconstruction shape {tuple(recs.shape[1:])} differs from originals {tuple(originals.shape[1:])}"
        )
    n = originals.shape[0]
    if n == 0:
        raise FedleakError("iip: no originals")
    if assignment is None:
        assignment = identity_assignment(n, recs.shape[0])
    if len(assignment) != n:
        raise FedleakError(f"iip: assignment has {len(assignment)} entries for {n} originals")
    dtype = work_dtype(recs, originals)
    device = originals.device
    candidates = originals.detach().to(dtype=dtype)
    if pool is not None:
        pool, _ = _batched(pool, "iip: pool")
        if pool.shape[1:] != originals.shape[1:]:
            raise FedleakError(
                f"iip: pool images have shape {tuple(pool.shape[1:])}, originals {tuple(originals.shape[1:])}"
            )
        candidates = torch.cat([candidates, pool.detach().to(device=device, dtype=dtype)])
    matched = [i for i, j in enumerate(assignment) if j is not None]
    if not matched:
        return 0.0
    chosen = torch.as_tensor([assignment[i] for i in matched], device=recs.device)
    r = recs.detach()[chosen].to(device=device, dtype=dtype)
    # Direct differences, not the |x|²+|y|²−2xy expansion: equal images get exactly equal distances.
    d = torch.cdist(r.flatten(1), candidates.flatten(1), compute_mode="donot_use_mm_for_euclid_dist")
    own = d[torch.arange(len(matched), device=device), torch.as_tensor(matched, device=device)]
    identified = own <= d.min(dim=1).values
    return float(identified.sum()) / n
