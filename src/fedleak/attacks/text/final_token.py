"""The final token of each causal-LM sequence, read from the output-embedding gradient.

Under next-token loss the last token of a sequence predicts nothing and nothing attends to it, so
its gradient in every attention weight is exactly zero: DAGER never sees it (Petrov et al. recover
all but the last token). It enters the update only as the *label* of position L−2. The gradient
of the output embedding W (LM head, tied to the input embedding in GPT-2) is affine in the labels'
one-hot vectors: with every other token known, simulating the client's step with a dummy final
token u leaves the residual R = G_obs − G_u = (1/c)·Σₙ (e_u − e_{yₙ}) hₙᵀ, where hₙ is the final hidden
state at position L−2 (known once the prefix is known). Hence R·H⁺ has column n ≈ (e_u − e_{yₙ})/c and
yₙ is its most negative row — one least-squares solve, no search. The client step is simulated with
the same function the victim runs (``simulate``), so FedAvg's several local steps are included.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from .probes import _param_names, base_of, capture


def output_embedding_name(model: nn.Module, gradient: dict) -> str | None:
    """The parameter name of the output embedding / LM head if the update carries its gradient."""
    head = base_of(model).get_output_embeddings() if hasattr(base_of(model), "get_output_embeddings") else None
    if head is None:
        return None
    name = _param_names(model).get(id(head.weight))
    return name if name in gradient else None


def recover_final(model: nn.Module, params: dict, gradient: dict, prefixes: torch.Tensor,
                  simulate: Callable[[torch.Tensor], dict], dummy: int) -> tuple[torch.Tensor, dict]:
    """Final tokens (N,) for ``prefixes`` (N, L−1) and diagnostics (the relative gradient residual)."""
    name = output_embedding_name(model, gradient)
    if name is None:
        return torch.full((prefixes.shape[0],), dummy, dtype=torch.long), {
            "recovered": False, "reason": "the output embedding / LM head has no gradient in this update "
                                          "(frozen, e.g. LoRA), so the final tokens are not observable"}
    n = prefixes.shape[0]
    ids = torch.cat([prefixes, torch.full((n, 1), dummy, dtype=torch.long)], dim=1)
    observed = gradient[name].double()
    residual = observed - simulate(ids)[name].double()
    head = base_of(model).get_output_embeddings()
    hidden = capture(model, params, ids, head)[:, -2].double().to(residual.device)  # (N, d) state predicting the final token
    coeff = residual @ torch.linalg.pinv(hidden)  # (V, N)
    scale = float(coeff[dummy].max())
    low, arg = coeff.min(0)
    finals = torch.where(low < -0.5 * abs(scale), arg, torch.full_like(arg, dummy)).cpu()
    ids[:, -1] = finals
    check = simulate(ids)[name].double()
    rel = float((observed - check).norm() / observed.norm().clamp_min(1e-30))
    before = float(residual.norm() / observed.norm().clamp_min(1e-30))
    return finals, {"recovered": True, "residual_before": before, "residual_after": rel}
