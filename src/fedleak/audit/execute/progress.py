"""Progress of an audit, through one callback.

The audit calls ``progress(event)`` with a dict: ``{"stage": text}`` when a stage starts (loading,
one attack on one client, the report) and ``{"stage": text, "step": s, "total": T, "loss": x,
"unit": u}`` while an attack runs (``loss`` is ``None`` for an exact attack's search steps);
``{"stage": text, "plan": {"attacks": N}}`` announces the work before it starts and attack stages
carry ``"attack": True``. Three reporters implement it: a tqdm bar (an interactive terminal), log
lines (stderr is not a terminal: CI, nohup; :class:`LogProgress`: one line per stage, one when each
attack starts and one when it ends, and between them a heartbeat with the step counter at most every
30 s — optimization iterations and exact attacks' search steps alike, :mod:`fedleak.attacks.progress` —,
with an ETA from the plan's remaining work), and nothing (``--quiet``). Library users pass their own
callable to :func:`fedleak.audit`.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

ProgressFn = Callable[[dict], None]


class LogProgress:
    """Log lines off a terminal: one per stage, one when an attack starts and one when it ends, and a heartbeat.

    A ``{"stage": ..., "plan": {"attacks": N}}`` event announces how many attack runs follow; each attack's
    stage event carries ``"attack": True`` and ends the previous attack (its end line says how long it ran).
    While an attack runs, its (step, total) reports are only recorded: the heartbeat writes the counter, the
    step and the loss after ``FEDLEAK_PROGRESS_INTERVAL`` seconds (default 30) without a line
    (:mod:`fedleak.runs.heartbeat`), so a 0.1-s attack takes two lines and a 10-minute one a line every 30 s
    (issue 46). Every line also goes to the ``fedleak`` logger. The ETA (:meth:`eta`) is the plan's remaining
    work at the measured rate.
    """

    def __init__(self, stream=None, every: float = 10.0, heartbeat: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.every = every  # kept for callers that pass it; lines come from stages and the heartbeat only
        self.stage = ""
        self.start = self.stage_start = time.perf_counter()
        self.total_attacks, self.attacks, self.attack_start, self.attack_seconds = 0, 0, None, 0.0
        self.fraction = 0.0  # of the running attack: the furthest step/total of its loops
        self.warmup = 0.0  # the first attack's seconds before its first step: one-time imports and set-up
        self.step: Optional[tuple] = None
        self.unit = "iteration"
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
        """Seconds left: the plan's remaining attack runs times the measured seconds per run.

        Work is counted in attack runs, the running one by the furthest share of steps its loops reached; the
        rate is all attack time so far over the work done. The remaining work only falls, so the ETA rises
        only by as much as the measured rate does (a measured slowdown), and it is 0 once the planned runs
        are done. ``None`` before a tenth of a run is measured (a rate from the first step of the first
        attack would count its set-up as its speed); the first attack's time before its first step (the
        one-time imports and warm-up: 15 of its 18 s in the README's custom-model example) is left out of the rate.
        """
        if not self.total_attacks or self.attack_start is None:
            return None
        running = self.in_attack
        spent = self.attack_seconds + (time.perf_counter() - self.attack_start if running else 0.0) - self.warmup
        done = (self.attacks - 1 + self.fraction) if running else self.attacks
        remaining = max(self.total_attacks - done, 0.0)
        if remaining == 0:
            return 0.0
        if done < 0.1:
            return None
        return remaining * spent / done

    def _eta_text(self) -> str:
        from ...runs.heartbeat import duration

        eta = self.eta()
        return "" if eta is None else f"; ETA ~{duration(eta)} (estimate)"

    def _counter(self) -> str:
        return f"attack {self.attacks}/{self.total_attacks} " if self.total_attacks and self.in_attack else ""

    def _where(self) -> str:
        if self.step is None:
            return ""
        step, total, loss = self.step
        return f"{self.unit} {step}/{total}" + (f", loss {loss:.4g}" if loss is not None else "")

    def _heartbeat_line(self) -> str:
        from ...runs.heartbeat import duration

        where = self._where() or f"running for {duration(time.perf_counter() - self.stage_start)}"  # no step counter
        return f"{self._counter()}{self.stage}: {where}{self._eta_text()}"

    def _end_attack(self) -> None:
        """The running attack ended: add its time and write its end line."""
        if not self.in_attack or self.attack_start is None:
            return
        seconds = time.perf_counter() - self.attack_start
        counter, where = self._counter(), self._where()
        self.attack_seconds += seconds
        self.in_attack, self.fraction = False, 0.0
        self._write(f"{counter}{self.stage}: done in {seconds:.1f} s{' (' + where + ')' if where else ''}"
                    f"{self._eta_text()}")

    def __call__(self, event: dict) -> None:
        stage = event.get("stage", "")
        if "plan" in event:
            self.total_attacks = int(event["plan"].get("attacks") or 0)
        if "step" not in event:
            self._end_attack()
            self.stage, self.step, self.fraction, self.stage_start = stage, None, 0.0, time.perf_counter()
            if event.get("attack"):
                self.attacks, self.attack_start, self.in_attack = self.attacks + 1, time.perf_counter(), True
                self._write(f"{self._counter()}{stage}{self._eta_text()}")
            else:
                self._write(stage)
            return
        total = max(int(event.get("total") or 0), 1)
        step = int(event["step"])
        if self.in_attack and self.attacks == 1 and self.step is None:  # the first attack's first step: warm-up ends
            self.warmup = time.perf_counter() - self.attack_start
        self.step, self.unit = (step, total, event.get("loss")), event.get("unit") or "iteration"
        if self.in_attack:
            self.fraction = max(self.fraction, min(step / total, 1.0))

    def close(self) -> None:
        self._end_attack()
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
            show({"stage": stage, "attack": True})  # off a terminal: a line as it starts, one as it ends
        with progress_reporter(optimizer_callback(show, stage)):
            return work()
    finally:
        if show is not None and hasattr(show, "close"):
            show.close()
