"""Experiment configuration: YAML → typed, validated config (schema in ``docs/experiments.md``).

Every section is checked when loaded: unknown keys and bad values stop with a message that names
the key and the allowed ones, before any job runs.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import FedleakError, check_options, unknown_choice
from .fl.defenses import Defense
from .types import Protocol

THREAT_LABELS = ("none", "counts", "labels", "batches")
TOP_KEYS = ("name", "description", "data", "model", "protocol", "defense", "threat", "rounds", "metrics",
            "settings", "variants", "quick", "paper", "attack_seed")
DATA_KEYS = ("dataset", "root", "num_clients", "samples_per_client", "seed", "split", "options", "first_client")
MODEL_KEYS = ("name", "seed", "options", "train_rounds", "train_clients_per_round", "train_protocol")
METRIC_KEYS = ("threshold", "clip", "lpips", "save_images")
ROUNDS_KEYS = ("epochs", "samples_per_round")
SETTING_KEYS = ("name", "data", "model", "protocol", "defense", "threat", "rounds", "variants")
VARIANT_KEYS = ("attack", "options", "model", "protocol", "defense", "threat", "rounds")
#: the sections a setting or a variant may override
OVERRIDABLE = ("data", "model", "protocol", "defense", "threat", "rounds")
QUICK_KEYS = ("data", "variant_options", "model", "settings", "variants")


@dataclass(frozen=True)
class Variant:
    """One row of a table: a registered attack with options and optional section overrides."""

    name: str
    attack: str
    options: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Setting:
    """One column group of a table: overrides of the base sections (e.g. E=1 vs E=10)."""

    name: str
    overrides: dict = field(default_factory=dict)
    variants: Optional[tuple[str, ...]] = None


@dataclass
class ExperimentConfig:
    name: str
    description: str
    data: dict
    model: dict
    protocol: dict
    defense: Any
    threat: dict
    metrics: dict
    settings: list[Setting]
    variants: list[Variant]
    quick: dict
    paper: dict
    attack_seed: int = 0
    rounds: dict = field(default_factory=dict)

    def resolve(self, setting: Setting, variant: Variant) -> dict:
        """The sections (data, model, protocol, defense, threat) in force for one job."""
        base = {"data": self.data, "model": self.model, "protocol": self.protocol, "defense": self.defense,
                "threat": self.threat, "rounds": self.rounds}
        merged = _merge(base, setting.overrides)
        return _merge(merged, variant.overrides)


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _section(raw: dict, key: str, allowed, where: str) -> dict:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise FedleakError(f"{where}: section {key!r} must be a mapping, got {type(value).__name__}")
    check_options(f"{where} section {key!r}", value, allowed)
    return value


def _check_sections(section: dict, where: str) -> None:
    """Validate override sections eagerly (so a typo fails before the first job)."""
    if "data" in section:
        _section(section, "data", DATA_KEYS, where)
    if "model" in section:
        _section(section, "model", MODEL_KEYS, where)
    if "protocol" in section:
        protocol = _section(section, "protocol", tuple(Protocol().to_json()), where)
        Protocol(**{**Protocol().to_json(), **protocol})
    if "defense" in section:
        Defense.parse(section["defense"])
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
    _check_sections(raw, source)
    raw_variants = raw.get("variants")
    if not raw_variants or not isinstance(raw_variants, dict):
        raise FedleakError(f"{source}: 'variants' must map variant names to {{attack: NAME, options: {{...}}}}")
    variants = []
    for name, entry in raw_variants.items():
        if isinstance(entry, str):
            entry = {"attack": entry}
        if not isinstance(entry, dict) or "attack" not in entry:
            raise FedleakError(f"{source}: variant {name!r} needs an 'attack' name")
        check_options(f"{source} variant {name!r}", entry, VARIANT_KEYS)
        _check_sections(entry, f"{source} variant {name!r}")
        overrides = {k: entry[k] for k in OVERRIDABLE if k != "data" and k in entry}
        variants.append(Variant(str(name), entry["attack"], dict(entry.get("options") or {}), overrides))
    settings = []
    for i, entry in enumerate(raw.get("settings") or [{"name": "default"}]):
        if not isinstance(entry, dict):
            raise FedleakError(f"{source}: settings[{i}] must be a mapping")
        check_options(f"{source} settings[{i}]", entry, SETTING_KEYS)
        _check_sections(entry, f"{source} setting {entry.get('name', i)!r}")
        overrides = {k: entry[k] for k in OVERRIDABLE if k in entry}
        only = tuple(entry["variants"]) if entry.get("variants") else None
        settings.append(Setting(str(entry.get("name", f"setting-{i}")), overrides, only))
    quick = _section(raw, "quick", QUICK_KEYS, source)
    return ExperimentConfig(
        name=str(raw.get("name", source)), description=str(raw.get("description", "")), data=data, model=model,
        protocol=dict(raw.get("protocol") or {}), defense=raw.get("defense", "none"),
        threat=dict(raw.get("threat") or {"labels": "none"}), metrics=metrics, settings=settings, variants=variants,
        quick=quick, paper=dict(raw.get("paper") or {}), attack_seed=int(raw.get("attack_seed", 0)),
        rounds=dict(raw.get("rounds") or {}),
    )


def load_config(path) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"missing config file {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise FedleakError(f"{path} is not valid YAML: {exc}") from None
    return parse_config(raw, str(path))


def presets() -> dict[str, str]:
    """Preset names → descriptions (files in ``fedleak/presets``)."""
    out = {}
    for entry in sorted(resources.files("fedleak.presets").iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            raw = yaml.safe_load(entry.read_text()) or {}
            out[entry.name[:-5]] = str(raw.get("description", ""))
    return out


def load_preset(name: str) -> ExperimentConfig:
    available = presets()
    if name not in available:
        raise unknown_choice("preset", name, available)
    entry = resources.files("fedleak.presets").joinpath(f"{name}.yaml")
    return parse_config(yaml.safe_load(entry.read_text()), f"preset {name}")


def apply_overrides(config: ExperimentConfig, *, data_root=None, clients=None, variants=None, settings=None,
                    quick: bool = False, variant_options: Optional[dict] = None,
                    first_client: Optional[int] = None) -> ExperimentConfig:
    """Command-line overrides: data root, number of clients, a subset of variants/settings, quick scale."""
    config = copy.deepcopy(config)
    if quick and config.quick:
        config.data = _merge(config.data, config.quick.get("data", {}))
        config.model = _merge(config.model, config.quick.get("model", {}))
        extra = config.quick.get("variant_options", {})
        config.variants = [Variant(v.name, v.attack, {**v.options, **extra}, v.overrides) for v in config.variants]
        if config.quick.get("settings"):
            settings = settings or list(config.quick["settings"])
        if config.quick.get("variants"):
            variants = variants or list(config.quick["variants"])
    if variant_options:
        config.variants = [Variant(v.name, v.attack, {**v.options, **variant_options}, v.overrides)
                           for v in config.variants]
    if data_root is not None:
        config.data["root"] = str(data_root)
    if clients is not None:
        if int(clients) < 1:
            raise FedleakError(f"--clients must be positive, got {clients}")
        config.data["num_clients"] = int(clients)
    if first_client is not None:  # checked where it is used (experiment._client_range)
        config.data["first_client"] = int(first_client)
    if variants:
        config.variants = _select(config.variants, variants, f"variant of {config.name}")
    if settings:
        config.settings = _select(config.settings, settings, f"setting of {config.name}")
    return config


def _select(items: list, names, kind: str) -> list:
    """The ``items`` whose ``.name`` is in ``names``; an unknown name is an error listing the known."""
    known = {item.name for item in items}
    for name in names:
        if name not in known:
            raise unknown_choice(kind, name, known)
    return [item for item in items if item.name in names]
