"""Every shipped preset parses, names registered attacks with valid options, and resolves per setting."""

import pytest

import fedleak
from fedleak.config import apply_overrides, load_preset, presets
from fedleak.data import DATASETS
from fedleak.fl import Defense
from fedleak.models import MODELS
from fedleak.types import Protocol

NAMES = sorted(presets())


def test_presets_exist_for_every_paper():
    prefixes = {name.split("-")[0] for name in NAMES}
    assert {"dimitrov", "robbing", "agic", "awa"} <= prefixes


@pytest.mark.parametrize("name", NAMES)
def test_preset_is_valid(name):
    config = load_preset(name)
    assert config.name == name and config.description
    assert config.data["dataset"] in DATASETS and config.model["name"] in MODELS
    for variant in config.variants:
        fedleak.attacks.build(variant.attack, **variant.options)
    for setting in config.settings:
        for variant in config.variants:
            sections = config.resolve(setting, variant)
            Protocol(**{**Protocol().to_json(), **sections["protocol"]})
            Defense.parse(sections["defense"])
    quick = apply_overrides(config, quick=True)
    for variant in quick.variants:
        fedleak.attacks.build(variant.attack, **variant.options)
    for setting, rows in config.paper.items():
        assert setting in {s.name for s in config.settings}, f"paper numbers for unknown setting {setting}"
        assert set(rows) <= {v.name for v in config.variants}, f"paper numbers for unknown variants in {setting}"
