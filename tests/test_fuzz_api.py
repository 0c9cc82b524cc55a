"""Fuzzing ``fedleak.audit(...)``: generated keyword arguments raise FedleakError (one line) or reach
the work; never TypeError/AttributeError/ValueError, never a file outside ``out``."""

from fuzz_targets import run_target


def test_fuzz_api():
    assert run_target("api", max_examples=150) > 0
