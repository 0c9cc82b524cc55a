"""Ctrl-C that answers within two seconds, while an attack sits inside a long C operation.

Python runs a signal handler only in the main thread and only between bytecodes, so a
``KeyboardInterrupt`` waits for the C operation in progress to return: the backward pass through
Dimitrov et al.'s unrolled client simulation (several seconds per call on a loaded CPU), a batch of
SPEAR's SVDs. :func:`responsive` runs such work in a daemon worker thread (same context variables,
same grad mode) while the main thread waits in short slices, so Ctrl-C (and the CLI's SIGTERM
handler) interrupts the main thread at once. It then asks the worker to stop — every attack loop
checks :func:`fedleak.attacks.progress.check_stop` at each step — waits at most :data:`GRACE`
seconds for it, and re-raises. A worker still inside a C operation after that is abandoned: it
writes nothing (job files, reports and locks belong to the main thread), and
:func:`exit_without_waiting` ends the process without waiting for it.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from typing import Any, Callable

#: seconds the main thread waits, after an interrupt, for the worker to reach its next step
GRACE = 0.5
#: the main thread's waiting slice (how soon a signal is seen)
SLICE = 0.05

_abandoned: list[threading.Thread] = []


def responsive(fn: Callable[..., Any], *args, **kwargs) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread, interruptible from the main thread within ``SLICE`` s.

    Outside the main thread (a worker pool, a notebook's background thread) ``fn`` runs directly:
    only the main thread receives signals.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args, **kwargs)
    import torch

    from ..attacks.progress import clear_stop, request_stop

    clear_stop()
    box: dict[str, Any] = {}
    context, grad = contextvars.copy_context(), torch.is_grad_enabled()

    def work() -> None:
        try:
            with torch.set_grad_enabled(grad):
                box["value"] = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="fedleak-work", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(SLICE)
    except BaseException:  # KeyboardInterrupt, the CLI's Terminated: stop the loops, then unwind here
        request_stop()
        worker.join(GRACE)
        if worker.is_alive():
            _abandoned.append(worker)
        raise
    if "error" in box:
        raise box["error"]
    return box.get("value")


def abandoned() -> bool:
    """True while a worker left behind by an interrupt is still running (inside a C operation)."""
    return any(t.is_alive() for t in _abandoned)


def exit_without_waiting(code: int) -> None:
    """End the process with ``code`` now if an interrupted worker is still running, else do nothing.

    Interpreter shutdown with a thread inside libtorch can abort; the CLI's output is flushed first.
    """
    if not abandoned():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
