"""Verification of a text recovery: recompute the client's update from the recovered sequences (issue 27).

An exact attack's result is *proved* only when the update recomputed from what it recovered, through the one
client-update function (:func:`fedleak.fl.client.local_training`, the model's own loss), matches the update
that was sent within :data:`TOLERANCE` — the same meaning as SPEAR's and the row/bias ratio's
(:func:`fedleak.attacks.fc_exact.verify`). DAGER's span distances decide which tokens to try; they are not
the proof.

The loss also needs each sequence's label, which the span test never sees:

* **causal LM** — the target after the sequence (the next token of the stream, or none). Appending a token y
  to a sequence and leaving the new last position without a target gives exactly the loss of the sequence
  with label y (a causal model's earlier positions never attend to a later token), so the labels are read
  like DAGER's hidden final token (:func:`.final_token.recover_final`, one least-squares solve on the output
  embedding's gradient); "no target" where no class stands out. With the head frozen (LoRA) they are read
  through the adapters' gradient, on which the targets act through the head's rows
  (:func:`.frozen_head.read_targets`, FedSGD);
* **classification** — the class: the classifier's weight gradient is affine in the one-hot labels,
  G(y) − G(0) = Σₙ (e₀ − e_{yₙ}) hₙᵀ / N (hₙ the classifier's input), solved the same way.

FedSGD is compared on the gradient, FedAvg on θᶜ − θˢ computed by the same float32 steps as the client's (so
rounding of the weights does not count as a mismatch). The server does not know the client's batch order:
with several mini-batches per epoch the recomputation uses consecutive slices of the recovered order, and a
recovery in another order does not verify (reported, never proved). Dropout in the client's training (train
mode) cannot be recomputed either: the comparison is then made and fails, as it should.
"""

from __future__ import annotations

import torch
from torch import nn

from ...fl.client import local_training, sequential_schedule
from ...types import Update
from .probes import base_of, capture
from .final_token import output_embedding_name, recover_final
from .frozen_head import read_targets

#: the ceiling of the tolerance: a relative error at or above it never proves (float32: ~1e-6 reached)
TOLERANCE = 1e-3
#: the tolerance is this multiple of the recomputation's own float32 error (issue #42 item 6): a one-token change moves
#: the update by about 60/tokens (0.06 at 1,024 tokens, 6e-4 at 10^5: under the old fixed 1e-3), the float32 error
#: stays near 1e-7–1e-6, so 100× it keeps a true recovery (the client's float32 order differs from ours) and rejects
#: one wrong token up to ~10^6 tokens
FLOAT_MARGIN = 100.0
IGNORE = -100


def _gradient(model: nn.Module, update: Update, ids: torch.Tensor, labels: torch.Tensor) -> dict:
    """The summed gradient of the client's steps for ``ids`` and ``labels`` (the label-reading solves use it)."""
    if not hasattr(model, "loss_fn"):  # a bare transformers model (unit tests): its own loss, one step
        from .common import simulate

        return simulate(model, update, ids, labels)
    params = {k: v.detach() for k, v in update.server_params.items()}
    schedule = sequential_schedule(ids.shape[0], update.protocol)
    return local_training(model, params, ids, labels, schedule, update.protocol.lr, loss_fn=model.loss_fn,
                          train_mode=False).grad_sum


def _recompute(model: nn.Module, update: Update, ids: torch.Tensor, labels: torch.Tensor) -> dict:
    """The update (gradient for FedSGD, θᶜ − θˢ for FedAvg) the client would send for ``ids`` and ``labels``."""
    if not hasattr(model, "loss_fn"):
        grads = _gradient(model, update, ids, labels)
        return grads if update.is_fedsgd else {k: -update.protocol.lr * g for k, g in grads.items()}
    params = {k: v.detach() for k, v in update.server_params.items()}
    schedule = sequential_schedule(ids.shape[0], update.protocol)
    result = local_training(model, params, ids, labels, schedule, update.protocol.lr, loss_fn=model.loss_fn,
                            buffers=update.buffers, train_mode=update.protocol.train_mode)
    if update.is_fedsgd:
        return result.grad_sum
    return {k: result.params[k] - params[k] for k in params}


def _observed(update: Update) -> dict:
    if update.is_fedsgd:
        return update.gradient
    return {k: update.client_params[k] - update.server_params[k] for k in update.server_params}


def relative_error(model: nn.Module, update: Update, ids: torch.Tensor, labels: torch.Tensor) -> float:
    """‖recomputed − sent‖ / ‖sent‖ over every parameter of the update."""
    rec, obs = _recompute(model, update, ids, labels), _observed(update)
    names = [k for k in obs if k in rec]
    a = torch.cat([rec[k].reshape(-1).double() for k in names])
    b = torch.cat([obs[k].reshape(-1).double() for k in names])
    den = float(b.norm())
    return float((a - b).norm()) / den if den > 0 else float("inf")


def float_error(model: nn.Module, update: Update, ids: torch.Tensor, labels: torch.Tensor) -> float:
    """The recomputation's own float32 error: ‖U₃₂ − U₆₄‖ / ‖U₆₄‖ between the update recomputed in float32 and in
    float64 from the same sequences and labels (the model is switched to float64 and back)."""
    import dataclasses

    dtypes = {n: p.dtype for n, p in model.named_parameters()} | {n: b.dtype for n, b in model.named_buffers()}
    r32 = _recompute(model, update, ids, labels)
    wide = dataclasses.replace(
        update, server_params={k: v.double() for k, v in update.server_params.items()},
        buffers={k: (v.double() if v.is_floating_point() else v) for k, v in (update.buffers or {}).items()})
    try:
        r64 = _recompute(model.double(), wide, ids, labels)
    finally:
        for n, p in model.named_parameters():
            p.data = p.data.to(dtypes[n])
        for n, b in model.named_buffers():
            b.data = b.data.to(dtypes[n])
    names = [k for k in r64 if k in r32]
    a = torch.cat([r32[k].reshape(-1).double() for k in names])
    b = torch.cat([r64[k].reshape(-1).double() for k in names])
    den = float(b.norm())
    return float((a - b).norm()) / den if den > 0 else 0.0


def derived_tolerance(error: float, ceiling: float = TOLERANCE) -> float:
    """:data:`FLOAT_MARGIN` × the recomputation's float error, at most ``ceiling`` (and above 0)."""
    return min(ceiling, max(FLOAT_MARGIN * error, 1e-12))


def _classifier(model: nn.Module, gradient: dict, classes: int):
    """``(name of its weight, module)`` of the last linear layer with ``classes`` outputs that the update trains."""
    names = {id(p): n for n, p in model.named_parameters()}
    found = None
    for module in base_of(model).modules():
        if isinstance(module, nn.Linear) and module.out_features == classes and names.get(id(module.weight)) in gradient:
            found = (names[id(module.weight)], module)
    return found


def _labels_from_head(model, update: Update, ids: torch.Tensor, classes: int):
    """Classification labels from the classifier's weight gradient (one least-squares solve)."""
    gradient = update.pseudo_gradient()
    head = _classifier(model, gradient, classes)
    if head is None:
        return None, "the classifier has no gradient in this update (frozen), so the labels are not observable"
    name, module = head
    zeros = torch.zeros(ids.shape[0], dtype=torch.long)
    residual = gradient[name].double() - _gradient(model, update, ids, zeros)[name].double()
    hidden = capture(model, update.server_params, ids, module).double()
    if hidden.dim() == 3:  # a decoder's score head sees every position; the logits are read at the last token
        pad = getattr(base_of(model).config, "pad_token_id", None)
        real = (ids != pad) if pad is not None else torch.ones_like(ids, dtype=torch.bool)
        last = (real.long().cumsum(1).argmax(1))
        hidden = hidden[torch.arange(ids.shape[0]), last.to(hidden.device)]
    coeff = residual @ torch.linalg.pinv(hidden)  # (C, N): column n ≈ (e_0 − e_{y_n}) / N (hidden: N × d)
    scale = float(coeff.abs().max()) or 1.0
    low, arg = coeff.min(0)
    return torch.where(low < -0.5 * scale, arg, torch.zeros_like(arg)).cpu(), None


def _labels_after(model, update: Update, ids: torch.Tensor):
    """Causal-LM labels (the target after each sequence) by :func:`recover_final` on the sequence + one token."""
    gradient = update.pseudo_gradient()
    if output_embedding_name(model, gradient) is None:  # frozen head (LoRA): read through the adapters
        if not hasattr(model, "loss_terms"):
            return None, "the output embedding has no gradient in this update, so the targets are not observable"
        rates = model.dropout_rates() if hasattr(model, "dropout_rates") else {}
        if rates and update.protocol.train_mode:  # the recomputation cannot match without the client's masks
            return None, ("the client trained with dropout on: without its masks the update cannot be recomputed, "
                          "so the targets after the sequences are not read through the adapters")
        return read_targets(model, update, ids, lambda x, y: _gradient(model, update, x, y), model.loss_terms)
    vocab = int(base_of(model).config.vocab_size)
    used = set(ids.reshape(-1).tolist())
    pad = getattr(model, "pad_id", None)
    dummy = next(v for v in range(vocab) if v not in used and v != pad)

    def simulate(longer):
        return _gradient(model, update, longer, torch.full((longer.shape[0],), IGNORE, dtype=torch.long))

    finals, _ = recover_final(model, update.server_params, gradient, ids, simulate, dummy)
    return torch.where(finals == dummy, torch.full_like(finals, IGNORE), finals), None


def verify(model: nn.Module, update: Update, ids: torch.Tensor, classes: int, tolerance: float = TOLERANCE) -> dict:
    """Recompute the update from recovered ``ids`` (N, L) and the labels read from the update; compare.

    Returns ``{"matches", "relative_error", "tolerance", "labels", "note"}``; ``matches`` only when all N sequences
    were recovered and the recomputed update matches within ``tolerance``. Candidate labels: those read from
    the update, and the label-free ones (no target / class 0); the better match counts.
    """
    ids = ids.long()
    out = {"matches": False, "relative_error": None, "tolerance": tolerance, "labels": None,
           "method": "update recomputed through fedleak.fl.client.local_training from the recovered sequences"}
    if ids.shape[0] != update.num_samples or ids.numel() == 0:
        out["note"] = f"{ids.shape[0]} of {update.num_samples} sequences recovered: nothing complete to recompute"
        return out
    from .common import task_of

    causal = task_of(model) == "causal-lm"
    read, note = (_labels_after(model, update, ids) if causal else _labels_from_head(model, update, ids, classes))
    plain = torch.full((ids.shape[0],), IGNORE if causal else 0, dtype=torch.long)
    candidates = [c for c in (read, plain) if c is not None]
    errors = [relative_error(model, update, ids, c) for c in candidates]
    best = min(range(len(errors)), key=errors.__getitem__)
    out.update({"relative_error": errors[best], "labels": candidates[best].tolist(), "matches": False})
    if errors[best] < tolerance:  # below the ceiling: the tolerance this recomputation's float error allows
        noise = float_error(model, update, ids, candidates[best])
        out.update({"float_error": noise, "tolerance": derived_tolerance(noise, tolerance),
                    "tolerance_rule": f"{FLOAT_MARGIN:g} × the float32 recomputation's error against float64, at "
                                      f"most {tolerance:g}"})
        out["matches"] = bool(errors[best] < out["tolerance"])
    if note:
        out["note"] = note
    return out
