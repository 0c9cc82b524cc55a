"""Type and bound checks of config sections: one :class:`FedleakError` line naming the key.

The sections ``data``, ``model``, ``metrics`` and ``rounds`` are strict pydantic models with the bounds of
:mod:`fedleak.config.boundary` (the same rules as the audit's settings and attack options: ``2.5`` or
``"4"`` for a count, ``"false"`` for a boolean, NaN for a number are refused, naming ``data.num_clients``).

Used for the base sections, every setting/variant override and ``quick:`` alike, so that a typo
fails before the first job runs.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BeforeValidator, ConfigDict, Field, create_model

from ..errors import FedleakError, check_options, unknown_choice
from ..fl.defenses import Defense
from ..types import Protocol
from .boundary import MAX_FLOAT, _no_nul, validate
from .schema import (DATA_KEYS, MAX_CLIENTS, MAX_ROUNDS, MAX_SAMPLES, MAX_SEED, MODEL_KEYS, ROUNDS_KEYS, SPLITS,
                     THREAT_LABELS)


def _section(raw: dict, key: str, allowed, where: str) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise FedleakError(f"{where}: section {key!r} must be a mapping, got {type(value).__name__}")
    check_options(f"{where} section {key!r}", value, allowed)
    return value


def _text(value, what: str, *, optional: bool = False) -> Optional[str]:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise FedleakError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _mapping(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FedleakError(f"{what} must be a mapping, got {value!r}")
    return value


def _protocol(values: dict, what: str) -> Protocol:
    try:
        return Protocol(**{**Protocol().to_json(), **values})
    except FedleakError as exc:
        raise FedleakError(f"{what}: {exc}") from None


def _count(low: int, high: int):
    return Annotated[int, Field(strict=True, ge=low, le=high)]


_NAME = Annotated[str, Field(strict=True, min_length=1, max_length=10_000), BeforeValidator(_no_nul)]
_STRICT = ConfigDict(strict=True, extra="forbid")


def _section_model(section: str, **fields):
    """A strict model of one section, wrapped so that errors name ``section.key`` (``data.num_clients``)."""
    inner = create_model(f"{section.title()}Section", __config__=_STRICT,
                         **{k: (v, None) for k, v in fields.items()})
    return create_model(f"{section.title()}Wrapper", __config__=_STRICT, **{section: (inner, ...)})


#: the typed sections of an experiment file (the bounds of :mod:`fedleak.config.boundary`)
_DATA = _section_model("data", dataset=_NAME, root=Optional[_NAME], num_clients=_count(1, MAX_CLIENTS),
                       samples_per_client=Optional[_count(1, MAX_SAMPLES)], seed=_count(0, MAX_SEED),
                       split=Literal[SPLITS], options=Optional[dict], first_client=_count(0, MAX_CLIENTS - 1))
_MODEL = _section_model("model", name=_NAME, seed=_count(0, MAX_SEED), options=Optional[dict],
                        train_rounds=_count(0, MAX_ROUNDS), train_clients_per_round=_count(1, MAX_CLIENTS),
                        train_protocol=dict)
_METRICS = _section_model("metrics", threshold=Optional[Annotated[float, Field(strict=True, allow_inf_nan=False,
                                                                              ge=-MAX_FLOAT, le=MAX_FLOAT)]],
                          clip=bool, lpips=Union[bool, _NAME], save_images=bool)
_ROUNDS = _section_model("rounds", epochs=_count(1, MAX_ROUNDS), samples_per_round=Optional[_count(1, MAX_SAMPLES)])


def _typed(model, section: str, values: dict, where: str) -> None:
    """``values`` of ``section`` checked by its strict model; the first problem as one line."""
    for key, value in values.items():  # a key set to null is "not given" only where the schema says Optional
        if value is None and key in ("dataset", "num_clients", "seed", "split", "name", "train_rounds",
                                     "train_clients_per_round", "clip", "save_images", "epochs", "lpips"):
            raise FedleakError(f"{where}: {section}.{key} must not be null")
    validate(model, {section: values}, where=where)


def _check_data(data: dict, where: str) -> None:
    """Types and bounds of a ``data`` section (base, setting override or ``quick.data``)."""
    _typed(_DATA, "data", data, where)


def _check_model(model: dict, where: str) -> None:
    _typed(_MODEL, "model", model, where)
    if "train_protocol" in model:
        w = f"{where}: model.train_protocol"
        _protocol(_checked_keys(model["train_protocol"], w, tuple(Protocol().to_json())), w)


def _check_metrics(metrics: dict, where: str) -> None:
    _typed(_METRICS, "metrics", metrics, where)


def _checked_keys(value, what: str, allowed) -> dict:
    value = _mapping(value, what)
    check_options(what, value, allowed)
    return value


def _raise(exc: Exception):
    raise exc


def _check_defense(value, where: str) -> None:
    if value is not None and not isinstance(value, (str, dict)):
        raise FedleakError(f"{where}: defense must be a string like 'gaussian:0.01', a mapping or none, got {value!r}")
    try:
        Defense.parse(value)
    except TypeError as exc:  # a mapping with keys Defense does not take
        raise FedleakError(f"{where}: defense {value!r} is not valid ({exc})") from None
    except FedleakError as exc:
        raise FedleakError(f"{where}: {exc}") from None


def _check_sections(section: dict, where: str) -> None:
    """Validate override sections eagerly (so a typo fails before the first job)."""
    if "data" in section:
        _check_data(_section(section, "data", DATA_KEYS, where), where)
    if "model" in section:
        _check_model(_section(section, "model", MODEL_KEYS, where), where)
    if "protocol" in section:
        protocol = _section(section, "protocol", tuple(Protocol().to_json()), where)
        _protocol(protocol, f"{where}: protocol")
    if "defense" in section:
        _check_defense(section["defense"], where)
    if "threat" in section:
        threat = _section(section, "threat", ("labels",), where)
        if threat.get("labels", "none") not in THREAT_LABELS:
            raise unknown_choice("threat.labels", threat.get("labels"), THREAT_LABELS)
    if "rounds" in section:
        _typed(_ROUNDS, "rounds", _section(section, "rounds", ROUNDS_KEYS, where), where)
