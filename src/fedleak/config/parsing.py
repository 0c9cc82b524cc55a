"""A config mapping → :class:`ExperimentConfig`: top-level keys, variants, settings, ``quick:``."""

from __future__ import annotations

from ..errors import FedleakError, check_options
from .schema import (DATA_KEYS, MAX_SEED, METRIC_KEYS, MODEL_KEYS, OVERRIDABLE, QUICK_KEYS, SETTING_KEYS, TOP_KEYS,
                     VARIANT_KEYS, ExperimentConfig, Setting, Variant)
from .validation import (_check_data, _check_metrics, _check_model, _check_sections, _checked_keys, _mapping,
                         _section, _text)


def parse_config(raw: dict, source: str = "config") -> ExperimentConfig:
    """Validate a config mapping and turn it into an :class:`ExperimentConfig`."""
    if not isinstance(raw, dict):
        raise FedleakError(f"{source}: an experiment config must be a YAML mapping")
    check_options(source, raw, TOP_KEYS)
    data = _section(raw, "data", DATA_KEYS, source)
    if "dataset" not in data:
        raise FedleakError(f"{source}: data.dataset is required (e.g. femnist, cifar10, digits)")
    model = _section(raw, "model", MODEL_KEYS, source)
    if "name" not in model:
        raise FedleakError(f"{source}: model.name is required (e.g. femnist-cnn)")
    metrics = _section(raw, "metrics", METRIC_KEYS, source)
    _check_metrics(metrics, source)
    _check_sections(raw, source)
    for key in ("name", "description"):
        if key in raw and not isinstance(raw[key], (str, int, float)):
            raise FedleakError(f"{source}: {key} must be a string, got {raw[key]!r}")
    attack_seed = raw.get("attack_seed", 0)
    if isinstance(attack_seed, bool) or not isinstance(attack_seed, int) or not 0 <= attack_seed <= MAX_SEED:
        raise FedleakError(f"{source}: attack_seed must be an integer from 0 to {MAX_SEED}, got {attack_seed!r}")
    paper = _mapping(raw.get("paper"), f"{source}: paper")
    variants = _parse_variants(raw.get("variants"), source)
    settings = _parse_settings(raw.get("settings"), source, [v.name for v in variants])
    quick = _section(raw, "quick", QUICK_KEYS, source)
    _check_quick(quick, source, [v.name for v in variants], [s.name for s in settings])
    return ExperimentConfig(
        name=str(raw.get("name", source)), description=str(raw.get("description", "")), data=data, model=model,
        protocol=dict(raw.get("protocol") or {}), defense=raw.get("defense", "none"),
        threat=dict(raw.get("threat") or {"labels": "none"}), metrics=metrics, settings=settings, variants=variants,
        quick=quick, paper=dict(paper), attack_seed=attack_seed, rounds=dict(raw.get("rounds") or {}),
    )


def _name(value, what: str) -> str:
    """A variant or setting name: a non-empty string (YAML numbers are turned into strings)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not str(value).strip():
        raise FedleakError(f"{what} must be a non-empty name, got {value!r}")
    return str(value)


def _parse_variants(raw_variants, source: str) -> list[Variant]:
    if not raw_variants or not isinstance(raw_variants, dict):
        raise FedleakError(f"{source}: 'variants' must map variant names to {{attack: NAME, options: {{...}}}}")
    variants: list[Variant] = []
    for name, entry in raw_variants.items():
        name = _name(name, f"{source}: variant name")
        if name in {v.name for v in variants}:
            raise FedleakError(f"{source}: two variants are named {name!r}")
        if isinstance(entry, str):
            entry = {"attack": entry}
        if not isinstance(entry, dict) or "attack" not in entry:
            raise FedleakError(f"{source}: variant {name!r} needs an 'attack' name")
        check_options(f"{source} variant {name!r}", entry, VARIANT_KEYS)
        _text(entry["attack"], f"{source}: variant {name!r} attack")
        options = _mapping(entry.get("options"), f"{source}: variant {name!r} options")
        _check_sections(entry, f"{source} variant {name!r}")
        overrides = {k: entry[k] for k in OVERRIDABLE if k != "data" and k in entry}
        variants.append(Variant(name, entry["attack"], dict(options), overrides))
    return variants


def _names(value, what: str, known: list[str], kind: str) -> tuple[str, ...]:
    """A list of known variant/setting names (no repeats)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise FedleakError(f"{what} must be a list of {kind} names, got {value!r}")
    names = tuple(_name(v, what) for v in value)
    for name in names:
        if name not in known:
            raise FedleakError(f"{what} names unknown {kind} {name!r}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise FedleakError(f"{what} lists a {kind} twice: {list(names)}")
    return names


def _parse_settings(raw_settings, source: str, variant_names: list[str]) -> list[Setting]:
    if raw_settings is None:
        raw_settings = [{"name": "default"}]
    if not isinstance(raw_settings, list) or not raw_settings:
        raise FedleakError(f"{source}: 'settings' must be a non-empty list of mappings, got {raw_settings!r}")
    settings: list[Setting] = []
    for i, entry in enumerate(raw_settings):
        if not isinstance(entry, dict):
            raise FedleakError(f"{source}: settings[{i}] must be a mapping")
        check_options(f"{source} settings[{i}]", entry, SETTING_KEYS)
        name = _name(entry.get("name", f"setting-{i}"), f"{source}: settings[{i}].name")
        if name in {s.name for s in settings}:
            raise FedleakError(f"{source}: two settings are named {name!r}")
        _check_sections(entry, f"{source} setting {name!r}")
        overrides = {k: entry[k] for k in OVERRIDABLE if k in entry}
        only = None
        if entry.get("variants") is not None:
            only = _names(entry["variants"], f"{source}: setting {name!r} variants", variant_names, "variant")
            if not only:
                raise FedleakError(f"{source}: setting {name!r} lists no variants")
        settings.append(Setting(name, overrides, only))
    return settings


def _check_quick(quick: dict, source: str, variant_names: list[str], setting_names: list[str]) -> None:
    """``quick:`` is checked like the rest, so --quick cannot fail late."""
    where = f"{source} quick"
    if "data" in quick:
        _check_data(_checked_keys(quick["data"], f"{where}: data", DATA_KEYS), where)
    if "model" in quick:
        _check_model(_checked_keys(quick["model"], f"{where}: model", MODEL_KEYS), where)
    options = _mapping(quick.get("variant_options"), f"{where}: variant_options")
    for key in options:
        if not isinstance(key, str):
            raise FedleakError(f"{where}: variant_options keys must be option names, got {key!r}")
    if quick.get("variants") is not None:
        _names(quick["variants"], f"{where}: variants", variant_names, "variant")
    if quick.get("settings") is not None:
        _names(quick["settings"], f"{where}: settings", setting_names, "setting")
