"""Per-example gradients: the one path (``torch.func.vmap(grad(...))`` with a per-example fallback) shared by
the defended client step (:mod:`.client`, DP-SGD-style per-example defenses, Dimitrov et al. App. A.10) and the
inspector's D-SNR (:mod:`.dsnr`, Garov et al. SEER §3)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ..types import Params


def per_example_gradients(model: nn.Module, params: Params, buffers: Params, x: torch.Tensor, y: torch.Tensor,
                          loss_fn: Callable) -> Params:
    """name -> (B, *shape): the gradient of ``loss_fn`` on each example alone, at ``params``.

    ``torch.func.vmap(grad(...))`` over the batch; models that vmap cannot trace (data-dependent
    control flow, e.g. BERT's attention-mask checks, or BatchNorm in train mode on a batch of one)
    fall back to one ``grad`` per example, which gives the same values. Used by the defended client
    step (DP-SGD style per-example defenses) and by the inspector's D-SNR (:mod:`fedleak.fl.dsnr`)."""
    detached = {k: v.detach() for k, v in params.items()}

    def single_loss(p, xi, yi):  # buffers copied: BatchNorm in train mode updates them in place
        logits = functional_call(model, {**p, **{k: b.clone() for k, b in buffers.items()}}, (xi.unsqueeze(0),))
        return loss_fn(logits, yi.unsqueeze(0))

    try:
        return vmap(grad(single_loss), in_dims=(None, 0, 0))(detached, x, y)
    except RuntimeError as exc:
        if "vmap" not in str(exc) and "functorch" not in str(exc):
            raise
        return _per_example_loop(single_loss, detached, x, y)


def _per_example_loop(single_loss, params: Params, x, y) -> Params:
    """Per-example gradients one example at a time (the same values as vmap, for models vmap cannot trace)."""
    rows = [grad(single_loss)(params, x[i], y[i]) for i in range(x.shape[0])]
    return {k: torch.stack([r[k] for r in rows]) for k in params}
