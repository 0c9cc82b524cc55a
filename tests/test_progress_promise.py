"""Progress that keeps its promise, interrupts that answer (issue 33 items 1 and 2).

Off a terminal every attack loop — optimizations per iteration, exact attacks per unit of their
search — gives a line at least every ``FEDLEAK_PROGRESS_INTERVAL`` seconds with an ETA from a
measured rate that counts down to done; Ctrl-C ends a run within 2 s even inside a long C operation
and says only what is on disk. Short intervals keep the tests fast.
"""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedleak.attacks import build
from fedleak.attacks.optimize import OptimizerConfig, optimize, progress_reporter
from fedleak.attacks.progress import current_unit
from fedleak.fl import client_update
from fedleak.types import Protocol

SRC = Path(__file__).resolve().parents[1] / "src"


def _eta(line: str):
    """Seconds of the ``ETA ~...`` in a progress line (``duration``'s format), or None."""
    m = re.search(r"ETA ~((?:\d+ h )?(?:\d+ min )?(?:\d+ s)?)", line)
    if not m:
        return None
    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+) (h|min|s)", m.group(1)))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


def _env(interval: str) -> dict:
    return {**os.environ, "FEDLEAK_PROGRESS_INTERVAL": interval, "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}


def _default_sigint() -> None:
    """In the child: Ctrl-C's default, even when the test runs where SIGINT is ignored (a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _timed_lines(proc, until=None, timeout=240.0):
    out, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        out.append((time.monotonic(), line.rstrip("\n")))
        if (until and until(line)) or time.monotonic() > deadline:
            break
    return out


def _counts_down(etas: list) -> None:
    """A measured ETA is corrected as work goes: it ends far below where it started (not only raised)."""
    assert len(etas) >= 3, etas
    assert etas[-1] <= max(1, etas[0] // 2), etas
    rises = sum(b > a + 1 for a, b in zip(etas, etas[1:]))
    assert rises <= len(etas) // 3, etas


def _leaf_root(root: Path, writers: int = 1, samples: int = 10) -> Path:
    """A LEAF FEMNIST train split of random 28×28 images (what the preset reads)."""
    g = torch.Generator().manual_seed(0)
    users = {f"w{u}": {"x": torch.rand(samples, 784, generator=g).round(decimals=3).tolist(),
                       "y": [i % 10 for i in range(samples)]} for u in range(writers)}
    (root / "train").mkdir(parents=True)
    (root / "train" / "all.json").write_text(json.dumps({"users": list(users), "num_samples": [samples] * writers,
                                                        "user_data": users}))
    return root


def test_preset_off_a_terminal_gives_lines_on_the_interval_with_an_eta_counting_down(tmp_path):
    """``fedleak run --preset dimitrov-table1-femnist --quick`` off a terminal (about 15 s on 2 busy cores)."""
    root = _leaf_root(tmp_path / "leaf")
    proc = subprocess.Popen([sys.executable, "-m", "fedleak.cli", "--threads", "1", "run", "--preset",
                             "dimitrov-table1-femnist", "--data-root", str(root), "--clients", "1", "--settings",
                             "E1-m5", "--variants", "ours-prior", "--quick", "-o", "iterations=120", "--out", "runs/p"],
                            cwd=tmp_path, env=_env("0.3"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines = _timed_lines(proc)
    assert proc.wait(timeout=60) == 0, "\n".join(l for _, l in lines)
    text = [l for _, l in lines]
    done = next(i for i, l in enumerate(text) if l.startswith("[1/1]"))
    estimate = next(i for i, l in enumerate(text) if l.startswith("estimate: ~"))
    assert estimate < done and "s per iteration measured over" in text[estimate], text
    beats = [l for l in text[estimate:done] if ": iteration " in l]
    assert all("ETA ~" in l for l in beats), beats  # from the estimate on, every line carries the measured ETA
    _counts_down([_eta(l) for l in beats])
    times = [t for t, _ in lines[: done + 1]]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.3 + 2.0  # the interval, with room for a busy machine


def test_api_logger_lines_on_the_interval_also_during_one_long_step(monkeypatch, caplog):
    """The README's API path: no callback, ``logging`` at INFO (about 3 s)."""
    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.2")
    x = torch.zeros(3)

    def objective(step):
        time.sleep(1.0 if step == 5 else 0.05)  # one step five times the interval
        return ((x - 1) ** 2).sum()

    with caplog.at_level(logging.INFO, logger="fedleak"):
        optimize([x], objective, OptimizerConfig(lr=0.1, iterations=40, log_every=10), description="demo")
    records = [r for r in caplog.records if r.name == "fedleak" and r.getMessage().startswith("demo: ")]
    times = [r.created for r in records]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.2 + 0.5, [r.getMessage() for r in records]
    during = [r.getMessage() for r in records if "iteration 5/40" in r.getMessage()]
    assert len(during) >= 3, during  # the long step is not silent
    with_eta = [r.getMessage() for r in records if "ETA ~" in r.getMessage()]
    assert with_eta and "(measured rate)" in with_eta[0]
    etas = [_eta(m) for m in with_eta]
    assert etas[-1] <= 1 and max(etas) >= 1, with_eta


def test_exact_attack_reports_its_search_steps():
    """SPEAR reports subsets tried of its budget, at every chunk, through the same callback (about 1 s)."""
    from fedleak.models import MLP
    from fedleak.types import ClientData, DataSpec

    spec = DataSpec("toy", (1, 8, 8), 10, (0.0,), (1.0,), pixel_range=(-4.0, 4.0))
    torch.manual_seed(0)
    model = MLP(spec, (128,))
    g = torch.Generator().manual_seed(1)
    data = ClientData(torch.randn((8, 1, 8, 8), generator=g).clamp(-3.5, 3.5), torch.randint(0, 10, (8,), generator=g))
    update = client_update(model, data, Protocol("fedsgd"))
    events = []
    with progress_reporter(lambda s, t, loss: events.append((s, t, loss, current_unit()))):
        rec = build("spear", seed=0, chunk=16).reconstruct(update, model, spec)
    assert rec.extras["certain"] is True
    assert len(events) >= 3 and {e[3] for e in events} == {"subsets tried"}
    assert [e[0] for e in events] == sorted(e[0] for e in events) and events[-1][1] == 200_000
    assert all(e[2] is None for e in events)


def test_audit_log_eta_counts_down_for_an_exact_search(monkeypatch):
    """The audit's log lines for an exact attack's search steps: unit, interval, an ETA that falls (about 4 s)."""
    import io

    from fedleak.audit.execute.progress import LogProgress, optimizer_callback
    from fedleak.attacks.progress import counting, loop_progress

    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.1")
    stream = io.StringIO()
    show = LogProgress(stream=stream)
    try:
        show({"stage": "plan", "plan": {"attacks": 1}})
        show({"stage": "fedavg: DAGER", "attack": True})
        with progress_reporter(optimizer_callback(show, "fedavg: DAGER")):
            with loop_progress(20, "search steps", "dager") as tick:
                advance = counting(tick)
                for _ in range(20):
                    time.sleep(0.2)
                    advance()
    finally:
        show.close()
    lines = stream.getvalue().splitlines()
    steps = [l for l in lines if "search steps" in l]
    assert steps and all("attack 1/1 fedavg: DAGER" in l for l in steps), lines
    _counts_down([_eta(l) for l in steps if "ETA ~" in l])


def test_dager_reports_through_the_logger_with_a_measured_eta(monkeypatch, caplog):
    """DAGER on gpt2-tiny (about 3 s): vocabulary chunks then growth steps, one counter, an ETA."""
    pytest.importorskip("transformers")
    from fedleak import data, models

    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.05")
    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("gpt2-tiny", spec, seed=0)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01))
    with caplog.at_level(logging.INFO, logger="fedleak"):
        rec = build("dager").reconstruct(update, model, spec)
    assert rec.extras["verified"] is True
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dager: search steps")]
    assert len(lines) >= 3, lines
    counts = [int(re.search(r"search steps (\d+)/", l).group(1)) for l in lines]
    assert counts == sorted(counts) and counts[-1] > counts[0]
    assert any("ETA ~" in l for l in lines)


def test_sigint_ends_a_preset_size_job_within_two_seconds_and_says_only_what_is_true(tmp_path):
    """Ctrl-C inside Dimitrov et al.'s unrolled simulation (E10-m5: its backward is one long C call).

    About 20 s on 2 busy cores. The run's last words say no job finished and that rerunning starts it;
    nothing says "resume".
    """
    (tmp_path / "exp.yaml").write_text(
        "name: lat\ndata: {dataset: digits, num_clients: 1, samples_per_client: 50}\nmodel: {name: femnist-cnn}\n"
        "protocol: {algorithm: fedavg, epochs: 10, batch_size: 5, lr: 0.004}\nthreat: {labels: counts}\n"
        "variants: {ours: {attack: dimitrov, options: {iterations: 500}}}\n")
    proc = subprocess.Popen([sys.executable, "-m", "fedleak.cli", "--threads", "1", "run", "exp.yaml", "--out", "r"],
                            cwd=tmp_path, env=_env("0.2"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            bufsize=1, preexec_fn=_default_sigint)
    seen = _timed_lines(proc, until=lambda l: ": iteration 2/" in l)
    assert proc.poll() is None, seen
    time.sleep(0.4)  # most of an iteration is its backward pass
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    latency = time.monotonic() - start
    assert proc.returncode == 130, err
    assert latency < 2.0, latency
    said = "\n".join(l for _, l in seen) + out + err
    assert "interrupted before any job finished (no job file under r)" in said, said
    assert "resume" not in said and "Traceback" not in said, said
    assert err.strip().splitlines()[-1] == "fedleak: interrupted by SIGINT", err
