"""Type and bound checks of config sections: one :class:`FedleakError` line naming the key.

Used for the base sections, every setting/variant override and ``quick:`` alike, so that a typo
fails before the first job runs.
"""

from __future__ import annotations

from typing import Optional

from ..errors import FedleakError, check_bool, check_int, check_number, check_options, unknown_choice
from ..fl.defenses import Defense
from ..types import Protocol
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


def _check_data(data: dict, where: str) -> None:
    """Types and bounds of a ``data`` section (base, setting override or ``quick.data``)."""
    checks = {
        "dataset": lambda v, w: _text(v, w),
        "root": lambda v, w: _text(v, w, optional=True),
        "num_clients": lambda v, w: check_int(v, w, 1, MAX_CLIENTS),
        "samples_per_client": lambda v, w: v is None or check_int(v, w, 1, MAX_SAMPLES),
        "seed": lambda v, w: check_int(v, w, 0, MAX_SEED),
        "split": lambda v, w: v in SPLITS or _raise(unknown_choice(w, v, SPLITS)),
        "options": _mapping,
        "first_client": lambda v, w: check_int(v, w, 0, MAX_CLIENTS - 1),
    }
    for key, value in data.items():
        checks[key](value, f"{where}: data.{key}")


def _check_model(model: dict, where: str) -> None:
    checks = {
        "name": lambda v, w: _text(v, w),
        "seed": lambda v, w: check_int(v, w, 0, MAX_SEED),
        "options": _mapping,
        "train_rounds": lambda v, w: check_int(v, w, 0, MAX_ROUNDS),
        "train_clients_per_round": lambda v, w: check_int(v, w, 1, MAX_CLIENTS),
        "train_protocol": lambda v, w: _protocol(_checked_keys(v, w, tuple(Protocol().to_json())), w),
    }
    for key, value in model.items():
        checks[key](value, f"{where}: model.{key}")


def _check_metrics(metrics: dict, where: str) -> None:
    checks = {
        "threshold": lambda v, w: v is None or check_number(v, w),
        "clip": check_bool,
        "lpips": lambda v, w: isinstance(v, (bool, str)) or _raise(
            FedleakError(f"{w} must be true, false or a weights file path, got {v!r}")),
        "save_images": check_bool,
    }
    for key, value in metrics.items():
        checks[key](value, f"{where}: metrics.{key}")


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
        rounds = _section(section, "rounds", ROUNDS_KEYS, where)
        epochs, per_round = rounds.get("epochs", 1), rounds.get("samples_per_round")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise FedleakError(f"{where}: rounds.epochs must be a positive integer, got {epochs!r}")
        if per_round is not None and (isinstance(per_round, bool) or not isinstance(per_round, int) or per_round < 1):
            raise FedleakError(f"{where}: rounds.samples_per_round must be a positive integer, got {per_round!r}")
