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

A target returns ``(observed, simulate, num_inputs)``; ``simulate(inputs, labels)`` takes the
dummy inputs and the length-N label sequence (per-epoch targets tile it over epochs).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..fl.client import local_training, sequential_schedule
from ..types import Params, Update

Simulate = Callable[[torch.Tensor, torch.Tensor], Params]


def gradient_target(update: Update, model: nn.Module, scale: float | None = None) -> tuple[Params, Simulate, int]:
    """Match the pseudo-gradient with ``scale`` × one full-batch gradient at θˢ (default scale s)."""
    n = update.num_samples
    scale = float(update.num_steps if scale is None else scale)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        batch = [[torch.arange(inputs.shape[0], device=inputs.device)]]
        result = local_training(model, update.server_params, inputs, labels, batch, update.protocol.lr,
                                buffers=update.buffers, create_graph=True)
        return result.grad_sum if scale == 1.0 else {k: scale * g for k, g in result.grad_sum.items()}

    return update.pseudo_gradient(), simulate, n


def epoch_gradient_target(update: Update, model: nn.Module) -> tuple[Params, Simulate, int]:
    """E full-batch steps on the same N images, each gradient scaled by ⌈N/m⌉ (``none_epoch``)."""
    n = update.num_samples
    protocol = update.protocol
    per_epoch = protocol.batches_per_epoch(n)

    def scaled_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return per_epoch * torch.nn.functional.cross_entropy(logits, labels)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        full = [[torch.arange(n, device=inputs.device)] for _ in range(protocol.local_epochs())]
        return local_training(model, update.server_params, inputs, labels, full, protocol.lr,
                              buffers=update.buffers, create_graph=True, loss_fn=scaled_loss).grad_sum

    return update.pseudo_gradient(), simulate, n


def simulation_target(update: Update, model: nn.Module, per_epoch_inputs: bool,
                      schedule=None) -> tuple[Params, Simulate, int]:
    """Unrolled local SGD with the attacker's consecutive batches (Dimitrov et al. SimUpdate).

    With ``per_epoch_inputs`` there are E·N dummy images (epoch e uses block e) and a length-N
    label sequence is tiled E times (a length-E·N sequence is used as given: per-epoch labels, the
    known-batch-labels ablation of Table 8); otherwise the same N images serve every epoch (the
    ``shared`` baseline). ``schedule`` (epochs × batches × indices into the dummy inputs) replaces
    the consecutive batches, e.g. a batch composition the server was told.
    """
    n = update.num_samples
    protocol = update.protocol
    epochs = protocol.local_epochs()
    if schedule is None:
        schedule = sequential_schedule(n, protocol, per_epoch_inputs=per_epoch_inputs)

    def simulate(inputs: torch.Tensor, labels: torch.Tensor) -> Params:
        tile = per_epoch_inputs and labels.shape[0] == n
        tiled = labels.repeat(epochs, *([1] * (labels.dim() - 1))) if tile else labels
        sched = [[b.to(inputs.device) for b in epoch] for epoch in schedule]
        return local_training(model, update.server_params, inputs, tiled, sched, protocol.lr,
                              buffers=update.buffers, create_graph=True).grad_sum

    return update.pseudo_gradient(), simulate, n * epochs if per_epoch_inputs else n
