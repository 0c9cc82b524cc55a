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


def secure_aggregate_per_client(model_for, clients: Sequence[ClientData], protocol: Protocol, *, seed: int = 0,
                                defense: Defense | str | None = None, metadata: Optional[dict] = None) -> Update:
    """Secure aggregation when the server shipped a *different* model to each client (LOKI's threat model).

    ``model_for(k)`` is the model client k receives (same parameter names and shapes for every k).
    Each client runs the one client update from its own model; the server learns only the
    N-weighted mean of the K results: FedSGD the mean gradient, FedAvg the mean weight change
    Σ Nₖ(θᶜₖ − θˢₖ)/Σ Nₖ, returned against client 0's θˢ (only parameters shared by all clients
    are meaningful in it). Accumulated client by client, so K large models never sit in memory at once.
    """
    clients = list(clients)
    if not clients:
        raise FedleakError("secure aggregation needs at least one client update")
    total = sum(len(c) for c in clients)
    acc, reference, first = None, None, None
    for k, client in enumerate(clients):
        update = client_update(model_for(k), client, protocol, seed=seed + k, defense=defense)
        weight = int(update.num_samples) / total
        values = update.gradient if update.is_fedsgd else {
            n: update.client_params[n] - update.server_params[n] for n in update.server_params}
        if acc is None:
            first, reference = update, update.server_params
            acc = {n: weight * v for n, v in values.items()}
        else:
            if set(values) != set(acc) or any(values[n].shape != acc[n].shape for n in acc):
                raise FedleakError(f"secure aggregation: client {k}'s model has other parameters than client 0's")
            for n, v in values.items():
                acc[n] += weight * v
    meta = {"secure_aggregation": {"clients": len(clients), "per_client_models": True,
                                   "num_samples": [len(c) for c in clients]}}
    meta.update(metadata or {})
    if first.is_fedsgd:
        return Update(reference, first.protocol, total, gradient=acc, buffers=first.buffers, metadata=meta)
    return Update(reference, first.protocol, total, client_params={n: reference[n] + d for n, d in acc.items()},
                  buffers=first.buffers, metadata=meta)
