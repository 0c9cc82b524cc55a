"""The typed experiment config and the limits of its values (schema in ``docs/experiments.md``).

:class:`ExperimentConfig` holds the validated sections; a :class:`Setting` (a column group) and a
:class:`Variant` (a row: an attack with options) override them per job (:meth:`ExperimentConfig.resolve`).
The key lists and size limits here are what :mod:`.validation` checks against.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

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

from .boundary import MAX_CLIENTS, MAX_ROUNDS, MAX_SAMPLES, MAX_SEED  # noqa: E402,F401  (one set of bounds)
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
