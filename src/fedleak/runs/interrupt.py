"""Ctrl-C that answers within two seconds, while an attack sits inside a long C operation.

Python runs a signal handler only in the main thread and only between bytecodes, so a
``KeyboardInterrupt`` waits for the C operation in progress to return: the backward pass through
Dimitrov et al.'s unrolled client simulation (several seconds per call on a loaded CPU), a batch of
SPEAR's SVDs. :func:`responsive` runs such work in a daemon worker thread (same context variables,
same grad mode) while the main thread waits in short slices, so Ctrl-C (and the CLI's SIGTERM
handler) interrupts the main thread at once. It then asks the worker to stop — every attack loop
checks :func:`fedleak.attacks.progress.check_stop` at each step — waits at most :data:`GRACE`
seconds for it, and re-raises. A worker still inside a C operation after that is abandoned: it
writes nothing (job files, reports and locks belong to the main thread), and the CLI ends the
process with :func:`exit_now` rather than waiting for it.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
import time
from typing import Any, Callable

#: seconds the main thread waits, after an interrupt, for the worker to reach its next step
GRACE = 0.5
#: the main thread's waiting slice (how soon a signal is seen)
SLICE = 0.05

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
    finished = threading.Event()
    context, grad = contextvars.copy_context(), torch.is_grad_enabled()

    def work() -> None:
        try:
            with torch.set_grad_enabled(grad):
                box["value"] = context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="fedleak-work", daemon=True)
    worker.start()
    # poll a flag between sleeps, never Thread.join()/is_alive(): a KeyboardInterrupt landing inside
    # those (they take the thread's state lock) makes the interpreter abort at exit while the worker
    # ran autograd ("terminate called without an active exception", torch 2.13 / Python 3.11)
    try:
        while not finished.is_set():
            time.sleep(SLICE)
    except BaseException:  # KeyboardInterrupt, the CLI's Terminated: stop the loops, then unwind here
        request_stop()
        deadline = time.monotonic() + GRACE
        while not finished.is_set() and time.monotonic() < deadline:
            time.sleep(SLICE)
        raise  # a worker still running is left behind (daemon; it writes nothing)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def exit_now(code: int) -> None:
    """End the process with ``code`` at once, after flushing the output (the CLI after an interrupt).

    Everything that matters was cleaned up while the interrupt unwound (locks, staging folders, job
    files). The interpreter's own shutdown is skipped: with a worker left inside libtorch, or after
    a worker ran autograd and the main thread took the signal, it can abort ("terminate called
    without an active exception", torch 2.13 / Python 3.11) and turn exit 130 into 134.
    """
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
