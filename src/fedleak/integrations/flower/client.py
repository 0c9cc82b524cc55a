"""The client side of a Flower (Message API) federation: the inspector mod, evaluation mode, node settings.

* :func:`inspector_mod` — a Flower client mod (``ClientApp(mods=[inspector_mod])``) that runs
  :func:`fedleak.fl.inspect.inspect_state` on every model a ``train`` or ``evaluate`` message
  carries, *before* the client's code sees it, and answers a suspicious one (an imprint block, trap
  weights) with an error reply instead of training on it. :func:`make_inspector_mod` sets the
  threshold and the message types.
* :func:`share_truth` — evaluation mode, for simulations only: a client that opts in puts its true
  batch into its reply as a ``ConfigRecord`` under :data:`TRUTH_KEY` (one safetensors blob, never a
  pickle). A ``ConfigRecord`` is what Flower's DP mods (``LocalDpMod``, ``fixedclipping_mod``,
  ``adaptiveclipping_mod``), its DP strategy wrappers and ``FedAvg`` leave alone: they count and
  rewrite ``ArrayRecord``s and ``MetricRecord``s only, so the reply they see is exactly the one
  they expect, and the wrapped strategy aggregates what it would without fedleak. The audit reads
  the batch without removing it and marks every score computed from it *client-reported*.
* :func:`report_dp` — a client tells the audit which of Flower's DP mods it runs (``LocalDpMod``'s
  σ and C are invisible to the server otherwise); also *client-reported*.
* :func:`node_settings` — what a client protects and shares comes from its node's config
  (``flower-supernode --node-config``), never from the run config the server side submits: the run
  config can only make a client stricter (turn the inspector on, turn sharing off).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import torch
from flwr.app import ConfigRecord, Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from ...errors import FedleakError
from ...fl.inspect import DEFAULT_THRESHOLD, inspect_state
from ...types import ClientData
from .convert import record_arrays

#: key of the true batch in a reply (evaluation mode): a ConfigRecord holding one safetensors blob
TRUTH_KEY = "fedleak-truth"
#: key of the client's own account of the DP mods it runs (a ConfigRecord)
DP_KEY = "fedleak-dp"
#: prefix of the reason of the inspector's error replies
REFUSAL = "fedleak inspector refused the model"
#: the largest shared batch the audit reads (bytes)
MAX_TRUTH_BYTES = 64 * 2 ** 20
#: node settings for Flower's simulation engine, whose node config holds only the partition
NODE_CONFIG_ENV = "FEDLEAK_NODE_CONFIG"


def share_truth(content: RecordDict, inputs: torch.Tensor, labels: torch.Tensor) -> RecordDict:
    """Put the true batch (normalized inputs, labels) into a reply's content (evaluation mode)."""
    from safetensors.torch import save

    if not isinstance(content, RecordDict):
        raise FedleakError(f"share_truth needs the reply's RecordDict, got {type(content).__name__}")
    if not isinstance(inputs, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise FedleakError("share_truth needs the inputs and labels as torch tensors")
    blob = save({"inputs": inputs.detach().cpu().contiguous(), "labels": labels.detach().cpu().long().contiguous()})
    content[TRUTH_KEY] = ConfigRecord({"batch": blob, "format": "safetensors", "origin": "client-reported"})
    return content


def read_truth(content: RecordDict, num_examples: Optional[int] = None) -> Optional[ClientData]:
    """The true batch a reply shares (``None`` when it shares none); the reply is left as it is.

    Raises a :class:`~fedleak.FedleakError` naming what is wrong with a malformed one (not a
    ConfigRecord, not one safetensors blob of ``inputs`` and ``labels``, sizes that disagree with
    each other or with the reply's ``num-examples``, non-finite values).
    """
    from safetensors.torch import load

    if TRUTH_KEY not in content:
        return None
    record = content[TRUTH_KEY]
    if not isinstance(record, ConfigRecord):
        raise FedleakError(f"the reply's {TRUTH_KEY!r} entry is a {type(record).__name__}, not a ConfigRecord "
                           "(fedleak >= 0.x shares the batch as a ConfigRecord; see share_truth)")
    blob = record.get("batch")
    if not isinstance(blob, bytes) or not blob or len(blob) > MAX_TRUTH_BYTES:
        raise FedleakError(f"the reply's {TRUTH_KEY!r} record needs 'batch': one safetensors blob of at most "
                           f"{MAX_TRUTH_BYTES} bytes")
    try:
        arrays = load(blob)
    except Exception as exc:  # noqa: BLE001 - safetensors' own errors name no field
        raise FedleakError(f"the reply's {TRUTH_KEY!r} batch is not a readable safetensors blob "
                           f"({type(exc).__name__})") from None
    if set(arrays) != {"inputs", "labels"}:
        raise FedleakError(f"the reply's {TRUTH_KEY!r} batch must hold 'inputs' and 'labels', got {sorted(arrays)}")
    inputs, labels = arrays["inputs"], arrays["labels"]
    if inputs.dim() < 2 or labels.dim() != 1 or labels.shape[0] != inputs.shape[0] or inputs.shape[0] == 0:
        raise FedleakError(f"the reply's {TRUTH_KEY!r} batch has inputs {tuple(inputs.shape)} and labels "
                           f"{tuple(labels.shape)}: one label per input expected")
    if num_examples is not None and inputs.shape[0] != num_examples:
        raise FedleakError(f"the reply's {TRUTH_KEY!r} batch holds {inputs.shape[0]} inputs, its num-examples "
                           f"says {num_examples}")
    if inputs.is_floating_point() and not bool(torch.isfinite(inputs).all()):
        raise FedleakError(f"the reply's {TRUTH_KEY!r} inputs hold NaN or infinite values")
    if labels.is_floating_point() or labels.is_complex():
        raise FedleakError(f"the reply's {TRUTH_KEY!r} labels must be integers, got {labels.dtype}")
    return ClientData(inputs.clone(), labels.long().clone())


def save_truth(path, truth: ClientData) -> Path:
    """A shared batch kept beside its reconstruction (safetensors ``inputs`` / ``labels``; the report's originals)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"inputs": truth.inputs.detach().cpu().contiguous(), "labels": truth.labels.detach().cpu().contiguous()},
              str(path))
    return path


def load_truth(path) -> ClientData:
    """:func:`save_truth`'s file back (safetensors only, never a pickle)."""
    from safetensors.torch import load_file

    arrays = load_file(str(path))
    return ClientData(arrays["inputs"], arrays["labels"].long())


def describe_mods(mods: Sequence) -> list[dict]:
    """The Flower DP mods among ``mods``, described (σ, C, fixed/adaptive) as far as the mod knows them."""
    from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod

    found = []
    for mod in mods:
        if isinstance(mod, LocalDpMod):
            sigma = mod.sensitivity * math.sqrt(2 * math.log(1.25 / mod.delta)) / mod.epsilon if mod.epsilon else None
            found.append({"mechanism": "LocalDpMod", "where": "client", "clipping": "fixed",
                          "clipping_norm": float(mod.clipping_norm), "noise_std": sigma, "noise": "local",
                          "epsilon": float(mod.epsilon), "delta": float(mod.delta),
                          "sensitivity": float(mod.sensitivity)})
        elif mod is fixedclipping_mod:
            found.append({"mechanism": "fixedclipping_mod", "where": "client", "clipping": "fixed"})
        elif mod is adaptiveclipping_mod:
            found.append({"mechanism": "adaptiveclipping_mod", "where": "client", "clipping": "adaptive"})
    return found


def report_dp(content: RecordDict, mods: Sequence) -> RecordDict:
    """Add the client's account of its DP mods (:func:`describe_mods`) to a reply, as a ConfigRecord."""
    import json

    found = describe_mods(mods)
    if found:
        content[DP_KEY] = ConfigRecord({"mods": json.dumps(found), "origin": "client-reported"})
    return content


@dataclass(frozen=True)
class NodeSettings:
    """What a node decided for itself: its data partition, the inspector, sharing its batch."""

    partition_id: int
    num_partitions: int
    inspect: bool
    share_truth: bool


def _flag(value, key: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise FedleakError(f"{where} {key}={value!r}: expected true or false")


def _env_config() -> dict:
    raw = os.environ.get(NODE_CONFIG_ENV, "").strip()
    out = {}
    for item in raw.split():
        key, sep, value = item.partition("=")
        if not sep or key not in ("inspect", "share-truth"):
            raise FedleakError(f"{NODE_CONFIG_ENV}={raw!r}: expected 'inspect=BOOL share-truth=BOOL', got {item!r}")
        out[key] = value.strip("'\"")
    return out


def node_settings(context: Context, *, inspect: bool = False, share_truth: bool = False) -> NodeSettings:
    """Read a node's settings: ``partition-id`` and ``num-partitions`` (required), ``inspect`` and
    ``share-truth`` (default false) from its node config (``flower-supernode --node-config``; for
    Flower's simulation engine, whose node config holds only the partition, from the environment
    variable :data:`NODE_CONFIG_ENV` of the machine running the simulated nodes). The run config
    may only make the node stricter: ``inspect=true`` turns the inspector on, ``share-truth=false``
    turns sharing off; the opposite values change nothing. ``inspect``/``share_truth``: the node
    owner's defaults (the ClientApp code it runs), used when its node config does not say."""
    node, run = dict(context.node_config), dict(context.run_config)
    missing = [key for key in ("partition-id", "num-partitions") if key not in node]
    if missing:
        raise FedleakError(f"this SuperNode's node config has no {' or '.join(missing)}: start it with "
                           "--node-config \"partition-id=I num-partitions=N\" (0 <= I < N)")
    try:
        part, parts = int(node["partition-id"]), int(node["num-partitions"])
    except (TypeError, ValueError):
        raise FedleakError(f"node config partition-id={node['partition-id']!r} num-partitions="
                           f"{node['num-partitions']!r}: integers expected") from None
    if not 0 <= part < parts:
        raise FedleakError(f"node config partition-id={part} num-partitions={parts}: need 0 <= partition-id < "
                           "num-partitions")
    own = {**_env_config(), **{k: node[k] for k in ("inspect", "share-truth") if k in node}}
    inspect = _flag(own.get("inspect", bool(inspect)), "inspect", "node config")
    share = _flag(own.get("share-truth", bool(share_truth)), "share-truth", "node config")
    if "inspect" in run and _flag(run["inspect"], "inspect", "run config"):
        inspect = True
    if "share-truth" in run and not _flag(run["share-truth"], "share-truth", "run config"):
        share = False
    return NodeSettings(part, parts, inspect, share)


def make_inspector_mod(threshold: float = DEFAULT_THRESHOLD, message_types=("train", "evaluate")):
    """A client mod refusing models whose inspection is suspicious at ``threshold``."""
    inspect_state({"probe": torch.zeros(1)}, threshold)  # validates the threshold early
    types = tuple(message_types)

    def inspector_mod(msg: Message, context: Context, call_next) -> Message:
        category = msg.metadata.message_type.split(".")[0]
        if category not in types or not msg.has_content():
            return call_next(msg, context)
        for key, record in msg.content.array_records.items():
            try:
                state = {name: torch.from_numpy(array.copy()) for name, array in record_arrays(record).items()}
                inspection = inspect_state(state, threshold)
            except FedleakError as exc:
                return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, f"{REFUSAL}: unreadable model ({exc})"),
                               reply_to=msg)
            if inspection.suspicious:
                return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, f"{REFUSAL} in {key!r}: "
                                     f"{inspection.summary()}"), reply_to=msg)
        return call_next(msg, context)

    return inspector_mod


#: the inspector with the default threshold, for ``ClientApp(mods=[inspector_mod])``
inspector_mod = make_inspector_mod()


def node_inspector_mod(default: bool = False):
    """The inspector, on when the node's settings say so (:func:`.client.node_settings`: its node
    config, or ``default`` — the node owner's code — or a run config asking for it)."""

    def mod(msg: Message, context: Context, call_next) -> Message:
        if node_settings(context, inspect=default).inspect:
            return inspector_mod(msg, context, call_next)
        return call_next(msg, context)

    return mod
