"""The Python API's arguments (issue 47 class 6): a bad value is one :class:`FedleakError` line naming the argument,
as the CLI names the flag — never ``TypeError``, ``ValueError``, ``MemoryError`` or a silent acceptance. Fuzzed with
hypothesis over the public entry points; work is never reached (the tripwires of ``tests/hostile_doors.py``)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fedleak
from hostile_doors import _guarded, check_api  # noqa: F401  (_guarded: the tripwires, autouse)

DP = "flower-central-dp:noise=1.0,clip=1.0,clients=4"


def _canary(**kwargs):
    from flwr.serverapp.strategy import FedAvg

    from fedleak.integrations.flower.canary import CanaryAudit

    return CanaryAudit(FedAvg(), **{"canaries": 4, "clip": 1.0, **kwargs})


#: entry point -> (call taking the bad keyword, the arguments it is fuzzed on)
DOORS = {
    "audit": (lambda **k: fedleak.audit(**k), ("seed", "out")),
    "simulate_update": (lambda **k: fedleak.simulate_update(k.pop("out", "o"), **k), ("seed", "out")),
    "dp_audit": (lambda **k: fedleak.dp_audit(defense=DP, **k), ("seed", "out")),
    "inspect_model_file": (lambda **k: fedleak.inspect_model_file("m.safetensors", **k), ("seed",)),
    "run_experiment": (lambda **k: fedleak.run_experiment(preset="robbing-one-shot", **k), ("out",)),
    "CanaryAudit": (_canary, ("seed", "out", "canaries")),
}
SEEDS = st.one_of(st.integers(max_value=-1), st.integers(min_value=2 ** 32, max_value=2 ** 80), st.text(max_size=3),
                  st.floats(allow_nan=True), st.booleans(), st.lists(st.integers(), max_size=2))
OUTS = st.one_of(st.integers(), st.floats(), st.lists(st.text(max_size=2), max_size=2), st.booleans())
CANARIES = st.one_of(st.integers(max_value=1), st.integers(min_value=100_001, max_value=2 ** 45), st.floats(),
                     st.text(max_size=2))


@pytest.mark.parametrize("door", list(DOORS))
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_bad_api_arguments_are_named(door, data, tmp_path_factory):
    import os

    call, arguments = DOORS[door]
    argument = data.draw(st.sampled_from(arguments))
    value = data.draw({"seed": SEEDS, "out": OUTS, "canaries": CANARIES}[argument])
    old = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("api"))
    try:
        problem = check_api(lambda: call(**{argument: value}), argument)
    finally:
        os.chdir(old)
    assert problem == "", (door, argument, value, problem)


@pytest.mark.parametrize("door, kwargs, needle", [
    ("CanaryAudit(canaries=2**40)", {"canaries": 2 ** 40}, "canaries"),  # tried to allocate 8 TiB
    ("CanaryAudit(seed=-1)", {"seed": -1}, "seed"), ("CanaryAudit(seed='x')", {"seed": "x"}, "seed"),
    ("CanaryAudit(out=5)", {"out": 5}, "out"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_the_issue_instances(door, kwargs, needle):
    assert check_api(lambda: _canary(**kwargs), needle) == ""
