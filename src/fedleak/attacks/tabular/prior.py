"""TabLeak's structural prior (Vero et al. 2023, §2 step 2; research notes §2): the map from the optimized
variable z to records — per categorical column a softmax (τ = 1) of its de-standardized logits, re-standardized,
per continuous column a sigmoid into the column's standardized [min, max].

:class:`StructuralPrior` holds the schema's constants; for TabLeak's own configuration (softmax and sigmoid) the
map and its gradient are :class:`_SoftmaxSigmoid`, written out by hand: per block the softmax's Jacobian-vector
product p ⊙ (v − Σ_block p ⊙ v), every block at once with block sums as products with the 0/1 block-membership
matrix. ``tests/test_tabular_fast_gradient.py`` checks value and gradient against autograd.
"""

from __future__ import annotations

import torch


class StructuralPrior:
    """z → records: softmax on each de-standardized categorical block (``softmax``), sigmoid into each continuous
    range (``sigmoid``; the reference's "no softmax" ablation keeps it, Inverting Gradients drops both).

    The attack optimizes z with its columns GROUPED (:attr:`perm`: every categorical block in schema order, then
    the continuous columns; Adam and the sign trick are element-wise, so the steps are the same), so that
    :meth:`grouped` is a few operations on contiguous slices: all blocks' softmaxes at once, exp(x − m) / Σ exp(x − m)
    with m each block's max (as torch's kernel, which is slow on short blocks) and the block sums as products
    with the 0/1 block-membership matrix. ``__call__`` is the same map in the schema's column order."""

    def __init__(self, schema, like: torch.Tensor, softmax: bool, sigmoid: bool = True) -> None:
        self.schema, self.softmax, self.sigmoid = schema, softmax, sigmoid
        self.blocks = schema.categorical_blocks()
        self.cont = torch.tensor(schema.continuous_index(), dtype=torch.long, device=like.device)
        self.low, self.high = schema.bounds(like)
        cat = [i for block in self.blocks for i in range(block.start, block.stop)]
        self.width = len(cat)
        self.spans = []
        member = torch.zeros(len(cat), len(self.blocks))
        for k, block in enumerate(self.blocks):
            at = cat.index(block.start)
            self.spans.append((at, at + block.stop - block.start))
            member[at:at + block.stop - block.start, k] = 1.0
        mean, std = schema._stats(like)
        self.cat = torch.tensor(cat, dtype=torch.long, device=like.device)
        self.cat_mean, self.cat_std = mean[self.cat], std[self.cat]
        self.member = member.to(like)
        self.span = self.high - self.low
        # the full-width map (:class:`_SoftmaxSigmoid`): continuous columns are singleton blocks with a zero logit
        k = len(self.cont)
        self.in_scale = torch.cat([self.cat_std, torch.ones(k).to(like)])
        self.in_offset = torch.cat([self.cat_mean, torch.zeros(k).to(like)])
        self.out_scale = torch.cat([1.0 / self.cat_std, self.span])
        self.out_offset = torch.cat([-self.cat_mean / self.cat_std, self.low])
        full = torch.zeros(len(cat) + k, len(self.blocks) + k)
        full[:len(cat), :len(self.blocks)] = member
        full[len(cat):, len(self.blocks):] = torch.eye(k)
        self.full_member = full.to(like)
        self.implicit = torch.cat([torch.zeros(len(self.blocks)), torch.ones(k)]).to(like)
        self.perm = torch.cat([self.cat, self.cont])  # grouped column j = schema column perm[j]
        self.inverse = torch.argsort(self.perm)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        return self.grouped(z.index_select(-1, self.perm)).index_select(-1, self.inverse)

    def grouped(self, z: torch.Tensor) -> torch.Tensor:
        """The map on z with grouped columns (:attr:`perm`); returns the records with grouped columns. TabLeak's
        own prior (softmax and sigmoid) runs as :class:`_SoftmaxSigmoid` (its backward by hand); the ablations'
        maps are a few autograd operations."""
        if self.softmax and self.sigmoid and self.width and len(self.cont):
            return _SoftmaxSigmoid.apply(z, self)
        c = self.width
        parts = []
        if c:
            parts.append(self._probabilities(z[..., :c]).sub_(self.cat_mean).div_(self.cat_std) if self.softmax
                         else z[..., :c])
        if len(self.cont):
            value = z[..., c:]
            parts.append(self.low + (self.high - self.low) * torch.sigmoid(value) if self.sigmoid else value)
        return torch.cat(parts, dim=-1) if len(parts) > 1 else parts[0]

    def _probabilities(self, logits: torch.Tensor) -> torch.Tensor:
        """Every categorical block's softmax of its de-standardized logits (grouped columns), a new tensor.

        The softmax is shift-invariant per block, so one shift per record (its largest logit: nothing overflows)
        serves every block unless a block lies so far below it that its exponentials underflow (block sum
        < 1e-30, i.e. ~70 below the record's max); only then is each block shifted by its own max. Reading that
        check is a host sync: off the CPU every block is shifted by its own max from the start (no sync per step)."""
        raw = torch.addcmul(self.cat_mean, logits, self.cat_std)
        with torch.no_grad():
            shift = raw.amax(dim=-1, keepdim=True)
        e = (raw - shift).exp() if torch.is_grad_enabled() and raw.requires_grad else torch.sub(raw, shift).exp_()
        sums = e @ self.member
        if raw.device.type != "cpu" or bool((sums.detach() < 1e-30).any()):
            with torch.no_grad():
                shift = torch.stack([raw[..., a:b].amax(dim=-1) for a, b in self.spans], dim=-1) @ self.member.T
            e = (raw - shift).exp()
            sums = e @ self.member
        if torch.is_grad_enabled() and e.requires_grad:
            return e / (sums @ self.member.T)
        return e.div_(sums @ self.member.T)

    def full_probabilities(self, z: torch.Tensor) -> torch.Tensor:
        """Every block's softmax over the full width (grouped columns, no autograd): the categorical blocks'
        probabilities, and each continuous column's sigmoid as the softmax of (z, 0). One shift per record,
        m = max(0, largest logit), so nothing overflows; if a block's sum underflows (< 1e-30) the categorical blocks
        are computed block by block (:meth:`_probabilities`) and the sigmoids by torch's kernel. Off the CPU that
        block-by-block path is taken from the start: reading the underflow check would sync the device every step."""
        if z.device.type != "cpu":
            c = self.width
            return torch.cat([self._probabilities(z[..., :c]), torch.sigmoid(z[..., c:])], dim=-1)
        raw = torch.addcmul(self.in_offset, z, self.in_scale)
        shift = raw.amax(dim=-1, keepdim=True).clamp_min_(0.0)
        e = torch.sub(raw, shift).exp_()
        sums = torch.matmul(e, self.full_member).add_(torch.exp(-shift) * self.implicit)
        if bool((sums < 1e-30).any()):
            c = self.width
            return torch.cat([self._probabilities(z[..., :c]), torch.sigmoid(z[..., c:])], dim=-1)
        return e.div_(torch.matmul(sums, self.full_member.T))

    def restart_output(self, z: torch.Tensor) -> torch.Tensor:
        """A restart's result as the reference returns it (§2 step 5): the categorical blocks stay the optimized
        logits, the continuous columns go through the sigmoid. The pooling and the entropy softmax the logits ONCE
        (``median+softmax``); softmaxing the already softmaxed probabilities again would flatten every category
        distribution towards uniform, changing the median's argmax and every categorical entropy."""
        if not (self.sigmoid and len(self.cont)):
            return z
        out = z.clone()
        out[..., self.cont] = self.low + (self.high - self.low) * torch.sigmoid(z[..., self.cont])
        return out


class _SoftmaxSigmoid(torch.autograd.Function):
    """z (grouped columns) → records (grouped columns), and its backward by hand, over the full width at once.

    A sigmoid is the softmax of a block of two logits, z and a constant 0: so every continuous column is a block
    of its own with an implicit zero logit, and one block softmax p serves all columns. Then x = a ⊙ p + b
    (categorical a = 1/σ, b = −μ/σ: re-standardized; continuous a = span, b = low) and, with q = p ⊙ a ⊙ ∂x,
    ∂z = s ⊙ (q − p ⊙ Σ_block q), s the de-standardizing scale (σ, or 1 for a continuous column): for a continuous
    column that is ∂x ⊙ span ⊙ p(1 − p), the sigmoid's derivative."""

    @staticmethod
    def forward(ctx, z, prior):
        p = prior.full_probabilities(z)
        ctx.save_for_backward(p)
        ctx.prior = prior
        return torch.addcmul(prior.out_offset, p, prior.out_scale)

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        prior = ctx.prior
        q = (grad * prior.out_scale).mul_(p)
        q.addcmul_(p, (q @ prior.full_member) @ prior.full_member.T, value=-1.0)
        return q.mul_(prior.in_scale), None
