"""Experiment configuration: YAML → typed, validated config (schema in ``docs/experiments.md``).

Every section is checked when loaded: unknown keys, values of the wrong type and absurd sizes
(``num_clients`` above :data:`MAX_CLIENTS`, ``samples_per_client`` above :data:`MAX_SAMPLES`) stop
with one line naming the key and the allowed values, before any job runs and before memory is
spent. ``quick:`` keys are checked like the rest; duplicate keys in a YAML mapping, duplicate
setting names and settings naming unknown variants are errors; a file that is not UTF-8 or not
valid YAML is reported in one line with its line number.

Layout: :mod:`.schema` (the typed config, key lists, limits), :mod:`.validation` (value checks),
:mod:`.parsing` (mapping → config), :mod:`.loading` (YAML files and presets), :mod:`.overrides`
(command-line overrides).
"""

from .loading import load_config, load_preset, parse_yaml, presets
from .overrides import apply_overrides
from .parsing import parse_config
from .schema import (DATA_KEYS, MAX_CLIENTS, MAX_CONFIG_BYTES, MAX_ROUNDS, MAX_SAMPLES, MAX_SEED, METRIC_KEYS,
                     MODEL_KEYS, OVERRIDABLE, QUICK_KEYS, ROUNDS_KEYS, SETTING_KEYS, SPLITS, THREAT_LABELS, TOP_KEYS,
                     VARIANT_KEYS, ExperimentConfig, Setting, Variant)

__all__ = [
    "ExperimentConfig", "Setting", "Variant", "apply_overrides", "load_config", "load_preset", "parse_config",
    "parse_yaml", "presets", "MAX_CLIENTS", "MAX_SAMPLES", "MAX_SEED", "MAX_ROUNDS", "MAX_CONFIG_BYTES",
]
