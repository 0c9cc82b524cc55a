"""The experiment config after validation (schema in ``docs/experiments.md``).

:class:`ExperimentConfig` holds the sections that :mod:`.experiment_model` validated (its strict
pydantic models are the only reader of an experiment file); a :class:`Setting` (a column group) and a
:class:`Variant` (a row: an attack with options) override them per job. :meth:`ExperimentConfig.resolve`
gives a job's sections as plain values (what a job's hash covers), :meth:`ExperimentConfig.typed` the
same sections with the protocol and the defense as built objects, so that no code downstream parses them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

#: the sections a setting or a variant may override
OVERRIDABLE = ("data", "model", "protocol", "defense", "threat", "rounds")
#: the largest experiment file read
MAX_CONFIG_BYTES = 10_000_000


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

    def typed(self, setting: Setting, variant: Variant) -> dict:
        """:meth:`resolve` with ``protocol`` a :class:`~fedleak.types.Protocol` and ``defense`` a built
        :class:`~fedleak.fl.defenses.Defense` (or update filter), ``threat`` its label kind as a string."""
        from ..fl.defenses import Defense
        from ..types import Protocol

        sections = self.resolve(setting, variant)
        return {**sections, "protocol": Protocol(**{**Protocol().to_json(), **(sections["protocol"] or {})}),
                "defense": Defense.parse(sections["defense"]),
                "threat": (sections.get("threat") or {}).get("labels", "none"), "rounds": sections.get("rounds") or {}}


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
