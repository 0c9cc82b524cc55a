"""Per-candidate gradients of LoRA adapters in closed form, batched, on the last k layers only.

A LoRA layer (Hu et al. 2022, "LoRA", §4.1) computes y = W x + s·B A x: with h = A x (the adapter's
r-dimensional code) and z = B h, the gradient of a sequence's loss ℓ is

    ∇B ℓ = Σₜ (∂ℓ/∂zₜ) hₜᵀ,        ∇A ℓ = Σₜ (Bᵀ ∂ℓ/∂zₜ) xₜᵀ,

sums over the sequence's token positions t (s is inside ∂ℓ/∂z). So one ordinary batched backward that returns
∂ℓ/∂z at each adapter, with each candidate's loss summed (candidates do not interact: the attention mask is per
sequence), yields every candidate's own gradient by two einsums — no per-example ``vmap``, the same values.

Only the adapters of the last k transformer blocks are asked for: nothing before the first of them requires a
gradient, so the forward pass through the early blocks builds no graph and the backward pass stops at block
L − k. What the attacker knows is unchanged (θˢ, the protocol, the candidates); the fit of the update then uses
those coordinates of the update only (:func:`fedleak.attacks.text.adam_fit.adam_fit_scores`, ``layers``).
Cost per candidate: one forward pass, plus the backward pass of the LM head and k blocks (activation gradients
only: the frozen weights get none).
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import torch
from torch import nn
from torch.func import functional_call

from ...errors import FedleakError

#: candidate tokens a batched pass (16 sequences of 64; 2 of 512), bounding the (tokens × vocabulary) logits
TOKENS_PER_PASS = 1024
_LAYER = re.compile(r"\.(\d+)\.")


def is_lora(names: list) -> bool:
    """Whether every name is a LoRA adapter matrix (``….lora_A.<adapter>.weight`` / ``….lora_B.<adapter>.weight``)."""
    return bool(names) and all((".lora_A." in n or ".lora_B." in n) and n.endswith(".weight") for n in names)


def block_of(name: str) -> int:
    """The transformer block index of a parameter name (its first integer path component)."""
    found = _LAYER.search(name)
    if found is None:
        raise FedleakError(f"cannot tell the layer of parameter {name!r}")
    return int(found.group(1))


def last_layers(names: list, k: Optional[int]) -> list:
    """The names of the last ``k`` blocks' parameters (all of them when ``k`` is None), in the given order."""
    if k is None:
        return list(names)
    if int(k) < 1:
        raise FedleakError(f"layers must be a positive number of blocks, got {k!r}")
    blocks = sorted({block_of(n) for n in names})
    chosen = set(blocks[-int(k):])
    return [n for n in names if block_of(n) in chosen]


def _samples(output) -> list:
    """The batch's output as one output per sequence, by ``unbind`` (its backward stacks the rows' gradients once;
    slicing would materialise a full-batch gradient per sequence)."""
    if isinstance(output, tuple):  # LMOutput (logits, ids): split each field
        fields = [t.unbind(0) for t in output]
        return [type(output)(*(f[i].unsqueeze(0) for f in fields)) for i in range(len(fields[0]))]
    return [row.unsqueeze(0) for row in output.unbind(0)]


def lora_gradients(model: nn.Module, params: dict, buffers: dict, ids: torch.Tensor, labels: torch.Tensor,
                   names: list, *, transform: Optional[Callable] = None,
                   progress: Optional[Callable[[int, int], None]] = None) -> torch.Tensor:
    """(M, P) gradients of each candidate's own loss w.r.t. the LoRA matrices ``names`` (flattened in that order),
    at ``params`` (the server's), eval mode; equal to per-example autograd (tested)."""
    if not is_lora(names):
        raise FedleakError("lora_gradients needs LoRA adapter matrices (lora_A / lora_B weights) only")
    modules = dict(model.named_modules())
    owners = sorted({n.rsplit(".lora_", 1)[0] for n in names}, key=lambda o: (block_of(o + "."), o))
    adapter = {n.rsplit(".lora_", 1)[1].split(".")[1] for n in names}
    if len(adapter) != 1:
        raise FedleakError(f"lora_gradients: one adapter expected, got {sorted(adapter)}")
    adapter = adapter.pop()
    for owner in owners:
        if f"{owner}.lora_A.{adapter}" not in modules or f"{owner}.lora_B.{adapter}" not in modules:
            raise FedleakError(f"lora_gradients: module {owner!r} has no LoRA adapter {adapter!r}")
    loss_fn = model.loss_fn
    chunk = max(1, TOKENS_PER_PASS // max(1, ids.shape[1]))
    rows = []
    previous = model.training
    model.eval()
    try:
        for first in range(0, ids.shape[0], chunk):
            seen: dict = {}

            def on_a(mod, args, out, owner):  # x: the adapter's input (dropout is the identity in eval mode)
                seen[owner, "x"] = args[0].detach()

            def on_b(mod, args, out, owner):  # h = A x, and z = B h kept in the graph (a leaf in the first block)
                seen[owner, "h"] = args[0].detach()
                if not out.requires_grad:
                    out = out.detach().requires_grad_(True)
                seen[owner, "z"] = out
                return out

            hooks = []
            for owner in owners:
                hooks.append(modules[f"{owner}.lora_A.{adapter}"].register_forward_hook(
                    lambda m, a, o, owner=owner: on_a(m, a, o, owner)))
                hooks.append(modules[f"{owner}.lora_B.{adapter}"].register_forward_hook(
                    lambda m, a, o, owner=owner: on_b(m, a, o, owner)))
            part = ids[first:first + chunk]
            try:
                with torch.enable_grad():
                    output = functional_call(model, {**params, **buffers}, (part,), strict=False)
                    loss = sum(loss_fn(one, labels[first + i:first + i + 1])
                               for i, one in enumerate(_samples(output)))
                    zs = [seen[owner, "z"] for owner in owners]
                    dz = torch.autograd.grad(loss, zs, allow_unused=True)
            finally:
                for hk in hooks:
                    hk.remove()
            grads = {}
            for owner, g in zip(owners, dz):
                h, x = seen[owner, "h"], seen[owner, "x"]
                g = torch.zeros_like(seen[owner, "z"]) if g is None else g.detach()
                g, h, x = g.reshape(g.shape[0], -1, g.shape[-1]), h.reshape(h.shape[0], -1, h.shape[-1]), \
                    x.reshape(x.shape[0], -1, x.shape[-1])
                grads[f"{owner}.lora_B.{adapter}.weight"] = torch.einsum("blo,blr->bor", g, h)
                b = params[f"{owner}.lora_B.{adapter}.weight"].detach()
                grads[f"{owner}.lora_A.{adapter}.weight"] = torch.einsum("blr,bld->brd", g @ b, x)
            flat = torch.cat([grads[n].reshape(part.shape[0], -1).float() for n in names], 1)
            rows.extend(transform(row) if transform is not None else row for row in flat)
            if progress is not None:
                progress(min(first + chunk, ids.shape[0]), ids.shape[0])
    finally:
        model.train(previous)
    return torch.stack(rows)
