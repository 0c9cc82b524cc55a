"""The guard of every fedleak strategy wrapper (:class:`ReplyGuard`): a federation no reply can end.

Flower's ``FedAvg`` (and every strategy built on its checks) raises on one reply that is not like
the others — no ``ArrayRecord``, two of them, a wrong shape, an extra or missing key, a
``MetricRecord`` with other keys — and the ServerApp dies with it; the DP wrappers zip a reply's
arrays with the global model's by position and die the same way. :class:`ReplyGuard` is one behaviour
that :class:`~fedleak.integrations.flower.LeakageAudit` and :class:`~fedleak.integrations.flower.CanaryAudit`
both apply: it screens every train reply before the wrapped strategy sees it and *quarantines* one that
the strategy could not aggregate, recording why; the strategy receives the others in order.

**Validity follows from what the server sent, never from a vote of the replies** (Sybil clients can
supply a majority). A reply passes when it is an error reply (passed on: the strategy has its own rule
for them), or when it comes from a node that was sent a model this round (once), holds exactly one
``ArrayRecord`` under the key it was sent with, whose entries have the names, order, shapes and
dtype of the ones sent and finite values, and exactly one ``MetricRecord`` of at most
:data:`MAX_METRICS` entries whose weight (``num-examples``) is a whole number in [1, 10⁹], whose values
are finite numbers (or lists of them) and which holds every configured metric (``metric_keys``).
Config records are not looked at (fedleak's shared batch travels in one).

What FedAvg also demands — one metric-record name and one set of metric keys in every reply — is a
matter of consistency, not validity, so it never quarantines a reply: the passed replies' metric
records are *reconciled* (:func:`reconcile`) to the configured keys (or, without a configuration, to the
keys every passed reply carries in the same form) under one record name. A reply's arrays and its
weight are never touched, so the aggregate of the arrays is exactly the strategy's own over the
passed replies; the metric keys dropped are recorded with the reply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import numpy as np

#: what the guard remembers of the record a node was sent: (record key, [(name, shape, dtype)])
Layout = tuple[str, list[tuple[str, tuple, str]]]

MAX_EXAMPLES = 10 ** 9
#: the most entries a reply's MetricRecord may hold (a real client reports a handful)
MAX_METRICS = 1024


@dataclass
class Screened:
    """The replies the strategy receives, and the ones held back with their reasons."""

    passed: list
    quarantined: list  # [(message, reason)]
    trimmed: dict = None  # {id(message): [metric keys dropped by the reconciliation]}


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


def check_metrics(content, weight_key: str, required: tuple = ()) -> Optional[str]:
    """Why the reply's ``MetricRecord`` cannot be aggregated (``None`` when it can)."""
    metrics = content.metric_records
    if len(metrics) != 1:
        return f"{len(metrics)} MetricRecords; exactly one expected"
    record = next(iter(metrics.values()))
    if len(record) > MAX_METRICS:
        return f"its MetricRecord holds {len(record)} entries (at most {MAX_METRICS})"
    if weight_key not in record:
        return f"its MetricRecord has no {weight_key!r} (the aggregation weight)"
    weight = record[weight_key]
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) \
            or weight != int(weight) or not 1 <= weight <= MAX_EXAMPLES:
        return f"{weight_key} = {str(weight)[:40]}: a whole number in [1, {MAX_EXAMPLES}] expected"
    bad = next((k for k, v in record.items() if not _number(v)), None)
    if bad is not None:
        return f"metric {str(bad)[:60]!r} is not a finite number"
    missing = [k for k in required if k not in record]
    if missing:
        return f"its MetricRecord lacks the configured metric(s) {missing[:3]}"
    return None


def _form(value):
    return len(value) if isinstance(value, list) else None


def reconcile(passed: list, weight_key: str, metric_keys: Optional[tuple] = None) -> dict:
    """Give every passed reply one metric-record name and one set of metric keys, in place.

    The keys kept are ``metric_keys`` (with the weight) when configured, else those every passed reply
    carries in the same form (a number, or a list of one length): what one reply sends never decides
    whether another is aggregated. Returns ``{id(message): [keys dropped]}`` for the replies changed.
    """
    content = [m.content for m in passed if not m.has_error()]
    if not content:
        return {}
    records = [next(iter(c.metric_records.items())) for c in content]
    if metric_keys is not None:
        keep = set(metric_keys) | {weight_key}
    else:
        keep = set(records[0][1].keys())
        for _, record in records[1:]:
            keep &= set(record.keys())
        keep = {k for k in keep if len({_form(record[k]) for _, record in records}) == 1}
    name = records[0][0]
    trimmed = {}
    for message, c, (key, record) in zip([m for m in passed if not m.has_error()], content, records):
        dropped = [k for k in record.keys() if k not in keep]
        for k in dropped:
            del record[k]
        if key != name:
            del c[key]
            c[name] = record
        if dropped:
            trimmed[id(message)] = sorted(dropped)
    return trimmed


def screen(replies: Iterable, sent: dict[int, Layout], weight_key: str,
           metric_keys: Optional[tuple] = None) -> Screened:
    """Split a round's train replies into those the strategy can aggregate and the quarantined;
    reconcile the passed replies' metric records (:func:`reconcile`)."""
    replies = list(replies)
    passed, quarantined, seen = [], [], set()
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
                reason = check_arrays(message.content, sent[node]) or \
                    check_metrics(message.content, weight_key, tuple(metric_keys or ()))
            seen.add(node)
        except Exception as exc:  # noqa: BLE001 - whatever a client sends, the federation goes on
            reason = f"unreadable reply ({type(exc).__name__}: {str(exc)[:200]})"
        if reason is None:
            passed.append(message)
        else:
            quarantined.append((message, reason))
    return Screened(passed, quarantined, reconcile(passed, weight_key, metric_keys))


class ReplyGuard:
    """The guard as one behaviour of every strategy wrapper: remember what each node was sent
    (:meth:`sent`), screen the round's replies against it (:meth:`screen`).

    ``weight_key``: the aggregation weight's metric (Flower's ``num-examples``). ``metric_keys``: the
    metrics the server expects in every reply (optional; a reply lacking one is quarantined, others are
    dropped before aggregation). ``arrayrecord_key``: the ``ArrayRecord`` of the train message when it
    holds several.
    """

    def __init__(self, weight_key: str = "num-examples", metric_keys: Optional[Iterable[str]] = None,
                 arrayrecord_key: Optional[str] = None) -> None:
        from ...errors import FedleakError

        if not isinstance(weight_key, str) or not weight_key:
            raise FedleakError(f"weight key must be a metric name, got {weight_key!r}")
        if metric_keys is not None:
            if isinstance(metric_keys, str) or not all(isinstance(k, str) and k for k in metric_keys):
                raise FedleakError(f"metric_keys must be a list of metric names, got {metric_keys!r}")
            metric_keys = tuple(metric_keys)
        self.weight_key, self.metric_keys, self.arrayrecord_key = weight_key, metric_keys, arrayrecord_key
        self._layouts: dict[tuple[int, int], Layout] = {}

    def sent(self, server_round: int, messages: Iterable) -> None:
        """Remember the array layout each train message carries to its node."""
        for message in messages:
            records = message.content.array_records
            key = self.arrayrecord_key if self.arrayrecord_key in records else next(iter(records), None)
            if key is not None:
                self._layouts[(server_round, message.metadata.dst_node_id)] = layout(key, records[key])

    def screen(self, server_round: int, replies: Iterable) -> Screened:
        """The round's replies screened against what was sent; the round is then forgotten."""
        sent = {node: value for (r, node), value in self._layouts.items() if r == server_round}
        self._layouts = {key: value for key, value in self._layouts.items() if key[0] != server_round}
        return screen(replies, sent, self.weight_key, self.metric_keys)

    def passed(self, server_round: int, replies: Iterable, log: list, strategy: str) -> list:
        """:meth:`screen`, with each quarantined reply appended to ``log`` as a record; the passed replies."""
        screened = self.screen(server_round, replies)
        for reply, reason in screened.quarantined:
            log.append({"round": int(server_round), "client": _node(reply), "status": "quarantined",
                        "reason": f"not passed to {strategy}: {reason}"[:500]})
        return screened.passed
