"""The client side of a Flower (Message API) federation: the inspector mod and evaluation mode.

* :func:`inspector_mod` — a Flower client mod (``ClientApp(mods=[inspector_mod])``) that runs
  :func:`fedleak.fl.inspect.inspect_state` on every model a ``train`` or ``evaluate`` message
  carries, *before* the client's code sees it, and answers a suspicious one (an imprint block, trap
  weights) with an error reply instead of training on it. :func:`make_inspector_mod` sets the
  threshold and the message types.
* :func:`share_truth` — evaluation mode, for simulations only: a client opts in to put its true
  batch into its reply (``ArrayRecord`` under :data:`TRUTH_KEY`), so that the server-side
  :class:`~fedleak.integrations.flower.LeakageAudit` can score PSNR / Rec % / IIP; the audit strips
  it before the wrapped strategy aggregates. A real deployment never does this.
"""

from __future__ import annotations

from typing import Optional

import torch
from flwr.app import ArrayRecord, Context, Error, Message, RecordDict
from flwr.common.constant import ErrorCode

from ...errors import FedleakError
from ...fl.inspect import DEFAULT_THRESHOLD, inspect_state
from ...types import ClientData
from .convert import record_arrays

#: key of the true batch in a reply (evaluation mode)
TRUTH_KEY = "fedleak-truth"
#: prefix of the reason of the inspector's error replies
REFUSAL = "fedleak inspector refused the model"


def share_truth(content: RecordDict, inputs: torch.Tensor, labels: torch.Tensor) -> RecordDict:
    """Put the true batch (normalized inputs, labels) into a reply's content (evaluation mode)."""
    if not isinstance(content, RecordDict):
        raise FedleakError(f"share_truth needs the reply's RecordDict, got {type(content).__name__}")
    if not isinstance(inputs, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise FedleakError("share_truth needs the inputs and labels as torch tensors")
    content[TRUTH_KEY] = ArrayRecord({"inputs": inputs.detach().cpu().contiguous(),
                                      "labels": labels.detach().cpu().long().contiguous()})
    return content


def take_truth(content: RecordDict) -> Optional[ClientData]:
    """Remove the true batch from a reply's content and return it (``None`` when not shared)."""
    if TRUTH_KEY not in content:
        return None
    record = content.pop(TRUTH_KEY)
    if not isinstance(record, ArrayRecord):
        raise FedleakError(f"the reply's {TRUTH_KEY!r} entry is a {type(record).__name__}, not an ArrayRecord")
    arrays = record_arrays(record)
    if set(arrays) != {"inputs", "labels"}:
        raise FedleakError(f"the reply's {TRUTH_KEY!r} record must hold 'inputs' and 'labels', got {sorted(arrays)}")
    return ClientData(torch.from_numpy(arrays["inputs"].copy()), torch.from_numpy(arrays["labels"].copy()).long())


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
