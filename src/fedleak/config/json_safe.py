"""The one JSON reader for files that enter from outside: bounded size and nesting, strict JSON.

Update, reconstruction, job and result files and LEAF data files all go through
:func:`loads_bounded`: the nesting depth is measured before parsing (a file of 100 000 ``[`` would
otherwise end in Python's ``RecursionError``), ``NaN``/``Infinity`` (not JSON; what fedleak writes
never holds them) are refused, and every problem is one :class:`FedleakError` line naming the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from ..errors import FedleakError

#: the largest metadata/result file read (a job record is a few kilobytes)
MAX_JSON_BYTES = 64_000_000
#: the deepest nesting accepted (fedleak's own files nest fewer than 10 levels)
MAX_JSON_DEPTH = 64

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)


def json_depth(data: bytes) -> int:
    """The deepest ``[``/``{`` nesting of JSON text ``data`` (brackets inside strings not counted)."""
    stripped = _STRING.sub(b'""', data)
    arr = np.frombuffer(stripped, dtype=np.uint8)
    if arr.size == 0:
        return 0
    step = ((arr == ord("[")) | (arr == ord("{"))).astype(np.int64) - ((arr == ord("]")) | (arr == ord("}")))
    return int(np.cumsum(step).max(initial=0))


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def loads_bounded(data: bytes, source: str, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH):
    """JSON bytes → Python data, refusing oversized, too deeply nested, non-UTF-8 or non-strict JSON."""
    if len(data) > max_bytes:
        raise FedleakError(f"{source} is {len(data)} bytes; at most {max_bytes} are read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FedleakError(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    depth = json_depth(data)
    if depth > max_depth:
        raise FedleakError(f"{source} nests {depth} levels deep; at most {max_depth}")
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise FedleakError(f"corrupt JSON file {source}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise FedleakError(f"corrupt JSON file {source}: {exc}") from None


def read_json_file(path, *, max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH, obj: bool = True):
    """The JSON document in ``path`` (an object when ``obj``); every problem one line naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"missing file {path}")
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise FedleakError(f"{path} is {size} bytes; at most {max_bytes} are read")
        data = path.read_bytes()
    except OSError as exc:
        raise FedleakError(f"cannot read {path}: {exc.strerror or exc}") from None
    value = loads_bounded(data, str(path), max_bytes=max_bytes, max_depth=max_depth)
    if obj and not isinstance(value, dict):
        raise FedleakError(f"{path} must hold a JSON object, got a JSON {type(value).__name__}")
    return value
