"""What the text attacks share: the update's θ points, the client simulation, exactness and the result.

* :func:`param_points` — θˢ for FedSGD; for FedAvg θˢ + α(θᶜ − θˢ) at α = k/s (k < s, at most
  ``points``): the pseudo-gradient of s local steps is Σₜ Xₜᵀ Gₜ with Xₜ the inputs at the weights of
  step t, so a candidate is tested against the span at the interpolated weights of each step and
  its smallest distance counts (DAGER tests at θˢ only, which fails once embeddings and LayerNorms
  move: 10 steps at lr 1e-2).
* :func:`simulate` — the client's update for given token ids through the one client update
  (:func:`fedleak.fl.local_training`, the wrapper's own loss), as the server would recompute it.
* :func:`exactness` — the precondition of exact span recovery, stated, never silently assumed.
* :func:`positional_ambiguity` — when the first span cannot place a token (additive position embeddings).
* :func:`framing_tokens` — the special tokens a tokenizer puts around every sequence.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...types import Reconstruction, Update
from .probes import base_of, device_of, hf_of


def task_of(model: nn.Module) -> str:
    task = getattr(model, "task", None)
    if task in ("causal-lm", "classification"):
        return task
    name = type(base_of(model)).__name__
    return "causal-lm" if name.endswith(("LMHeadModel", "ForCausalLM")) else "classification"


def vocab_size(model: nn.Module) -> int:
    return int(base_of(model).config.vocab_size)


def param_points(update: Update, points: int) -> list[dict]:
    start = update.server_params
    if update.is_fedsgd:
        return [start]
    steps = max(1, update.num_steps)
    alphas = sorted({round(k * (steps - 1) / max(1, points - 1)) / steps for k in range(min(points, steps))})
    delta = update.delta()
    return [{k: v + a * delta[k] for k, v in start.items()} for a in alphas]


def labels_for(model: nn.Module, ids: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    if labels is not None:
        return labels
    if task_of(model) == "causal-lm":  # no target after the sequence (the final token predicts nothing)
        return torch.full((ids.shape[0],), -100, dtype=torch.long)
    return torch.zeros(ids.shape[0], dtype=torch.long)


def simulate(model: nn.Module, update: Update, ids: torch.Tensor, labels: torch.Tensor | None = None) -> dict:
    """The pseudo-gradient (θˢ − θᶜ)/η the client would send for ``ids`` (FedSGD: the gradient)."""
    from ...fl.client import local_training, sequential_schedule

    labels = labels_for(model, ids, labels)
    params = {k: v.detach() for k, v in update.server_params.items()}
    if hasattr(model, "loss_fn"):
        schedule = sequential_schedule(ids.shape[0], update.protocol)
        result = local_training(model, params, ids, labels, schedule, update.protocol.lr, loss_fn=model.loss_fn,
                                train_mode=False)
        return result.grad_sum
    # a bare transformers model (unit tests of the linear algebra): its own loss, one step
    live = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    hf = hf_of(model)
    target = ids if task_of(model) == "causal-lm" else labels  # (HF shifts; the final token has no target)
    loss = torch.func.functional_call(hf, live, (ids,), {"labels": target}, strict=False).loss
    grads = torch.autograd.grad(loss, list(live.values()), allow_unused=True)
    return {k: (g if g is not None else torch.zeros_like(v)) for (k, v), g in zip(live.items(), grads)}


#: σ/σ₁ below which singular values are float32 rounding, not data (√ε of float32, as :func:`.spans.gap_rank`)
ROUNDING_FLOOR = math.sqrt(torch.finfo(torch.float32).eps)


def exactness(tokens: int, limit: int, first, second, reason_extra: str = "", gap_found: bool = True) -> dict:
    """The exactness condition of span recovery (distinct tokens ≤ layer width / LoRA rank).

    It holds only when the span is distinguishable from the noise floor: each probe's singular values drop, at
    the span's rank, to the float32 rounding level (σ_{r+1} ≤ σ₁·√ε, :func:`.spans.gap_rank`) below the layer's
    width. ``gap_found`` False says the data had no such gap — noise (a defense, or FedAvg's drift) fills the
    span — and a rank substituted afterwards (N·L) does not make the condition hold.
    """
    proper = first.proper and second.proper
    holds = gap_found and proper and tokens <= limit
    spans = [sp for sp in first.spans + second.spans if sp.singular.numel() and float(sp.singular[0]) > 0]
    floor = min((float(sp.singular[-1] / sp.singular[0]) for sp in spans), default=0.0)
    extra = {}
    if holds:
        reason = (f"{tokens} token inputs in the step fit the span limit {limit}; gaps found at rank "
                  f"{first.rank} (first) and {second.rank} (second), down to the float32 rounding floor")
    elif not proper and (tokens > limit or floor <= ROUNDING_FLOOR):
        verb = "exceed" if tokens > limit else "fill"
        reason = (f"{tokens} token inputs {verb} the span limit {limit} (layer width or LoRA rank)"
                  + (f" {tokens / max(limit, 1):.1f}-fold" if tokens > limit else "") + ": the gradient has "
                  "full rank, every candidate lies in its span, no span test can separate tokens")
    elif not gap_found or not proper:
        extra["noise_filled"] = True
        reason = (f"noise fills the span: the gradient's singular values never drop to the float32 rounding floor "
                  f"(σ₁·√ε ≈ {ROUNDING_FLOOR:.1e}·σ₁) below the span limit {limit} (smallest σ/σ₁ = {floor:.1e}), "
                  f"so the span holds noise (a defense's, FedAvg's drift across local steps, or the float32 rounding "
                  f"of the weights the client sent, magnified by 1/lr) as well as the "
                  f"{tokens} token inputs")
    else:
        reason = (f"{tokens} token inputs may exceed the span limit {limit}; the spans are proper (repeated tokens), "
                  "so the recovery is tried but not certain")
    return {"holds": bool(holds), "tokens": int(tokens), "limit": int(limit), **extra,
            "reason": reason + reason_extra}


def text_result(ids: torch.Tensor, model: nn.Module, extras: dict) -> Reconstruction:
    """A text Reconstruction: ids (M, L) long, decoded strings when the model has a tokenizer."""
    ids = ids.long().cpu()
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        extras["text"] = [tokenizer.decode(row.tolist()) for row in ids]
    return Reconstruction(ids.to(device_of(model)), None, None, extras)


def first_inputs_fn(model: nn.Module, points: list[dict], module: nn.Module):
    """ids (B, T) -> the first probe's inputs at each θ point, stacked (K, B, T, d)."""
    from .probes import capture

    def run(ids):
        return torch.stack([capture(model, p, ids, module) for p in points])

    return run


def positional_ambiguity(cands: list[torch.Tensor], rank: int) -> dict | None:
    """When more (token, position) inputs pass the first span test than the span's rank: the inputs are then
    linearly dependent, and the test cannot tell a true pairing of a token with a position from a false one.

    A model that adds a learned position embedding to the token's (BERT, GPT-2) feeds its first layer
    LN(E[v] + P[p]); LayerNorm only centres, rescales each vector and adds one bias, so the span of a batch's
    inputs has rank (distinct tokens + distinct positions − connected components of the token–position graph + 1)
    — measured on MiniLM, 4 × 32 without dropout: 82 tokens + 32 positions − 5 components + 1 = 110, the rank the
    gradient shows, for 121 distinct inputs — and it holds E[v] + P[p] for every token and position of one
    component: the first test gives the batch's tokens, not their places (72 candidates at every position
    there). Dropout's masked copies break the additivity (rank 128, 3–4 candidates per position). None when
    the accepted inputs fit the rank.
    """
    accepted = sum(int(c.numel()) for c in cands)
    if accepted <= rank:
        return None
    return {"accepted_inputs": accepted, "first_rank": int(rank),
            "reason": (f"{accepted} (token, position) inputs pass the first span test, more than its rank {rank}: "
                       "they are linearly dependent — a token's and a position's embeddings are added before the "
                       "first layer, so its span holds every pairing of the batch's tokens with their positions — "
                       "and the first layer gives the batch's tokens, not their places; the order rests on the "
                       "second layer's test and the search over pairings")}


def framing_tokens(model: nn.Module, length: int) -> dict[int, int]:
    """Position -> token of the special tokens the model's tokenizer puts around every sequence that fills
    ``length`` (BERT: [CLS] at 0, [SEP] at length − 1); empty without a tokenizer. The server's own input format,
    not the client's data: an encoder's position whose masked copies no candidate fits (several sequences share
    its token) takes it before the closest token, which can be a neighbour's (MiniLM 4 × 32, seed 1:
    a sequence's "optional" at position 30 stood in at 31 for the four shared [SEP])."""
    from ...data.tokenizers import special_ids

    tokenizer = getattr(model, "tokenizer", None)
    try:
        lead, trail = special_ids(tokenizer) if tokenizer is not None else ((), ())
    except (AttributeError, TypeError):  # not a tokenizers.Tokenizer
        return {}
    out = {p: int(t) for p, t in enumerate(lead) if p < length}
    out.update({length - len(trail) + k: int(t) for k, t in enumerate(trail) if length - len(trail) + k >= 0})
    return out
