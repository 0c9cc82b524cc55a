"""The one reader of the short text forms users type: name lists, ``KEY=VALUE`` options, ``KIND:ARGS`` specs.

Every such string (``--attacks a,b``, ``--variants``, ``--settings``, ``--option KEY=VALUE``,
``--defense gaussian:0.01``, ``dp-sgd:clip=1,noise=0.5``, ``flower-central-dp:noise=1,clip=1,clients=4``,
``--sweep lora=4,8``) is split here and nowhere else, with one set of rules:

* an empty list, an empty item (``a,,b``, ``,``), an item given twice, and a key given twice are refused;
* a spec's values are numbers (finite, within :data:`~fedleak.config.boundary.MAX_FLOAT`), and a key
  declared integer (``clients``, ``secagg``) must be a whole number (``2.5`` refused);
* a ``KEY=VALUE`` option's value is a YAML scalar (number, boolean, string) or a flat list of scalars.

The typed objects built from the parts (attack options, :class:`~fedleak.fl.defenses.Defense`, sweeps)
check their own fields through :mod:`fedleak.config.boundary`; nothing downstream splits strings again.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

from ..errors import FedleakError
from .boundary import MAX_FLOAT, MAX_INT, finite_float

#: the most items a list or spec may hold (a typo, not a deployment, has more)
MAX_ITEMS = 1000


def split_names(text, what: str) -> tuple[str, ...]:
    """``"a,b"`` → ``("a", "b")``; empty, blank items and repeats are refused, naming ``what``."""
    if not isinstance(text, str):
        raise FedleakError(f"{what} must be a comma-separated list of names, got {text!r}")
    if "\x00" in text:
        raise FedleakError(f"{what} contains a NUL character")
    items = [part.strip() for part in text.split(",")]
    if not any(items):
        raise FedleakError(f"{what} is empty; give one or more comma-separated names")
    if "" in items:
        raise FedleakError(f"{what} {text!r} has an empty item (two commas, or a comma at an end)")
    return names_tuple(items, what)


def split_sweep(text: str, knobs: Iterable[str]) -> tuple[str, list[str]]:
    """``"KNOB=V1,V2"`` → ``("KNOB", ["V1", "V2"])`` (``--sweep``); the values stay strings for the sweep's own
    typed check (:class:`fedleak.audit.plan.config.Sweep`). A missing ``=``, an empty list or an empty item is
    refused, naming the flag."""
    if "\x00" in text:
        raise FedleakError("--sweep contains a NUL character")
    knob, eq, rest = text.partition("=")
    if not eq:
        raise FedleakError(f"--sweep expects KNOB=V1,V2,..., got {text!r}; knobs: {', '.join(knobs)}")
    if not rest.strip():
        raise FedleakError(f"--sweep {knob.strip()}= has an empty value list; give e.g. {knob.strip()}=1,2,4")
    values = [v.strip() for v in rest.split(",")]
    if "" in values:
        raise FedleakError(f"--sweep {text!r} has an empty value (two commas, or a comma at an end)")
    if len(values) > MAX_ITEMS:
        raise FedleakError(f"--sweep {knob.strip()}= has {len(values)} values; at most {MAX_ITEMS}")
    return knob, values

def names_tuple(items: Iterable, what: str) -> tuple[str, ...]:
    """A sequence of names (YAML list or split string) checked: non-empty strings, no repeat."""
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip() or "\x00" in item:
            raise FedleakError(f"{what} must hold non-empty names, got {item!r}")
        out.append(item.strip())
    if not out:
        raise FedleakError(f"{what} is empty; give one or more names")
    if len(out) > MAX_ITEMS:
        raise FedleakError(f"{what} has {len(out)} items; at most {MAX_ITEMS}")
    repeated = sorted({n for n in out if out.count(n) > 1})
    if repeated:
        raise FedleakError(f"{what} names {repeated[0]!r} twice")
    return tuple(out)


def _scalar(text: str):
    """A YAML scalar (or flat list of scalars) from ``text``; anything nested stays a string."""
    import yaml

    if len(text) > 10_000:
        raise FedleakError(f"option value of {len(text)} characters; at most 10000")
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return text
    if isinstance(value, list) and all(v is None or isinstance(v, (bool, int, float, str)) for v in value):
        return value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if value is not None else None
    return text


def parse_pairs(pairs: Optional[Sequence[str]], flag: str = "--option") -> dict:
    """``["lr=0.1", "labels=auto"]`` → ``{"lr": 0.1, "labels": "auto"}`` (``-`` in keys becomes ``_``)."""
    out: dict = {}
    for pair in pairs or []:
        if not isinstance(pair, str):
            raise FedleakError(f"{flag} expects KEY=VALUE, got {pair!r}")
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key or "\x00" in pair:
            raise FedleakError(f"{flag} expects KEY=VALUE, got {pair!r}")
        if key in out:
            raise FedleakError(f"{flag} gives {key!r} twice")
        if not value.strip():
            raise FedleakError(f"{flag} {key}= has no value")
        out[key] = _scalar(value)
    return out


def parse_spec(text, what: str, *, keys: Sequence[str], positional: Optional[str] = None,
               integers: Sequence[str] = (), aliases: Optional[dict] = None) -> tuple[str, dict]:
    """``"kind:KEY=V,KEY=V"`` → ``(kind, {key: number})``.

    ``keys`` are the allowed keys (after ``aliases``); a bare value (``gaussian:0.01``) is ``positional``
    and may come once, first. ``integers`` must be whole numbers. An empty part, a key given twice, a
    key without ``=VALUE`` and a value that is not a finite number are refused, naming the spec.
    """
    if not isinstance(text, str):
        raise FedleakError(f"{what} must be a string like KIND:KEY=VALUE, got {text!r}")
    text = text.strip()
    kind, colon, rest = text.partition(":")
    kind = kind.strip().lower()
    if colon and not rest.strip():
        raise FedleakError(f"{what} {text!r} ends with ':' and no value")
    values: dict = {}
    parts = [p.strip() for p in rest.split(",")] if rest.strip() else []
    if len(parts) > MAX_ITEMS:
        raise FedleakError(f"{what} {text!r} has {len(parts)} parts; at most {MAX_ITEMS}")
    for index, part in enumerate(parts):
        if not part:
            raise FedleakError(f"{what} {text!r} has an empty part (two commas, or a comma at an end)")
        key, eq, value = part.partition("=")
        if eq:
            key = key.strip().lower().replace("-", "_")
            key = (aliases or {}).get(key, key)
        elif positional is not None and index == 0:
            key, value = positional, part
        else:
            allowed = ", ".join(keys)
            raise FedleakError(f"{what} {text!r}: {part!r} is not KEY=VALUE (keys: {allowed})")
        if key not in keys:
            raise FedleakError(f"{what} {text!r}: unknown key {key!r}; KEY=VALUE with KEY one of {', '.join(keys)}")
        if key in values:
            raise FedleakError(f"{what} {text!r} gives {key!r} twice")
        if not value.strip():
            raise FedleakError(f"{what} {text!r}: {key}= has no value")
        number = finite_float(value.strip(), f"{what} {text!r}: {key}")
        if key in integers:
            if not number.is_integer() or abs(number) > MAX_INT:
                raise FedleakError(f"{what} {text!r}: {key} must be a whole number, got {value.strip()!r}")
            number = int(number)
        values[key] = number
    return kind, values


__all__ = ["MAX_FLOAT", "MAX_INT", "MAX_ITEMS", "names_tuple", "parse_pairs", "parse_spec", "split_names"]
