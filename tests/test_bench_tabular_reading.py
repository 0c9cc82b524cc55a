"""benchmarks/bench_tabular.py's generated reading of its table: the numbers in docs/tabular.md's sentences are the
rows' means, and the agreement with the TabLeak abstracts is decided from them, not typed."""

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_tabular.py"


def _bench():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_tabular", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(job, accuracy, **more):
    return {"job": job, "batch": 0, "accuracy": accuracy, "exact_match_rate": 0.0, "cpu_seconds": 10.0,
            "prior": {"accuracy": 0.5}, **more}


def test_the_reading_is_computed_from_the_rows():
    bench = _bench()
    rows = [_row("tableak-adult-b32", 0.78), _row("tableak-adult-b32", 0.76), _row("ig-adult-b32", 0.66),
            _row("tableak-adult-b128", 0.7, categorical_low_entropy_accuracy=0.95,
                 continuous_low_entropy_accuracy=0.93),
            _row("tableak-german-b128", 0.7, categorical_low_entropy_accuracy=0.92,
                 continuous_low_entropy_accuracy=0.8)]
    text = bench.reading(rows)
    assert "11.0 points above Inverting Gradients (77.0 vs 66.0 %" in text and "in agreement" in text
    assert "holds except for German's continuous cells." in text
    rows[2] = _row("ig-adult-b32", 0.40)
    assert "a disagreement" in bench.reading(rows)
    cells = (("b32", 0.76), ("b32-e1-m8", 0.75), ("b32-e5-m32", 0.7))
    rows += [_row(f"tableak-fedavg-adult-{c}", a) for c, a in cells]
    assert ("FedAvg on Adult (E 1, m 32; E 1, m 8; E 5, m 32): 76.0 → 75.0 → 70.0 % cells right (prior baseline "
            "50.0 %)") in bench.reading(rows)
