"""A tiny causal transformer language model for the text experiments (Fowl et al., App. A.4).

Fowl et al. insert the imprint block right after the word embeddings of the small transformer of
Wang et al. (2021, "A field guide to federated optimization"). :class:`TinyTransformerLM` is such a
model at CPU scale: token embedding (``embedding``, initialized N(0, 1) like ``nn.Embedding``),
learned positions, pre-LayerNorm blocks of causal multi-head self-attention and a GELU MLP, a
final LayerNorm and a linear head that predicts the token following the sequence (next-word
prediction, :mod:`fedleak.data.text`). No dropout, so the client update is deterministic.

Inputs are token ids stored as floats, shape (N, L) (or (N, 1, 1, L) as the
:class:`~fedleak.types.DataSpec` describes them); they are rounded to integers. Build it with
``fedleak.models.build("text-transformer", spec)`` (L and the vocabulary size come from the spec)
or directly.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import FedleakError
from ..types import DataSpec
from .registry import register


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention where position t attends to positions ≤ t."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise FedleakError(f"embedding size {dim} is not divisible by {heads} heads")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, length, dim = x.shape
        q, k, v = self.qkv(x).view(n, length, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dim // self.heads)
        mask = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(n, length, dim))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm block: x + attention(LN(x)), then x + MLP(LN(x))."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = CausalSelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyTransformerLM(nn.Module):
    """Token embedding → + positions → blocks → LayerNorm → head on the last position."""

    def __init__(self, vocab_size: int, seq_len: int, dim: int = 32, heads: int = 2, layers: int = 2,
                 hidden: int = 64) -> None:
        super().__init__()
        self.vocab_size, self.seq_len = int(vocab_size), int(seq_len)
        self.embedding = nn.Embedding(self.vocab_size, dim)
        self.position = nn.Parameter(0.02 * torch.randn(self.seq_len, dim))
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, hidden) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, self.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        ids = tokens.reshape(tokens.shape[0], -1)
        if ids.shape[1] != self.seq_len:
            raise FedleakError(f"the language model takes sequences of {self.seq_len} tokens, got {ids.shape[1]}")
        ids = ids.round().long() if ids.is_floating_point() else ids.long()
        x = self.embedding(ids) + self.position
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x[:, -1]))


@register("text-transformer", "Tiny causal transformer LM (next-token prediction) for text specs (1, 1, L); "
                              "the language model of Fowl et al. App. A.4 at CPU scale")
def text_transformer(spec: DataSpec, *, dim: int = 32, heads: int = 2, layers: int = 2,
                     hidden: int = 64) -> TinyTransformerLM:
    """:class:`TinyTransformerLM` with L = ``spec.shape[2]`` and ``spec.num_classes`` tokens."""
    if spec.shape[:2] != (1, 1):
        raise FedleakError(f"text-transformer needs a token spec of shape (1, 1, L), got {spec.shape}")
    for name, value in (("dim", dim), ("heads", heads), ("layers", layers), ("hidden", hidden)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise FedleakError(f"text-transformer option {name!r} must be a positive integer, got {value!r}")
    return TinyTransformerLM(spec.num_classes, spec.shape[2], dim, heads, layers, hidden)
