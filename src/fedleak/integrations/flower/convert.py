"""Flower payloads ↔ fedleak updates: arrays, ``ArrayRecord``, fit/train configs.

Flower moves a model either as a list of numpy arrays (the legacy API's ``Parameters``; the
convention of its PyTorch examples, the default here with ``keys="state"``, is
``model.state_dict()`` order; ``keys="parameters"`` means ``named_parameters()`` only) or, in the
Message API, as an ``ArrayRecord`` keyed by name (``ArrayRecord(model.state_dict())``). Every
conversion checks the arrays against the model — count, names, shapes, finite values — and
raises a one-line :class:`~fedleak.FedleakError` naming the first array that does not fit.

Needs only numpy and torch; the ``ArrayRecord`` helpers import ``flwr`` when called.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ...errors import FedleakError, unknown_choice
from ...types import Params, Protocol, Update

KEYS = ("state", "parameters")
#: names Flower apps commonly put in the fit/train config, mapped to Protocol fields (the legacy
#: examples use underscores, the Message-API templates hyphens)
CONFIG_ALIASES = {"local_epochs": "epochs", "local-epochs": "epochs", "epochs": "epochs",
                  "batch_size": "batch_size", "batch-size": "batch_size", "lr": "lr", "learning_rate": "lr",
                  "learning-rate": "lr"}


def _names(model: nn.Module, keys: str) -> tuple[list[str], set[str]]:
    if keys not in KEYS:
        raise unknown_choice("array layout", keys, KEYS)
    params = {name for name, _ in model.named_parameters()}
    order = list(model.state_dict()) if keys == "state" else [name for name, _ in model.named_parameters()]
    return order, params


def model_arrays(model: nn.Module, keys: str = "state") -> list[np.ndarray]:
    """The model as Flower sends it: numpy arrays in ``state_dict()`` (or parameter) order."""
    order, _ = _names(model, keys)
    state = model.state_dict()
    return [state[name].detach().cpu().numpy().copy() for name in order]


def split_arrays(model: nn.Module, arrays: Sequence[np.ndarray], keys: str = "state",
                 what: str = "arrays") -> tuple[Params, Params]:
    """Flower arrays → (parameters, buffers) keyed like the model, checked name by name.

    Raises a :class:`~fedleak.FedleakError` naming the first array whose count, shape or values
    (NaN/inf) do not fit the model.
    """
    order, param_names = _names(model, keys)
    arrays = list(arrays)
    if len(arrays) != len(order):
        raise FedleakError(f"{what}: {len(arrays)} arrays for a model with {len(order)} "
                           f"{'state entries' if keys == 'state' else 'parameters'} ({type(model).__name__}); "
                           "is it the same architecture, and the same layout (keys='state' or 'parameters')?")
    state = model.state_dict()
    params, buffers = {}, {}
    for name, array in zip(order, arrays):
        array = np.asarray(array)
        expected = tuple(state[name].shape)
        if tuple(array.shape) != expected:
            raise FedleakError(f"{what}: array for {name!r} has shape {tuple(array.shape)}, the model has {expected}")
        tensor = torch.from_numpy(array.copy()).to(state[name].dtype)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise FedleakError(f"{what}: array for {name!r} holds NaN or infinite values")
        (params if name in param_names else buffers)[name] = tensor
    return params, buffers


def update_from_arrays(model: nn.Module, sent: Sequence[np.ndarray], returned: Sequence[np.ndarray],
                       num_examples: int, protocol: Protocol, *, keys: str = "state",
                       metadata: Optional[dict] = None) -> Update:
    """One client's :class:`~fedleak.Update` from the arrays the server sent and got back.

    FedAvg: the returned arrays are the client's weights θᶜ. FedSGD (``protocol.algorithm``):
    a client that returns weights after one step of lr η has sent the gradient (θˢ − θᶜ)/η,
    which is what the update holds. Buffers are the ones the server sent (the model state the
    client started from).
    """
    server, buffers = split_arrays(model, sent, keys, "arrays the server sent")
    return update_from_split(model, server, buffers, returned, num_examples, protocol, keys, metadata)


def update_from_split(model: nn.Module, server: Params, buffers: Params, returned: Sequence[np.ndarray],
                      num_examples: int, protocol: Protocol, keys: str = "state",
                      metadata: Optional[dict] = None) -> Update:
    """:func:`update_from_arrays` with the sent model already split (convert it once per round)."""
    client, _ = split_arrays(model, returned, keys, "arrays the client returned")
    return update_from_params(server, buffers, client, num_examples, protocol, metadata)


def update_from_params(server: Params, buffers: Params, client: Params, num_examples, protocol: Protocol,
                       metadata: Optional[dict] = None) -> Update:
    """The :class:`~fedleak.Update` of a client that returned ``client`` for the sent ``server``:
    FedAvg keeps θᶜ, FedSGD turns it into the gradient (θˢ − θᶜ)/η."""
    if isinstance(num_examples, bool) or not isinstance(num_examples, (int, float)) or not num_examples >= 1 \
            or int(num_examples) != num_examples:
        raise FedleakError(f"the client reported {num_examples!r} examples; expected a positive integer")
    meta = dict(metadata or {})
    if protocol.algorithm == "fedsgd":
        gradient = {k: (server[k] - client[k]) / protocol.lr for k in server}
        return Update(server, protocol, int(num_examples), gradient=gradient, buffers=buffers, metadata=meta)
    return Update(server, protocol, int(num_examples), client_params=client, buffers=buffers, metadata=meta)


def protocol_from_config(base: Protocol, config: Optional[Mapping[str, Any]]) -> Protocol:
    """``base`` with the config entries that name a protocol field (``local_epochs`` /
    ``local-epochs`` / ``epochs``, ``batch_size`` / ``batch-size``, ``lr`` / ``learning_rate`` /
    ``learning-rate``) taken over; the result is validated like any :class:`~fedleak.Protocol`."""
    known = {f.name for f in fields(Protocol)}
    changes = {CONFIG_ALIASES[k]: v for k, v in dict(config or {}).items() if k in CONFIG_ALIASES
               and CONFIG_ALIASES[k] in known}
    try:
        if "epochs" in changes:
            changes["epochs"] = int(changes["epochs"])
        if "batch_size" in changes:
            changes["batch_size"] = int(changes["batch_size"])
        if "lr" in changes:
            changes["lr"] = float(changes["lr"])
    except (TypeError, ValueError) as exc:
        raise FedleakError(f"the train config holds a protocol value that is not a number: {exc}") from None
    return replace(base, **changes) if changes else base


# -- the Message API's records ------------------------------------------------------------------

def model_record(model: nn.Module):
    """The model as a Message-API ``ArrayRecord`` (its ``state_dict()``, names kept)."""
    from flwr.app import ArrayRecord

    return ArrayRecord({k: v.detach().cpu() for k, v in model.state_dict().items()})


def record_arrays(record) -> dict[str, np.ndarray]:
    """An ``ArrayRecord`` as ``{name: numpy array}`` in its own order."""
    try:
        return {name: array.numpy() for name, array in record.items()}
    except Exception as exc:  # a malformed array (bad dtype or shape bytes) from a client
        raise FedleakError(f"an ArrayRecord could not be read as numpy arrays: {exc}") from None


def split_record(model: nn.Module, record, what: str = "arrays") -> tuple[Params, Params]:
    """An ``ArrayRecord`` → (parameters, buffers) of ``model``.

    Names decide when the record is keyed like ``model.state_dict()`` (what
    ``ArrayRecord(model.state_dict())`` gives); otherwise the order does, as for a record built
    with ``ArrayRecord.from_numpy_ndarrays``. Checked as in :func:`split_arrays`.
    """
    arrays = record_arrays(record)
    adapters = _adapter_params(model, arrays, what)
    if adapters is not None:  # a LoRA model's adapters, as FlowerTune sends them (get_peft_model_state_dict)
        return adapters, {}
    state_names = list(model.state_dict())
    if set(arrays) == set(state_names):
        return split_arrays(model, [arrays[name] for name in state_names], "state", what)
    named = [k for k in arrays if not k.isdigit()]
    if named and len(arrays) == len(state_names):
        missing = sorted(set(state_names) - set(arrays))[:3]
        raise FedleakError(f"{what}: the ArrayRecord's names do not match the model's (missing e.g. "
                           f"{', '.join(map(repr, missing))})")
    return split_arrays(model, list(arrays.values()), "state", what)


# -- LoRA adapters (FlowerTune) --------------------------------------------------------------------

def adapter_record(model: nn.Module, params: Optional[Params] = None):
    """A LoRA model's adapters as FlowerTune puts them in an ``ArrayRecord``:
    ``peft.get_peft_model_state_dict`` keys, from ``params`` (the wrapper's names) or the model."""
    from flwr.app import ArrayRecord

    from ...models.hf.lora import adapter_state

    return ArrayRecord({k: v.detach().cpu().contiguous() for k, v in adapter_state(model, params).items()})


def _adapter_params(model: nn.Module, arrays: dict, what: str) -> Optional[Params]:
    """The record as the wrapper's trainable parameters when it holds exactly a LoRA model's adapter
    state (``get_peft_model_state_dict`` keys); ``None`` when the model has no adapters."""
    if getattr(model, "lora_rank", None) is None:
        return None
    from ...models.hf.lora import adapter_state, params_from_adapter_state

    expected = adapter_state(model)
    if set(arrays) != set(expected):
        missing = sorted(set(expected) - set(arrays))[:2]
        extra = sorted(set(arrays) - set(expected))[:2]
        raise FedleakError(f"{what}: the ArrayRecord is not the model's LoRA adapter state (missing {missing}, "
                           f"unexpected {extra})")
    tensors = {}
    for key, array in arrays.items():
        tensor = torch.from_numpy(np.asarray(array).copy()).to(expected[key].dtype)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise FedleakError(f"{what}: array for {key!r} holds NaN or infinite values")
        tensors[key] = tensor
    return params_from_adapter_state(model, tensors)
