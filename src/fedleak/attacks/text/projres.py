"""ProjRes: membership of candidate documents from the projection residual of their hidden embeddings.

Deng et al., "ProjRes" (IEEE S&P 2026, arXiv 2604.21197): a passive honest-server membership attack on
a federated language model's update — no shadow model, no auxiliary classifier, no history. A linear
layer Y = X Wᵀ (X: the layer's input rows, one per token) has the weight gradient ∇W = ∇Yᵀ X, so every
row of ∇W is a combination of the step's input rows: the *row subspace* of ∇W holds the hidden
embeddings of the tokens that were trained on. A member's embeddings at that layer (computed by the
server at its own weights θˢ) lie in or near that subspace, a non-member's do not; the score of a
candidate is its projection residual ‖x − Π x‖ / ‖x‖ (mean log over its tokens and the layers), low
for members. A LoRA adapter's A (r × d) receives Bᵀ∇Yᵀ X: its update's row subspace (rank ≤ r) is again
spanned by input rows, so the same test reads the adapter update the server receives.

What is measured here (the paper's idea, our instance — stated so a reviewer can check it):

* the subspace of each layer is the row space of the layer's *update* the server receives (the
  pseudo-gradient θˢ − θᶜ of FedAvg, or the FedSGD gradient), restricted to the directions above its
  numerical floor (:func:`~.spans.gap_rank`, the rank DAGER uses); under AdamW (FlowerTune's client)
  the update is an elementwise-normalised sum of gradients, whose rows are no longer exact input
  combinations — the residual then measures closeness, not membership in the span;
* where the update has full row rank (more distinct tokens than the layer width, e.g. full fine-tuning
  of 10 steps × 16 × 64 tokens) the row space is the whole input space and every residual is 0: the
  test is then run on the top-k right singular directions, k = :data:`FULL_RANK_SHARE` of the width, so
  it is still a test of closeness to the update's dominant input directions (said in ``subspace``);
* embeddings are taken after subtracting the candidates' mean embedding at that layer (every text
  shares a large common component — the massive activations of a decoder's residual stream — that
  lies near any update's subspace and is no evidence of membership) and whitened by their covariance
  (:func:`_inverse_sqrt`: the test runs in the metric where a member's own contribution to the update
  stands out of the other tokens'), both estimated from a seeded sample of :data:`STATS_SAMPLE`
  candidates (no label is used); ``centred=False`` / ``whiten=False`` keep them raw;
* the per-layer score is the mean over the candidate's tokens of log residual; layers are combined by
  their mean after standardising each over the candidates (the server holds all candidates; no label
  is used), so no layer's scale dominates.

Cost: one forward pass of each candidate at θˢ (no gradient), plus one SVD per adapted layer — less than
the client's own update (s steps of forward + backward over its data), measured by the benchmark.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch
from torch import nn
from torch.func import functional_call

from ...errors import FedleakError
from ...types import Update

#: the share of the layer width kept as "the subspace" when the update has full row rank
FULL_RANK_SHARE = 0.25
#: candidates per forward pass
CHUNK = 16
#: candidates (a seeded sample) whose embeddings fix each layer's centre and whitening (SmolLM2 at 64 tokens:
#: 8,192 token embeddings for a 576-wide covariance)
STATS_SAMPLE = 128
_LORA_A = ".lora_A."


def _linear_rows(delta: torch.Tensor, module: nn.Module) -> Optional[torch.Tensor]:
    """The update of one layer as (rows, input width): a LoRA A or nn.Linear weight as is, GPT-2's Conv1D
    (in × out) transposed; ``None`` for anything that is not a linear map of the module's input."""
    if delta.dim() != 2:
        return None
    if type(module).__name__ == "Conv1D":
        return delta.T
    return delta


def layers(model: nn.Module, update: Update) -> dict:
    """``{module name: (parameter name, update rows (k, d))}`` of the layers whose update's rows live in the
    space of the module's input: LoRA A adapters when the update carries them (the module is the adapted
    layer: its input is the adapter's), else the weights of linear layers (not embeddings, not the LM head
    tied to them)."""
    modules = dict(model.named_modules())
    delta = update.delta()
    out = {}
    lora = [k for k in delta if _LORA_A in k and k.endswith(".weight")]
    if lora:
        for key in lora:
            owner = key.split(_LORA_A)[0]
            if owner in modules:
                out[owner] = (key, delta[key].detach())
        return out
    for key, value in delta.items():
        if not key.endswith(".weight"):
            continue
        owner = key[: -len(".weight")]
        module = modules.get(owner)
        if module is None or isinstance(module, nn.Embedding) or "lm_head" in owner or "embed" in owner:
            continue
        if isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D":
            rows = _linear_rows(value.detach(), module)
            if rows is not None:
                out[owner] = (key, rows)
    return out


def subspace(rows: torch.Tensor) -> tuple[torch.Tensor, int, bool]:
    """``(V (d, k) orthonormal, k, full)``: the row space of ``rows`` above its numerical floor, or its top
    :data:`FULL_RANK_SHARE` of directions when the rows span the whole input space (``full``)."""
    from .spans import gap_rank

    m = rows.double()
    _, s, vh = torch.linalg.svd(m, full_matrices=False)
    rank, _ = gap_rank(s, tuple(m.shape))
    width = m.shape[1]
    full = rank >= width
    if full:
        rank = max(1, int(round(FULL_RANK_SHARE * width)))
    return vh[:rank].T.contiguous(), int(rank), bool(full)


def _inverse_sqrt(cov: torch.Tensor) -> torch.Tensor:
    """Σ^{-1/2} (ridge 1e-6 of the mean variance). Whitening maps x ↦ Σ^{-1/2} x and the update rows R ↦ R Σ^{-1/2}:
    when R = Σⱼ uⱼ xⱼᵀ, R Σ^{-1/2} = Σⱼ uⱼ (Σ^{-1/2} xⱼ)ᵀ, so the same residual test runs in the whitened metric,
    where the self term of a member (‖Σ^{-1/2} x‖² ≈ d) stands out of the cross terms (≈ √d each)."""
    cov = cov + 1e-6 * float(cov.diagonal().mean().clamp_min(1e-30)) * torch.eye(cov.shape[0], dtype=cov.dtype)
    evals, evecs = torch.linalg.eigh(cov)
    return (evecs * evals.clamp_min(1e-300).rsqrt()) @ evecs.T


def _inputs(model: nn.Module, update: Update, names: list, ids: torch.Tensor) -> dict:
    """``{module name: (B, L, d) inputs}`` of the chunk ``ids`` at θˢ, eval mode (the server's weights and
    the expected network: it does not know the client's dropout masks)."""
    modules = dict(model.named_modules())
    seen: dict = {}
    hooks = [modules[n].register_forward_pre_hook(lambda mod, args, n=n: seen.__setitem__(n, args[0].detach()))
             for n in names]
    params = {k: v.detach() for k, v in update.server_params.items()}
    buffers = {k: v.detach() for k, v in (update.buffers or {}).items()}
    previous = model.training
    model.eval()
    try:
        with torch.no_grad():
            functional_call(model, {**params, **buffers}, (ids,), strict=False)
    finally:
        model.train(previous)
        for h in hooks:
            h.remove()
    missing = [n for n in names if n not in seen]
    if missing:
        raise FedleakError(f"projres: layer {missing[0]!r} saw no input in the model's forward pass")
    return seen


def projres_scores(model: nn.Module, update: Update, ids: torch.Tensor, *, centred: bool = True,
                   whiten: bool = True, seed: int = 0, progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """``{scores (higher = member: minus the standardised mean log residual), residual (M,) mean log residual,
    per_layer (M, n), layers, subspace, seconds}`` for the candidate token sequences ``ids`` (M, L)."""
    if ids.dim() != 2 or ids.shape[0] < 2:
        raise FedleakError(f"projres needs at least 2 candidate sequences (M, L), got {tuple(ids.shape)}")
    start = time.perf_counter()
    chosen = layers(model, update)
    if not chosen:
        raise FedleakError("projres: the update holds no linear layer or LoRA adapter whose rows live in a layer's "
                           "input space")
    names = sorted(chosen)
    ranks, full_count = [], 0
    ids = ids.long()
    pad = getattr(model, "pad_id", None)
    mask = (ids != pad) if pad is not None else torch.ones_like(ids, dtype=torch.bool)
    mask[:, 0] = True  # a sequence of only padding still scores its first position
    device = next(iter(update.server_params.values())).device
    # the metric (centre, whitening) from a seeded sample of the candidates (their inputs reused), then the rest
    order = torch.randperm(ids.shape[0], generator=torch.Generator().manual_seed(int(seed)))
    sample, rest = order[:STATS_SAMPLE], order[STATS_SAMPLE:]
    parts = [_inputs(model, update, names, ids[sample[i:i + CHUNK]].to(device)) for i in range(0, sample.numel(), CHUNK)]
    seen = {n: torch.cat([part[n] for part in parts]) for n in names}  # the logits of one chunk at a time only
    del parts
    metric = {}
    for n in names:
        flat = seen[n].double().cpu()[mask[sample]]
        mean = flat.mean(0) if centred else torch.zeros(flat.shape[1], dtype=flat.dtype)
        inv_sqrt = _inverse_sqrt((flat - mean).T @ (flat - mean) / max(1, flat.shape[0] - 1)) if whiten else None
        del flat
        rows = chosen[n][1].double().cpu()
        v, k, full = subspace(rows @ inv_sqrt if whiten else rows)
        metric[n] = (mean, inv_sqrt, v)
        ranks.append(k)
        full_count += int(full)
    per_layer = torch.zeros(ids.shape[0], len(names), dtype=torch.float64)

    def score(index: torch.Tensor, seen: dict) -> None:
        weights = mask[index].double()
        for j, n in enumerate(names):
            mean, inv_sqrt, v = metric[n]
            x = seen[n].double().cpu() - mean
            if inv_sqrt is not None:
                x = x @ inv_sqrt
            res = ((x - (x @ v) @ v.T).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-30)).clamp_min(1e-12).log()
            per_layer[index, j] = (res * weights).sum(1) / weights.sum(1)

    score(sample, seen)
    del seen
    if progress is not None:
        progress(sample.numel(), ids.shape[0])
    for first in range(0, rest.numel(), CHUNK):
        index = rest[first:first + CHUNK]
        score(index, _inputs(model, update, names, ids[index].to(device)))
        if progress is not None:
            progress(sample.numel() + min(first + CHUNK, rest.numel()), ids.shape[0])
    std = per_layer.std(0, keepdim=True)
    z = (per_layer - per_layer.mean(0, keepdim=True)) / torch.where(std > 0, std, torch.ones_like(std))
    scores = -z.mean(1)
    return {"scores": scores.tolist(), "residual": per_layer.mean(1).tolist(), "per_layer": per_layer,
            "layers": names, "seconds": time.perf_counter() - start,
            "subspace": {"layers": len(names), "ranks": sorted(set(ranks)), "full_rank_layers": full_count,
                         "centred": centred,
                         "rule": ("the row space of each layer's update above its numerical floor; where it is the "
                                  f"whole input space, its top {FULL_RANK_SHARE:.0%} of directions")},
            "statistic": "projection residual of the candidate's hidden embeddings (each layer's input at the "
                         "server's weights) on the row subspace of that layer's update (ProjRes)"}
