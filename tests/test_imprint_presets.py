"""The Robbing-the-Fed presets build their malicious models, and their attacks accept them."""

from __future__ import annotations

import json

import pytest

import fedleak.models as models
from fedleak.attacks import build as build_attack


@pytest.mark.parametrize("preset", ["robbing-fedsgd-cifar10", "robbing-one-shot", "robbing-fedavg",
                                    "robbing-deep-resnet18", "robbing-noise", "robbing-cah"])
def test_robbing_presets_build_their_malicious_models(preset):
    from fedleak.config import load_preset
    from fedleak.data import spec_for

    config = load_preset(preset)
    seen = set()
    for setting in config.settings:
        for variant in config.variants:
            sections = config.resolve(setting, variant)
            model_section = sections["model"]
            key = json.dumps(model_section, sort_keys=True)
            if key in seen or len(seen) >= 2:
                continue
            seen.add(key)
            spec = spec_for(sections["data"]["dataset"])
            model = models.build(model_section["name"], spec, seed=int(model_section.get("seed", 0)),
                                 **model_section.get("options", {}))
            secrets = model.imprint_secrets()
            attack = build_attack(variant.attack, **variant.options)
            assert attack.options.structure in ("auto", secrets["structure"])
