"""What the ``fedleak`` process does around a command (:func:`fedleak.cli.main`): one-line messages on
stderr, SIGTERM unwound like Ctrl-C (exit 143), a closed stdout pipe kept quiet (exit 141), and what running
the command again does after an interrupt."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path


def one_line(text: str) -> str:
    """A message on one line (multi-line messages from libraries are joined)."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when SIGTERM arrives, so it unwinds exactly like Ctrl-C."""


def on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated()


def install_sigterm():
    try:
        return signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # not the main thread (main() called from a worker thread): leave signals alone
        return None


def silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def report_line(message: str) -> None:
    try:
        print(f"fedleak: {message}", file=sys.stderr)
    except (OSError, ValueError):
        pass


def after_interrupt(args) -> str:
    """What running the command again does: ``run`` resumes only if a job file is on disk."""
    if args.command != "run":
        return "start over"
    jobs = Path(args.out) / "jobs" if getattr(args, "out", None) else None
    return "resume" if jobs is not None and jobs.is_dir() and any(jobs.rglob("*.json")) else "start"
