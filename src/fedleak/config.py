"""Experiment configuration: YAML → typed, validated config (schema in ``docs/experiments.md``).

Every section is checked when loaded: unknown keys, values of the wrong type and absurd sizes
(``num_clients`` above :data:`MAX_CLIENTS`, ``samples_per_client`` above :data:`MAX_SAMPLES`) stop
with one line naming the key and the allowed values, before any job runs and before memory is
spent. ``quick:`` keys are checked like the rest; duplicate keys in a YAML mapping, duplicate
setting names and settings naming unknown variants are errors; a file that is not UTF-8 or not
valid YAML is reported in one line with its line number.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import yaml

from .errors import FedleakError, check_bool, check_int, check_number, check_options, unknown_choice
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

MAX_CLIENTS = 100_000
MAX_SAMPLES = 1_000_000
MAX_SEED = 2 ** 32 - 1
MAX_ROUNDS = 100_000
MAX_CONFIG_BYTES = 10_000_000
SPLITS = ("train", "test")


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
    attack_seed = check_int(raw.get("attack_seed", 0), f"{source}: attack_seed", 0, MAX_SEED)
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


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden by own keys
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # unhashable key: the base class reports it
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


def parse_yaml(text: bytes, source: str):
    """YAML bytes → Python objects; non-UTF-8, malformed YAML and duplicate keys → one line with the line number."""
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = text[:exc.start].count(b"\n") + 1
        raise FedleakError(f"{source} is not UTF-8 text (line {line}, byte {exc.start}); is it a YAML file?") from None
    try:
        return yaml.load(decoded, Loader=_UniqueKeyLoader)  # a SafeLoader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
        if mark is None and hasattr(exc, "position"):  # reader errors (control characters)
            line = decoded[:exc.position].count("\n") + 1
        else:
            line = mark.line + 1 if mark is not None else "?"
        where = ""
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark is not None and context_mark.line + 1 != line:
            where = f" ({' '.join(str(context).split())} started on line {context_mark.line + 1})"
        problem = " ".join(str(problem).split())
        raise FedleakError(f"{source} is not valid YAML: line {line}: {problem}{where}") from None


def load_config(path) -> ExperimentConfig:
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"missing config file {path}")
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise FedleakError(f"{path} is {size} bytes; an experiment config is at most {MAX_CONFIG_BYTES}")
        text = path.read_bytes()
    except OSError as exc:
        raise FedleakError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    return parse_config(parse_yaml(text, str(path)), str(path))


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
    return parse_config(parse_yaml(entry.read_bytes(), f"preset {name}"), f"preset {name}")


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
