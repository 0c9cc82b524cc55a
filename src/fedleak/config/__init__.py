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

from ..lazy import attributes

# imported on first use (PEP 562): `fedleak.config.cli_args` (the command line's argument types) is read by
# `fedleak --help` without pydantic or torch (issue 46)
_NAMES = {
    "MAX_CLIENTS": "boundary", "MAX_ROUNDS": "boundary", "MAX_SAMPLES": "boundary", "MAX_SEED": "boundary",
    "MAX_CONFIG_BYTES": "experiment", "OVERRIDABLE": "experiment", "ExperimentConfig": "experiment",
    "Setting": "experiment", "Variant": "experiment",
    "SPLITS": "experiment_model", "THREAT_LABELS": "experiment_model", "TOP_KEYS": "experiment_model",
    "ExperimentFile": "experiment_model", "parse_config": "experiment_model",
    "load_config": "loading", "load_preset": "loading", "parse_yaml": "loading", "presets": "loading",
    "apply_overrides": "overrides",
}

__all__ = [
    "ExperimentConfig", "ExperimentFile", "Setting", "Variant", "apply_overrides", "load_config", "load_preset",
    "parse_config", "parse_yaml", "presets", "MAX_CLIENTS", "MAX_SAMPLES", "MAX_SEED", "MAX_ROUNDS",
    "MAX_CONFIG_BYTES", "OVERRIDABLE", "SPLITS", "THREAT_LABELS", "TOP_KEYS",
]


__getattr__ = attributes(__name__, _NAMES)
