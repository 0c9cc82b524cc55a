"""The client's first-layer dropout masks, as recovered by the masked-copy test, replayed in later tests.

:func:`~.spans.masked_fit` returns, beside the residual, the coordinates a true (token, position) input lost
to the client's dropout. An encoder's second span (block 0's MLP) sees LN(x̃ + attention(x̃)): the residual
stream carries the masked copy x̃ itself, so testing sequence candidates with the clean x leaves a third of
its norm as noise (at p = 0.1, ‖x − x̃‖/‖x‖ ≈ √(p/(1−p))). :class:`RecoveredMasks` feeds block 0 the masked
copies instead (a forward pre-hook), for every candidate whose mask was recovered; what remains unknown are
the masks inside block 0 (attention probabilities, the attention output).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .probes import ARCHITECTURES, _module, model_type
from .spans import Span, masked_fit


class RecoveredMasks:
    """Per position the candidate tokens and the keep factors m/(1−p) of their recovered masks."""

    def __init__(self, model: nn.Module, span: Span, cands: list[torch.Tensor], inputs: torch.Tensor):
        """``inputs`` (C, L, d): the first probe's clean inputs of ``cands`` laid out as ids[c, p] = cands[p][c]
        (shorter positions repeat their last token)."""
        _, drop = masked_fit(inputs, span.basis, span.mask_rate)
        self.tokens = [c.clone() for c in cands]
        self.keep = [(~drop[:c.numel(), p]).to(inputs.dtype) / (1 - span.mask_rate) for p, c in enumerate(cands)]
        path = ARCHITECTURES[model_type(model)][0][0]
        self.block = _module(model, path[:path.index(".0.") + 2])

    @staticmethod
    def layout(cands: list[torch.Tensor]) -> torch.Tensor:
        """ids (C, L) holding every position's candidates (C the most at any position)."""
        rows = max(c.numel() for c in cands)
        return torch.stack([torch.cat([c, c[-1:].expand(rows - c.numel())]) for c in cands], 1)

    def factors(self, ids: torch.Tensor, width: int) -> torch.Tensor:
        """(B, L, d) keep factors for these sequences; 1 where a token's mask is unknown."""
        out = torch.ones(*ids.shape, width, dtype=self.keep[0].dtype)
        for p, (tokens, keep) in enumerate(zip(self.tokens, self.keep)):
            match = ids[:, p].unsqueeze(1) == tokens.unsqueeze(0)  # (B, c)
            hit = match.any(1)
            out[hit, p] = keep[match[hit].float().argmax(1)]
        return out

    @contextmanager
    def replayed(self, ids: torch.Tensor):
        """Block 0 receives the masked copies of these sequences' first-layer inputs."""
        def pre(_module, args, kwargs):
            hidden = args[0] if args else kwargs["hidden_states"]
            scaled = hidden * self.factors(ids.cpu(), hidden.shape[-1]).to(hidden.device, hidden.dtype)
            if args:
                return (scaled, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": scaled}

        handle = self.block.register_forward_pre_hook(pre, with_kwargs=True)
        try:
            yield
        finally:
            handle.remove()
