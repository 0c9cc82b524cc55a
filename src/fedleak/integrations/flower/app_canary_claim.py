"""The DP claim canary nodes test on an app whose nodes run Flower's ``LocalDpMod`` alone (issue 42, item 2;
Flower FLIP #1122: local DP is opt-in per node).

With client-side DP wrappers the train config carries the clip norm; with ``LocalDpMod`` only, the claim — clip
norm C, sensitivity S, (ε, δ), hence the Gaussian noise sd s = S·√(2 ln(1.25/δ))/ε per coordinate of each reply
(:func:`fedleak.fl.update_filters.local_dp_std`) — lives in the mod object of each node's ClientApp. It is read
from the very place :mod:`.app_canary_nodes` reads a node's mods from: the ClientApp that answers a train message
for that node (the loaded one, or one the app builds for the node inside its train function, followed by calling
the app once per node with the first round's message: no training where the loaded ClientApp carries the mod,
one call of the node's train function otherwise).

Nodes disagree when some lack the mod: the claim is the one the mod-carrying nodes state (their mods must agree),
and a node without it is named from its canaries' replies only (:func:`.canary_replies.reply_test`: the clipping
test and the noise test against s/C), never from this reading. No node carrying a mod: no claim (the caller refuses).
"""

from __future__ import annotations

import threading
from typing import Optional

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp

from ...errors import FedleakError
from .app_chains import CLIENTAPP_CALL, own_train
from .canary_nodes import train_mods


class _Found(BaseException):
    """Raised inside the user's train function once the answering ClientApp's LocalDpMod is found (no training);
    a BaseException, so a user's ``except Exception`` does not swallow it."""


class _Reading(threading.local):
    mods = None  # the mods seen along the call path (None: not reading)


_READING = _Reading()


def _reading_call(self: ClientApp, message, context):
    """``ClientApp.__call__`` while reading: note this app's train mods; stop at a LocalDpMod, else go on into its
    train function (a ClientApp it calls for the node is read the same way)."""
    from flwr.clientapp.mod import LocalDpMod

    if _READING.mods is None or not message.metadata.message_type.startswith("train"):
        return CLIENTAPP_CALL(self, message, context)
    mods = train_mods(self)
    _READING.mods.extend(mods)
    if any(isinstance(m, LocalDpMod) for m in mods):
        raise _Found
    return own_train(self)(message, context)


def node_local_dp(app: ClientApp, content: RecordDict, node: int, nodes: int, run_config: dict):
    """The ``LocalDpMod`` of the ClientApp that answers node ``node``'s train message (``content``), or None."""
    from flwr.clientapp.mod import LocalDpMod

    message = Message(content, dst_node_id=node + 1, message_type="train")
    context = Context(run_id=message.metadata.run_id, node_id=node + 1, state=RecordDict(), run_config=run_config,
                      node_config={"partition-id": node, "num-partitions": nodes})
    saved, _READING.mods = ClientApp.__call__, []
    ClientApp.__call__ = _reading_call
    try:
        _reading_call(app, message, context)
    except _Found:
        pass
    except Exception as exc:  # noqa: BLE001 - the user's ClientApp failing here is named in one line
        raise FedleakError(f"canary nodes: reading node {node}'s ClientApp mods failed ({type(exc).__name__}: "
                           f"{str(exc)[:160]})") from None
    finally:
        ClientApp.__call__, mods, _READING.mods = saved, _READING.mods, None
    return next((m for m in mods if isinstance(m, LocalDpMod)), None)


def local_dp_claim(app: ClientApp, content: RecordDict, nodes: int, run_config: dict) -> Optional[dict]:
    """The LocalDpMod claim of the federation: read from each node's ClientApp, the one the mod-carrying nodes
    state (they must agree: else one line naming two that differ); None where no node carries the mod."""
    from ...fl.update_filters import local_dp_std

    stated = {}
    for k in range(nodes):
        mod = node_local_dp(app, content, k, nodes, run_config)
        if mod is not None:
            stated[k] = (float(mod.clipping_norm), float(mod.sensitivity), float(mod.epsilon), float(mod.delta))
    if not stated:
        return None
    first = next(iter(stated))
    for k, claim in stated.items():
        if claim != stated[first]:
            raise FedleakError(f"canary nodes: the nodes' LocalDpMods state different claims (node {first}: "
                               f"C, S, ε, δ = {stated[first]}; node {k}: {claim}): audit one claim at a time")
    clip, sensitivity, epsilon, delta = stated[first]
    if not epsilon > 0:
        raise FedleakError(f"canary nodes: node {first}'s LocalDpMod states ε = {epsilon}: no noise scale to test")
    return {"mechanism": "LocalDpMod", "clipping_norm": clip, "sensitivity": sensitivity, "epsilon": epsilon,
            "delta": delta, "noise_std": local_dp_std(sensitivity, epsilon, delta),
            "stated_by": f"the LocalDpMod of {len(stated)} of the {nodes} nodes' ClientApps"}
