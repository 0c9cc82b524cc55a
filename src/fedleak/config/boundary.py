"""The one validated boundary: typed settings checked by pydantic v2 strict models.

Every value that enters fedleak from outside (CLI flags after argparse, ``--config`` YAML, the
keyword arguments of :func:`fedleak.audit`, job and result files, Flower replies) is checked here
once, and nothing downstream re-parses it. The rules:

* numbers are finite (NaN, ±Inf refused) and inside bounds (``1e308`` refused before it overflows a
  later computation); integers are integers (``2.5``, ``"3"``, ``true`` refused);
* booleans are YAML/Python booleans (``"false"`` refused: it is a string, and truthy);
* strings are strings without NUL characters; lists are lists.

:func:`settings_model` derives a strict model from a dataclass's fields and type hints, so a new
key of :class:`fedleak.audit.AuditConfig` is validated by adding the field there (with optional
bounds in ``field(metadata={"ge": 1, "le": 4096})``) and nothing else. :func:`validate` runs a
model and turns pydantic's report into one :class:`~fedleak.errors.FedleakError` line naming the
field and the value.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import typing
from typing import Annotated, Any, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from ..errors import FedleakError
from ..bounds import (MAX_CLIENTS, MAX_EPOCHS, MAX_FLOAT, MAX_INT, MAX_RATE,  # noqa: F401  (re-exported: the
                      MAX_ROUNDS, MAX_SAMPLES, MAX_SEED)  # one set of bounds, fedleak.bounds)

_STRICT = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)


def _no_nul(value):
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


def _tuple_of_str(value):
    """A list (YAML) or tuple of strings → a tuple; a string is one item."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(value)
    return value


def _number_type(hint, meta: dict):
    if hint is bool:
        return bool
    bounds = {k: meta[k] for k in ("ge", "gt", "le", "lt") if k in meta}
    if hint is int:
        bounds.setdefault("ge", 0)
        if "lt" not in bounds:
            bounds.setdefault("le", MAX_INT)
        return Annotated[int, Field(strict=True, **bounds)]
    if "lt" not in bounds:
        bounds.setdefault("le", MAX_FLOAT)
    if "gt" not in bounds:
        bounds.setdefault("ge", -MAX_FLOAT)
    return Annotated[float, Field(strict=True, allow_inf_nan=False, **bounds)]


def field_type(hint, meta: Optional[dict] = None):
    """The strict pydantic type of one dataclass field (``meta``: its bounds)."""
    meta = meta or {}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return Optional[field_type(inner[0], meta)]
        return Union[tuple(field_type(a, meta) for a in inner)]
    if hint in (bool, int, float):
        return _number_type(hint, meta)
    if hint is str:
        return Annotated[str, Field(strict=True, min_length=meta.get("min_length", 1), max_length=100_000),
                         BeforeValidator(_no_nul)]
    if hint is tuple or origin is tuple:
        item = field_type(args[0], meta) if args and args[0] is not Ellipsis else str
        return Annotated[tuple[item, ...], BeforeValidator(_tuple_of_str)]
    if hint is dict or origin is dict:
        return dict
    return hint  # Literal[...], list[str], a class: pydantic checks it strictly (Any stays open)


@functools.lru_cache(maxsize=None)
def settings_model(cls) -> type[BaseModel]:
    """A strict pydantic model of dataclass ``cls``'s fields (``extra`` and ``Any`` fields left open)."""
    hints = typing.get_type_hints(cls)
    bounds = getattr(cls, "BOUNDS", {}) or {}
    definitions = {}
    for f in dataclasses.fields(cls):
        if f.name == "extra":
            continue
        kind = field_type(hints[f.name], {**bounds.get(f.name, {}), **f.metadata})
        try:  # a type pydantic cannot check is left open rather than breaking every config
            create_model("Probe", __config__=_STRICT, value=(kind, None))
        except Exception:  # noqa: BLE001
            kind = Any
        definitions[f.name] = (kind, None)
    return create_model(f"{cls.__name__}Settings", __config__=_STRICT, **definitions)


def _explain(error: dict) -> str:
    kind, ctx = error.get("type", ""), error.get("ctx") or {}
    if kind in ("bool_type", "bool_parsing"):
        return "must be true or false"
    if kind in ("int_type", "int_from_float", "int_parsing"):
        return "must be an integer"
    if kind in ("finite_number",):
        return "must be a finite number"
    if kind in ("float_type", "float_parsing"):
        return "must be a number"
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        op = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}[kind]
        limit = next(iter(ctx.values()), "?")
        return f"must be a number {op} {limit:g}" if isinstance(limit, float) else f"must be {op} {limit}"
    if kind in ("string_type",):
        return "must be a string"
    if kind in ("string_too_short",):
        return "must be a non-empty string"
    if kind in ("tuple_type", "list_type"):
        return "must be a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "must be a mapping"
    if kind == "too_short":
        return "must not be empty"
    if kind == "too_long":
        return f"has too many items (at most {ctx.get('max_length', '?')})"
    if kind == "extra_forbidden":
        return "is not a known key"
    if kind == "missing":
        return "is required"
    if kind == "value_error" and ctx.get("error") is not None:  # a check of ours (a spec built to test it)
        return " ".join(str(ctx["error"]).split())
    if kind == "literal_error" and ctx.get("expected"):
        return f"must be one of {ctx['expected']}"
    text = " ".join(str(error.get("msg", "is not valid")).split())
    return text.replace("Input should be", "must be", 1)


def _short(value) -> str:
    text = " ".join(repr(value).split())  # one line, whatever the value's repr
    return text if len(text) <= 80 else text[:77] + "..."


def _part(part) -> str:
    """One key of a location as printed: as written, or quoted when it holds blanks or unprintable characters."""
    text = str(part)
    return text if text and text.isprintable() and not any(c.isspace() for c in text) else _short(text)


def name_of(loc, style: str = "key") -> str:
    """A location tuple as the user wrote it: ``defense[1]`` (key) or ``--batch-size`` (flag)."""
    head, rest = _part(loc[0]) if loc else "value", loc[1:]
    if style == "flag":
        head = "--" + head.replace("_", "-")
    return head + "".join(f"[{p}]" if isinstance(p, int) else f".{_part(p)}" for p in rest)


def validate(model: type[BaseModel], values: dict, where: str = "", style: str = "key") -> BaseModel:
    """``values`` checked by ``model``; the first problem as one :class:`FedleakError` line."""
    if not isinstance(values, dict):
        raise FedleakError(f"{where or 'settings'} must be a mapping of keys to values, got {type(values).__name__}")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        prefix = f"{where}: " if where else ""
        problem = _explain(error)
        got = "" if error.get("type") == "value_error" and "got " in problem else f", got {_short(error.get('input'))}"
        raise FedleakError(f"{prefix}{name_of(error.get('loc', ()), style)} {problem}{got}") from None


def finite_float(value, what: str, *, low: float = -MAX_FLOAT, high: float = MAX_FLOAT,
                 positive: bool = False) -> float:
    """One number from a spec string or a mapping: finite, in ``[low, high]`` (``> 0`` when ``positive``)."""
    if isinstance(value, bool):
        raise FedleakError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise FedleakError(f"{what} must be a number, got {_short(value)}") from None
    if not math.isfinite(number):
        raise FedleakError(f"{what} must be a finite number, got {_short(value)}")
    if not low <= number <= high or (positive and number <= 0):
        bound = f"> 0 and <= {high:g}" if positive else f"from {low:g} to {high:g}"
        raise FedleakError(f"{what} must be a number {bound}, got {_short(value)}")
    return number


def api_arguments(function: str, **checks) -> None:
    """Arguments of a public function checked at its door: ``name=(value, type or tuple, what)``.

    A value of the wrong type is one :class:`FedleakError` line naming the function, the argument and
    what it takes (``client_update(): protocol must be a fedleak.Protocol, got dict``); an ``int`` argument
    refuses ``bool`` and must lie in ``[0, MAX_SEED]`` (every integer argument of the API is a seed or a count).
    """
    for name, (value, kinds, what) in checks.items():
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if ok and isinstance(value, int) and not isinstance(value, bool):
            ok = 0 <= value <= MAX_SEED
        if not ok:
            raise FedleakError(f"{function}(): {name} must be {what}, got {_short(value)} "
                               f"({type(value).__name__})")
