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


def _key(name: str) -> str:
    return name.replace(".", "__")


class Restarts(nn.Module):
    """``model`` run R times side by side; parameters are the stacked copies ``copies.<name>`` (R, ...)."""

    def __init__(self, model: nn.Module, params: Params, restarts: int) -> None:
        super().__init__()
        self._model = [model]  # not a submodule: its own parameters are never the ensemble's
        self.names = list(params)
        self.restarts = int(restarts)
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
    """Every restart's summed gradient (R, ...) per parameter: ``inputs`` (R, n, d), ``labels`` (n,) or (R, n)."""
    restarts, n = inputs.shape[0], inputs.shape[1]
    flat = inputs.reshape(restarts * n, *inputs.shape[2:])
    tiled = labels.reshape(-1).repeat(restarts) if labels.dim() == 1 else labels.reshape(-1)
    result = local_training(ensemble, ensemble.stacked(params), flat, tiled,
                            expand_schedule(schedule, n, restarts), lr, create_graph=create_graph,
                            loss_fn=ensemble.loss, train_mode=train_mode)
    return ensemble.unstack(result.grad_sum)


def cosine_distances(simulated: dict[str, torch.Tensor], observed: Params) -> torch.Tensor:
    """(R,) 1 − cosine between each restart's gradient and the observed one, over all tensors concatenated."""
    names = list(observed)
    restarts = simulated[names[0]].shape[0]
    sim = torch.cat([simulated[k].reshape(restarts, -1) for k in names], dim=1)
    obs = torch.cat([observed[k].reshape(1, -1).to(sim.dtype) for k in names], dim=1)
    return 1.0 - F.cosine_similarity(sim, obs.expand_as(sim), dim=1, eps=1e-12)
