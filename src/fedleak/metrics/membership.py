"""Membership-inference scores: ROC curve, AUC and the true-positive rate at a low false-positive rate.

Carlini et al. ("Membership inference attacks from first principles", S&P 2022, §III) argue that a
membership attack is judged by its TPR at a low FPR (1 %, 0.1 %), not by its average accuracy; we
report both with the AUC. Scores are "higher = more likely a member"; ties are handled by
thresholding at each distinct score (the empirical ROC). With ``n`` non-members the smallest FPR
that can be resolved is 1/n: :func:`membership_metrics` says so (``fpr_resolution``), and a TPR at
an FPR below it is the TPR at FPR 0 (no non-member above the threshold) — a lower bound of the rate
at that FPR, never an extrapolation. The AUC comes with DeLong's 95 % interval (:func:`auc_interval`).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import FedleakError


def roc_curve(scores: Sequence[float], members: Sequence[bool]) -> tuple[list[float], list[float]]:
    """``(fpr, tpr)`` of the threshold test "score ≥ t" over every distinct score, from (0, 0) to (1, 1)."""
    s = torch.as_tensor(list(scores), dtype=torch.float64)
    m = torch.as_tensor(list(members), dtype=torch.bool)
    if s.dim() != 1 or s.numel() != m.numel():
        raise FedleakError(f"membership scores and labels must be two equal-length lists, got {s.numel()} and "
                           f"{m.numel()}")
    if not bool(torch.isfinite(s).all()):
        raise FedleakError("membership scores must be finite")
    pos, neg = int(m.sum()), int((~m).sum())
    if pos == 0 or neg == 0:
        raise FedleakError(f"a ROC curve needs members and non-members, got {pos} and {neg}")
    fpr, tpr = [0.0], [0.0]
    for t in torch.unique(s).flip(0).tolist():
        above = s >= t
        fpr.append(int((above & ~m).sum()) / neg)
        tpr.append(int((above & m).sum()) / pos)
    return fpr, tpr


def auc(fpr: Sequence[float], tpr: Sequence[float]) -> float:
    """Area under the ROC curve (trapezoids; 0.5 is chance, 1 perfect separation)."""
    return float(sum((fpr[i] - fpr[i - 1]) * (tpr[i] + tpr[i - 1]) / 2 for i in range(1, len(fpr))))


def tpr_at_fpr(fpr: Sequence[float], tpr: Sequence[float], target: float) -> float:
    """The largest TPR among thresholds whose FPR is at most ``target``."""
    return float(max(t for f, t in zip(fpr, tpr) if f <= target + 1e-12))


def auc_interval(scores: Sequence[float], members: Sequence[bool], level: float = 0.95) -> tuple[float, float]:
    """DeLong's confidence interval of the AUC (DeLong, DeLong & Clarke-Pearson, Biometrics 1988): the AUC is the
    Mann–Whitney mean of ψ(member score, non-member score) (1 above, ½ tied, 0 below); its variance is
    S₁₀/m + S₀₁/n from the per-member and per-non-member means of ψ; the interval is AUC ± z·√var (normal
    approximation), clipped to [0, 1]."""
    s = torch.as_tensor(list(scores), dtype=torch.float64)
    m = torch.as_tensor(list(members), dtype=torch.bool)
    x, y = s[m], s[~m]
    if x.numel() < 2 or y.numel() < 2:
        raise FedleakError(f"an AUC interval needs at least 2 members and 2 non-members, got {x.numel()} and "
                           f"{y.numel()}")
    psi = (x[:, None] > y[None, :]).double() + 0.5 * (x[:, None] == y[None, :]).double()
    area = float(psi.mean())
    v10, v01 = psi.mean(1), psi.mean(0)
    var = float(v10.var() / x.numel() + v01.var() / y.numel())
    z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + level / 2, dtype=torch.float64)))
    half = z * var ** 0.5
    return max(0.0, area - half), min(1.0, area + half)


def membership_metrics(scores: Sequence[float], members: Sequence[bool]) -> dict:
    """``{auc, auc_ci95 (DeLong), tpr_at_1pct_fpr, tpr_at_0.1pct_fpr, members, non_members, fpr_resolution,
    roc}``."""
    fpr, tpr = roc_curve(scores, members)
    neg = sum(1 for m in members if not m)
    pos = len(list(members)) - neg
    ci = list(auc_interval(scores, members)) if min(pos, neg) >= 2 else None
    return {"auc": auc(fpr, tpr), "auc_ci95": ci, "tpr_at_1pct_fpr": tpr_at_fpr(fpr, tpr, 0.01),
            "tpr_at_0.1pct_fpr": tpr_at_fpr(fpr, tpr, 0.001), "members": sum(1 for m in members if m),
            "non_members": neg, "fpr_resolution": 1.0 / neg, "roc": {"fpr": fpr, "tpr": tpr}}
