"""Fuzzing every file loader with mutated bytes of a valid file (update JSON and safetensors, weights,
IDX, 8- and 16-bit PNG, CIFAR pickle, LEAF JSON and JSON.gz, job records): a value or one
FedleakError line naming the file (targets in ``fuzz_targets.py``)."""

import pytest
from fuzz_targets import SEEDS, run_target


@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_fuzz_file_loader(kind):
    assert run_target(f"file:{kind}", max_examples=40) > 0
