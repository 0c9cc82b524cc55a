"""Fuzzing the command line: generated argv fragments exit 0, 1 (inspect) or 2 with one line, never a
traceback or an internal error, and write nothing outside --out (targets in ``fuzz_targets.py``)."""

from fuzz_targets import run_target


def test_fuzz_cli():
    assert run_target("cli", max_examples=120) > 0
