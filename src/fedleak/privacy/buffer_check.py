"""Integer buffers a DP aggregator clipped and noised, found from what the server holds (issue #42, item 3).

A model's non-trainable integer buffers (BatchNorm's ``num_batches_tracked``) travel in a Flower ``ArrayRecord``
beside the weights. Flower's DP wrappers before 1.45 (flwr #8381) clip and noise every array of the update, the
integer ones included: the released aggregate carries them as noisy floats (an int64 counter 7 → 9 on the nodes
comes back as float64 9.84), and their change counts in the update's norm, so the weights are clipped harder than
the configured C. McMahan et al. (ICLR 2018, DP-FedAvg) clip and noise the *trainable* parameters; a counter is not
one.

From the server's view only — the replies' arrays (names, dtypes, values) and the released aggregate — this names
the entries that are integer-typed in every reply and come back with another dtype or non-integer values. It is not
a privacy violation (noise on more coordinates costs no privacy), so it never changes the DP verdict: it is a finding
beside it.
"""

from __future__ import annotations

from typing import Iterable, Optional

import numpy as np

#: where the fault lives (named in the finding)
CAUSE = ("the DP wrapper clipped and noised non-trainable integer buffers with the weights (Flower < 1.45, "
         "flwr #8381)")


def _named(record) -> list:
    """(name, array) pairs of a Flower ArrayRecord, or of a dict / list of numpy arrays."""
    if hasattr(record, "to_numpy_ndarrays") and hasattr(record, "keys"):
        return list(zip(record.keys(), record.to_numpy_ndarrays()))
    if isinstance(record, dict):
        return [(str(k), np.asarray(v)) for k, v in record.items()]
    return [(str(i), np.asarray(v)) for i, v in enumerate(record)]


def integer_entries(records: Iterable) -> dict:
    """Name → dtype of the entries integer-typed, with one shape, in every one of ``records`` (one round's
    replies)."""
    out: Optional[dict] = None
    for record in records:
        ints = {name: (str(a.dtype), a.shape) for name, a in _named(record)
                if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_}
        out = ints if out is None else {k: v for k, v in out.items() if ints.get(k) == v}
    return {name: dtype for name, (dtype, _) in (out or {}).items()}


class BufferCheck:
    """Accumulates, round by round, the integer entries of the replies whose released value is not what averaging
    the replies gives (FedAvg's mean weighted by the replies' example counts, or, without counts, a value outside the
    replies' range): clipped or noised. A plain FedAvg also returns them as float64, but with the replies' mean, so a
    dtype change alone is not a finding. :meth:`finding` is the one sentence (or None)."""

    def __init__(self) -> None:
        self.expected: dict = {}  # name → (integer dtype in the replies, weighted mean, low, high)
        self.names: dict = {}  # name → dtype of the entries integer-typed in every reply of some round
        self.seen: dict = {}  # name → {"replies_dtype", "released_dtype", "rounds", "example", "mean"}
        self.rounds = 0

    def replies(self, records: Iterable, weights: Optional[Iterable] = None) -> None:
        """The round's replies as the server received them (ArrayRecords, before aggregation); ``weights``: their
        example counts (FedAvg's ``num-examples``), if known."""
        records = [dict(_named(r)) for r in records]
        for name, dtype in integer_entries(records).items():
            self.names.setdefault(name, dtype)  # integer in every reply once: a buffer from then on
        w = None if weights is None else np.asarray(list(weights), float)
        if w is not None and (w.size != len(records) or not np.all(w >= 0) or w.sum() <= 0):
            w = None
        self.expected = {}
        for name, dtype in self.names.items():
            if not records or any(name not in r or np.shape(r[name]) != np.shape(records[0][name]) for r in records):
                continue
            values = np.stack([np.asarray(r[name], float) for r in records])  # a canary echoes a float release
            mean = None if w is None else np.tensordot(w / w.sum(), values, axes=1)
            self.expected[name] = (dtype, mean, values.min(axis=0), values.max(axis=0))

    def release(self, record, server_round: Optional[int] = None) -> None:
        """The aggregate the strategy released for the round: integer reply entries released off the replies'
        average."""
        self.rounds += 1
        for name, a in _named(record):
            if name not in self.expected:
                continue
            dtype, mean, low, high = self.expected[name]
            values = np.asarray(a, float)
            if values.shape != low.shape:
                off = True
            elif mean is not None:
                off = bool(np.any(np.abs(values - mean) > 1e-6 * np.maximum(1.0, np.abs(mean))))
            else:
                off = bool(np.any((values < low - 1e-6) | (values > high + 1e-6)))
            if off:
                entry = self.seen.setdefault(name, {"replies_dtype": dtype, "released_dtype": str(np.asarray(a).dtype),
                                                    "rounds": [], "example": float(np.ravel(values)[0])
                                                    if values.size else None,
                                                    "mean": None if mean is None else float(np.ravel(mean)[0])})
                entry["rounds"].append(self.rounds if server_round is None else int(server_round))

    def finding(self) -> Optional[dict]:
        """What was seen, which arrays, the cause and what it means; None when every integer entry came back
        integer-typed (or there were none)."""
        if not self.seen:
            return None
        names = sorted(self.seen)
        first = self.seen[names[0]]
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        rounds = sorted({r for e in self.seen.values() for r in e["rounds"]})
        example = "" if first["example"] is None else f", e.g. {names[0]} = {first['example']:.4g}" + (
            "" if first["mean"] is None else f" where the replies average {first['mean']:.4g}")
        sentence = (f"Integer buffers came back noised: {len(names)} array(s) integer-typed in every reply "
                    f"({shown}: {first['replies_dtype']}) were released as {first['released_dtype']} off the replies' average{example}, in "
                    f"{len(rounds)} of {self.rounds} rounds: {CAUSE}. The model's buffers are corrupted, and their "
                    "change spends the clip budget, so the weights are clipped harder than configured; this is "
                    "not a privacy violation and does not change the DP verdict.")
        return {"kind": "integer buffers noised", "arrays": names, "rounds": rounds, "detail": self.seen,
                "cause": CAUSE, "privacy_violation": False, "sentence": sentence}


def dp_chain(strategy) -> tuple:
    """(whether a Flower ``DifferentialPrivacy*`` wrapper is in ``strategy``'s chain of ``.strategy`` attributes,
    the innermost strategy's ``weighted_by_key`` where it is a plain FedAvg/FedProx whose release is the weighted
    mean, else None: the replies' range is checked instead). Without a DP wrapper nothing is checked: a server
    optimizer (FedAdam) or LocalDpMod's noise on the replies is another matter."""
    node, dp, inner = strategy, False, strategy
    for _ in range(16):
        if node is None:
            break
        dp, inner, node = dp or type(node).__name__.startswith("DifferentialPrivacy"), node, getattr(node, "strategy",
                                                                                                    None)
    return dp, (getattr(inner, "weighted_by_key", None) if type(inner).__name__ in ("FedAvg", "FedProx") else None)


def check_release(replies: Iterable, released, weights: Optional[Iterable] = None,
                  server_round: Optional[int] = None) -> Optional[dict]:
    """One round: the replies' arrays (and example counts) and the released aggregate → the finding (or None)."""
    check = BufferCheck()
    check.replies(replies, weights)
    check.release(released, server_round)
    return check.finding()
