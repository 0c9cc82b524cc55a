"""CLI flags, config files, data files and the Python API: the instances of issue 47 classes 3, 4, 6 and 7.

Each case: the input, exit code 2 (the CLI) or a :class:`FedleakError` (the API), and the words the one-line
message must name; nothing written outside ``--out``, nothing left inside it. Work is never reached (the
tripwires of ``tests/hostile_doors.py`` replace data loading and training), so a case that is accepted fails in
milliseconds instead of running an audit.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostile_doors import _guarded, check_api, check_cli  # noqa: F401  (_guarded: the tripwires, autouse)

DP = ["dp-audit", "--defense", "flower-central-dp:noise=1.0,clip=1.0,clients=4", "--out", "out"]
SGD = ["dp-audit", "--defense", "dp-sgd:clip=1.0,noise=1.0", "--out", "out"]


def _metrics(**edits) -> str:
    """A leakage audit's metrics.json of the right format (the audited defense), then ``edits``."""
    base = {"format": "fedleak.audit/1", "config": {"defense": ["flower-central-dp:noise=1.0,clip=1.0,clients=4"]},
            "threat_models": {"honest-but-curious": {"verdict": "high"}}, "epsilon": {}, "environment": {}}
    base.update(edits)
    return json.dumps(base)


#: (case, files to write {name: text}, argv, the words the message must name)
CASES = [
    # class 7: a seed beyond 64 bits was blamed on a derived seed inside client_update()
    ("dp-audit --seed 2^70", {}, DP + ["--seed", str(2 ** 70)], "--seed"),
    # class 4: a knob the audit would not turn
    ("dp-audit --lora-reply at client level", {"a.safetensors": "", "b.safetensors": ""},
     DP + ["--lora-reply", "a.safetensors,b.safetensors"], "--lora-reply"),
    ("dp-audit --lora at example level", {}, SGD + ["--lora", "4"], "--lora"),
    ("audit --lora-dropout without --lora", {}, ["audit", "--data", "text", "--lora-dropout", "0.1", "--out", "out"],
     "--lora-dropout"),
    # class 3: --leakage-metrics of the right format and the wrong shape
    ("leakage metrics: config a list", {"m.json": _metrics(config=[1])}, DP + ["--leakage-metrics", "m.json"],
     "config"),
    ("leakage metrics: defense an int", {"m.json": _metrics(config={"defense": 5})},
     DP + ["--leakage-metrics", "m.json"], "defense"),
    ("leakage metrics: threat_models a list", {"m.json": _metrics(threat_models=[1])},
     DP + ["--leakage-metrics", "m.json"], "threat_models"),
    ("leakage metrics: environment a string", {"m.json": _metrics(environment="x")},
     DP + ["--leakage-metrics", "m.json"], "environment"),
    ("leakage metrics: a threat model a string", {"m.json": _metrics(threat_models={"hbc": "x"})},
     DP + ["--leakage-metrics", "m.json"], "threat_models"),
]


@pytest.mark.parametrize("case, files, argv, needle", CASES, ids=[c[0] for c in CASES])
def test_cli_case(case, files, argv, needle, tmp_path, capsys):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert check_cli(argv, needle, tmp_path, capsys, out=tmp_path / "out") == ""


def test_dp_audit_seed_through_the_api():
    import fedleak

    assert check_api(lambda: fedleak.dp_audit(defense="flower-central-dp:noise=1.0,clip=1.0,clients=4",
                                              seed=2 ** 70), "seed") == ""


def test_an_explicit_membership_0_survives_flowertune():
    """Issue 47 class 4: --flowertune replaced an explicit --membership 0 with 64."""
    from fedleak.audit.plan import flowertune
    from fedleak.audit.plan.config import AuditConfig
    from fedleak.audit.plan.default import DEFAULT_CANDIDATES

    off, _ = flowertune.apply(AuditConfig(data="text", flowertune=True, membership=0))
    unset, _ = flowertune.apply(AuditConfig(data="text", flowertune=True))
    assert off.membership == 0 and unset.membership == DEFAULT_CANDIDATES


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(["config", "threat_models", "epsilon", "environment", "quick", "modality"]),
       value=st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2), st.floats(),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_fuzzed_leakage_metrics_are_refused_in_one_line_or_read(tmp_path_factory, key, value):
    """Whatever shape a metrics.json key has, reading it ends in one FedleakError line naming the option, or reads."""
    from fedleak.errors import FedleakError
    from fedleak.privacy.beside import read_leakage

    path = tmp_path_factory.mktemp("m") / "m.json"
    path.write_text(_metrics(**{key: value}).replace("NaN", "0"))
    try:
        read_leakage(path, "flower-central-dp:noise=1.0,clip=1.0,clients=4")
    except FedleakError as exc:
        assert "\n" not in str(exc) and "--leakage-metrics" in str(exc)
