"""The honest client: one update (Alg. 1 of Dimitrov et al., "Data Leakage in Federated Averaging") as the
server receives it, and a client's updates over several rounds.

:func:`client_update` checks its arguments, seeds the batch order, the defense's noise and dropout from
``seed``, trains with the one local-SGD loop (:func:`fedleak.fl.local_sgd.local_training`, which every
attacker's simulation calls too), applies an update-level filter, and returns the
:class:`~fedleak.types.Update` — the gradient for FedSGD, the client weights θᶜ for FedAvg.
:func:`client_rounds` chains such updates over the rounds of several epochs (AGIC §IV-B).

The local-SGD names (:func:`local_training`, :func:`batch_schedule`, :func:`sequential_schedule`,
:class:`LocalResult`, :func:`cross_entropy`, :func:`model_loss`, :func:`has_batchnorm`) stay importable from
here.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn

from ..errors import FedleakError
from ..types import ClientData, Params, Protocol, Update
from ..types.params import buffers_of, check_finite, params_of
from .defenses import Defense
from .local_sgd import (LocalResult, Schedule, batch_schedule, cross_entropy, has_batchnorm, local_training,
                        model_loss, sequential_schedule)
from .per_example import per_example_gradients
from .update_filters import UpdateFilter

__all__ = ["LocalResult", "Schedule", "batch_schedule", "client_rounds", "client_update", "cross_entropy",
           "has_batchnorm", "local_training", "model_loss", "per_example_gradients", "sequential_schedule"]


def client_update(
    model: nn.Module,
    data: ClientData,
    protocol: Protocol,
    *,
    seed: int = 0,
    defense: Defense | str | None = None,
    params: Optional[Params] = None,
    buffers: Optional[Params] = None,
    metadata: Optional[dict] = None,
) -> Update:
    """The honest client: train on ``data`` under ``protocol`` from the model's weights θˢ.

    Returns the :class:`~fedleak.types.Update` the server receives: the gradient for FedSGD,
    the client weights θᶜ for FedAvg. The batch order and the defense noise come from a
    generator seeded with ``seed`` (on the data's device), so the update is reproducible.
    """
    from ..config.boundary import api_arguments

    api_arguments("client_update", model=(model, nn.Module, "a torch.nn.Module (build one with fedleak.models.build)"),
                  data=(data, ClientData, "a fedleak.ClientData"),
                  protocol=(protocol, Protocol, "a fedleak.Protocol, e.g. Protocol('fedavg', 1, 5, 0.004)"),
                  seed=(seed, int, f"an integer from 0 to {2 ** 32 - 1}"),
                  metadata=(metadata, (dict, type(None)), "a mapping or None"))
    meta = [n for n, p in model.named_parameters() if p.is_meta]
    if meta:
        raise FedleakError(f"client_update(): the model's parameters are on the meta device (no values), e.g. "
                           f"{meta[0]!r}; build it with real tensors")
    defense = Defense.parse(defense)
    update_filter = defense if isinstance(defense, UpdateFilter) else None  # acts on the whole update (below)
    defense = Defense() if update_filter is not None else defense
    server = params if params is not None else params_of(model)
    buffers = buffers if buffers is not None else buffers_of(model)
    check_finite(server, "model parameters")
    first = next(iter(server.values()))
    # integer inputs (token ids of a text client) keep their dtype; floating inputs take the model's
    inputs = data.inputs.to(device=first.device, dtype=first.dtype if data.inputs.is_floating_point() else None)
    if not bool(torch.isfinite(inputs).all()):
        raise FedleakError(f"client {data.client_id} has NaN or inf inputs")
    if data.labels.dtype.is_floating_point:
        raise FedleakError("client labels must be integer class indices")
    generator = torch.Generator(device=first.device)
    generator.manual_seed(int(seed))
    # the batch order is drawn on the CPU whatever the device (randperm takes a CPU generator; the order is the
    # same on every device), the noise of defenses on the device's generator
    order = generator if first.device.type == "cpu" else torch.Generator().manual_seed(int(seed))
    schedule = batch_schedule(len(data), protocol, order)
    try:
        # dropout masks (model, LoRA) come from torch's generator: seeded on a forked copy (reproducible updates)
        with torch.random.fork_rng(devices=[first.device] if first.device.type == "cuda" else []):
            torch.random.default_generator.manual_seed(int(seed) + 104_729)
            if first.device.type == "cuda":
                torch.cuda.manual_seed(int(seed) + 104_729)
            result = local_training(model, server, inputs, data.labels.to(first.device), schedule, protocol.lr,
                                    buffers=buffers, defense=defense, generator=generator,
                                    train_mode=protocol.train_mode, optimizer=protocol.optimizer)
    except (RuntimeError, IndexError) as exc:
        raise FedleakError(f"the model cannot be trained on client {data.client_id}'s data "
                           f"(inputs {tuple(inputs.shape)}, labels {data.labels.min().item()}..{data.labels.max().item()}): "
                           f"{str(exc).splitlines()[0]}") from None
    meta = {"client_id": data.client_id, "seed": int(seed), "defense": defense.to_json(), **(metadata or {})}
    if update_filter is not None:
        steps = sum(len(epoch) for epoch in schedule)  # the round's local steps (NVFlare's NUM_STEPS_CURRENT_ROUND)
        return _filtered(update_filter, server, protocol, len(data), result, buffers, meta, generator, steps)
    if protocol.algorithm == "fedsgd":
        return Update(server, protocol, len(data), gradient=result.grad_sum, buffers=buffers, metadata=meta)
    return Update(server, protocol, len(data), client_params=result.params, buffers=buffers, metadata=meta)


def _filtered(update_filter, server: Params, protocol: Protocol, n: int, result, buffers, meta, generator,
              steps: int = 1) -> Update:
    """The update after an update-level filter (:mod:`.update_filters`) on Δ = θᶜ − θˢ (−η·g for FedSGD)."""
    if protocol.algorithm == "fedsgd":
        delta = {k: -protocol.lr * g for k, g in result.grad_sum.items()}
    else:
        delta = {k: result.params[k] - server[k] for k in server}
    filtered = update_filter.apply_update(delta, generator, steps) if update_filter.changes_update else None
    meta["defense"] = {**update_filter.to_json(), "epsilon": update_filter.spent(sum(v.numel() for v in delta.values()))}
    if filtered is None:  # nothing acts on what the server sees: the update as trained, bit for bit
        return Update(server, protocol, n, gradient=result.grad_sum if protocol.algorithm == "fedsgd" else None,
                      client_params=None if protocol.algorithm == "fedsgd" else result.params, buffers=buffers,
                      metadata=meta)
    if protocol.algorithm == "fedsgd":
        return Update(server, protocol, n, gradient={k: -v / protocol.lr for k, v in filtered.items()},
                      buffers=buffers, metadata=meta)
    return Update(server, protocol, n, client_params={k: server[k] + v for k, v in filtered.items()},
                  buffers=buffers, metadata=meta)


def client_rounds(model: nn.Module, data: ClientData, protocol: Protocol, *, epochs: int = 2,
                  samples_per_round: Optional[int] = None, seed: int = 0, reshuffle: bool = True,
                  defense=None, metadata: Optional[Callable[[ClientData, int], dict]] = None) -> list[Update]:
    """The updates a server observes from one client over several epochs of rounds (AGIC §IV-B).

    Each epoch the client's N samples are (re)shuffled and split into rounds of
    ``samples_per_round`` samples (default: all N, one round per epoch); each round is one
    :func:`fedleak.fl.client.client_update` under ``protocol`` starting from the weights the
    previous round returned (a federation of this one client, so W_{k+1} = the client's W_T).
    Every update's metadata holds ``epoch`` and ``round`` (what the server knows of its rounds),
    plus ``metadata(part, round_seed)`` when given (e.g. the labels the server is told).
    """
    n = len(data)
    per_round = n if samples_per_round is None else int(samples_per_round)
    if per_round < 1 or n % per_round:
        raise FedleakError(f"samples_per_round must divide the client's {n} samples, got {samples_per_round}")
    if int(epochs) < 1:
        raise FedleakError(f"epochs must be a positive integer, got {epochs}")
    generator = torch.Generator()
    generator.manual_seed(int(seed))
    params, buffers = params_of(model), buffers_of(model)
    updates: list[Update] = []
    round_index = 0
    for epoch in range(int(epochs)):
        order = torch.randperm(n, generator=generator) if (reshuffle and epoch > 0) else torch.arange(n)
        for start in range(0, n, per_round):
            index = order[start:start + per_round].sort().values
            part = ClientData(data.inputs[index], data.labels[index], data.client_id)
            round_seed = seed * 1000 + round_index
            extra = metadata(part, round_seed) if metadata is not None else {}
            update = client_update(model, part, protocol, seed=round_seed, defense=defense, params=params,
                                   buffers=buffers, metadata={**extra, "epoch": epoch, "round": round_index})
            updates.append(update)
            params = update.final_params()
            round_index += 1
    return updates
