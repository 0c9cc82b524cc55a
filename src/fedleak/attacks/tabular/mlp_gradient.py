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
    """(R,) 1 − cosine between each restart's one-step gradient and ``observed`` (FedSGD), without forming the
    weight gradients where that is cheaper. For ∂W = δᵀa: ⟨∂W, G⟩ = Σ δ ⊙ (aGᵀ), with aGᵀ from the same matrix
    product over all R·n rows as the forward aWᵀ; ‖∂W‖² = Σ (δδᵀ) ⊙ (aaᵀ), two n × n Gram matrices per restart
    when n·(in + out) < in·out, else ∂W itself. The same number as :func:`fedleak.attacks.tabular.restarts.
    cosine_distances` of :func:`batched_gradient`, in fewer operations on smaller tensors. ``params`` are shared
    by the restarts."""
    restarts, n = x.shape[0], x.shape[1]
    activations, projected = [x], []  # projected[l] = a_l G_lᵀ, formed with the forward product (one GEMM)
    h = x
    for i, (w, b) in enumerate(layers):
        out_dim = params[w].shape[0]
        both = torch.matmul(h, torch.cat([params[w], observed[w].to(params[w])], dim=0).transpose(0, 1))
        h = both[..., :out_dim] + params[b]
        projected.append(both[..., out_dim:])
        if i < len(layers) - 1:
            h = F.relu(h)
            activations.append(h)
    onehot = F.one_hot(labels.reshape(-1, n).expand(restarts, n).long(), h.shape[-1]).to(h.dtype)
    delta = (torch.softmax(h, dim=-1) - onehot) / n
    dot = sq = obs_sq = 0
    for i in range(len(layers) - 1, -1, -1):
        w, b = layers[i]
        a = activations[i]
        big_w, big_b = observed[w].to(a), observed[b].to(a)
        g_b = delta.sum(dim=1)
        dot = dot + g_b @ big_b + (delta * projected[i]).sum(dim=(1, 2))
        out_dim, in_dim = big_w.shape
        if n * (in_dim + out_dim) < in_dim * out_dim:
            gram = torch.bmm(delta, delta.transpose(1, 2)) * torch.bmm(a, a.transpose(1, 2))
            sq = sq + gram.sum(dim=(1, 2)) + (g_b * g_b).sum(dim=1)
        else:
            g_w = torch.bmm(delta.transpose(1, 2), a)
            sq = sq + (g_w * g_w).sum(dim=(1, 2)) + (g_b * g_b).sum(dim=1)
        obs_sq = obs_sq + big_w.pow(2).sum() + big_b.pow(2).sum()
        if i:
            delta = torch.ops.aten.threshold_backward(torch.matmul(delta, params[w]), a, 0.0)
    return 1.0 - dot / (sq * obs_sq).sqrt().clamp_min(1e-12)
