"""Independent restarts of an attack as ONE tensor: R copies of the model evaluated in one vmapped call.

TabLeak's 30 restarts are independent optimizations (research notes §4: the reference runs them one after
another, 12–25 min per batch of 32 on this machine). Here the dummy records of all restarts form one tensor
(R·n, d), laid out restart-major, and :class:`Restarts` is a module whose parameters are the R stacked copies of
the model's parameters: its forward pass runs the model on every restart's rows with its own copy
(``torch.func.vmap`` over ``functional_call``). Its loss is the sum over restarts of each restart's mean loss, so
the gradient with respect to copy r is exactly restart r's gradient, and an SGD step on the stacked copies is
every restart's own step. The client update itself is still the one local-SGD function
(:func:`fedleak.fl.client.local_training`): FedSGD (one step) and FedAvg simulations (many) alike.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call, vmap
from torch.nn import functional as F

from ...fl.client import local_training
from ...types import Params
from .mlp_gradient import cosine_distances_mlp, mlp_layers, simulate_mlp


def _key(name: str) -> str:
    return name.replace(".", "__")


class Restarts(nn.Module):
    """``model`` run R times side by side; parameters are the stacked copies ``copies.<name>`` (R, ...)."""

    def __init__(self, model: nn.Module, params: Params, restarts: int) -> None:
        super().__init__()
        self._model = [model]  # not a submodule: its own parameters are never the ensemble's
        self.names = list(params)
        self.restarts = int(restarts)
        self.layers = mlp_layers(model)  # the closed-form gradient applies (a ReLU MLP), else None: autograd
        self.copies = nn.ParameterDict({_key(k): nn.Parameter(v.detach().unsqueeze(0).repeat(
            self.restarts, *([1] * v.dim())), requires_grad=False) for k, v in params.items()})

    def stacked(self, params: Params) -> Params:
        """``params`` repeated R times under the ensemble's parameter names."""
        return {f"copies.{_key(k)}": v.unsqueeze(0).repeat(self.restarts, *([1] * v.dim())) for k, v in params.items()}

    def unstack(self, stacked: Params) -> dict[str, torch.Tensor]:
        """Stacked results (R, ...) under the model's own names."""
        return {k: stacked[f"copies.{_key(k)}"] for k in self.names}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        model = self._model[0]
        params = {k: self.copies[_key(k)] for k in self.names}
        per = x.reshape(self.restarts, -1, *x.shape[1:])
        out = vmap(lambda p, xr: functional_call(model, p, (xr,)))(params, per)
        return out.reshape(-1, *out.shape[2:])

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Σ_r mean cross-entropy of restart r (the rows are restart-major, every restart holds as many)."""
        return F.cross_entropy(logits, labels) * self.restarts


def expand_schedule(schedule, rows_per_restart: int, restarts: int):
    """A schedule over one restart's rows → the same batches over all restarts' rows (restart-major)."""
    offsets = torch.arange(restarts) * rows_per_restart
    return [[(batch[None, :] + offsets[:, None]).reshape(-1) for batch in epoch] for epoch in schedule]


def simulate(ensemble: Restarts, params: Params, inputs: torch.Tensor, labels: torch.Tensor, schedule, lr: float,
             *, create_graph: bool = True, train_mode: bool = True) -> dict[str, torch.Tensor]:
    """Every restart's summed gradient (R, ...) per parameter: ``inputs`` (R, n, d), ``labels`` (n,) or (R, n).

    For a ReLU MLP with class-index labels the gradients are the closed form of :mod:`.mlp_gradient` (one
    first-order backward for the attack instead of a double backward; same values); otherwise the one local-SGD
    function through the vmapped ensemble, ``create_graph`` as asked."""
    if closed_form(ensemble, labels, params):
        with torch.set_grad_enabled(create_graph and torch.is_grad_enabled()):
            return simulate_mlp(ensemble.layers, dict(params), inputs, labels.to(inputs.device), schedule, lr)
    restarts, n = inputs.shape[0], inputs.shape[1]
    flat = inputs.reshape(restarts * n, *inputs.shape[2:])
    tiled = labels.reshape(-1).repeat(restarts) if labels.dim() == 1 else labels.reshape(-1)
    result = local_training(ensemble, ensemble.stacked(params), flat, tiled,
                            expand_schedule(schedule, n, restarts), lr, create_graph=create_graph,
                            loss_fn=ensemble.loss, train_mode=train_mode)
    return ensemble.unstack(result.grad_sum)


def closed_form(ensemble: Restarts, labels: torch.Tensor, named: Params) -> bool:
    """Whether :mod:`.mlp_gradient` computes this ensemble's gradients: a ReLU MLP, class-index labels, and
    ``named`` (weights or an observed update) exactly the MLP's parameters."""
    return (ensemble.layers is not None and not labels.is_floating_point()
            and set(named) == {name for layer in ensemble.layers for name in layer})


def cosine_distances(simulated: dict[str, torch.Tensor], observed: Params) -> torch.Tensor:
    """(R,) 1 − cosine between each restart's gradient and the observed one, over all tensors concatenated
    (the reference's ``_cosine_similarity_loss``: one global cosine), as per-tensor dot products and squared norms
    (no concatenated copy; the product with the fixed observed tensor is one matrix-vector product)."""
    names = list(observed)
    restarts = simulated[names[0]].shape[0]
    dot = sq = obs_sq = 0
    for k in names:
        g = simulated[k].reshape(restarts, -1)
        o = observed[k].reshape(-1).to(g)
        dot = dot + g @ o
        sq = sq + (g * g).sum(dim=1)
        obs_sq = obs_sq + o.dot(o)
    return 1.0 - dot / (sq * obs_sq).sqrt().clamp_min(1e-12)


def distances(ensemble: Restarts, params: Params, inputs: torch.Tensor, labels: torch.Tensor, schedule, lr: float,
              observed: Params, *, create_graph: bool = True, train_mode: bool = True) -> torch.Tensor:
    """(R,) each restart's cosine distance to ``observed``: :func:`cosine_distances` of :func:`simulate`, or, for
    one local step of a ReLU MLP with class-index labels, :func:`.mlp_gradient.cosine_distances_mlp` (the same
    number without the weight gradients, its gradient with respect to the records by hand) when no weight requires a
    gradient."""
    steps = sum(len(epoch) for epoch in schedule)
    fixed = not any(t.requires_grad for t in (*params.values(), *observed.values()))
    if steps == 1 and fixed and closed_form(ensemble, labels, observed):
        with torch.set_grad_enabled(create_graph and torch.is_grad_enabled()):
            (batch,) = [b.to(inputs.device) for epoch in schedule for b in epoch]
            labels = labels.to(inputs.device)
            if not torch.equal(batch, torch.arange(inputs.shape[1], device=inputs.device)):
                inputs, labels = inputs.index_select(1, batch), labels.index_select(-1, batch)
            return cosine_distances_mlp(ensemble.layers, dict(params), inputs, labels, observed)
    return cosine_distances(simulate(ensemble, params, inputs, labels, schedule, lr, create_graph=create_graph,
                                     train_mode=train_mode), observed)


def grouped_target(ensemble: Restarts, params: Params, observed: Params, perm: torch.Tensor, fallback):
    """The attack's distances for records whose columns are permuted (column j = schema column ``perm[j]``, the
    grouped layout of TabLeak's structural prior): for the closed form the first layer's weight columns and the
    observed first-layer gradient's columns are permuted alike (every dot product and norm, hence every cosine,
    is unchanged); otherwise the records are put back in schema order for ``fallback(x)``, the schema-order
    distances. The result is called as ``target(x, labels, schedule, lr, train_mode)``."""
    inverse = torch.argsort(perm)
    if ensemble.layers is None or set(observed) != {name for layer in ensemble.layers for name in layer}:
        return lambda x, *rest: fallback(x.index_select(-1, inverse.to(x.device)))
    first = ensemble.layers[0][0]
    params = {**params, first: params[first].index_select(1, perm.to(params[first].device))}
    observed = {**observed, first: observed[first].index_select(1, perm.to(observed[first].device))}

    def target(x, labels, schedule, lr, train_mode):
        if not closed_form(ensemble, labels, observed):
            return fallback(x.index_select(-1, inverse.to(x.device)))
        return distances(ensemble, params, x, labels, schedule, lr, observed, train_mode=train_mode)

    return target
