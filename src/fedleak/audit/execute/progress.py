"""Progress of an audit, through one callback.

The audit calls ``progress(event)`` with a dict: ``{"stage": text}`` when a stage starts (loading,
one attack on one client, the report) and ``{"stage": text, "step": s, "total": T, "loss": x,
"unit": u}`` while an attack runs (``loss`` is ``None`` for an exact attack's search steps);
``{"stage": text, "plan": {"attacks": N}}`` announces the work before it starts and attack stages
carry ``"attack": True``. Three reporters implement it: a tqdm bar (an interactive terminal), log
lines (stderr is not a terminal: CI, nohup; one line per stage, one every ``every`` percent of a
long attack — optimization iterations and exact attacks' search steps alike,
:mod:`fedleak.attacks.progress` —, an ETA from measured rates, and a heartbeat at least every
30 s), and nothing (``--quiet``). Library users pass their own callable to :func:`fedleak.audit`.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

ProgressFn = Callable[[dict], None]


class LogProgress:
    """Log lines: one per stage, one every ``every`` percent of an optimization, and a heartbeat.

    A ``{"stage": ..., "plan": {"attacks": N}}`` event announces how many attack runs follow; each
    attack's stage event carries ``"attack": True``. From the measured time of the attack runs so
    far (the running one counted by its share of iterations) every line after the first iterations
    carries an ETA, stated as an estimate. No line for ``FEDLEAK_PROGRESS_INTERVAL`` seconds (default
    30) makes the heartbeat repeat the current stage, iteration and loss
    (:mod:`fedleak.runs.heartbeat`). Every line also goes to the ``fedleak`` logger.
    """

    def __init__(self, stream=None, every: float = 10.0, heartbeat: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.stage = ""
        self.next_percent = 0.0
        self.start = time.perf_counter()
        self.total_attacks, self.attacks, self.attack_start, self.attack_seconds = 0, 0, None, 0.0
        self.step: Optional[tuple] = None
        self.first: Optional[tuple] = None  # (time, step) of the running loop's first report
        self.step_time, self.unit = self.start, "iteration"
        self.in_attack, self.beat = False, None
        if heartbeat:
            from ...runs.heartbeat import Heartbeat

            self.beat = Heartbeat(self._heartbeat_line, self._write)

    def _write(self, text: str) -> None:
        from ...runs.heartbeat import logger

        line = f"[{time.perf_counter() - self.start:7.1f}s] {text}"
        print(line, file=self.stream, flush=True)
        logger.info(line)
        if self.beat is not None:
            self.beat.wrote()

    def eta(self) -> Optional[float]:
        """Seconds left, from measurements only, recomputed on every line (corrected, not only raised).

        The running attack: its steps left times its seconds per step measured from its first to its
        latest report (set-up excluded), counted down since that report; before two reports, the mean
        finished attack's time minus what it has run. The attacks after it: the mean finished attack's time, or before any finished, the
        running attack's projected time. ``None`` before a measurement.
        """
        if not self.total_attacks or self.attack_start is None:
            return None
        now = time.perf_counter()
        finished = self.attacks - 1
        mean = self.attack_seconds / finished if finished > 0 else None
        rate = None
        if self.step is not None and self.first is not None and self.step[0] > self.first[1]:
            rate = (self.step_time - self.first[0]) / (self.step[0] - self.first[1])
        if rate is not None:
            step, total = self.step[0], self.step[1]
            current = max(max(total - step, 0) * rate - (now - self.step_time), 0.0)
            projected = (now - self.attack_start) + current
        elif mean is not None:
            current, projected = max(mean - (now - self.attack_start), 0.0), mean
        else:
            return None
        return current + max(self.total_attacks - self.attacks, 0) * (mean if mean is not None else projected)

    def _eta_text(self) -> str:
        from ...runs.heartbeat import duration

        eta = self.eta()
        return "" if eta is None else f"; ETA ~{duration(eta)} (estimate)"

    def _counter(self) -> str:
        return f"attack {self.attacks}/{self.total_attacks} " if self.total_attacks and self.in_attack else ""

    def _heartbeat_line(self) -> str:
        it = ""
        if self.step is not None:
            step, total, loss = self.step
            it = f": {self.unit} {step}/{total}" + (f", loss {loss:.4g}" if loss is not None else "")
        return f"{self._counter()}{self.stage}{it}{self._eta_text()}"

    def __call__(self, event: dict) -> None:
        stage = event.get("stage", "")
        if "plan" in event:
            self.total_attacks = int(event["plan"].get("attacks") or 0)
        if "step" not in event:
            if event.get("attack"):
                now = time.perf_counter()
                if self.attack_start is not None:
                    self.attack_seconds += now - self.attack_start
                self.attacks, self.attack_start = self.attacks + 1, now
            self.stage, self.next_percent, self.step, self.first = stage, self.every, None, None
            self.in_attack = bool(event.get("attack"))
            self._write(f"{self._counter()}{stage}{self._eta_text()}" if self.in_attack else stage)
            return
        total = max(int(event.get("total") or 0), 1)
        step = int(event["step"])
        if self.step is not None and (step < self.step[0] or total != self.step[1]):
            self.first, self.next_percent = None, self.every  # a new loop inside the stage: measure afresh
        self.step, self.step_time, self.unit = (step, total, event.get("loss")), time.perf_counter(), \
            event.get("unit") or "iteration"
        if self.first is None:
            self.first = (self.step_time, step)
        percent = 100.0 * step / total
        if percent >= self.next_percent or (self.beat is not None and self.beat.due()):
            loss = event.get("loss")
            self._write(f"{self._counter()}{stage}: {percent:3.0f}% ({self.unit} {step}/{total})"
                        + (f", loss {loss:.3g}" if loss is not None else "") + self._eta_text())
            while self.next_percent <= percent:
                self.next_percent += self.every

    def close(self) -> None:
        if self.beat is not None:
            self.beat.close()


class BarProgress:
    """A tqdm bar whose description is the current stage."""

    def __init__(self):
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit="it", dynamic_ncols=True,
                        bar_format="{desc} {percentage:3.0f}%|{bar}| {n}/{total} {postfix}")

    def __call__(self, event: dict) -> None:
        self.bar.set_description_str(event.get("stage", ""), refresh=False)
        if "step" not in event:
            self.bar.reset(total=0)
            self.bar.set_postfix_str("", refresh=False)
            self.bar.refresh()
            return
        total = int(event.get("total") or 0)
        if self.bar.total != total:
            self.bar.reset(total=total)
        self.bar.n = int(event["step"])
        if event.get("loss") is not None:
            self.bar.set_postfix_str(f"loss {event['loss']:.3g}", refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def reporter(mode="auto"):
    """``"auto"`` (bar on a terminal, else log lines), ``"bar"``, ``"log"``, ``None``/``"quiet"``, or a callable."""
    if callable(mode):
        return mode
    if mode in (None, False, "quiet", "none"):
        return None
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "log"
    if mode == "bar":
        return BarProgress()
    if mode == "log":
        return LogProgress()
    from ...errors import unknown_choice

    raise unknown_choice("progress mode", mode, ("auto", "bar", "log", "quiet"))


def optimizer_callback(progress: Optional[ProgressFn], stage: str):
    """The (step, total, loss) callback of the optimization loop, forwarded as events."""
    if progress is None:
        return None

    from ...attacks.progress import current_unit

    def report(step: int, total: int, loss) -> None:
        progress({"stage": stage, "step": step, "total": total, "loss": loss, "unit": current_unit()})

    return report


def with_progress(mode, stage: str, work):
    """``work()`` under a reporter for ``mode`` (:func:`reporter`): every optimization loop inside reports to it."""
    from ...attacks.optimize import progress_reporter

    show = reporter(mode)
    try:
        if show is not None:
            show({"stage": stage})
        with progress_reporter(optimizer_callback(show, stage)):
            return work()
    finally:
        if show is not None and hasattr(show, "close"):
            show.close()
