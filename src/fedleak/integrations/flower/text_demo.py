"""The demo's FlowerTune-shaped text federation (``python -m fedleak.integrations.flower.demo --task text``).

As Flower's FlowerTune LLM recipe: every node holds the same frozen base model with LoRA adapters
(rank R, α 2R, PEFT's initialisation), the server sends the adapter state in the ``ArrayRecord``
(``get_peft_model_state_dict`` keys), each ``ClientApp`` loads it, trains the adapters on its own
text (next-token loss, fedleak's one client update) and replies with its adapter state and
``num-examples``; Flower's ``FedAvg`` averages the adapters. The server side is wrapped in
:class:`~fedleak.integrations.flower.LeakageAudit`, which reads each reply as a LoRA
:class:`~fedleak.Update` (:func:`~.convert.split_record`) and attacks it with ``dager`` while the
federation runs. Round 1 starts from B = 0; later rounds start from the averaged adapters (B ≠ 0).

The model is a config-built causal LM (``gpt2-tiny`` by default, random base weights: the demo
runs offline in seconds); the text is fedleak's embedded corpus cut with the MiniLM tokenizer.
"""

from __future__ import annotations

from typing import Callable

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from ... import data as fl_data
from ... import models
from ...errors import FedleakError
from ...fl import client_update
from ...types import ClientData, Protocol
from .client import node_inspector_mod, node_settings, share_truth
from .convert import adapter_record, split_record

TEXT_MODELS = ("gpt2-tiny", "llama-tiny")


def text_federation(model_name: str, clients: int, samples: int, seq_len: int, lora: int, seed: int):
    """``(spec, partitions, model_fn)``: the text each node holds and the LoRA model every node builds."""
    if model_name not in TEXT_MODELS:
        raise FedleakError(f"--model for --task text must be one of {', '.join(TEXT_MODELS)}, got {model_name!r}")
    spec, parts = fl_data.load("text", num_clients=clients, samples_per_client=samples, seed=seed, seq_len=seq_len,
                               task="causal-lm")
    if len(parts) < clients:
        raise FedleakError(f"the embedded text holds {len(parts)} partitions of {samples} sequences, not {clients}")

    def model_fn() -> nn.Module:
        return models.build(model_name, spec, seed=seed, lora=lora)

    return spec, parts, model_fn


def train_adapters(model: nn.Module, data: ClientData, protocol: Protocol) -> float:
    """One client's local training of the adapters (fedleak's one client update), loaded back into
    ``model``; returns the trained model's loss on its data."""
    update = client_update(model, data, protocol, seed=0)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for name, value in update.final_params().items():
            params[name].copy_(value)
        return float(model.loss_fn(model(data.inputs), data.labels))


def make_text_client_app(clients: list[ClientData], model_fn: Callable[[], nn.Module], *, share: bool = False,
                         inspect: bool = False) -> ClientApp:
    """A FlowerTune-shaped ClientApp: adapters in, local training, adapters out."""
    app = ClientApp(mods=[node_inspector_mod(inspect)])

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        settings = node_settings(context, inspect=inspect, share_truth=share)
        data = clients[settings.partition_id]
        model = model_fn()
        adapters, _ = split_record(model, msg.content["arrays"], "the adapters the server sent")
        with torch.no_grad():
            params = dict(model.named_parameters())
            for name, value in adapters.items():
                params[name].copy_(value)
        config = msg.content["config"]
        protocol = Protocol("fedavg", epochs=int(config.get("local-epochs", 1)),
                            batch_size=min(int(config.get("batch-size", len(data))), len(data)),
                            lr=float(config["lr"]), reshuffle=False)
        loss = train_adapters(model, data, protocol)
        content = RecordDict({"arrays": adapter_record(model),
                              "metrics": MetricRecord({"train-loss": loss, "num-examples": len(data)})})
        if settings.share_truth:
            share_truth(content, data.inputs, data.labels)
        return Message(content, reply_to=msg)

    return app
