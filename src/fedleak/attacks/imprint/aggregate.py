"""Secure aggregation as the server sees it (Fowl et al. 2022, §4.2): the sample-weighted mean update."""

from __future__ import annotations

from typing import Sequence

import torch

from ...errors import FedleakError
from ...types import Params, Update


def aggregate(updates: Sequence[Update]) -> Update:
    """The aggregate the server sees under secure aggregation: the sample-weighted mean update.

    FedSGD: Σ Nᵤ·gᵤ / Σ Nᵤ, the gradient of the mean loss over all users' inputs (§4.2); FedAvg:
    the weighted mean of the returned weights. All updates must share θˢ and the protocol.
    """
    updates = list(updates)
    if not updates or not all(isinstance(u, Update) for u in updates):
        raise FedleakError("aggregate needs a non-empty list of fedleak.Update")
    first = updates[0]
    for u in updates[1:]:
        if u.protocol != first.protocol or u.is_fedsgd != first.is_fedsgd or set(u.server_params) != set(first.server_params):
            raise FedleakError("aggregated updates must share the protocol and the model")
        if any(not torch.equal(u.server_params[k], first.server_params[k]) for k in first.server_params):
            raise FedleakError("aggregated updates must start from the same server parameters")
    total = sum(int(u.num_samples) for u in updates)

    def mean(get) -> Params:
        return {k: sum(get(u)[k] * (u.num_samples / total) for u in updates) for k in first.server_params}

    meta = {"aggregated_users": len(updates)}
    if "imprint" in first.metadata:
        meta["imprint"] = first.metadata["imprint"]
    if first.is_fedsgd:
        return Update(first.server_params, first.protocol, total, gradient=mean(lambda u: u.gradient),
                      buffers=first.buffers, metadata=meta)
    return Update(first.server_params, first.protocol, total, client_params=mean(lambda u: u.client_params),
                  buffers=first.buffers, metadata=meta)
