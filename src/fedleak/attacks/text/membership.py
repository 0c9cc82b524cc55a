"""Membership of candidate documents in a client's update: the update fitted on the candidates' gradients jointly.

The honest server holds candidate documents (token sequences) and one client's update; some
candidates were in the client's data. A client update is a sum of per-step minibatch mean
gradients, Δ/η = Σₜ (1/|bₜ|) Σ_{i∈bₜ} ∇ℓ(xᵢ; θₜ), so a member's own gradient ∇ℓ(x; θˢ) is one term
of it (θₜ ≈ θˢ at a small client lr), with coefficient 1/|b| per step that saw it; a non-member's is not.

The score of a candidate is its coefficient in the least-squares fit of the update's pseudo-gradient on
all M candidates' gradients at once, β = (GGᵀ)⁻¹GΔ (G: M × P), the normal equations of Δ ≈ Σᵢ βᵢgᵢ. A
member's coefficient estimates its share of the update, a non-member's estimates 0; the client's other
documents, which the server does not hold, enter only through their projection on the candidates'
gradients. The fit is what the alignment statistic of gradient membership tests (the cosine between one
candidate's gradient and the update: Nasr, Shokri, Houmansadr, S&P 2019, §IV, white-box gradients; the
canary statistic of Andrew et al., ICLR 2024) becomes when the candidates are scored together. Texts share
most of their gradient (common tokens, the language model's general loss slope), so one cosine at a time
is dominated by what every candidate has; the joint fit assigns that shared part to the members that
carry it. On SmolLM2 at FlowerTune's CPU shape (16 × 64 tokens, 10 local steps, LoRA r 32, dropout 0.075)
the cosine was near chance where the fit separated members (``benchmarks/results/llm_flowertune.json``
records both). The centred cosine (minus the candidates' mean gradient) and the raw cosine are kept beside it.

A candidate's gradient is, for LoRA adapters, their closed form from one batched backward
(:mod:`.lora_grads`: the same values as per-example autograd); otherwise it is computed by the client's own
functions (its per-example gradients, :func:`fedleak.fl.client.per_example_gradients`, for the language-model
wrappers; else
:func:`fedleak.fl.client.local_training`, one step on that document alone), in eval mode: the server
does not know the client's dropout masks, so it uses the expected network. Only the trainable
parameters count (the LoRA adapters under LoRA, as the update carries). When the stored candidate
gradients would exceed :data:`EXACT_LIMIT` floats they are compressed by a seeded random-sign
sketch to :data:`SKETCH_DIM` coordinates, which preserves inner products in expectation.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch
from torch import nn

from ...errors import FedleakError
from ...types import Update

EXACT_LIMIT = 250_000_000
SKETCH_DIM = 1 << 16
#: candidates a pass of per-example gradients
CHUNK = 16

#: the membership attacks of the text audit (``fedleak attacks`` lists them; each scores candidate documents)
MEMBERSHIP_ATTACKS = {
    "projres": "ProjRes (Deng et al., S&P 2026): projection residual of a candidate's hidden embeddings on each "
               "layer's update row subspace (LoRA A or linear weights); one forward pass per candidate",
    "joint-fit": "the update fitted on all candidates' gradients jointly (least squares; the coefficient is the score, "
                 "Nasr et al. S&P 2019's alignment scored together); one gradient per candidate",
    "adam-fit": "the joint fit in the client's AdamW metric (each coordinate scaled by AdamW's linearised step "
                "1/sqrt(mu^2 + sigma^2/b), from the candidates); one gradient per candidate",
}


class _Sketch:
    """x ↦ Σ over chunks of (signs ⊙ x) reshaped to (·, D): a random-sign count sketch with a fixed seed."""

    def __init__(self, numel: int, dim: int, seed: int) -> None:
        self.dim = dim
        self.pad = (-numel) % dim
        g = torch.Generator().manual_seed(seed)
        self.signs = (torch.randint(0, 2, (numel + self.pad,), generator=g, dtype=torch.int8) * 2 - 1)

    def __call__(self, flat: torch.Tensor) -> torch.Tensor:
        x = torch.cat([flat, flat.new_zeros(self.pad)]) * self.signs.to(flat.dtype)
        return x.view(-1, self.dim).sum(0)


def _flat(params: dict, names: list) -> torch.Tensor:
    return torch.cat([params[k].detach().reshape(-1).float() for k in names])


def candidate_gradients(model: nn.Module, update: Update, ids: torch.Tensor, labels: Optional[torch.Tensor] = None,
                        *, names: Optional[list] = None, transform: Optional[Callable] = None,
                        progress: Optional[Callable[[int, int], None]] = None) -> torch.Tensor:
    """(M, P) flattened gradients of each candidate sequence alone at θˢ (eval mode, the model's loss): LoRA adapters
    in closed form (:func:`.lora_grads.lora_gradients`), else by the client's per-example gradients (:func:`fedleak.fl.client.per_example_gradients`, :data:`CHUNK` candidates
    a pass) for the language-model wrappers, else one client step per candidate (the same values)."""
    from ...fl.client import local_training, per_example_gradients
    from .common import labels_for
    from .lora_grads import is_lora, lora_gradients

    names = names if names is not None else list(update.server_params)
    params = {k: v.detach() for k, v in update.server_params.items()}
    labels = labels_for(model, ids, labels)
    loss_fn = getattr(model, "loss_fn", None)
    rows = []
    if callable(loss_fn) and is_lora(names):  # closed form from one batched backward (the same values)
        buffers = {k: v.detach() for k, v in (getattr(update, "buffers", None) or {}).items()}
        return lora_gradients(model, params, buffers, ids, labels, names, transform=transform, progress=progress)
    if callable(loss_fn):
        buffers = {k: v.detach() for k, v in (getattr(update, "buffers", None) or {}).items()}
        previous = model.training
        model.eval()
        try:
            for first in range(0, ids.shape[0], CHUNK):
                part = per_example_gradients(model, params, buffers, ids[first:first + CHUNK],
                                             labels[first:first + CHUNK], loss_fn)
                flat = torch.cat([part[k].detach().reshape(part[k].shape[0], -1).float() for k in names], 1)
                rows.extend(transform(row) if transform is not None else row for row in flat)
                if progress is not None:
                    progress(min(first + CHUNK, ids.shape[0]), ids.shape[0])
        finally:
            model.train(previous)
        return torch.stack(rows)
    for i in range(ids.shape[0]):
        result = local_training(model, params, ids[i:i + 1], labels[i:i + 1], [[torch.tensor([0])]], 1.0,
                                loss_fn=loss_fn, train_mode=False)
        flat = _flat(result.grad_sum, names)
        rows.append(transform(flat) if transform is not None else flat)
        if progress is not None:
            progress(i + 1, ids.shape[0])
    return torch.stack(rows)


def _cosines(grads: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (grads @ target) / (grads.norm(dim=1) * target.norm()).clamp_min(1e-30)


def joint_fit(grads: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """β minimizing ‖target − Σᵢ βᵢ gradsᵢ‖ (float64 normal equations; a relative ridge of 1e-9 keeps duplicate
    candidates solvable, splitting their share)."""
    g = grads.double()
    gram = g @ g.T
    ridge = 1e-9 * float(gram.diagonal().mean().clamp_min(1e-300))
    return torch.linalg.solve(gram + ridge * torch.eye(gram.shape[0], dtype=gram.dtype), g @ target.double())


def membership_scores(model: nn.Module, update: Update, ids: torch.Tensor, labels: Optional[torch.Tensor] = None, *,
                     seed: int = 0, progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """``{scores (the joint fit's coefficients), cosine (centred), raw, seconds, parameters, sketched}`` for the
    candidates ``ids`` (M, L)."""
    if ids.dim() != 2 or ids.shape[0] < 2:
        raise FedleakError(f"membership needs at least 2 candidate sequences (M, L), got {tuple(ids.shape)}")
    start = time.perf_counter()
    target = update.pseudo_gradient()
    names = list(update.server_params)
    numel = sum(update.server_params[k].numel() for k in names)
    sketch = _Sketch(numel, SKETCH_DIM, seed) if numel * (ids.shape[0] + 1) > EXACT_LIMIT else None
    delta = _flat(target, names)
    if sketch is not None:
        delta = sketch(delta)
    grads = candidate_gradients(model, update, ids.long(), labels, names=names, transform=sketch, progress=progress)
    raw = _cosines(grads, delta)
    centered = _cosines(grads - grads.mean(0, keepdim=True), delta)
    fit = joint_fit(grads, delta)
    return {"scores": fit.tolist(), "cosine": centered.tolist(), "raw": raw.tolist(),
            "seconds": time.perf_counter() - start, "parameters": int(numel), "sketched": sketch is not None,
            "statistic": "coefficient of the candidate's gradient (at the server's weights) in the least-squares fit "
                         "of the update's pseudo-gradient on all candidates' gradients jointly"}
