"""Membership under the client's AdamW: the joint fit on the candidates' gradients as AdamW scales them.

The joint fit (:mod:`.membership`) models the update as a sum of the documents' gradients,
Δ/η = Σₜ ḡₜ (plain local SGD). FlowerTune's client runs AdamW (Loshchilov & Hutter, ICLR 2019, Alg. 2):
each step moves coordinate j by η·m̂ₜⱼ/(√v̂ₜⱼ + ε), an elementwise-normalised step, so Δ is no longer a
combination of gradients: a coordinate that every document pushes a little moves as far as one that a
single document pushes hard. Measured on ``llama-tiny`` with LoRA r 8 (10 steps of 16 × 16 tokens, 320 + 320
candidates, seed 0, ``benchmarks/results/membership_tiny.json``): the plain fit falls from AUC 0.998 under SGD to
0.848 under AdamW; this fit reaches 0.931 there (0.958 on seed 1, 0.926 on a held-back corpus). Under full
fine-tuning with AdamW at lr 1e-3 the plain fit is the stronger (0.998 against 0.879): an embedding row that one
document touches moves by AdamW's first-step size whatever its gradient, which the candidates' spread does not
model. The audit runs both from the same gradients.

The attacker knows the protocol (AdamW, batch b), not the data. Linearise AdamW where its denominator
settles: v̂ₜⱼ (an average of squared minibatch-mean gradients, β₂ = 0.999) ≈ E[ḡⱼ²] = μⱼ² + σⱼ²/b, where
μⱼ, σⱼ are the mean and standard deviation of one document's gradient at coordinate j. Then
Δⱼ ≈ η Σₜ m̂ₜⱼ / rⱼ with rⱼ = √(μⱼ² + σⱼ²/b), and m̂ₜ is a combination of the steps' minibatch gradients,
so Δ ≈ Σᵢ βᵢ (gᵢ / r): the update is again a combination of the documents' gradients, each coordinate
scaled by 1/r. The score of a candidate is its coefficient β in the least-squares fit of Δ on all
candidates' scaled gradients at once (the joint fit in AdamW's metric). μ and σ are estimated from the
candidates themselves — members and non-members of the same distribution, no label is used. Under plain
SGD (``optimizer="sgd"``) r = 1 and this is the joint fit.

Candidate gradients: one per candidate at θˢ, in eval mode. Under LoRA they come in closed form from one
batched backward pass (:func:`.lora_grads.lora_gradients`: ∇B = Σₜ ∂ℓ/∂zₜ hₜᵀ, the same values as per-example
autograd), and ``layers=k`` asks only for the adapters of the last k blocks: the early blocks' forward builds no
graph and the backward stops at block L − k; the fit is then the same least-squares model on those coordinates of
the update (Δ restricted to them: each coordinate's AdamW step is a function of that coordinate's gradients only,
so the restriction is again Δ ≈ Σᵢ βᵢ gᵢ/r on fewer equations). Other models: the client's per-example
gradients (:func:`.membership.candidate_gradients`). Where M × P floats exceed :data:`.membership.EXACT_LIMIT`
the fit uses a seeded random subset of the coordinates (the same least-squares model on fewer equations;
r is per coordinate, so a subset keeps it exact, which a random-sign sketch would not).

Cost: one forward pass per candidate plus the backward pass of the LM head and the k blocks asked for
(measured against the client's own update by ``benchmarks/bench_membership.py``).
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch
from torch import nn

from ...errors import FedleakError
from ...types import Update
from .membership import EXACT_LIMIT, _cosines, _flat, candidate_gradients, joint_fit


def adam_scale(grads: torch.Tensor, batch: int) -> torch.Tensor:
    """1/r per coordinate, r = √(μ² + σ²/b) from the candidates' gradients (M, P); 0 where no candidate moves it."""
    g = grads.double()
    mu, sd = g.mean(0), g.std(0) if g.shape[0] > 1 else torch.zeros(g.shape[1], dtype=g.dtype)
    r = (mu.square() + sd.square() / max(1, int(batch))).sqrt()
    return torch.where(r > 0, 1.0 / r.clamp_min(1e-300), torch.zeros_like(r))


def coordinates(numel: int, candidates: int, seed: int, limit: int = EXACT_LIMIT) -> Optional[torch.Tensor]:
    """A seeded sorted subset of ``numel`` coordinates so that candidates × kept ≤ ``limit``; ``None``: keep all."""
    if numel * (candidates + 1) <= limit:
        return None
    keep = max(candidates * 4, limit // (candidates + 1))
    g = torch.Generator().manual_seed(int(seed) + 9_973)
    return torch.randperm(numel, generator=g)[:min(numel, keep)].sort().values


def fit_scores(grads: torch.Tensor, delta: torch.Tensor, optimizer: str, batch: int) -> torch.Tensor:
    """β of Δ ≈ Σᵢ βᵢ (gᵢ / r) (``optimizer`` ``adamw``) or Δ ≈ Σᵢ βᵢ gᵢ (``sgd``)."""
    if optimizer == "adamw":
        return joint_fit(grads.double() * adam_scale(grads, batch), delta)
    return joint_fit(grads, delta)


def adam_fit_scores(model: nn.Module, update: Update, ids: torch.Tensor, labels: Optional[torch.Tensor] = None, *,
                    seed: int = 0, layers: Optional[int] = None, sweep: tuple = (),
                    progress: Optional[Callable[[int, int], None]] = None) -> dict:
    """``{scores (the coefficients), joint (the plain fit on the same gradients), cosine (centred), raw (cosine),
    seconds, parameters, kept, silent, layers}`` for the candidate sequences ``ids`` (M, L): one gradient per
    candidate serves all. ``layers``: the LoRA adapters of the last k blocks only (None: every trainable parameter).
    ``silent``: kept coordinates no candidate's gradient moves (a first round's LoRA A: B = 0, so ∇A = 0; such A
    matrices are not differentiated at all). ``cpu_seconds``: {gradients, fit (the AdamW fit), joint_cosines_sweep}.
    ``sweep`` (j, …): also ``sweep_scores`` {j: the AdamW fit on the last j blocks only}, from the same gradients."""
    from .lora_grads import block_of, is_lora, last_layers

    if ids.dim() != 2 or ids.shape[0] < 2:
        raise FedleakError(f"adam-fit needs at least 2 candidate sequences (M, L), got {tuple(ids.shape)}")
    start = time.perf_counter()
    every = list(update.server_params)
    lora = is_lora(every) and callable(getattr(model, "loss_fn", None))
    if layers is not None and not lora:
        raise FedleakError("adam-fit: layers (the last k blocks) needs an update of LoRA adapters only")
    chosen = last_layers(every, layers)
    # a LoRA A whose B is 0 at θˢ (a first round) has ∇A = s·Bᵀ(∂ℓ/∂z)xᵀ = 0 for every candidate: no column of the fit
    skipped = [n for n in chosen if lora and ".lora_A." in n
               and not bool(update.server_params[n.replace(".lora_A.", ".lora_B.")].any())]
    names = [n for n in chosen if n not in skipped] or chosen
    skipped = [n for n in skipped if n not in names]
    numel = sum(update.server_params[k].numel() for k in names)
    skipped_numel = sum(update.server_params[k].numel() for k in skipped)
    clock = time.process_time()
    keep = coordinates(numel, ids.shape[0], seed)
    transform = (lambda flat: flat[keep]) if keep is not None else None
    delta = _flat(update.pseudo_gradient(), names)
    if keep is not None:
        delta = delta[keep]
    grads = candidate_gradients(model, update, ids.long(), labels, names=names, transform=transform,
                                progress=progress)
    batch = update.protocol.batch_size_for(update.num_samples)
    optimizer = update.protocol.optimizer
    cpu = {"gradients": time.process_time() - clock}
    clock = time.process_time()
    scores = fit_scores(grads, delta, optimizer, batch)
    cpu["fit"] = time.process_time() - clock
    clock = time.process_time()
    plain = joint_fit(grads, delta)
    raw, centred = _cosines(grads, delta), _cosines(grads - grads.mean(0, keepdim=True), delta)
    swept = {}
    if sweep:
        if not lora:
            raise FedleakError("adam-fit: sweep (the last j blocks) needs an update of LoRA adapters only")
        blocks = torch.cat([torch.full((update.server_params[k].numel(),), block_of(k)) for k in names])
        blocks = blocks[keep] if keep is not None else blocks
        order = sorted(set(blocks.tolist()))
        for j in sweep:
            cols = blocks >= order[-min(int(j), len(order))]
            swept[int(j)] = fit_scores(grads[:, cols], delta[cols], optimizer, batch).tolist()
    cpu["joint_cosines_sweep"] = time.process_time() - clock
    return {"scores": scores.tolist(), "sweep_scores": swept, "cpu_seconds": cpu, "joint": plain.tolist(),
            "cosine": centred.tolist(), "raw": raw.tolist(),
            "seconds": time.perf_counter() - start,
            "parameters": int(numel + skipped_numel), "kept": int(delta.numel() + skipped_numel), "layers": layers,
            "tensors": {"trainable": len(every), "fitted": len(names), "skipped_silent": len(skipped)},
            "optimizer": optimizer, "batch": int(batch),
            "silent": int((grads == 0).all(0).sum()) + skipped_numel,
            "statistic": ("coefficient of the candidate's gradient (at the server's weights), each coordinate scaled by "
                          "AdamW's linearised step 1/sqrt(mu^2 + sigma^2/b) from the candidates, in the least-squares "
                          "fit of the update on all candidates jointly" if optimizer == "adamw" else
                          "coefficient of the candidate's gradient in the least-squares fit of the update on all "
                          "candidates jointly (plain SGD: no scaling)")}
