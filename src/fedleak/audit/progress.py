"""Progress of an audit, through one callback.

The audit calls ``progress(event)`` with a dict: ``{"stage": text}`` when a stage starts (loading,
one attack on one client, the report) and ``{"stage": text, "step": s, "total": T, "loss": x}``
while an attack optimizes. Three reporters implement it: a tqdm bar (an interactive terminal), log
lines (stderr is not a terminal: CI, nohup; one line per stage and one every ``every`` percent of a
long attack), and nothing (``--quiet``). Library users pass their own callable to
:func:`fedleak.audit`.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

ProgressFn = Callable[[dict], None]


class LogProgress:
    """One line per stage, and one every ``every`` percent of an optimization."""

    def __init__(self, stream=None, every: float = 10.0):
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.stage = ""
        self.next_percent = 0.0
        self.start = time.perf_counter()

    def _write(self, text: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f}s] {text}", file=self.stream, flush=True)

    def __call__(self, event: dict) -> None:
        stage = event.get("stage", "")
        if "step" not in event:
            self.stage, self.next_percent = stage, self.every
            self._write(stage)
            return
        total = max(int(event.get("total") or 0), 1)
        percent = 100.0 * int(event["step"]) / total
        if percent >= self.next_percent:
            loss = event.get("loss")
            self._write(f"{stage}: {percent:3.0f}% ({event['step']}/{total})"
                        + (f", loss {loss:.3g}" if loss is not None else ""))
            while self.next_percent <= percent:
                self.next_percent += self.every

    def close(self) -> None:
        pass


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
    from ..errors import unknown_choice

    raise unknown_choice("progress mode", mode, ("auto", "bar", "log", "quiet"))


def optimizer_callback(progress: Optional[ProgressFn], stage: str):
    """The (step, total, loss) callback of the optimization loop, forwarded as events."""
    if progress is None:
        return None

    def report(step: int, total: int, loss: float) -> None:
        progress({"stage": stage, "step": step, "total": total, "loss": loss})

    return report
