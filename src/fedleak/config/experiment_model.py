"""The experiment file's one reader: every section a strict pydantic v2 model with the boundary's bounds.

An experiment file (``--config``, a preset) is a mapping whose every key, type and bound is declared
here and nowhere else: the top level (unknown keys, ``attack_seed``, ``name``), ``data``, ``model``,
``protocol``, ``defense``, ``threat``, ``rounds``, ``metrics``, each variant and setting (with their
overrides of those sections) and ``quick:``. The rules are :mod:`fedleak.config.boundary`'s: ``2.5``,
``"4"`` or ``true`` for a count, ``"false"`` for a boolean and NaN for a number are refused, and so are
values beyond the one set of bounds (:data:`~fedleak.config.boundary.MAX_CLIENTS`, ``MAX_SAMPLES``,
``MAX_ROUNDS``, ``MAX_SEED``, ``MAX_RATE``). The first problem is one :class:`~fedleak.errors.FedleakError`
line naming the file and the key (``exp.yaml: settings[1].protocol.lr must be a number > 0, got -1``).

Cross-references (a setting naming an unknown variant, two variants of one name) are checked after the
types, still before any job runs. :func:`parse_config` returns an :class:`~.experiment.ExperimentConfig`
holding the validated values; code downstream builds its objects from them without checking again.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from ..errors import FedleakError
from ..types.limits import ALGORITHMS
from .boundary import MAX_CLIENTS, MAX_EPOCHS, MAX_FLOAT, MAX_RATE, MAX_ROUNDS, MAX_SAMPLES, MAX_SEED, _no_nul, validate
from .experiment import OVERRIDABLE, ExperimentConfig, Setting, Variant
from .specs import names_tuple

THREAT_LABELS = ("none", "counts", "labels", "batches")
SPLITS = ("train", "test")


def _count(low: int, high: int):
    return Annotated[int, Field(strict=True, ge=low, le=high)]


def _as_name(value):
    """A YAML number used as a name (a variant ``1:``, a setting ``name: 10``) is that name's text."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value


def _defense_value(value):
    """``defense:``: a spec (``gaussian:0.01``), a mapping (``{kind, scale, clip}``) or null, built once to check
    it (``gaussian`` without a strength, ``dp-sgd`` without ``clip`` are refused)."""
    from ..fl.defenses import Defense

    if value is not None and not isinstance(value, (str, dict)):
        raise ValueError("must be a spec like 'gaussian:0.01', a mapping {kind, scale, clip} or null")
    if isinstance(value, str) and "\x00" in value:
        raise ValueError("contains a NUL character")
    if isinstance(value, dict):
        try:
            validate(DefenseMapping, value, where="")
        except FedleakError as exc:
            raise ValueError(str(exc)) from None
    try:
        Defense.parse(value)
    except FedleakError as exc:  # its text names the spec; the location names the key
        text = str(exc)
        raise ValueError(text[len("defense "):] if text.startswith("defense ") else text) from None
    return value


def _bool_or_name(value):
    """``metrics.lpips``: true, false or a network name."""
    if isinstance(value, bool) or isinstance(value, str) and value.strip() and "\x00" not in value:
        return value
    raise ValueError("must be true, false or a network name")


def _options_beside(reserved: tuple):
    """An ``options:`` mapping whose keys are names, none of them a key the section passes itself (``data.options.root``
    would reach the loader twice: ``TypeError: got multiple values for keyword argument``)."""
    def check(value):
        if value is None:
            return value
        for key in value:
            if not isinstance(key, str) or not key.strip():
                raise ValueError(f"keys must be option names, got {key!r}")
            if key in reserved:
                raise ValueError(f"{key!r} is not an option here: give it as a key of the section itself")
        return value
    return Annotated[Optional[dict], AfterValidator(check)]


#: the keyword arguments ``fedleak.data.load`` and ``fedleak.models.build`` take besides a section's options
_DATA_OPTIONS = _options_beside(("name", "root", "num_clients", "samples_per_client", "seed", "split"))
_MODEL_OPTIONS = _options_beside(("name", "spec", "seed"))

_NAME = Annotated[str, Field(strict=True, min_length=1, max_length=10_000), BeforeValidator(_no_nul)]
#: a name that YAML may have read as a number
_KEY = Annotated[str, Field(strict=True, min_length=1, max_length=10_000), BeforeValidator(_no_nul),
                 BeforeValidator(_as_name)]
_TEXT = Annotated[str, Field(strict=True, max_length=1_000_000), BeforeValidator(_no_nul), BeforeValidator(_as_name)]
_SEED = _count(0, MAX_SEED)
_NUMBER = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-MAX_FLOAT, le=MAX_FLOAT)]
_RATE = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=MAX_RATE)]
_NAMES = Annotated[list[_KEY], Field(strict=True, min_length=1, max_length=1000)]


class _Strict(BaseModel):
    """Strict types, unknown keys refused; a key absent is "not given" (its default is never validated), a key
    set to ``null`` is refused unless the field is Optional."""

    model_config = ConfigDict(strict=True, extra="forbid")


class DataSection(_Strict):
    dataset: _NAME = None
    root: Optional[_NAME] = None
    num_clients: _count(1, MAX_CLIENTS) = None
    samples_per_client: Optional[_count(1, MAX_SAMPLES)] = None
    seed: _SEED = None
    split: Literal[SPLITS] = None
    options: _DATA_OPTIONS = None
    first_client: _count(0, MAX_CLIENTS - 1) = None


class ProtocolSection(_Strict):
    algorithm: Literal[ALGORITHMS] = None
    epochs: _count(1, MAX_EPOCHS) = None
    batch_size: Optional[_count(1, MAX_SAMPLES)] = None
    lr: _RATE = None
    reshuffle: bool = None
    train_mode: bool = None


class ModelSection(_Strict):
    name: _NAME = None
    seed: _SEED = None
    options: _MODEL_OPTIONS = None
    train_rounds: _count(0, MAX_ROUNDS) = None
    train_clients_per_round: _count(1, MAX_CLIENTS) = None
    train_protocol: Optional[ProtocolSection] = None


class MetricsSection(_Strict):
    threshold: Optional[_NUMBER] = None
    clip: bool = None
    lpips: Annotated[Any, AfterValidator(_bool_or_name)] = None
    save_images: bool = None


class RoundsSection(_Strict):
    epochs: _count(1, MAX_EPOCHS) = None
    samples_per_round: Optional[_count(1, MAX_SAMPLES)] = None


class ThreatSection(_Strict):
    labels: Literal[THREAT_LABELS] = None


class DefenseMapping(_Strict):
    kind: _NAME = None
    scale: _NUMBER = None
    clip: Optional[_NUMBER] = None


#: ``defense:``: a spec (``gaussian:0.01``, ``dp-sgd:clip=1,noise=0.5``), a mapping, or null (none)
_DEFENSE = Annotated[Any, AfterValidator(_defense_value)]


class _Overrides(_Strict):
    """The sections a variant overrides (a setting may override ``data`` too)."""

    model: Optional[ModelSection] = None
    protocol: Optional[ProtocolSection] = None
    defense: _DEFENSE = None
    threat: Optional[ThreatSection] = None
    rounds: Optional[RoundsSection] = None


class VariantEntry(_Overrides):
    attack: _NAME
    options: Optional[dict] = None


def _variant_entry(value):
    """``name: ATTACK`` is short for ``name: {attack: ATTACK}``."""
    return {"attack": value} if isinstance(value, str) else value


class SettingEntry(_Overrides):
    name: _KEY = None
    data: Optional[DataSection] = None
    variants: Optional[_NAMES] = None


class QuickSection(_Strict):
    data: Optional[DataSection] = None
    model: Optional[ModelSection] = None
    variant_options: Optional[dict[_NAME, Any]] = None
    settings: Optional[_NAMES] = None
    variants: Optional[_NAMES] = None


class ExperimentFile(_Strict):
    """The top level of an experiment file."""

    name: _KEY = None
    description: _TEXT = None
    data: DataSection
    model: ModelSection
    protocol: Optional[ProtocolSection] = None
    defense: _DEFENSE = None
    threat: Optional[ThreatSection] = None
    rounds: Optional[RoundsSection] = None
    metrics: Optional[MetricsSection] = None
    settings: Optional[Annotated[list[SettingEntry], Field(min_length=1, max_length=10_000)]] = None
    variants: Annotated[dict[_KEY, Annotated[VariantEntry, BeforeValidator(_variant_entry)]],
                        Field(min_length=1, max_length=10_000)]
    quick: Optional[QuickSection] = None
    paper: Optional[dict] = None
    attack_seed: _SEED = None


TOP_KEYS = tuple(ExperimentFile.model_fields)


def _names(values, what: str, known: list[str], kind: str) -> tuple[str, ...]:
    """Variant or setting names (YAML numbers read as names) that exist, none twice."""
    names = names_tuple([str(v) for v in values], what)
    for name in names:
        if name not in known:
            raise FedleakError(f"{what} names unknown {kind} {name!r}; known: {', '.join(known)}")
    return names


def _name(value, what: str) -> str:
    if not str(value).strip():
        raise FedleakError(f"{what} must be a non-empty name, got {value!r}")
    return str(value)


def parse_config(raw, source: str = "config") -> ExperimentConfig:
    """Validate an experiment mapping (parsed YAML) and turn it into an :class:`ExperimentConfig`.

    The config keeps the sections as written (a job's hash covers them, so a file that validated before
    resumes its jobs unchanged); every one of them has passed :class:`ExperimentFile` first.
    """
    if not isinstance(raw, dict):
        raise FedleakError(f"{source}: an experiment config must be a YAML mapping, got {type(raw).__name__}")
    data, model = raw.get("data"), raw.get("model")
    if data is None or isinstance(data, dict) and "dataset" not in data:
        raise FedleakError(f"{source}: data.dataset is required (e.g. femnist, cifar10, digits)")
    if model is None or isinstance(model, dict) and "name" not in model:
        raise FedleakError(f"{source}: model.name is required (e.g. femnist-cnn)")
    if not raw.get("variants"):
        raise FedleakError(f"{source}: 'variants' must map variant names to {{attack: NAME, options: {{...}}}}")
    top = validate(ExperimentFile, raw, where=source)
    variants: list[Variant] = []
    for key, entry in raw["variants"].items():
        name = _name(key, f"{source}: variant name")
        if name in {v.name for v in variants}:
            raise FedleakError(f"{source}: two variants are named {name!r}")
        entry = {"attack": entry} if isinstance(entry, str) else entry
        variants.append(Variant(name, entry["attack"], dict(entry.get("options") or {}),
                                {k: entry[k] for k in OVERRIDABLE if k in entry}))
    known = [v.name for v in variants]
    settings: list[Setting] = []
    for i, entry in enumerate(raw.get("settings") or [{"name": "default"}]):
        name = _name(entry.get("name", f"setting-{i}"), f"{source}: settings[{i}].name")
        if name in {s.name for s in settings}:
            raise FedleakError(f"{source}: two settings are named {name!r}")
        only = None if entry.get("variants") is None else \
            _names(entry["variants"], f"{source}: setting {name!r} variants", known, "variant")
        settings.append(Setting(name, {k: entry[k] for k in OVERRIDABLE if k in entry}, only))
    quick = dict(raw.get("quick") or {})
    for key, kind, names in (("variants", "variant", known), ("settings", "setting", [s.name for s in settings])):
        if quick.get(key) is not None:
            _names(quick[key], f"{source} quick: {key}", names, kind)
    return ExperimentConfig(
        name=str(raw.get("name", source)), description=str(raw.get("description", "")), data=data, model=model,
        protocol=dict(raw.get("protocol") or {}), defense=raw.get("defense", "none"),
        threat=dict(raw.get("threat") or {"labels": "none"}), metrics=dict(raw.get("metrics") or {}),
        settings=settings, variants=variants, quick=quick, paper=dict(top.paper or {}),
        attack_seed=top.attack_seed or 0, rounds=dict(raw.get("rounds") or {}))


__all__ = ["ExperimentFile", "TOP_KEYS", "THREAT_LABELS", "SPLITS", "parse_config"]
