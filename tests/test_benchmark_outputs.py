"""Benchmarks never overwrite the tracked result files by default (issue 23 item 6)."""

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def test_every_benchmark_out_default_is_a_new_file():
    for script in sorted(BENCH.glob("bench_*.py")):
        text = script.read_text()
        for default in re.findall(r'add_argument\("--out",\s*default=([^,)]+)', text):
            assert default.startswith("fresh(") or "executor" in script.name, f"{script.name}: --out default {default}"


def test_fresh_names_a_new_timestamped_file_beside_the_tracked_one():
    code = "import sys; sys.path.insert(0, sys.argv[1]); from _results import fresh; print(fresh('attacks.json'))"
    path = Path(subprocess.run([sys.executable, "-c", code, str(BENCH)], capture_output=True, text=True,
                               check=True).stdout.strip())
    assert path.parent == BENCH / "results" and path.name != "attacks.json"
    assert re.fullmatch(r"attacks-[\w-]+-\d{8}-\d{6}\.json", path.name) and not path.exists()
