"""benchmarks/tableak_reference_findings.py (the sentences under the side-by-side table: a paired interval over
batches, the CPU ratio against the 10× target) and benchmarks/bench_tableak_floor.py (where TabLeak's CPU goes per
iteration) on a tiny batch: real numbers, the fields the docs read."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _entry(ours, theirs, cpu_ours, cpu_theirs):
    side = lambda acc, cpu: {"reference_metric": {"accuracy": acc}, "cpu_seconds": cpu}  # noqa: E731
    return {"dataset": "adult", "records": 128, "restarts": 30, "iterations": 1500,
            "fedleak": side(ours, cpu_ours), "reference": side(theirs, cpu_theirs)}


def test_the_findings_are_a_paired_interval_and_the_ratio_against_ten():
    findings = _load("tableak_reference_findings")
    d = findings.paired([0.80, 0.70, 0.75], [0.78, 0.71, 0.72])
    assert d["mean"] == pytest.approx(100 * (0.02 - 0.01 + 0.03) / 3)
    assert d["low"] < d["mean"] < d["high"] and d["batches"] == 3
    assert findings.paired([0.8], [0.7])["low"] is None
    below = findings.sentence(_entry([0.60, 0.61, 0.62], [0.70, 0.71, 0.72], [30, 30, 30], [200, 220, 240]))
    assert "below the reference" in below and "not below" not in below and "7.3× less (misses" in below
    level = findings.sentence(_entry([0.70, 0.73, 0.71], [0.71, 0.72, 0.71], [10, 12, 11], [200, 210, 220]))
    assert "not below the reference" in level and "meets the 10× target" in level
    assert "one batch: no interval" in findings.sentence(_entry([0.7], [0.6], [10], [200]))


def test_the_floor_benchmark_splits_an_iteration_into_products_and_the_rest(tmp_path):
    floor = _load("bench_tableak_floor")
    out = tmp_path / "floor.json"
    assert floor.main(["--settings", "german:8", "--restarts", "3", "--iterations", "3", "--rounds", "1",
                       "--reference-results", str(tmp_path / "none.json"), "--conditions", "test",
                       "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["iteration_ms"] > 0 and row["matrix_products_ms"] > 0 and row["other_ms"] >= 0
    assert row["matrix_products_per_iteration"] >= 6  # forward and backward of three layers at least
    assert row["products_alone"]["gflops"] > 0 and row["conditions"] == "test"
    assert row["reference_cpu_seconds_per_batch"] is None and row["threads"] >= 1
