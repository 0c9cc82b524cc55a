"""The guard of :class:`~fedleak.integrations.flower.LeakageAudit`: a federation no reply can end.

Flower's ``FedAvg`` (and every strategy built on its checks) raises on one reply that is not like
the others — no ``ArrayRecord``, two of them, a wrong shape, an extra or missing key, a
``MetricRecord`` with other keys — and the ServerApp dies with it; the DP wrappers zip a reply's
arrays with the global model's by position and die the same way. With ``guard=True`` (the
default) the audit screens every train reply before the wrapped strategy sees it and *quarantines*
one that the strategy could not aggregate, recording why; the strategy receives the others,
unchanged and in order, so the aggregate is exactly the strategy's own on the valid replies.

A reply passes when it is an error reply (passed on: the strategy has its own rule for them), or
when it comes from a node that was sent a model this round (once), holds exactly one
``ArrayRecord`` under the key it was sent with, whose entries have the names, order, shapes and
dtype of the ones sent and finite values, and exactly one ``MetricRecord`` whose weight
(``num-examples``) is a whole number in [1, 10⁹], whose values are finite numbers (or lists of
them) and whose keys are the ones most replies of the round have. Config records are not looked
at (fedleak's shared batch travels in one).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

#: what the guard remembers of the record a node was sent: (record key, [(name, shape, dtype)])
Layout = tuple[str, list[tuple[str, tuple, str]]]

MAX_EXAMPLES = 10 ** 9


@dataclass
class Screened:
    """The replies the strategy receives, and the ones held back with their reasons."""

    passed: list
    quarantined: list  # [(message, reason)]


def layout(key: str, record) -> Layout:
    """The names, shapes and dtypes of an ``ArrayRecord`` as it was sent."""
    return key, [(name, tuple(array.shape), str(array.dtype)) for name, array in record.items()]


def _node(message) -> Optional[int]:
    try:
        node = message.metadata.src_node_id
    except Exception:  # noqa: BLE001 - a reply without a usable node id
        return None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def _number(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_number(v) and not isinstance(v, list) for v in value)
    return False


def check_arrays(content, sent: Layout) -> Optional[str]:
    """Why the reply's arrays cannot be aggregated with the others (``None`` when they can)."""
    records = content.array_records
    if len(records) != 1:
        return f"{len(records)} ArrayRecords ({', '.join(sorted(records)) or 'none'}); exactly one expected"
    key, entries = sent
    if key not in records:
        return f"its ArrayRecord is {next(iter(records))!r}, the node was sent {key!r}"
    record = records[key]
    names = list(record.keys())
    expected = [name for name, _, _ in entries]
    if names != expected:
        extra = [n for n in names if n not in expected]
        missing = [n for n in expected if n not in names]
        what = (f"extra {extra[:3]}" if extra else "") + (", " if extra and missing else "") + \
               (f"missing {missing[:3]}" if missing else "")
        return f"array names differ from the model sent ({what or 'another order'})"
    for (name, shape, dtype), array in zip(entries, record.values()):
        if tuple(array.shape) != shape:
            return f"array {name!r} has shape {tuple(array.shape)}, the model sent has {shape}"
        if str(array.dtype) != dtype:
            return f"array {name!r} has dtype {array.dtype}, the model sent has {dtype}"
        try:
            values = array.numpy()
        except Exception as exc:  # noqa: BLE001 - bytes numpy cannot read
            return f"array {name!r} could not be read ({type(exc).__name__})"
        if values.dtype.kind == "f" and not bool(np.isfinite(values).all()):
            return f"array {name!r} holds NaN or infinite values"
    return None


def check_metrics(content, weight_key: str) -> Optional[str]:
    """Why the reply's ``MetricRecord`` cannot be aggregated (``None`` when it can)."""
    metrics = content.metric_records
    if len(metrics) != 1:
        return f"{len(metrics)} MetricRecords; exactly one expected"
    record = next(iter(metrics.values()))
    if weight_key not in record:
        return f"its MetricRecord has no {weight_key!r} (the aggregation weight)"
    weight = record[weight_key]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
            or weight != int(weight) or not 1 <= weight <= MAX_EXAMPLES:
        return f"{weight_key} = {weight!r}: a whole number in [1, {MAX_EXAMPLES}] expected"
    bad = next((k for k, v in record.items() if not _number(v)), None)
    if bad is not None:
        return f"metric {bad!r} is not a finite number"
    return None


def screen(replies: Iterable, sent: dict[int, Layout], weight_key: str) -> Screened:
    """Split a round's train replies into those the strategy can aggregate and the quarantined."""
    replies = list(replies)
    passed, quarantined, seen, candidates = [], [], set(), []
    for message in replies:
        try:
            if message.has_error():
                passed.append(message)
                continue
            node = _node(message)
            if node is None or node not in sent:
                reason = f"node {node} was sent no model this round"
            elif node in seen:
                reason = f"node {node} replied twice this round"
            else:
                reason = check_arrays(message.content, sent[node]) or check_metrics(message.content, weight_key)
            seen.add(node)
        except Exception as exc:  # noqa: BLE001 - whatever a client sends, the federation goes on
            reason = f"unreadable reply ({type(exc).__name__}: {str(exc)[:200]})"
        if reason is None:
            candidates.append(message)
        else:
            quarantined.append((message, reason))
    if candidates:  # FedAvg needs one set of metric keys: the one most replies share
        keysets = [frozenset(next(iter(m.content.metric_records.values())).keys()) for m in candidates]
        common = Counter(keysets).most_common(1)[0][0]
        for message, keys in zip(candidates, keysets):
            if keys == common:
                continue
            extra, missing = sorted(keys - common), sorted(common - keys)
            quarantined.append((message, f"metric keys differ from the round's other replies (extra {extra[:3]}, "
                                         f"missing {missing[:3]})"))
        keep = {id(m) for m, _ in quarantined}
        passed += [m for m in candidates if id(m) not in keep]
    order = {id(m): i for i, m in enumerate(replies)}  # the strategy gets the replies in their order
    return Screened(sorted(passed, key=lambda m: order[id(m)]), quarantined)
