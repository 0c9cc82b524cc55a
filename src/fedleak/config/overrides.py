"""Command-line overrides of a loaded config: data root, clients, subsets of variants/settings, ``--quick``."""

from __future__ import annotations

import copy
from typing import Optional

from ..errors import FedleakError, unknown_choice
from .experiment import ExperimentConfig, Variant, _merge


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
