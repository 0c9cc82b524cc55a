"""The Flower text demo explains itself on the console (issue 33, item 3): a reply DAGER cannot
recover (more token inputs than the LoRA rank) prints why, and Flower's log lines appear once per
round, also after the first text score (``rouge_score`` logs through ``absl``, which gave the root
logger a handler and doubled every propagated Flower line). One subprocess, about 15 s of CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr.serverapp")
pytest.importorskip("peft")
pytest.importorskip("rouge_score")

ROOT = Path(__file__).resolve().parents[1]


def test_text_demo_prints_why_replies_score_zero_and_each_flower_line_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "fedleak.integrations.flower.demo", "--task", "text", "--clients", "1",
                           "--rounds", "2", "--samples", "2", "--seq-len", "4", "--lora", "4", "--out",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("round ")]
    assert len(lines) == 2, done.stdout
    for line in lines:  # nothing recovered exactly: every line says why
        assert "exact_sequences 0" in line and "leakage inconclusive: " in line and "token inputs" in line, line
    # 2 sequences x 4 tokens = 8 token inputs > LoRA rank 4 in both rounds: round 1 (B = 0) reads the span from
    # B's gradient, round 2 (B != 0) from A's, and either is capped at the rank (attacks/text/probes.py)
    for line in lines:
        assert "8 token inputs exceed the span limit 4" in line, line
    logs = done.stdout + done.stderr
    for round_ in (1, 2):  # round 2 follows the first text score: each Flower line once
        assert logs.count(f"[ROUND {round_}/2]") == 1, logs[-4000:]
    assert logs.count("configure_train: Sampled 1 nodes") == 2, logs[-4000:]
