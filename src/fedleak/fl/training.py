"""FedAvg server training: rounds of sampled clients, each running the one client update.

Used to attack trained models at later rounds (Dimitrov et al., App. B.2 / Table 7: the FEMNIST
net trained with FedAvg, 10 clients a round, attacked at rounds 1, 6 and 11). As in the authors'
``train_femnist.sh`` (research note §A.2): every round samples ``clients_per_round`` distinct
clients uniformly, each trains locally with :func:`fedleak.fl.client_update` from the current
global weights, and the server takes the **plain (unweighted) mean** of the returned client
weights. Buffers (BatchNorm statistics) are left as they are.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import FedleakError
from ..types.params import buffers_of, params_of
from ..types import ClientData, Protocol
from .client import client_update
from .defenses import Defense

RoundCallback = Callable[[int, int], None]  # (round finished, total rounds)


def average_params(updates: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise unweighted mean of parameter dicts with the same keys."""
    if not updates:
        raise FedleakError("cannot average zero client models")
    return {k: torch.stack([u[k] for u in updates]).mean(0) for k in updates[0]}


def train_fedavg(model: nn.Module, clients: Sequence[ClientData], rounds: int, clients_per_round: int,
                 protocol: Protocol, seed: int = 0, progress: Optional[RoundCallback] = None,
                 defense: Defense | str | None = None) -> nn.Module:
    """Train ``model`` in place for ``rounds`` FedAvg rounds and return it.

    Round r samples ``min(clients_per_round, len(clients))`` clients without replacement from a
    NumPy generator seeded with ``seed``; client j of round r runs :func:`client_update` (the
    victim's code path, so the same protocol and ``defense`` apply) with its own derived seed.
    ``rounds=0`` returns the model unchanged. Deterministic given ``seed``.
    """
    if int(rounds) != rounds or rounds < 0:
        raise FedleakError(f"rounds must be a non-negative integer, got {rounds}")
    if int(clients_per_round) != clients_per_round or clients_per_round < 1:
        raise FedleakError(f"clients_per_round must be a positive integer, got {clients_per_round}")
    if not clients:
        raise FedleakError("FedAvg training needs at least one client")
    if protocol.algorithm != "fedavg":
        raise FedleakError(f"train_fedavg runs FedAvg rounds; got protocol algorithm {protocol.algorithm!r}")
    defense = Defense.parse(defense)
    rng = np.random.default_rng(int(seed))
    per_round = min(int(clients_per_round), len(clients))
    for r in range(int(rounds)):
        chosen = rng.choice(len(clients), size=per_round, replace=False)
        server = params_of(model)
        buffers = buffers_of(model)
        results = []
        for j, index in enumerate(chosen.tolist()):
            update = client_update(model, clients[index], protocol, seed=int(seed) * 1_000_003 + r * 1000 + j,
                                   defense=defense, params=server, buffers=buffers)
            results.append(update.client_params)
        averaged = average_params(results)
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(averaged[name])
        if progress is not None:
            progress(r + 1, int(rounds))
    return model
