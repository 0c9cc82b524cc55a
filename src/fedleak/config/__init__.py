"""Experiment configuration: YAML → validated config (schema in ``docs/experiments.md``).

Every section passes the strict pydantic models of :mod:`.experiment_model` when loaded: unknown keys,
values of the wrong type and absurd sizes (``num_clients`` above :data:`MAX_CLIENTS`,
``samples_per_client`` above :data:`MAX_SAMPLES`) stop with one line naming the key, before any job runs
and before memory is spent. ``quick:`` keys are checked like the rest; duplicate keys in a YAML mapping,
duplicate setting names and settings naming unknown variants are errors; a file that is not UTF-8 or not
valid YAML is reported in one line with its line number.

Layout: :mod:`.boundary` (the bounds and the strict-model helpers every door uses), :mod:`.experiment_model`
(the experiment file's models and :func:`parse_config`), :mod:`.experiment` (the validated config),
:mod:`.loading` (YAML files and presets), :mod:`.overrides` (command-line overrides), :mod:`.specs`
(the short text forms), :mod:`.loaders` (third-party file loaders).
"""

from .boundary import MAX_CLIENTS, MAX_ROUNDS, MAX_SAMPLES, MAX_SEED
from .experiment import MAX_CONFIG_BYTES, OVERRIDABLE, ExperimentConfig, Setting, Variant
from .experiment_model import SPLITS, THREAT_LABELS, TOP_KEYS, ExperimentFile, parse_config
from .loading import load_config, load_preset, parse_yaml, presets
from .overrides import apply_overrides

__all__ = [
    "ExperimentConfig", "ExperimentFile", "Setting", "Variant", "apply_overrides", "load_config", "load_preset",
    "parse_config", "parse_yaml", "presets", "MAX_CLIENTS", "MAX_SAMPLES", "MAX_SEED", "MAX_ROUNDS",
    "MAX_CONFIG_BYTES", "OVERRIDABLE", "SPLITS", "THREAT_LABELS", "TOP_KEYS",
]
