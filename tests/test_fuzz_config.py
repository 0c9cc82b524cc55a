"""Fuzzing the config loaders: generated YAML documents and mutated YAML bytes give a config or one
FedleakError line (targets in ``fuzz_targets.py``)."""

import pytest
from fuzz_targets import run_target


@pytest.mark.parametrize("name, budget", [("audit-yaml", 150), ("experiment-mapping", 150), ("yaml-bytes", 150)])
def test_fuzz_config(name, budget):
    assert run_target(name, max_examples=budget) > 0
