"""Attack interface, option handling and the registry behind ``fedleak.attacks.build``.

An attack is a class with an ``Options`` dataclass and ``reconstruct(update, model, spec)``.
Named variants (paper table rows such as ``ours-prior`` or ``dlg-adam``) are registered as an
attack class plus fixed option values, so a variant is a configuration, not a copy.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar

from torch import nn

from ..errors import FedleakError, check_options, unknown_choice
from ..types.params import check_update
from ..types import DataSpec, Reconstruction, Update
from .optimize import OptimizerConfig


@dataclass(frozen=True)
class AttackOptions:
    """Options common to all attacks."""

    seed: int = 0

    #: bounds of options (``fedleak.config.boundary``): seeds span the same range as every other seed
    BOUNDS: ClassVar[dict] = {"seed": {"le": 2 ** 32 - 1}}  # = fedleak.config.boundary.MAX_SEED


class Attack:
    """Base class: subclasses set ``Options`` and implement :meth:`_reconstruct`.

    Attacks see only what the server sees: the update, the model architecture (its weights are
    replaced by the update's θˢ), and the public :class:`~fedleak.types.DataSpec`.
    """

    Options: ClassVar[type] = AttackOptions
    name: ClassVar[str] = "attack"
    #: option name -> allowed values, checked when the attack is built
    choices: ClassVar[dict[str, tuple]] = {}
    #: options that must be finite and >= 0 / > 0 (``None`` means "paper default" and passes)
    non_negative: ClassVar[tuple[str, ...]] = ()
    positive: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options: Any) -> None:
        self.options = make_options(self.Options, options, self.name)
        for key, allowed in self.choices.items():
            value = getattr(self.options, key)
            if value not in allowed:
                raise unknown_choice(f"value for option {key!r} of attack {self.name!r}:", value, allowed)
        for keys, strict in ((self.non_negative, False), (self.positive, True)):
            for key in keys:
                _check_bound(self.name, key, getattr(self.options, key), strict)

    def optimizer_config(self, **overrides: Any) -> OptimizerConfig:
        """The :class:`OptimizerConfig` built from the options of the same names."""
        names = {f.name for f in fields(OptimizerConfig)}
        given = {k: v for k, v in dataclasses.asdict(self.options).items() if k in names and v is not None}
        return OptimizerConfig(**{**given, **overrides})

    def reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        if not isinstance(update, Update):
            raise FedleakError(f"reconstruct needs a fedleak.Update, got {type(update).__name__}")
        if not isinstance(spec, DataSpec):
            raise FedleakError(f"reconstruct needs a fedleak.DataSpec, got {type(spec).__name__}")
        check_update(update, model)
        first = next(model.parameters())
        update = update.to(device=first.device, dtype=first.dtype)
        return self._reconstruct(update, model, spec)

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"attack": self.name, **dataclasses.asdict(self.options)}


def _check_bound(attack: str, key: str, value: Any, strict: bool) -> None:
    if value is None:
        return
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise FedleakError(f"option {key!r} of attack {attack!r} expects a number, got {value!r}") from None
    if not math.isfinite(number) or number < 0 or (strict and number == 0):
        need = "a positive" if strict else "a non-negative"
        raise FedleakError(f"option {key!r} of attack {attack!r} must be {need} finite number, got {value!r}")


def auto_label_strategy(option: str, update: Update, num_classes: int, few: str = "yin") -> str:
    """The label strategy an attack uses when its ``labels`` option is ``auto``.

    Labels (or counts) the server was told win (``known``); otherwise ``few`` — Yin et al.'s
    rule while N ≤ C (AGIC §V-A, AWA §5.1), or iDLG for a single sample (``few="idlg"``) — and the
    count estimator ``reclabels`` beyond that.
    """
    if option != "auto":
        return option
    meta = update.metadata
    if meta.get("labels") is not None or meta.get("label_counts") is not None:
        return "known"
    n = update.num_samples
    small = n == 1 if few == "idlg" else n <= num_classes
    return few if small else "reclabels"


def make_options(options_cls: type, given: dict, kind: str):
    """The options ``given`` for attack ``kind``, checked by the strict model of ``options_cls``.

    One set of rules and bounds (:mod:`fedleak.config.boundary`): unknown names are listed, integers are
    integers (``2.5`` refused), booleans are booleans, numbers are finite and within the boundary's bounds.
    """
    from ..config.boundary import settings_model, validate

    if not isinstance(given, dict):
        raise FedleakError(f"options of attack {kind!r} must be a mapping, got {type(given).__name__}")
    names = {f.name for f in fields(options_cls)}
    check_options(f"attack {kind!r}", given, names)
    try:
        checked = validate(settings_model(options_cls), dict(given))
    except FedleakError as exc:  # "tv must be ..." -> the one wording of every option error
        name, _, problem = str(exc).partition(" ")
        raise FedleakError(f"option {name!r} of attack {kind!r} {problem}") from None
    values = {k: getattr(checked, k) for k in given}
    try:
        return options_cls(**values)
    except TypeError as exc:
        raise FedleakError(f"invalid options for attack {kind!r}: {exc}") from None


@dataclass(frozen=True)
class _Entry:
    cls: type
    fixed: dict
    description: str


ATTACKS: dict[str, _Entry] = {}


def register(name: str, cls: type, description: str, **fixed: Any) -> None:
    """Register ``cls`` under ``name`` with option values ``fixed`` (a named variant)."""
    ATTACKS[name] = _Entry(cls, dict(fixed), description)


def build(name: str, **options: Any) -> Attack:
    """Instantiate a registered attack or variant; user ``options`` override the variant's values."""
    ensure_loaded()
    if name not in ATTACKS:
        raise unknown_choice("attack", name, ATTACKS)
    entry = ATTACKS[name]
    attack = entry.cls(**{**entry.fixed, **options})
    attack.variant = name
    return attack


def available() -> dict[str, str]:
    ensure_loaded()
    return {name: entry.description for name, entry in sorted(ATTACKS.items())}


_loaders: list[Callable[[], None]] = []


def ensure_loaded() -> None:
    from . import catalogue  # noqa: F401  (imports every attack module, which register themselves)
