"""Progress off a terminal (issue 23 item 1): the plan, heartbeat lines within a bounded interval
(``FEDLEAK_PROGRESS_INTERVAL``), the ``fedleak`` logger, the API callback, and an interrupt message
true to what is on disk."""

import io
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from fedleak.attacks.optimize import OptimizerConfig, optimize
from fedleak.audit.execute.progress import LogProgress
from fedleak.runs.progress import interrupted_message

SRC = Path(__file__).resolve().parents[1] / "src"

TINY = """\
name: tiny
data: {dataset: digits, num_clients: 2, samples_per_client: 2}
model: {name: femnist-cnn}
protocol: {algorithm: fedsgd}
threat: {labels: counts}
variants: {ig: {attack: inverting-gradients, options: {iterations: 150}}}
"""


def _cli(tmp_path, *args, interval="0.3"):
    env = {**os.environ, "FEDLEAK_PROGRESS_INTERVAL": interval, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "fedleak.cli", "--threads", "1", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # also from a background job


def _lines(proc, until=None, timeout=60.0):
    """(arrival time, line) pairs read from a child's stdout (a pipe: off a terminal)."""
    out, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:
        out.append((time.monotonic(), line.rstrip("\n")))
        if (until and until(line)) or time.monotonic() > deadline:
            break
    return out


def test_run_prints_plan_and_heartbeat_lines_off_a_terminal(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = _cli(tmp_path, "run", "tiny.yaml", "--out", "runs/tiny")
    lines = _lines(proc)
    assert proc.wait(timeout=60) == 0, "\n".join(l for _, l in lines)
    text = [l for _, l in lines]
    assert text[0].startswith("plan: 2 job(s) to run, 0 of 2 already finished")
    assert any(l.startswith("estimate: ~") and "s per iteration measured" in l for l in text), text
    beats = [l for l in text if "job 1/2 default/ig/client-0: iteration" in l]
    assert beats and "loss" in beats[-1] and "ETA ~" in beats[-1], text
    assert any(l.startswith("[1/2] default/ig/client-0: PSNR") for l in text)
    # until the last job finished, no silence much longer than the 0.3 s interval
    work = [t for t, l in lines[: next(i for i, (_, l) in enumerate(lines) if l.startswith("[2/2]")) + 1]]
    gaps = [b - a for a, b in zip(work, work[1:])]
    assert max(gaps) < 3.0, gaps


def test_interrupt_message_names_only_what_exists(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = _cli(tmp_path, "run", "tiny.yaml", "--out", "runs/t1")
    lines = _lines(proc, until=lambda l: "iteration" in l)
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)  # a loaded machine may take a while to unwind
    assert proc.returncode == 130
    said = rest + "\n".join(l for _, l in lines)
    jobs = tmp_path / "runs/t1/jobs"
    finished = list(jobs.rglob("*.json")) if jobs.exists() else []
    if finished:
        assert f"{len(finished)} of 2 job file(s) are saved under runs/t1/jobs" in said, said
    else:
        assert "interrupted before any job finished (no job file under runs/t1)" in said, said
        assert "saved in" not in said


def test_interrupted_message_counts_job_files(tmp_path):
    assert "before any job finished" in interrupted_message(tmp_path / "none", 5)
    (tmp_path / "jobs/s/v").mkdir(parents=True)
    (tmp_path / "jobs/s/v/a.json").write_text("{}")
    (tmp_path / "jobs/s/v/b.json.stale").write_text("{}")
    assert interrupted_message(tmp_path, 5).startswith(f"interrupted: 1 of 5 job file(s) are saved under {tmp_path / 'jobs'}")


def test_audit_log_progress_heartbeat_and_eta(monkeypatch):
    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.1")
    stream = io.StringIO()
    show = LogProgress(stream=stream)
    try:
        show({"stage": "plan: 2 attack run(s)", "plan": {"attacks": 2}})
        show({"stage": "fedsgd: IG", "attack": True})
        show({"stage": "fedsgd: IG", "step": 14, "total": 100, "loss": 0.6})
        show({"stage": "fedsgd: IG", "step": 15, "total": 100, "loss": 0.5})  # a tenth of the run: a measured rate
        time.sleep(0.6)  # a long iteration: the heartbeat must speak
    finally:
        show.close()
    text = stream.getvalue()
    assert "attack 1/2 fedsgd: IG: iteration 15/100, loss 0.5; ETA ~" in text, text


def test_a_stage_without_steps_says_how_long_it_has_run(monkeypatch):
    """Issue 46: a client update of minutes without a step counter no longer repeats only its name."""
    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.1")
    stream = io.StringIO()
    show = LogProgress(stream=stream)
    try:
        show({"stage": "fedavg: client update 1/1"})
        time.sleep(0.5)
    finally:
        show.close()
    assert "fedavg: client update 1/1: running for 0 s" in stream.getvalue(), stream.getvalue()


class _Clock:
    """A fake ``time`` for :class:`LogProgress` (``perf_counter`` only moves when told)."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now


def _eta_seconds(line):
    """Seconds of the ``ETA ~...`` in a line (:func:`fedleak.runs.heartbeat.duration`'s format), or None."""
    import re

    m = re.search(r"ETA ~((?:\d+ h )?(?:\d+ min )?(?:\d+ s)?)", line)
    if not m:
        return None
    parts = dict((unit, int(n)) for n, unit in re.findall(r"(\d+) (h|min|s)", m.group(1)))
    return parts.get("h", 0) * 3600 + parts.get("min", 0) * 60 + parts.get("s", 0)


def test_audit_log_lines_two_per_attack_and_an_eta_ending_at_zero(monkeypatch):
    """Issue 46: off a terminal a 0.1-s attack takes two lines (start, end), not 11; the ETA is the plan's remaining
    work at the measured rate, rises no more than the measured slowdown and reads 0 at the end."""
    import fedleak.audit.execute.progress as progress

    clock = _Clock()
    monkeypatch.setattr(progress, "time", clock)
    stream = io.StringIO()
    show = LogProgress(stream=stream, heartbeat=False)
    per_step = [0.001] * 4 + [0.002] * 2  # six attacks of 100 steps; the last two run at half the speed
    show({"stage": "plan: 6 attack run(s)", "plan": {"attacks": 6}})
    etas, rates = [], []
    for i, seconds in enumerate(per_step):
        show({"stage": f"fedsgd: attack {i}", "attack": True})
        if i == 0:
            clock.now += 1.0  # the first attack's one-time warm-up (imports) before its first step: not its speed
        for step in range(1, 101):
            clock.now += seconds
            show({"stage": f"fedsgd: attack {i}", "step": step, "total": 100, "loss": 1.0 / step})
            if step % 25 == 0:
                etas.append(show.eta())
                rates.append((clock.now - 1.001) / (i + step / 100))
    show({"stage": "writing the report"})
    show.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 + 2 * 6 + 1, lines  # the plan, a start and an end per attack, the report
    ends = [line for line in lines if ": done in " in line]
    assert len(ends) == 6 and "(iteration 100/100, loss 0.01)" in ends[0]
    assert _eta_seconds(ends[-1]) == 0 and show.eta() == 0.0
    # over the first four attacks (one speed) the ETA only falls; after them it rises by at most the slowdown
    for (a, b), (ra, rb) in zip(zip(etas, etas[1:]), zip(rates, rates[1:])):
        assert b <= a * (rb / ra) + 1e-9, (a, b, ra, rb)
    assert all(b < a for a, b in zip(etas[:16], etas[1:16]))
    assert etas[0] == pytest.approx(0.024 / 0.25 * 5.75, rel=0.01)  # 5.75 runs left at the rate after warm-up


def test_optimize_logs_to_the_fedleak_logger_without_a_reporter(monkeypatch, caplog):
    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.01")
    x = torch.zeros(3)

    def slow(step):
        time.sleep(0.003)
        return ((x - 1) ** 2).sum()

    with caplog.at_level(logging.INFO, logger="fedleak"):
        optimize([x], slow, OptimizerConfig(lr=0.1, iterations=40, log_every=5), description="demo")
    lines = [r.getMessage() for r in caplog.records if r.name == "fedleak"]
    assert lines and all(line.startswith("demo: iteration ") for line in lines), lines
    assert any("loss" in line for line in lines), lines


def test_run_progress_callback_receives_plan_steps_and_jobs():
    from types import SimpleNamespace

    from fedleak.runs.progress import _Progress

    job = SimpleNamespace(setting="s", variant="v", client_index=0, __str__=lambda self: "s/v/c0")
    events, lines = [], []
    progress = _Progress(1, 0, [job], False, "tiny", lines.append, callback=events.append)
    try:
        progress.planned([job], [SimpleNamespace(name="v", attack="dlg", options={"iterations": 3})])
        for step in (1, 2, 3):
            progress.inner(step, 3, 0.5 / step)
        progress.finished(job, {"psnr": 21.5, "seconds": 0.1})
    finally:
        progress.close()
    assert [e["event"] for e in events] == ["plan", "step", "step", "step", "job"]
    assert events[-1]["done"] == 1 and events[-1]["total"] == 1 and events[-1]["psnr"] == 21.5
    assert lines[0].startswith("plan: 1 job(s) to run") and "v: dlg 3 it." in lines[0]


def test_fedleak_attack_prints_progress_lines_off_a_terminal(tmp_path, capsys, monkeypatch):
    import fedleak
    from fedleak.cli import main

    monkeypatch.setenv("FEDLEAK_PROGRESS_INTERVAL", "0.2")
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=1, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    update = fedleak.client_update(model, clients[0], fedleak.Protocol(algorithm="fedsgd"), seed=0,
                                   metadata={"model": {"name": "femnist-cnn"}, "spec": spec.to_json()})
    update.save(tmp_path / "u")
    assert main(["attack", str(tmp_path / "u"), "--attack", "inverting-gradients", "-o", "iterations=30",
                 "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0].endswith("attack inverting-gradients"), err
    # issue 46: the end line says how long it ran and where it ended; no percent lines between
    assert ": done in " in lines[-1] and "(iteration 30/30, loss " in lines[-1] and "%" not in err, err


def test_log_every_below_one_is_refused_and_fused_adam_takes_the_same_steps():
    """``log_every`` is a modulus of the loop: 0 used to end in a ZeroDivisionError mid-attack; it is refused when
    the configuration is made. TabLeak's ``fused`` Adam (torch's one-kernel step) takes the same steps as the plain
    loop, up to float rounding."""
    from fedleak.errors import FedleakError

    for bad in (0, -1, 2.5):
        with pytest.raises(FedleakError, match="log_every must be a positive integer"):
            OptimizerConfig(log_every=bad)
    results = []
    for fused in (False, True):
        x = torch.linspace(-1, 1, 12).reshape(3, 4).clone()
        optimize([x], lambda step: (x - 0.3).pow(2).sum(), OptimizerConfig(lr=0.05, iterations=40, signed=True,
                                                                            log_every=7, fused=fused))
        results.append(x.detach())
    assert torch.allclose(results[0], results[1], atol=1e-6)
    assert not torch.allclose(results[0], torch.linspace(-1, 1, 12).reshape(3, 4))
