"""Models of tabular federations.

=====================  ==========================================================================================
name                   source
=====================  ==========================================================================================
``tabular-mlp``        TabLeak (Vero et al., ICML 2023), reference ``models/fully_connected.py``:
                       Linear(d→100)–ReLU–Linear(100→100)–ReLU–Linear(100→classes), PyTorch's default init — the
                       zoo's :class:`~fedleak.models.zoo.MLP` with ``hidden=(100, 100)`` (first layer ``fc1``:
                       linear + ReLU, where the exact attacks apply).
``ft-transformer``     Gorishniy et al., "Revisiting Deep Learning Models for Tabular Data" (NeurIPS 2021): a
                       feature tokenizer (one token per column), a [CLS] token, pre-norm Transformer blocks, the
                       head on [CLS]; sizes of tabular-GIA (arXiv 2606.00986): 2 blocks, width 128, 4 heads.
=====================  ==========================================================================================

Inputs are the standardized records (N, width) of a tabular :class:`~fedleak.types.DataSpec`. The
FT-Transformer's tokenizer is one linear map per column: on a categorical block it is the embedding lookup of
the one-hot category (the block is an affine function of the one-hot vector, the map absorbs it), and it stays
differentiable for a relaxed block — tabular-GIA's softmax(logits)·E relaxation. Attention is written out
(softmax(QKᵀ/√d)V) so that the attacks' second-order gradients and batched restarts go through it.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..errors import FedleakError
from ..types import DataSpec
from .registry import register
from .zoo import MLP


def _tabular(spec: DataSpec, name: str):
    schema = spec.schema
    if schema is None:
        raise FedleakError(f"model {name!r} needs a tabular DataSpec (--data adult, german or a CSV/Parquet file), "
                           f"got {spec.modality} data {spec.name!r}")
    return schema


@register("tabular-mlp", "TabLeak's fully connected net (Vero et al. 2023): d-100-100-classes with ReLU")
def tabular_mlp(spec: DataSpec, *, hidden=(100, 100)) -> MLP:
    """The reference's ``FullyConnected`` ([100, 100, 2] on a binary label); ``hidden`` widths may be changed."""
    _tabular(spec, "tabular-mlp")
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = (hidden,)
    sizes = tuple(hidden)
    if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 65536 for s in sizes):
        raise FedleakError(f"tabular-mlp option 'hidden' must be a list of integers from 1 to 65536, got {hidden!r}")
    return MLP(spec, sizes)


class Block(nn.Module):
    """A pre-norm Transformer block: x + MHA(LN(x)), then x + FFN(LN(x)) with ReGLU (Gorishniy et al. §3.3)."""

    def __init__(self, dim: int, heads: int, ffn: int, first: bool) -> None:
        super().__init__()
        self.heads = heads
        # the first block has no attention normalization (their default)
        self.norm1 = nn.Identity() if first else nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ffn_in = nn.Linear(dim, 2 * ffn)
        self.ffn_out = nn.Linear(ffn, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads), dim=-1)
        x = x + self.out((attention @ v).transpose(1, 2).reshape(n, t, d))
        a, b = self.ffn_in(self.norm2(x)).chunk(2, dim=-1)
        return x + self.ffn_out(a * F.relu(b))


class FTTransformer(nn.Module):
    """Feature tokenizer → [CLS] + column tokens → blocks → LN → ReLU → linear head on [CLS]."""

    def __init__(self, spec: DataSpec, dim: int = 128, blocks: int = 2, heads: int = 4) -> None:
        super().__init__()
        schema = _tabular(spec, "ft-transformer")
        if dim % heads:
            raise FedleakError(f"ft-transformer: width {dim} must be a multiple of heads {heads}")
        self.slices = [(s.start, s.stop) for _, s in schema.blocks()]
        width = schema.width
        # the tokenizer: token_j = x[block_j] @ W_j + b_j, all columns as one masked (width × columns·dim) map
        self.tokenizer = nn.Linear(width, len(self.slices) * dim)
        nn.init.uniform_(self.tokenizer.weight, -1 / math.sqrt(dim), 1 / math.sqrt(dim))
        self.cls = nn.Parameter(torch.empty(dim).uniform_(-1 / math.sqrt(dim), 1 / math.sqrt(dim)))
        self.dim = dim
        ffn = int(dim * 4 / 3)
        self.blocks = nn.ModuleList(Block(dim, heads, ffn, first=i == 0) for i in range(blocks))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        mask = torch.zeros(len(self.slices), x.shape[1], dtype=x.dtype, device=x.device)
        for j, (a, b) in enumerate(self.slices):
            mask[j, a:b] = 1.0  # column j's token reads only its own entries
        weight = self.tokenizer.weight * mask.repeat_interleave(self.dim, dim=0)
        tokens = F.linear(x, weight, self.tokenizer.bias)
        tokens = tokens.view(x.shape[0], len(self.slices), self.dim)
        tokens = torch.cat([self.cls.expand(x.shape[0], 1, self.dim), tokens], dim=1)
        for block in self.blocks:
            tokens = block(tokens)
        return self.head(F.relu(self.norm(tokens[:, 0])))


@register("ft-transformer", "FT-Transformer (Gorishniy et al. 2021) for tables; tabular-GIA's 2 blocks, width 128")
def ft_transformer(spec: DataSpec, *, dim: int = 128, blocks: int = 2, heads: int = 4) -> FTTransformer:
    for key, value in (("dim", dim), ("blocks", blocks), ("heads", heads)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise FedleakError(f"ft-transformer option {key!r} must be an integer from 1 to 4096, got {value!r}")
    return FTTransformer(spec, dim, blocks, heads)
