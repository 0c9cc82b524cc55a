"""The gradient of a ReLU MLP's mean cross-entropy in closed form, batched over restarts and differentiable.

TabLeak's objective (Vero et al. 2023, §2 step 3; research notes §2) matches the gradient of the model at the
dummy records to the observed one; its own gradient with respect to the records is a second derivative, which
autograd computes by differentiating its own backward graph (``create_graph``: the double backward, about 60 % of
the attack's cost). For the papers' MLP (Linear–ReLU–…–Linear, :class:`fedleak.models.zoo.MLP`) and the mean
cross-entropy the per-batch gradient is a short closed form (back-propagation written out):

    a₀ = x,  hₗ = aₗ₋₁Wₗᵀ + bₗ,  aₗ = ReLU(hₗ)            (forward, l = 1 … L, no ReLU after the last)
    δ_L = (softmax(h_L) − onehot(y)) / n                 (mean cross-entropy)
    ∂W_l = δ_lᵀ aₗ₋₁,  ∂b_l = Σ_rows δ_l,  δₗ₋₁ = (δ_l W_l) ⊙ 1[hₗ₋₁ > 0]

written with batched matrix products over the restarts dimension (R stacked copies of the weights, R × n
records). It is an ordinary differentiable function of the records (and of the weights), so ONE first-order
backward through it gives the objective's gradient — the same number autograd's double backward gives (the ReLU
mask is piecewise constant; at hₗ = 0 both use the derivative 0). ``tests/test_tabular_fast_gradient.py`` checks
it against autograd. :func:`mlp_layers` says whether a model is such an MLP; any other model (the user's own
module, FT-Transformer, a wrapper) is not, and the caller keeps autograd.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

Layers = list[tuple[str, str]]


def mlp_layers(model: nn.Module) -> Optional[Layers]:
    """``[(weight name, bias name), …]`` of ``model`` if it is exactly the zoo's ReLU MLP trained with the mean
    cross-entropy (no loss of its own, no hooks, every layer with a bias); else None (use autograd)."""
    from ...models.zoo import MLP

    if type(model) is not MLP or callable(getattr(model, "loss_fn", None)):
        return None
    layers = []
    for i in range(1, model.num_layers + 1):
        layer = getattr(model, f"fc{i}", None)
        if type(layer) is not nn.Linear or layer.bias is None:
            return None
        layers.append((f"fc{i}.weight", f"fc{i}.bias"))
    for module in model.modules():
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
            return None
    return layers


def batched_gradient(layers: Layers, params: dict[str, torch.Tensor], x: torch.Tensor,
                     labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every restart's mean-cross-entropy gradient: ``params`` under the model's names, each either shared by all
    restarts (the model's own shape: one matrix product over all R·n rows) or stacked (R, …); ``x`` (R, n, d),
    ``labels`` class indices (n,) or (R, n). Returns the gradients (R, …) under the same names."""
    restarts, n = x.shape[0], x.shape[1]
    activations = [x]
    h = x
    for i, (w, b) in enumerate(layers):
        h = torch.matmul(h, params[w].transpose(-1, -2)) + params[b].unsqueeze(-2)  # (R, n, out)
        if i < len(layers) - 1:
            h = F.relu(h)
            activations.append(h)
    labels = labels.reshape(-1, n).expand(restarts, n)
    onehot = F.one_hot(labels.long(), h.shape[-1]).to(h.dtype)
    delta = (torch.softmax(h, dim=-1) - onehot) / n  # (R, n, classes)
    grads: dict[str, torch.Tensor] = {}
    for i in range(len(layers) - 1, -1, -1):
        w, b = layers[i]
        grads[w] = torch.bmm(delta.transpose(1, 2), activations[i])
        grads[b] = delta.sum(dim=1)
        if i:
            # δ ⊙ 1[h > 0] as autograd's ReLU backward computes it (one fused, differentiable operation)
            delta = torch.ops.aten.threshold_backward(torch.matmul(delta, params[w]), activations[i], 0.0)
    return grads


def simulate_mlp(layers: Layers, params: dict[str, torch.Tensor], inputs: torch.Tensor, labels: torch.Tensor,
                 schedule, lr: float) -> dict[str, torch.Tensor]:
    """Local SGD over ``schedule`` (batches of row indices into each restart's n rows) from ``params`` (shared),
    every step's gradient in closed form; returns the summed gradient (R, …) as the client computes it (one step:
    the gradient; several: (θ₀ − θ_T)/lr, :class:`fedleak.fl.local_sgd.LocalResult`)."""
    batches = [batch for epoch in schedule for batch in epoch]
    current = params
    for i, batch in enumerate(batches):
        y = labels.index_select(-1, batch)
        g = batched_gradient(layers, current, inputs.index_select(1, batch), y)
        if len(batches) == 1:
            return g
        current = {k: current[k] - lr * g[k] for k in current}
    return {k: (params[k] - current[k]) / lr for k in params}


def cosine_distances_mlp(layers: Layers, params: dict[str, torch.Tensor], x: torch.Tensor, labels: torch.Tensor,
                         observed: dict[str, torch.Tensor]) -> torch.Tensor:
    """(R,) 1 − cosine between each restart's one-step gradient and ``observed`` (FedSGD): the same number as
    :func:`fedleak.attacks.tabular.restarts.cosine_distances` of :func:`batched_gradient`, with its gradient with
    respect to the records written out by hand (:class:`_CosineToObserved`: about half the matrix products and a
    fraction of the element-wise passes autograd's double backward takes). ``params`` are shared by the restarts;
    the gradient flows to ``x`` only (:func:`fedleak.attacks.tabular.restarts.distances` keeps autograd when a
    weight or the observed update itself requires one)."""
    restarts, n = x.shape[0], x.shape[1]
    onehot = F.one_hot(labels.reshape(-1, n).expand(restarts, n).long(), params[layers[-1][1]].shape[0]).to(x.dtype)
    weights = tuple(params[w].to(x.dtype) for w, _ in layers)
    biases = tuple(params[b].to(x.dtype) for _, b in layers)
    targets = tuple(observed[w].to(x.dtype) for w, _ in layers)
    target_biases = tuple(observed[b].to(x.dtype) for _, b in layers)
    return _CosineToObserved.apply(x, onehot, weights, biases, targets, target_biases)


class _CosineToObserved(torch.autograd.Function):
    """D = 1 − S/√(Q·O) per restart, S = Σ_l ⟨∂θ_l, G_l⟩, Q = Σ_l ‖∂θ_l‖², O = ‖G‖², and ∂D/∂x by hand.

    Forward (module docstring's closed form): per layer either the weight gradient ∂W = δᵀa is formed (then
    ⟨∂W, G⟩ and ‖∂W‖² are element-wise), or, when n·(in + out) < in·out, never formed: ⟨∂W, G⟩ = Σ δ ⊙ (aGᵀ)
    with aGᵀ from the forward product, ‖∂W‖² = Σ (δδᵀ) ⊙ (aaᵀ) from two n × n Gram matrices.

    Backward, with α = −1/√(QO) and β = S·O/√(QO)³ (times the incoming gradient) so that ∂D/∂∂W = Ĝ = αG + β∂W:
    the adjoint of every δ_l, going up the layers, is ``a Ĝᵀ + 1ĝ_bᵀ + (adjoint of δ_{l−1} ⊙ 1[a > 0]) W_lᵀ``
    (Gram route: a Ĝᵀ = α aGᵀ + β (aaᵀ) δ), and each activation collects δ Ĝ (Gram route: α δG + β (δδᵀ) a); at
    the top the softmax's Jacobian p ⊙ (v − ⟨p, v⟩)/n turns the adjoint of δ_L into that of the logits, which goes
    down the forward pass as an ordinary backward (· W, ReLU mask) into the records. The ReLU masks are piecewise
    constant (derivative 0 at 0, as autograd's). ``tests/test_tabular_fast_gradient.py`` checks value and gradient
    against autograd's double backward."""

    @staticmethod
    def forward(ctx, x, onehot, weights, biases, targets, target_biases):
        restarts, n = x.shape[0], x.shape[1]
        routes, activations, masks, projected = [], [x], [None], []
        h = x
        for i, (w, b, big) in enumerate(zip(weights, biases, targets)):
            out_dim, in_dim = w.shape
            gram = n * (in_dim + out_dim) < in_dim * out_dim
            routes.append(gram)
            rows = h.reshape(-1, in_dim)
            if gram:
                both = torch.mm(rows, torch.cat([w, big], dim=0).t()).view(restarts, n, 2 * out_dim)
                h, aim = both[..., :out_dim] + b, both[..., out_dim:]
            else:
                h, aim = torch.addmm(b, rows, w.t()).view(restarts, n, out_dim), None
            projected.append(aim)
            if i < len(weights) - 1:
                h = h.relu_()
                activations.append(h)
                masks.append(torch.sign(h))  # 1[h > 0] as a float (h ≥ 0 after the ReLU): masks are products
        p = torch.sub(h, h.amax(dim=-1, keepdim=True)).exp_()  # softmax (torch's kernel is slow on 2 classes)
        p = p.div_(p.sum(dim=-1, keepdim=True))
        delta = (p - onehot) / n
        count = len(weights)
        deltas, grams, formed, bias_grads = [None] * count, [None] * count, [None] * count, [None] * count
        dot = sq = 0
        for i in range(count - 1, -1, -1):
            a, big, big_b = activations[i], targets[i], target_biases[i]
            deltas[i] = delta
            g_b = bias_grads[i] = delta.sum(dim=1)
            dot = dot + g_b @ big_b
            sq = sq + _row_dots(g_b, g_b)
            if routes[i]:
                grams[i] = (torch.bmm(delta, delta.transpose(1, 2)), torch.bmm(a, a.transpose(1, 2)))
                dot = dot + _row_dots(delta, projected[i])
                sq = sq + _row_dots(grams[i][0], grams[i][1])
            else:
                g_w = formed[i] = torch.bmm(delta.transpose(1, 2), a)
                dot = dot + g_w.reshape(restarts, -1) @ big.reshape(-1)
                sq = sq + _row_dots(g_w, g_w)
            if i:
                delta = torch.matmul(delta, weights[i]).mul_(masks[i])
        obs = sum(t.pow(2).sum() for t in targets) + sum(t.pow(2).sum() for t in target_biases)
        norm = (sq * obs).sqrt()
        ctx.save_for_backward(p, dot, obs, norm)
        ctx.parts = (routes, activations, masks, projected, deltas, grams, formed, bias_grads, weights, targets,
                     target_biases)
        return 1.0 - dot / norm.clamp_min(1e-12)

    @staticmethod
    def backward(ctx, grad):
        p, dot, obs, norm = ctx.saved_tensors
        routes, activations, masks, projected, deltas, grams, formed, bias_grads, weights, targets, target_biases = \
            ctx.parts
        n = p.shape[1]
        denom = norm.clamp_min(1e-12)
        alpha = -grad / denom
        beta = torch.where(norm > 1e-12, grad * dot * obs / denom.pow(3), torch.zeros_like(norm))
        a3, b3 = alpha[:, None, None], beta[:, None, None]
        up = None  # adjoint of δ_{i−1} after its ReLU mask, carried up the layers
        collected = []  # each activation's share from the weight gradients: δ_i Ĝ_i
        for i, (a, d) in enumerate(zip(activations, deltas)):
            out_dim, in_dim = weights[i].shape
            g_hat_b = (alpha[:, None] * target_biases[i] + beta[:, None] * bias_grads[i])[:, None, :]
            if routes[i]:
                d_delta = torch.baddbmm(projected[i] * a3, grams[i][1], d * b3)
                collected.append(torch.baddbmm(torch.matmul(d, targets[i]).mul_(a3), grams[i][0], a * b3))
            else:
                g_hat = torch.addcmul(targets[i] * a3, formed[i], b3)  # αG + β∂W
                d_delta = torch.bmm(a, g_hat.transpose(1, 2))
                collected.append(torch.bmm(d, g_hat))
            d_delta.add_(g_hat_b)
            if up is not None:
                d_delta.view(-1, out_dim).addmm_(up.view(-1, in_dim), weights[i].t())
            if i < len(activations) - 1:
                up = d_delta.mul_(masks[i + 1])  # d_delta is not needed again: masked in place
        d_h = p * (d_delta - (p * d_delta).sum(dim=-1, keepdim=True)) / n
        for i in range(len(weights) - 1, -1, -1):
            out_dim, in_dim = weights[i].shape
            d_a = collected[i]
            d_a.view(-1, in_dim).addmm_(d_h.reshape(-1, out_dim), weights[i])
            if i:
                d_h = d_a.mul_(masks[i])
        return d_a, None, None, None, None, None


def _row_dots(u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Per restart (leading dimension) Σ u ⊙ v; a squared norm when ``v`` is ``u`` (torch's norm kernel, one pass)."""
    r = u.shape[0]
    if v is u:
        return torch.linalg.vector_norm(u.reshape(r, -1), dim=1).square()
    return (u * v).reshape(r, -1).sum(dim=1)
