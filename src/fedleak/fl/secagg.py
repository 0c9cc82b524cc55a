"""Secure aggregation: the server sees only the sum of K clients' updates.

With secure aggregation (Bonawitz et al. 2017) the server learns Σ_k Δ_k and nothing about the
individual Δ_k. :func:`aggregate_updates` forms what it sees from K updates that each came from
the one client update (:func:`fedleak.fl.client_update`), as the FedAvg average the server then
applies: θᶜ = θˢ + Σ_k N_k Δ_k / Σ_k N_k (FedSGD: the N-weighted mean gradient, which for equal N is
the gradient of the mean loss over all K·N examples). The result is an ordinary :class:`Update`
with N = Σ_k N_k, so every attack runs on it unchanged, as a server attacking the aggregate would
(Fowl et al. 2022 §4 attack exactly this with an imprint block).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from ..errors import FedleakError
from ..types import ClientData, Protocol, Update
from .client import client_update
from .defenses import Defense


def aggregate_updates(updates: Sequence[Update]) -> Update:
    """The N-weighted average of K updates that share θˢ and protocol: what secure aggregation reveals."""
    updates = list(updates)
    if not updates:
        raise FedleakError("secure aggregation needs at least one client update")
    first = updates[0]
    for other in updates[1:]:
        if other.protocol != first.protocol or other.is_fedsgd != first.is_fedsgd:
            raise FedleakError("secure aggregation needs updates of one protocol")
        if set(other.server_params) != set(first.server_params) or any(
                not torch.equal(other.server_params[k], v) for k, v in first.server_params.items()):
            raise FedleakError("secure aggregation needs updates computed from the same server weights")
    total = sum(int(u.num_samples) for u in updates)
    weights = [int(u.num_samples) / total for u in updates]
    meta = {"secure_aggregation": {"clients": len(updates), "client_ids": [u.metadata.get("client_id") for u in updates],
                                   "num_samples": [int(u.num_samples) for u in updates]}}
    if first.is_fedsgd:
        gradient = {k: sum(w * u.gradient[k] for w, u in zip(weights, updates)) for k in first.gradient}
        return Update(first.server_params, first.protocol, total, gradient=gradient, buffers=first.buffers,
                      metadata=meta)
    delta = {k: sum(w * (u.client_params[k] - u.server_params[k]) for w, u in zip(weights, updates))
             for k in first.server_params}
    client = {k: first.server_params[k] + d for k, d in delta.items()}
    return Update(first.server_params, first.protocol, total, client_params=client, buffers=first.buffers,
                  metadata=meta)


def secure_aggregate(model: nn.Module, clients: Sequence[ClientData], protocol: Protocol, *, seed: int = 0,
                     defense: Defense | str | None = None, metadata: Optional[dict] = None) -> Update:
    """K clients each run the one client update from the model's weights; the server gets their aggregate.

    Client k uses seed ``seed + k`` for its batch order and defense noise.
    """
    updates = [client_update(model, client, protocol, seed=seed + k, defense=defense)
               for k, client in enumerate(clients)]
    aggregate = aggregate_updates(updates)
    aggregate.metadata.update(metadata or {})
    return aggregate


def concatenate(clients: Sequence[ClientData]) -> ClientData:
    """The K clients' data as one set: the ground truth an aggregate attack is scored against."""
    clients = list(clients)
    if len(clients) == 1:
        return clients[0]
    return ClientData(torch.cat([c.inputs for c in clients]), torch.cat([c.labels for c in clients]),
                      "+".join(c.client_id for c in clients))
