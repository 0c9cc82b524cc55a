"""Progress lines off a terminal: a line at least every ``interval`` seconds, also to ``logging``.

A long attack (Dimitrov et al.'s unrolled FedAvg simulation, AWA) may take minutes per job; off a
terminal (CI, ``nohup``, a notebook's log) a progress bar shows nothing. :class:`Heartbeat` runs a
daemon thread that calls ``line()`` whenever no line was written for ``interval`` seconds, so the
log proves the run is alive and says where it is (the job counter, the attack's iteration and loss,
an ETA). ``interval`` defaults to 30 s and is set with the environment variable
``FEDLEAK_PROGRESS_INTERVAL`` (seconds; tests use a fraction of a second).

Every line also goes to the ``fedleak`` logger (``logging.getLogger("fedleak")``, level INFO), so a
library user sees progress with ``logging.basicConfig(level=logging.INFO)``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional

INTERVAL_ENV = "FEDLEAK_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 30.0
logger = logging.getLogger("fedleak")


def interval() -> float:
    """Seconds between progress lines: ``$FEDLEAK_PROGRESS_INTERVAL`` or 30 (a bad value falls back to 30)."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(text) if text else DEFAULT_INTERVAL
    except ValueError:
        return DEFAULT_INTERVAL
    return value if 0.01 <= value <= 86400 else DEFAULT_INTERVAL


def duration(seconds: Optional[float]) -> str:
    """``95`` -> ``"1 min 35 s"`` (an estimate's precision: whole seconds, minutes above an hour)."""
    if seconds is None or seconds != seconds or seconds < 0:
        return "unknown"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Heartbeat:
    """Calls ``line()`` (a string or ``None``) every ``interval`` seconds of silence and writes it.

    ``write`` writes one line (print to stderr, a runner's ``log``); :meth:`wrote` tells the
    heartbeat that a line just went out by another path, which restarts its clock.
    """

    def __init__(self, line: Callable[[], Optional[str]], write: Callable[[str], None],
                 every: Optional[float] = None) -> None:
        self.line, self.write = line, write
        self.every = interval() if every is None else every
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="fedleak-heartbeat", daemon=True)
        self._thread.start()

    def wrote(self) -> None:
        self.last = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.every

    def _loop(self) -> None:
        while not self._stop.wait(min(self.every, max(0.01, self.every - (time.monotonic() - self.last)))):
            if not self.due():
                continue
            with self._lock:
                try:
                    text = self.line()
                    if text:
                        self.write(text)
                except Exception:  # a progress line must never break the run
                    pass
                self.wrote()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)
