"""Verdicts and their evidence as the audit engine produces them (issue 27): ``fedleak.audit`` end to end.

Every row of docs/verdict.md's "Verdicts from the audit engine" table comes from this file's output,
``benchmarks/results/verdict_audit.json``, rebuilt into the docs by ``benchmarks/regen_docs.py``; nothing is
assembled by hand: each case is one ``fedleak.audit(...)`` call and the row copies its ``metrics.json``.

Cases (small, CPU): an untrained MLP on the embedded digits under FedSGD (the row/bias ratio for one image,
SPEAR for 8, SPEAR under per-example noise, SPEAR on an update clipped by Flower's central DP before the server adds noise), and gpt2-tiny on the embedded text
(DAGER clean, and under noise σ = 0.01). Run: ``OMP_NUM_THREADS=1 nice python benchmarks/bench_verdict_audit.py``
(90 CPU-seconds measured on 2026-11-25: the cases' `cpu_seconds`).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

import fedleak

OUT = Path(__file__).parent / "results" / "verdict_audit.json"
IMAGE = {"model": "mlp", "algorithm": "fedsgd", "malicious": False, "attacks": ["inverting-gradients"],
         "iterations": 300}
TEXT = {"data": "text", "model": "gpt2-tiny", "algorithm": "fedsgd", "samples": 2, "malicious": False,
        "attacks": ["tiger"]}
CASES = {
    "mlp-b1": {**IMAGE, "samples": 1},
    "mlp-b8": {**IMAGE, "samples": 8},
    "mlp-b8-noise": {**IMAGE, "samples": 8, "defense": ["gaussian:0.1"]},
    "mlp-b8-flower-central-clip": {**IMAGE, "samples": 8, "defense": ["flower-central-dp:noise=1,clip=0.1,clients=10"]},
    "gpt2-tiny-2x16": dict(TEXT),
    "gpt2-tiny-2x16-noise": {**TEXT, "defense": ["gaussian:0.01"]},
}
KEEP = ("rec_percent", "psnr", "exact_sequences", "rouge1", "certain_targets", "precondition_held_targets",
        "iterations", "budget_unit", "budget_factor", "seconds", "kind")


def _attack(summary: dict) -> dict:
    out = {k: summary.get(k) for k in KEEP}
    condition = summary.get("precondition") or summary.get("exactness") or {}
    out["precondition"] = {"holds": condition.get("holds"), "reason": condition.get("reason"),
                           "noise_filled": condition.get("noise_filled", False)}
    check = summary.get("verification") or condition.get("verification")
    if check:
        out["verification"] = {"matches": check.get("matches", check.get("holds")),
                               **{k: check.get(k) for k in ("relative_error", "tolerance")}}
    return out


def run_case(name: str, settings: dict) -> dict:
    start = time.process_time()
    with tempfile.TemporaryDirectory() as folder:
        result = fedleak.audit(out=Path(folder) / name, progress=None, log=None, **settings)
    tm = result["threat_models"]["honest-but-curious"]
    scenario = next(iter(result["scenarios"].values()))
    return {"settings": settings, "verdict": tm["verdict"], "evidence": tm["evidence"],
            "proved_by": tm.get("proved_by"), "strongest": tm.get("strongest"), "not_tried": tm["not_tried"],
            "required_exact": tm.get("required_exact"),
            "attacks": {n: _attack(s) for n, s in scenario["attacks"].items()},
            "cpu_seconds": round(time.process_time() - start, 1)}


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)
    names = argv or list(CASES)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    cases = dict(previous.get("cases", {}))
    for name in names:
        cases[name] = run_case(name, CASES[name])
        print(name, cases[name]["verdict"], cases[name]["evidence"], cases[name]["cpu_seconds"], flush=True)
    OUT.write_text(json.dumps({
        "cases": cases, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "threads": torch.get_num_threads(), "load_average": list(os.getloadavg()), "device": "cpu",
        "torch": torch.__version__, "platform": platform.platform(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "engine": "fedleak.audit (src/fedleak/audit/run.py), one call per case"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
