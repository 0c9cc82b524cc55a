"""Progress of every attack loop, optimizations and exact searches alike, and the interrupt check.

An attack's loop reports ``(step, total, loss)`` through :func:`loop_progress`: the optimization
loop (:mod:`.optimize`) every iteration, the exact attacks every unit of their search — SPEAR's
sampled subsets (Dimitrov et al. 2024, §4.1), DAGER's vocabulary chunks and growth steps (Petrov et
al. 2024, Alg. 1), TAG's and TIGER's relaxation steps — with ``loss=None`` where there is none. The
unit ("iteration", "subsets tried", "search steps") is available to the receiver through
:func:`current_unit` while the loop runs.

Where the report goes: the callback installed with :func:`progress_reporter` (the CLI's bar, the
runner's log lines, ``fedleak.audit(progress=...)``), else the ``fedleak`` logger (INFO; nothing if
no one listens): a line at least every ``FEDLEAK_PROGRESS_INTERVAL`` seconds (default 30) — also
while a single step runs longer than that, from a heartbeat thread — with an ETA from the measured
rate since the loop's first step (set-up excluded), recomputed on every line and counted down
between reports.

Every report also checks the interrupt flag (:func:`request_stop`, set by the runner's SIGINT
handling), so a loop stops within one step of an interrupt even when the signal reaches another
thread.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator, Optional

ProgressFn = Callable[[int, int, Optional[float]], None]  # (step, total, loss or None)
_REPORTER: ContextVar[Optional[ProgressFn]] = ContextVar("fedleak_progress", default=None)
_UNIT: ContextVar[str] = ContextVar("fedleak_progress_unit", default="iteration")
_STOP = threading.Event()


def request_stop() -> None:
    """Ask every running attack loop to stop at its next step (it raises ``KeyboardInterrupt``)."""
    _STOP.set()


def clear_stop() -> None:
    _STOP.clear()


def stop_requested() -> bool:
    return _STOP.is_set()


def check_stop() -> None:
    """Raise ``KeyboardInterrupt`` if an interrupt was requested (called at every reported step)."""
    if _STOP.is_set():
        raise KeyboardInterrupt("interrupt requested")


@contextmanager
def progress_reporter(fn: Optional[ProgressFn]):
    """Install ``fn(step, total, loss)`` as the progress callback of every attack loop run inside."""
    token = _REPORTER.set(fn)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def current_unit() -> str:
    """What the running loop counts: ``"iteration"`` (optimizations), ``"subsets tried"``, ``"search steps"``..."""
    return _UNIT.get()


class LogReporter:
    """The fallback: ``fedleak`` logger lines at least every interval, with a measured-rate ETA.

    The rate is measured from the loop's first reported step (the set-up before it excluded) and the
    ETA recomputed on every line: ``(total − step) × seconds per step so far``, counted down since the
    latest step. A heartbeat thread writes the current line every interval, also while a single step
    outlasts it.
    """

    def __init__(self, description: str, unit: str, total: int, every: Optional[float] = None) -> None:
        from ..runs.heartbeat import Heartbeat, interval, logger

        self.logger, self.description, self.unit, self.total = logger, description, unit, total
        self.every = interval() if every is None else every
        self.start = time.monotonic()
        self.first: Optional[tuple[float, int]] = None
        self.step: Optional[tuple[int, int, Optional[float]]] = None
        self.step_time = self.start
        self.beat = Heartbeat(self.line, self._write, every=self.every)

    def _write(self, text: str) -> None:
        self.logger.info(text)

    def eta(self) -> Optional[float]:
        """Steps left × seconds per step from the first to the latest report, counted down since that report."""
        if self.step is None or self.first is None or self.step[0] <= self.first[1]:
            return None
        step, total, _ = self.step
        rate = (self.step_time - self.first[0]) / (step - self.first[1])
        return max(max(total - step, 0) * rate - (time.monotonic() - self.step_time), 0.0)

    def line(self) -> Optional[str]:
        from ..runs.heartbeat import duration

        if self.step is None:  # the first step (with the attack's set-up) is still running
            return (f"{self.description + ': ' if self.description else ''}{self.unit} 0/{self.total}, first step "
                    f"running ({time.monotonic() - self.start:.0f} s)")
        step, total, loss = self.step
        eta = self.eta()
        return (f"{self.description + ': ' if self.description else ''}{self.unit} {step}/{total}"
                + (f", loss {loss:.4g}" if loss is not None else "") + f" ({time.monotonic() - self.start:.0f} s"
                + (f", ETA ~{duration(eta)} (measured rate)" if eta is not None else "") + ")")

    def __call__(self, step: int, total: int, loss: Optional[float]) -> None:
        self.step, self.step_time = (step, total, loss), time.monotonic()
        if self.first is None:
            self.first = (self.step_time, step)  # the lines themselves come from the heartbeat thread

    def close(self) -> None:
        self.beat.close()


@contextmanager
def loop_progress(total: int, unit: str = "iteration", description: str = "",
                  progress: Optional[ProgressFn] = None) -> Iterator[Callable[..., None]]:
    """``tick(step, loss=None)`` for a loop of ``total`` steps; reports and checks the interrupt flag."""
    report = progress or _REPORTER.get()
    fallback = None
    if report is None:
        from ..runs.heartbeat import logger

        if logger.isEnabledFor(logging.INFO):
            report = fallback = LogReporter(description, unit, total)
    token = _UNIT.set(unit)

    def tick(step: int, loss: Optional[float] = None) -> None:
        check_stop()
        if report is not None:
            report(step, total, loss)

    try:
        yield tick
    finally:
        _UNIT.reset(token)
        if fallback is not None:
            fallback.close()


def counting(tick: Callable[..., None]) -> Callable[..., None]:
    """``advance(loss=None)``: one more step of a loop whose phases report through one counter."""
    state = {"step": 0}

    def advance(loss: Optional[float] = None) -> None:
        state["step"] += 1
        tick(state["step"], loss)

    return advance
