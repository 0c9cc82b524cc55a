"""Flower integration: record, and optionally attack, every client update of a real Flower run.

The server of a Flower (``flwr``) federation sees exactly what fedleak's threat models assume:
the weights it sent and the weights (or gradients) each client returned, with the client's
number of examples. :class:`LeakageRecorder` wraps any Flower strategy (FedAvg, FedProx, …) and,
without changing what it does, turns every ``FitRes`` of every round into a
:class:`fedleak.Update` (safetensors + JSON under ``out/round-R/client-CID/``) with the round's
:class:`fedleak.Protocol`, and when given an attack reconstructs the client's data from it on the
spot (honest-but-curious server). ``ship=`` makes it a malicious server that sends its own model —
e.g. a model with an imprint block (Fowl et al. 2022, :func:`fedleak.models.imprint`) — to the
clients of every round.

Flower moves a model as a list of numpy arrays. The convention of its PyTorch examples, which
is the default here (``keys="state"``), is ``model.state_dict()`` order (parameters and buffers
such as BatchNorm running statistics); ``keys="parameters"`` means ``named_parameters()`` only.

``flwr`` is optional: the conversion functions need only numpy, and :class:`LeakageRecorder`
subclasses Flower's ``Strategy`` when ``flwr`` is installed (``pip install flwr``).
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from ..errors import FedleakError, unknown_choice
from ..types import DataSpec, Params, Protocol, Update

try:  # Flower's legacy strategy API (flwr.server.strategy), present through flwr 1.x
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import Strategy as _StrategyBase

    FLOWER_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised where flwr is absent
    ndarrays_to_parameters = parameters_to_ndarrays = None
    _StrategyBase = object
    FLOWER_AVAILABLE = False

KEYS = ("state", "parameters")
#: names Flower apps commonly put in the fit config, mapped to Protocol fields
CONFIG_ALIASES = {"local_epochs": "epochs", "epochs": "epochs", "batch_size": "batch_size", "lr": "lr",
                  "learning_rate": "lr"}


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
    return _update(model, server, buffers, returned, num_examples, protocol, keys, metadata)


def _update(model: nn.Module, server: Params, buffers: Params, returned: Sequence[np.ndarray], num_examples: int,
            protocol: Protocol, keys: str, metadata: Optional[dict]) -> Update:
    client, _ = split_arrays(model, returned, keys, "arrays the client returned")
    meta = dict(metadata or {})
    if protocol.algorithm == "fedsgd":
        gradient = {k: (server[k] - client[k]) / protocol.lr for k in server}
        return Update(server, protocol, int(num_examples), gradient=gradient, buffers=buffers, metadata=meta)
    return Update(server, protocol, int(num_examples), client_params=client, buffers=buffers, metadata=meta)


def protocol_from_config(base: Protocol, config: dict) -> Protocol:
    """``base`` with the fit-config entries that name a protocol field (``local_epochs``,
    ``epochs``, ``batch_size``, ``lr``, ``learning_rate``) taken over."""
    known = {f.name for f in fields(Protocol)}
    changes = {CONFIG_ALIASES[k]: v for k, v in (config or {}).items() if k in CONFIG_ALIASES
               and CONFIG_ALIASES[k] in known}
    if "epochs" in changes:
        changes["epochs"] = int(changes["epochs"])
    if "batch_size" in changes:
        changes["batch_size"] = int(changes["batch_size"])
    if "lr" in changes:
        changes["lr"] = float(changes["lr"])
    return replace(base, **changes) if changes else base


def _to_arrays(parameters) -> list[np.ndarray]:
    if isinstance(parameters, (list, tuple)):
        return [np.asarray(a) for a in parameters]
    if parameters_to_ndarrays is None:
        raise FedleakError("reading Flower Parameters needs flwr (pip install flwr)")
    return parameters_to_ndarrays(parameters)


def _safe(name: Any) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name))


class LeakageRecorder(_StrategyBase):
    """A Flower strategy that records (and optionally attacks) every client update, then lets
    ``strategy`` do the real work.

    ``model``: the architecture the federation trains (its weights are not used unless
    ``ship=`` is the same module). ``protocol``: the client's local training (E, m, η) —
    per round overridden by the fit config's ``local_epochs``/``epochs``, ``batch_size``,
    ``lr``/``learning_rate``, or computed by a callable ``protocol(round, config)``.
    ``attack`` (a name or a built :class:`fedleak.attacks.Attack`) with ``spec`` reconstructs each
    update when it arrives; ``ship`` replaces the weights sent to clients by this module's
    (a malicious server). ``out/updates.jsonl`` lists every record.
    """

    def __init__(self, strategy, model: nn.Module, protocol: Union[Protocol, Callable[[int, dict], Protocol]],
                 out, *, keys: str = "state", attack=None, spec: Optional[DataSpec] = None,
                 attack_options: Optional[dict] = None, ship: Optional[nn.Module] = None,
                 clients: Optional[Callable[[str], bool]] = None) -> None:
        if not isinstance(model, nn.Module):
            raise FedleakError(f"LeakageRecorder needs the torch model of the federation, got {type(model).__name__}")
        _names(model, keys)
        if attack is not None and not isinstance(spec, DataSpec):
            raise FedleakError("LeakageRecorder: attacking updates needs spec=fedleak.DataSpec (input shape, classes, "
                               "normalization)")
        if ship is not None and not FLOWER_AVAILABLE:
            raise FedleakError("shipping a model to Flower clients needs flwr (pip install flwr)")
        if isinstance(attack, str):
            from ..attacks import build

            attack = build(attack, **(attack_options or {}))
        self.strategy, self.model, self.protocol, self.keys = strategy, model, protocol, keys
        self.attack, self.spec, self.ship, self.clients = attack, spec, ship, clients
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._sent: dict[int, tuple[Params, Params]] = {}  # round -> the (parameters, buffers) it sent
        self._config: dict[tuple[int, str], dict] = {}
        self.records: list[dict] = []

    # -- the strategy interface ---------------------------------------------------------------
    def initialize_parameters(self, client_manager):
        if self.ship is not None:
            return ndarrays_to_parameters(model_arrays(self.ship, self.keys))
        return self.strategy.initialize_parameters(client_manager)

    def configure_fit(self, server_round: int, parameters, client_manager):
        if self.ship is not None:
            parameters = ndarrays_to_parameters(model_arrays(self.ship, self.keys))
        instructions = self.strategy.configure_fit(server_round, parameters, client_manager)
        self._sent[server_round] = split_arrays(self.model, _to_arrays(parameters), self.keys, "arrays the server sent")
        for proxy, fit_ins in instructions:
            self._config[(server_round, str(proxy.cid))] = dict(getattr(fit_ins, "config", {}) or {})
        return instructions

    def aggregate_fit(self, server_round: int, results, failures):
        for proxy, fit_res in results:
            self.record(server_round, str(proxy.cid), fit_res)
        self._sent.pop(server_round, None)  # the round is over: keep no copy of its model
        self._config = {key: c for key, c in self._config.items() if key[0] != server_round}
        return self.strategy.aggregate_fit(server_round, results, failures)

    def configure_evaluate(self, server_round: int, parameters, client_manager):
        return self.strategy.configure_evaluate(server_round, parameters, client_manager)

    def aggregate_evaluate(self, server_round: int, results, failures):
        return self.strategy.aggregate_evaluate(server_round, results, failures)

    def evaluate(self, server_round: int, parameters):
        return self.strategy.evaluate(server_round, parameters)

    # -- recording ----------------------------------------------------------------------------
    def round_protocol(self, server_round: int, config: dict) -> Protocol:
        if callable(self.protocol) and not isinstance(self.protocol, Protocol):
            return self.protocol(server_round, config)
        return protocol_from_config(self.protocol, config)

    def record(self, server_round: int, cid: str, fit_res) -> Optional[dict]:
        """Store one client's update of ``server_round`` (and its reconstruction, if attacking)."""
        if self.clients is not None and not self.clients(cid):
            return None
        if server_round not in self._sent:
            raise FedleakError(f"LeakageRecorder: no parameters recorded for round {server_round}; the recorder must "
                               "be the strategy the server calls (configure_fit before aggregate_fit)")
        config = self._config.get((server_round, cid), {})
        protocol = self.round_protocol(server_round, config)
        server, buffers = self._sent[server_round]
        update = _update(self.model, server, buffers, _to_arrays(fit_res.parameters), fit_res.num_examples, protocol,
                         self.keys, metadata={"round": server_round, "client_id": cid, "fit_config": config,
                                              "client_metrics": dict(getattr(fit_res, "metrics", {}) or {})})
        where = self.out / f"round-{server_round}" / f"client-{_safe(cid)}"
        update.save(where / "update")
        entry = {"round": server_round, "client": cid, "num_examples": int(fit_res.num_examples),
                 "protocol": protocol.to_json(), "update": str(where / "update")}
        if self.attack is not None:
            rec = self.attack.reconstruct(update, self.model, self.spec)
            rec.save(where / "reconstruction")
            entry["reconstruction"] = str(where / "reconstruction")
            entry["attack"] = getattr(self.attack, "variant", self.attack.name)
        with open(self.out / "updates.jsonl", "a") as fh:
            fh.write(json.dumps(entry) + "\n")
        self.records.append(entry)
        return entry
