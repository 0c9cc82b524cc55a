"""Label metrics: label-count error and multiset label accuracy."""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import FedleakError


def label_counts(labels: Sequence[int] | torch.Tensor, num_classes: int, what: str = "labels") -> torch.Tensor:
    """Per-class counts ``(num_classes,)`` of integer labels.

    Accepts class indices ``(N,)`` (integer, or float with integral values) or per-sample class
    scores ``(N, num_classes)`` (one-hot, soft labels or logits; reduced with ``argmax``).
    """
    num_classes = int(num_classes)
    if num_classes < 1:
        raise FedleakError(f"num_classes must be positive, got {num_classes}")
    t = torch.as_tensor(labels).detach()
    if t.dim() == 2:
        if t.shape[1] != num_classes:
            raise FedleakError(
                f"{what}: per-class scores of shape {tuple(t.shape)} do not have {num_classes} classes"
            )
        t = t.argmax(dim=1)
    if t.dim() != 1:
        raise FedleakError(f"{what} must have shape (N,) or (N, num_classes), got {tuple(t.shape)}")
    if t.is_floating_point():
        if not bool(torch.isfinite(t).all()) or bool((t != t.round()).any()):
            raise FedleakError(f"{what} must be integral class indices")
    elif t.dtype == torch.bool or t.is_complex():
        raise FedleakError(f"{what} must be integral class indices, got dtype {t.dtype}")
    t = t.long()
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
        raise FedleakError(
            f"{what} out of range: values in [{int(t.min())}, {int(t.max())}], classes are 0..{num_classes - 1}"
        )
    return torch.bincount(t.cpu(), minlength=num_classes)


def label_count_error(true_labels, est_labels, num_classes: int) -> float:
    """Label-count error ``½ Σ_c |n_c − n̂_c|`` between true and estimated label multisets.

    The label error Dimitrov et al. report for RecLabels / Geng et al.'s count estimator (Table 2;
    ETH code ``flax_losses.py``): the number of mislabeled slots, i.e. how many labels must change
    to turn one multiset into the other when both have N elements.
    """
    a = label_counts(true_labels, num_classes, "true labels")
    b = label_counts(est_labels, num_classes, "estimated labels")
    return 0.5 * float((a - b).abs().sum())


def label_accuracy(true_labels, est_labels, num_classes: int) -> float:
    """Multiset overlap ``Σ_c min(n_c, n̂_c) / N`` (order-free; as breaching's ``count_integer_overlap``)."""
    a = label_counts(true_labels, num_classes, "true labels")
    b = label_counts(est_labels, num_classes, "estimated labels")
    n = int(a.sum())
    if n == 0:
        raise FedleakError("label_accuracy: no true labels")
    return float(torch.minimum(a, b).sum()) / n
