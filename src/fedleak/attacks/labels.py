"""Label and label-count inference from an update's last linear layer.

* :func:`idlg_label` — iDLG (Zhao et al. 2020): for one sample under cross-entropy the true
  class is the only row of the last layer's weight gradient with a negative sum (features after
  ReLU/sigmoid are non-negative); for FedAvg the pseudo-gradient Ĝ = (θˢ−θᶜ)/η keeps that sign.
* :func:`yin_labels` — Yin et al. 2021 (GradInversion): the N classes with the most negative
  per-row minimum; assumes distinct labels.

Label *counts* (Geng et al., Dimitrov et al.'s RecLabels) build on :func:`head_statistics`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.func import functional_call

from ..errors import FedleakError
from ..params import last_linear, weight_and_bias
from ..types import Params, Update


def _head_gradient(update: Update, model: nn.Module) -> torch.Tensor:
    weight_name, _ = weight_and_bias(last_linear(model))
    return update.pseudo_gradient()[weight_name]


def idlg_label(update: Update, model: nn.Module) -> torch.Tensor:
    """The single label of a batch of one (iDLG). Returns a (1,) long tensor."""
    grad = _head_gradient(update, model)
    return grad.sum(dim=-1).argmin().reshape(1)


def yin_labels(update: Update, model: nn.Module, num: Optional[int] = None) -> torch.Tensor:
    """N distinct labels ordered by the most negative row minimum (Yin et al. 2021, §3.1)."""
    grad = _head_gradient(update, model)
    num = update.num_samples if num is None else num
    if num > grad.shape[0]:
        raise FedleakError(f"Yin et al.'s rule gives distinct labels only; {num} samples but {grad.shape[0]} classes")
    return grad.min(dim=-1).values.argsort()[:num].sort().values


def head_statistics(model: nn.Module, params: Params, buffers: Params, inputs: torch.Tensor,
                    train_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean softmax p̄ (C,) and mean summed penultimate activation Ō (scalar) over ``inputs``.

    The penultimate features O are the input of the last linear layer (Geng et al.; research
    note §A.6 step 2), captured with a forward hook.
    """
    head = dict(model.named_modules())[last_linear(model).module]
    captured: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, _out: captured.append(args[0]))
    previous = model.training
    model.train(train_mode)
    try:
        with torch.no_grad():
            logits = functional_call(model, {**params, **buffers}, (inputs,))
    finally:
        hook.remove()
        model.train(previous)
    features = captured[-1].flatten(1)
    return torch.softmax(logits, dim=-1).mean(0), features.sum(1).mean()


LABEL_STRATEGIES = ("known", "idlg", "yin", "reclabels", "optimize")


def known_labels(update: Update, num_classes: int) -> torch.Tensor:
    """Labels the threat model lets the server know, from ``update.metadata``.

    ``metadata["labels"]`` (a label list) or ``metadata["label_counts"]`` (per-class counts,
    expanded sorted by class as in Dimitrov et al. §A.4). The experiment runner sets them only
    for settings with known labels (e.g. Dimitrov et al. Table 1); attacks never see the data.
    """
    meta = update.metadata
    if meta.get("labels") is not None:
        return torch.as_tensor(meta["labels"], dtype=torch.long)
    if meta.get("label_counts") is not None:
        counts = torch.as_tensor(meta["label_counts"], dtype=torch.long)
        if counts.numel() != num_classes or int(counts.sum()) != update.num_samples:
            raise FedleakError(f"label_counts in the update metadata must have {num_classes} entries summing to "
                               f"N={update.num_samples}")
        return counts_to_labels(counts)
    raise FedleakError("labels='known' needs the update's metadata to carry 'labels' or 'label_counts' "
                       "(a threat model where the server knows them); use labels='reclabels' to infer them")


def counts_to_labels(counts: torch.Tensor) -> torch.Tensor:
    """Class indices in ascending order, each repeated n_c times (research note §A.6 step 6)."""
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts.long())


def labels_to_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    return torch.bincount(labels.long().flatten(), minlength=num_classes)


def resolve_labels(strategy: str, update: Update, model: nn.Module, num_classes: int,
                   **options) -> Optional[torch.Tensor]:
    """Labels for the attack under ``strategy``; ``None`` means optimize them jointly (DLG)."""
    if strategy == "optimize":
        return None
    if strategy == "known":
        labels = known_labels(update, num_classes)
    elif strategy == "idlg":
        if update.num_samples != 1:
            raise FedleakError(f"iDLG's analytic label needs one sample, the update has N={update.num_samples}; "
                               "use labels='reclabels' or 'yin'")
        labels = idlg_label(update, model)
    elif strategy == "yin":
        labels = yin_labels(update, model)
    elif strategy == "reclabels":
        labels = counts_to_labels(reclabels(update, model, **options))  # noqa: F821 (defined below)
    else:
        raise FedleakError(f"unknown label strategy {strategy!r}; allowed: {', '.join(LABEL_STRATEGIES)}")
    first = next(iter(update.server_params.values()))
    return labels.to(first.device)
