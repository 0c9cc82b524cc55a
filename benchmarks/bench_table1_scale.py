"""How long Dimitrov et al.'s Table 1 takes at the README's scales (issue 46 item 5): numbers, not "a fraction".

    .venv/bin/python benchmarks/bench_table1_scale.py --data-root ../shared/data/femnist_leaf/leaf-torch_niid_sf0.05

Two runs of the real command (``python -m fedleak.cli run --preset dimitrov-table1-femnist``, 1 torch thread):

* ``smoke`` — 1 client, the ``ours-prior`` variant, setting E10-m5, ``--quick`` (50 iterations): run to the end,
  its wall and CPU seconds recorded;
* ``quick`` — the README's ``--quick`` command (10 clients, 3 variants, E10-m5: 30 jobs): started, its own
  ``estimate: ~…`` line read (the rate measured over job 1's first iterations), then stopped with SIGINT.

Writes a new ``benchmarks/results/table1_scale-<host>-<time>.json`` (``--out``; the committed ``table1_scale.json`` is one such run) with the load average, CPU count and threads;
``benchmarks/regen_docs.py`` puts the numbers in the README.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from _results import fresh  # noqa: E402
PRESET = ["-m", "fedleak.cli", "--threads", "1", "run", "--preset", "dimitrov-table1-femnist", "--settings", "E10-m5",
          "--quick"]
SCALES = {"smoke": ["--clients", "1", "--variants", "ours-prior"],
          "quick": ["--clients", "10", "--variants", "ours-prior,shared,fedsgd"]}


def _seconds(text: str) -> float:
    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+) (h|min|s)\b", text))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


def run(scale: str, data_root: str, out: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, *PRESET, *SCALES[scale], "--data-root", data_root, "--out", str(out / scale)]
    load = os.getloadavg()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # also from a background job
    estimate, lines = None, []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        found = re.match(r"estimate: ~(.+?) for the (\d+) job", line)
        if found and estimate is None:
            estimate = {"seconds": _seconds(found[1]), "jobs": int(found[2]), "line": line.strip(),
                        "after_wall_s": round(time.perf_counter() - start, 1)}
            if scale == "quick":
                proc.send_signal(signal.SIGINT)  # (a SIGTERM if it was ignored: exit code 143)
    code = proc.wait(timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finished = scale != "quick"
    if finished and code != 0:
        raise SystemExit(f"bench_table1_scale: {scale} exited {code}:\n" + "\n".join(lines[-20:]))
    return {"argv": ["python", *argv[1:]], "finished": finished, "exit_code": code, "estimate": estimate,
            "wall_s": round(wall, 1) if finished else None,
            "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1) if finished
            else None, "load_average_before": [round(x, 2) for x in load]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-root", required=True)
    parser.add_argument("--out", default=fresh("table1_scale.json"))
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        scales = {scale: run(scale, args.data_root, Path(tmp)) for scale in SCALES}
    result = {"benchmark": "table1_scale", "preset": "dimitrov-table1-femnist", "setting": "E10-m5",
              "scales": scales, "environment": {"cpu_count": os.cpu_count(), "threads": 1, "torch": torch.__version__,
                                                "device": "cpu", "load_average_after": [round(x, 2) for x in
                                                                                        os.getloadavg()],
                                                "date": time.strftime("%Y-%m-%d %H:%M:%S")}}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(scales, indent=1))


if __name__ == "__main__":
    main()
