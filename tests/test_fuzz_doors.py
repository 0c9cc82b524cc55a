"""Fuzzing the doors of issue #30 that ``test_fuzz_cli``/``test_fuzz_api`` do not reach (targets in
``fuzz_doors.py``): dp-audit, convert-gguf and the text-only audit flags; every public function of the
Python API; GGUF files, candidate documents and a run's config.json. Derandomized, bounded budgets."""

import pytest
from fuzz_doors import run_door

BUDGETS = [("cli-more", 80), ("api-doors", 200), ("file:gguf", 40), ("file:candidates", 40), ("file:run-config", 40)]


@pytest.mark.parametrize("name, budget", BUDGETS, ids=[b[0] for b in BUDGETS])
def test_fuzz_doors(name, budget):
    assert run_door(name, max_examples=budget) > 0
