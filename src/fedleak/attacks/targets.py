"""Targets: which observed quantity an attack matches, and how it simulates it from dummy data.

Every simulation goes through the one client update, :func:`fedleak.fl.local_training`.

* :func:`gradient_target` — one gradient of the mean loss over all dummy inputs at θˢ, times
  ``scale``. FedSGD (DLG / IG); the ``fedsgd`` baseline of Dimitrov et al. on FedAvg updates with
  scale s = E·⌈N/m⌉ (research note §A.9, mode ``none``); AGIC's one-batch approximation
  ΔW/(−μ) (Xu et al. Eq. 4).
* :func:`epoch_gradient_target` — E full-batch steps, each scaled by ⌈N/m⌉ (``fedsgd-epoch``,
  mode ``none_epoch``).
* :func:`simulation_target` — the full local-step simulation with the attacker's fixed batch
  order: one shared image set for all epochs (IG's FedAvg simulation = the ``shared`` baseline,
  mode ``full``) or one set per epoch (SimUpdate, Dimitrov et al. §4.1, mode ``full_many``).
* :func:`interpolated_epoch_target` — AWA's interpolated per-epoch update (Song et al. 2023
  Eqs. 19–21): one epoch of minibatch SGD from the interpolated θ_{e−1}, matched to (θ_E − θ_0)/E.

A target returns ``(observed, simulate, num_inputs)``; ``simulate(inputs, labels)`` takes the
dummy inputs and the length-N label sequence (per-epoch targets tile it over epochs).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..errors import FedleakError
from ..fl.client import local_training, sequential_schedule
from ..types import Params, Update

Simulate = Callable[[torch.Tensor, torch.Tensor], Params]


def gradient_target(update: Update, model: nn.Module, scale: float | None = None) -> tuple[Params, Simulate, int]:
    """Match the pseudo-gradient with ``scale`` × one full-batch gradient at θˢ (default scale s)."""
    n = update.num_samples
    scale = float(update.num_steps if scale is None else scale)

    buffers = _scratch(update)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        batch = [[torch.arange(inputs.shape[0], device=inputs.device)]]
        result = local_training(model, update.server_params, inputs, labels, batch, update.protocol.lr,
                                buffers=buffers, private_buffers=True, create_graph=True,
                                train_mode=update.protocol.train_mode)
        return result.grad_sum if scale == 1.0 else {k: scale * g for k, g in result.grad_sum.items()}

    return update.pseudo_gradient(), simulate, n


def epoch_gradient_target(update: Update, model: nn.Module,
                          checkpoint_every: int = 0) -> tuple[Params, Simulate, int]:
    """E full-batch steps on the same N images, each gradient scaled by ⌈N/m⌉ (``none_epoch``)."""
    n = update.num_samples
    protocol = update.protocol
    per_epoch = protocol.batches_per_epoch(n)
    buffers = _scratch(update)

    def scaled_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return per_epoch * torch.nn.functional.cross_entropy(logits, labels)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        full = [[torch.arange(n, device=inputs.device)] for _ in range(protocol.local_epochs())]
        return local_training(model, update.server_params, inputs, labels, full, protocol.lr,
                              buffers=buffers, private_buffers=True, create_graph=True, loss_fn=scaled_loss,
                              train_mode=protocol.train_mode, checkpoint_every=checkpoint_every).grad_sum

    return update.pseudo_gradient(), simulate, n


def simulation_target(update: Update, model: nn.Module, per_epoch_inputs: bool,
                      schedule=None, checkpoint_every: int = 0) -> tuple[Params, Simulate, int]:
    """Unrolled local SGD with the attacker's consecutive batches (Dimitrov et al. SimUpdate).

    With ``per_epoch_inputs`` there are E·N dummy images (epoch e uses block e) and a length-N
    label sequence is tiled E times (a length-E·N sequence is used as given: per-epoch labels, the
    known-batch-labels ablation of Table 8); otherwise the same N images serve every epoch (the
    ``shared`` baseline). ``schedule`` (epochs × batches × indices into the dummy inputs) replaces
    the consecutive batches, e.g. a batch composition the server was told. ``checkpoint_every``
    bounds the memory of the unrolled steps (see :func:`fedleak.fl.local_training`).
    """
    n = update.num_samples
    protocol = update.protocol
    epochs = protocol.local_epochs()
    if schedule is None:
        schedule = sequential_schedule(n, protocol, per_epoch_inputs=per_epoch_inputs)
    buffers = _scratch(update)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        tile = per_epoch_inputs and labels.shape[0] == n
        tiled = labels.repeat(epochs, *([1] * (labels.dim() - 1))) if tile else labels
        return local_training(model, update.server_params, inputs, tiled, schedule, protocol.lr,
                              buffers=buffers, private_buffers=True, create_graph=True,
                              train_mode=protocol.train_mode, checkpoint_every=checkpoint_every).grad_sum

    return update.pseudo_gradient(), simulate, n * epochs if per_epoch_inputs else n


def interpolated_epoch_target(update: Update, model: nn.Module, epoch: int = 1,
                              checkpoint_every: int = 0) -> tuple[Params, Simulate, int]:
    """AWA's interpolated per-epoch target (Song, Wang, Zuazua 2023, §4.1, Eqs. 19–21).

    With E local epochs the intermediate weights are interpolated linearly,
    θ_e ≈ θ_0 + (e/E)(θ_E − θ_0) (Eq. 19), so every epoch's update is Δθ_e ≈ (θ_E − θ_0)/E
    (Eq. 20). The simulation runs *one* epoch of minibatch SGD (the attacker's consecutive
    batches, scenario 3) on the N dummy images from θ_{e−1} (Eq. 21). Both sides are expressed as
    summed gradients (update / −η), like the other targets: observed Ĝ/E, simulated Σ_t g_t.
    """
    if update.is_fedsgd:
        raise FedleakError("the interpolated per-epoch target needs a FedAvg update (client weights), "
                           "got a FedSGD gradient")
    protocol = update.protocol
    epochs = protocol.local_epochs()
    if int(epoch) != epoch or not 1 <= epoch <= epochs:
        raise FedleakError(f"epoch must be an integer in 1..{epochs} (the update has E={epochs}), got {epoch!r}")
    n = update.num_samples
    fraction = (epoch - 1) / epochs
    start = {k: update.server_params[k] + fraction * (update.client_params[k] - update.server_params[k])
             for k in update.server_params}
    observed = {k: g / epochs for k, g in update.pseudo_gradient().items()}
    schedule = sequential_schedule(n, protocol, epochs=1)
    buffers = _scratch(update)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        return local_training(model, start, inputs, labels, schedule, protocol.lr, buffers=buffers,
                              private_buffers=True, create_graph=True, train_mode=protocol.train_mode,
                              checkpoint_every=checkpoint_every).grad_sum

    return observed, simulate, n


def _scratch(update: Update) -> Params:
    """One private copy of the update's buffers per target, which train-mode BatchNorm may overwrite
    on every call (its outputs use batch statistics, never the running ones); the update's own
    buffers stay untouched and nothing is copied per attack iteration."""
    return {k: v.clone() for k, v in (update.buffers or {}).items()}
