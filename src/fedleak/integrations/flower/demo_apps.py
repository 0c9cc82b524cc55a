"""The apps of fedleak's demo federations: the model, the ClientApp that trains it the way Flower's PyTorch
templates do (load the ``ArrayRecord``, fedleak's one client update, reply with ``state_dict()`` and
``num-examples``), the ServerApp whose ``main`` runs a :class:`~fedleak.integrations.flower.LeakageAudit`, and
:func:`federate`, which runs them over :class:`~.grid.InlineGrid` (no Ray, no SuperLink). The image, text
and tabular demos (:mod:`.demo`, :mod:`.text_demo`, :mod:`.tabular_demo`) all build on these.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from ... import models
from ...errors import FedleakError
from ...fl import client_update
from ...types import ClientData, DataSpec, Protocol
from .audit import LeakageAudit
from .client import node_inspector_mod, node_settings, report_dp, share_truth
from .convert import adapter_record, model_record
from .grid import run_inline


def federation_model(spec: DataSpec, malicious: bool, seed: int = 0, bins: int = 64) -> nn.Module:
    """The model the federation trains: LeNet, or (malicious server) LeNet behind an imprint block."""
    model = models.build("lenet", spec, seed=seed)
    if malicious:
        from ...models.imprint import imprint

        model = imprint(model, spec, bins=bins, seed=seed)
    return model


def local_sgd(model: nn.Module, data: ClientData, lr: float, epochs: int, batch_size: int) -> float:
    """The client's training: fedleak's one client update (Alg. 1 of Dimitrov et al.; SGD over the
    batches in order, as Flower's PyTorch templates train), loaded back into ``model``; returns the
    trained model's loss on the client's data (the ``train-loss`` metric)."""
    protocol = Protocol("fedavg", epochs=epochs, batch_size=min(batch_size, len(data)), lr=lr, reshuffle=False)
    update = client_update(model, data, protocol, seed=0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(update.client_params[name])
        return float(F.cross_entropy(model(data.inputs), data.labels))


def make_client_app(clients: list[ClientData], model_fn: Callable[[], nn.Module], *, share: bool = False,
                    inspect: bool = False, mods: Sequence = ()) -> ClientApp:
    """A ClientApp training ``model_fn()`` on partition ``node_config['partition-id']``.

    What the node protects and shares is its own decision (:func:`.client.node_settings`): its node
    config, with ``share``/``inspect`` as the node owner's defaults; a run config can only turn the
    inspector on or sharing off. ``mods``: more Flower client mods (e.g. Flower's DP mods), run
    inside the inspector; the reply reports the DP mods among them (:func:`.client.report_dp`)."""
    mods = list(mods)
    app = ClientApp(mods=[node_inspector_mod(inspect)] + mods)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        settings = node_settings(context, inspect=inspect, share_truth=share)
        if settings.partition_id >= len(clients):
            raise FedleakError(f"node config partition-id={settings.partition_id}: this app holds {len(clients)} "
                               "partitions")
        data = clients[settings.partition_id]
        model = model_fn()
        model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
        config = msg.content["config"]
        batch = int(config.get("batch-size", len(data)))
        loss = local_sgd(model, data, float(config["lr"]), int(config.get("local-epochs", 1)), batch)
        content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                              "metrics": MetricRecord({"train-loss": loss, "num-examples": len(data)})})
        if settings.share_truth:
            share_truth(content, data.inputs, data.labels)
        report_dp(content, mods)
        return Message(content, reply_to=msg)

    return app


def make_server_app(model: nn.Module, audit_fn: Callable, rounds: int,
                    train_config: dict, holder: Optional[dict] = None) -> ServerApp:
    """A ServerApp whose main runs ``audit_fn()`` for ``rounds``: a :class:`LeakageAudit`, or
    ``(strategy, audit)`` when a strategy (a Flower DP wrapper) wraps the audit."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        made = audit_fn()
        strategy, audit = made if isinstance(made, tuple) else (made, made)
        if holder is not None:
            holder["audit"] = audit
        initial = adapter_record(model) if getattr(model, "lora_rank", None) is not None else model_record(model)
        try:
            result = strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds,
                                    train_config=ConfigRecord(dict(train_config)))
        finally:
            audit.close()
        if holder is not None:
            holder["result"] = result

    return app


def federate(out, model, client_app, spec, protocol, *, clients: int, rounds: int, blocking: bool,
             **audit) -> LeakageAudit:
    """Run ``client_app`` on ``clients`` nodes for ``rounds`` rounds of Flower's ``FedAvg`` wrapped in a
    :class:`LeakageAudit` (``audit``: its attack keywords); each node trains one epoch of one batch at the
    protocol's lr. Returns the audit."""
    def audit_fn() -> LeakageAudit:
        strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients)
        return LeakageAudit(strategy, model, out, spec=spec, protocol=protocol, blocking=blocking, **audit)

    holder: dict = {}
    config = {"lr": protocol.lr, "local-epochs": 1, "batch-size": protocol.batch_size}
    run_inline(make_server_app(model, audit_fn, rounds, config, holder), client_app, clients)
    return holder["audit"]
