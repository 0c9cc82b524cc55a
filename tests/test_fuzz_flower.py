"""Fuzzing the Flower reply converter: arrays of any shape and dtype, any num-examples, metrics and
train config give an update or one FedleakError line (targets in ``fuzz_targets.py``)."""

from fuzz_targets import run_target


def test_fuzz_flower_reply():
    assert run_target("flower-reply", max_examples=200) > 0
