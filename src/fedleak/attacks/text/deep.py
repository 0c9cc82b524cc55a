"""Evidence from every layer: the attention spans of all blocks, for decoder growth under dropout.

DAGER tests a decoder's prefixes through one span, the next layer's (§4.2). Under dropout no candidate lies in
that span (its vectors are masked copies of the true inputs) and one layer ranks the true continuation first
only by a margin comparable to the masks' spread. Every block's adapted projection has its own gradient span
and its own, independent dropout mask, and in a first LoRA round (PEFT's B = 0) the forward itself is the clean
one, so the input of block l at the new position is exactly computable for a candidate prefix. The log span
distances of the blocks add up: measured on SmolLM2 (LoRA r 32, dropout 0.075, 1 × 16) a true token sums to
≈ −70 over the 30 blocks, a wrong one to ≈ −28 (``benchmarks/bench_llm.py``). :class:`LayerEvidence` gives
the geometric mean of the distances over the blocks (one forward with a hook on every block's probe).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .probes import ARCHITECTURES, Probe, _Stop, build_probe, model_type, run_model

#: fewer spans than this add little to the second probe's own (a two-block model has one more): not used
MIN_SPANS = 4


def block_paths(model: nn.Module, block: int) -> tuple[str, ...]:
    """The first-probe paths (the attention projections of block 0) moved to ``block``."""
    first = ARCHITECTURES[model_type(model)][0]
    return tuple(p.replace(".0.", f".{block}.", 1) for p in first)


def num_blocks(model: nn.Module) -> int:
    config = getattr(getattr(model, "hf", model), "config", None)
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0)


@dataclass
class LayerEvidence:
    """The probes of blocks 1 … L−1 that have a gradient, tested together."""

    probes: list[Probe]
    params: dict
    model: nn.Module

    @classmethod
    def build(cls, model: nn.Module, gradient: dict, params: dict, noise: Optional[dict] = None,
              first_block: int = 1) -> Optional["LayerEvidence"]:
        found = []
        for block in range(first_block, num_blocks(model)):
            probe = build_probe(model, block_paths(model, block), gradient, params, causal=True, noise=noise)
            if probe is not None and probe.proper:
                found.append(probe)
        evidence = cls(found, params, model)
        return evidence if evidence.count >= MIN_SPANS else None

    @property
    def count(self) -> int:
        return sum(len(p.spans) for p in self.probes)

    def distance(self, ids: torch.Tensor, last: bool = True) -> torch.Tensor:
        """Geometric mean over the blocks' spans of the relative distance of each sequence's inputs: (B,) at
        the last position when ``last``, else (B, T). One forward, stopped after the deepest probe's input."""
        store: dict[int, torch.Tensor] = {}
        deepest = len(self.probes) - 1

        def hook(index):
            def pre(_module, args, kwargs):
                x = args[0] if args else next(iter(kwargs.values()))
                store[index] = x[:, -1:] if last else x
                if index == deepest:
                    raise _Stop
            return pre

        handles = [p.modules[0].register_forward_pre_hook(hook(i), with_kwargs=True)
                   for i, p in enumerate(self.probes)]
        try:
            with torch.no_grad():
                try:
                    run_model(self.model, self.params, ids)
                except _Stop:
                    pass
        finally:
            for h in handles:
                h.remove()
        total = None
        for i, probe in enumerate(self.probes):
            for span in probe.spans:
                d = span.distance(store[i]).clamp_min(1e-30).log()
                total = d if total is None else total + d
        mean = (total / self.count).exp().cpu()
        return mean[:, -1] if last else mean
