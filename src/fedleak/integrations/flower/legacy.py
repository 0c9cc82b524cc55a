"""The legacy-API recorder (``flwr.server.strategy``): record and attack every client update.

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
from typing import Any, Callable, Optional, Union

import numpy as np
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec, Params, Protocol
from .convert import _names, client_metadata, model_arrays, protocol_from_config, split_arrays, update_from_split

try:  # Flower's legacy strategy API (flwr.server.strategy), present through flwr 1.x
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server.strategy import Strategy as _StrategyBase

    FLOWER_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised where flwr is absent
    ndarrays_to_parameters = parameters_to_ndarrays = None
    _StrategyBase = object
    FLOWER_AVAILABLE = False

def _to_arrays(parameters) -> list[np.ndarray]:
    if isinstance(parameters, (list, tuple)):
        return [np.asarray(a) for a in parameters]
    if parameters_to_ndarrays is None:
        raise FedleakError("reading Flower Parameters needs flwr (pip install flwr)")
    return parameters_to_ndarrays(parameters)


def _safe(name: Any) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name))


#: what a wrapped (legacy) Flower strategy must provide at the least (the training round the recorder watches)
_STRATEGY_METHODS = ("configure_fit", "aggregate_fit")


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
        missing = [m for m in _STRATEGY_METHODS if not callable(getattr(strategy, m, None))]
        if missing:
            raise FedleakError(f"LeakageRecorder wraps a flwr.server.strategy.Strategy (e.g. FedAvg()), got "
                               f"{type(strategy).__name__} without {', '.join(missing[:3])}")
        if not isinstance(protocol, Protocol) and not callable(protocol):
            raise FedleakError(f"LeakageRecorder: protocol must be a fedleak.Protocol or a callable "
                               f"protocol(round, config), got {type(protocol).__name__}")
        from ...config.boundary import api_arguments

        api_arguments("LeakageRecorder", keys=(keys, str, "'state' or 'parameters'"),
                      attack_options=(attack_options, (dict, type(None)), "a mapping or None"))
        if clients is not None and not callable(clients):
            raise FedleakError(f"LeakageRecorder: clients must be a callable clients(cid) -> bool or None, "
                               f"got {type(clients).__name__}")
        _names(model, keys)
        if attack is not None and not isinstance(spec, DataSpec):
            raise FedleakError("LeakageRecorder: attacking updates needs spec=fedleak.DataSpec (input shape, classes, "
                               "normalization)")
        if ship is not None and not FLOWER_AVAILABLE:
            raise FedleakError("shipping a model to Flower clients needs flwr (pip install flwr)")
        if isinstance(attack, str):
            from ...attacks import build

            attack = build(attack, **(attack_options or {}))
        self.strategy, self.model, self.protocol, self.keys = strategy, model, protocol, keys
        self.attack, self.spec, self.ship, self.clients = attack, spec, ship, clients
        from ...runs.outdir import prepare_out_dir

        self.out = prepare_out_dir(out, "out")
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
            try:
                self.record(server_round, str(proxy.cid), fit_res)
            except Exception as exc:  # noqa: BLE001 - one client's reply never takes the federation down
                reason = str(exc) if isinstance(exc, FedleakError) else f"{type(exc).__name__}: {exc}"
                entry = {"round": server_round, "client": str(getattr(proxy, "cid", "?")), "status": "rejected",
                         "reason": reason[:500]}
                with open(self.out / "updates.jsonl", "a") as fh:
                    fh.write(json.dumps(entry) + "\n")
                self.records.append(entry)
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
        update = update_from_split(self.model, server, buffers, _to_arrays(fit_res.parameters), fit_res.num_examples, protocol,
                         self.keys, metadata={"round": server_round, "client_id": cid, "fit_config": config,
                                              "client_metrics": client_metadata(getattr(fit_res, "metrics", {}))})
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
