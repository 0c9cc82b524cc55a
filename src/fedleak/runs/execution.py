"""Where an experiment's jobs run: in this process, or as Ray tasks. The runner does not know which.

An executor has one method, ``map(fn, context, tasks, progress=None)``: it calls
``fn(context, task)`` for every task and yields ``(index, result)`` pairs *as results arrive* (in
any order), so the caller writes each job's file the moment it is computed. ``context`` is what
every task shares (the experiment config, device, dtype): the Ray executor ships it to the cluster
once. ``fn`` must be a module-level function (Ray pickles it by reference).

* :class:`LocalExecutor` — one job after another in this process (each in a worker thread the main
  thread waits on, so Ctrl-C answers at once: :mod:`fedleak.runs.interrupt`); ``progress`` (a
  :func:`fedleak.attacks.optimize.progress_reporter` callback) sees every step of the attack's loop.
* :class:`RayExecutor` — every job a Ray task (``num_cpus``/``num_gpus`` per job); a task whose
  worker process dies (killed, out of memory) is re-run up to ``max_retries`` times by Ray;
  without an address a private local Ray instance is started on 127.0.0.1 (no dashboard) and shut
  down afterwards. Ray is an optional dependency: ``pip install -e ".[ray]"``.
"""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from ..errors import FedleakError

#: test hook: when this environment variable names a file that does not exist yet, the first Ray
#: task to start creates it and SIGKILLs its own worker process (shows that Ray retries the job).
KILL_ONCE_ENV = "FEDLEAK_TEST_KILL_WORKER_ONCE"


class LocalExecutor:
    """Runs the jobs one after another in the calling process."""

    name = "local"

    def map(self, fn: Callable, context: Any, tasks: Sequence, progress=None) -> Iterator[tuple[int, Any]]:
        from ..attacks.optimize import progress_reporter
        from .interrupt import responsive

        for index, task in enumerate(tasks):
            with progress_reporter(progress):
                result = responsive(fn, context, task)  # Ctrl-C answers while the job is inside a C operation
            yield index, result

    def close(self) -> None:
        pass


def import_ray():
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        import ray
    except ImportError:
        raise FedleakError('the Ray executor needs Ray: pip install -e ".[ray]" (or pip install "ray>=2.9")') from None
    return ray


def _in_worker(fn: Callable, context: Any, task: Any, threads: int, kill_marker: Optional[str]):
    """The body of one Ray task: fix the thread count, run the job (the test hook may kill us)."""
    import torch

    torch.set_num_threads(max(1, threads))
    if kill_marker and not os.path.exists(kill_marker):
        Path(kill_marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return fn(context, task)


class RayExecutor:
    """Runs every job as a Ray task and yields results as they finish.

    ``address``: a running cluster (``HOST:PORT``, ``auto``, or ``ray://...``); ``None`` starts a
    local Ray on 127.0.0.1 with ``num_cpus`` CPUs (default: all) that is shut down by :meth:`close`.
    If Ray is already initialized in this process (a test, a notebook) that instance is used and
    left running.
    """

    name = "ray"

    def __init__(self, address: Optional[str] = None, *, cpus_per_job: float = 1, gpus_per_job: float = 0,
                 max_retries: int = 3, num_cpus: Optional[int] = None) -> None:
        if cpus_per_job <= 0:
            raise FedleakError(f"--cpus-per-job must be positive, got {cpus_per_job}")
        if gpus_per_job < 0:
            raise FedleakError(f"--gpus-per-job must be >= 0, got {gpus_per_job}")
        if max_retries < 0:
            raise FedleakError(f"--max-retries must be >= 0, got {max_retries}")
        self.address, self.cpus_per_job, self.gpus_per_job = address, cpus_per_job, gpus_per_job
        self.max_retries, self.num_cpus = int(max_retries), num_cpus
        self.ray = import_ray()
        self._started = False

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        try:
            with warnings.catch_warnings():  # Ray's "in future versions" tip about GPU env vars, on every start
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
                if self.address:
                    ray.init(address=self.address, **kwargs)
                else:
                    ray.init(address="local", num_cpus=self.num_cpus, _node_ip_address="127.0.0.1", **kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = self.address or "a local instance"
            raise FedleakError(f"could not start or reach Ray ({where}): {str(exc).splitlines()[0]}") from None
        self._started = True

    def map(self, fn: Callable, context: Any, tasks: Sequence, progress=None) -> Iterator[tuple[int, Any]]:
        ray = self.ray
        self._connect()
        remote = ray.remote(num_cpus=self.cpus_per_job, num_gpus=self.gpus_per_job, max_retries=self.max_retries,
                            retry_exceptions=False)(_in_worker)
        context_ref = ray.put(context)
        threads = max(1, int(self.cpus_per_job))
        marker = os.environ.get(KILL_ONCE_ENV) or None
        pending = {remote.remote(fn, context_ref, task, threads, marker): index for index, task in enumerate(tasks)}
        try:
            while pending:
                # in short waits: a signal reaches Python only between them (Ctrl-C answers at once)
                done, _ = ray.wait(list(pending), num_returns=1, timeout=0.2)
                for ref in done:
                    index = pending.pop(ref)
                    yield index, self._result(ref, tasks[index])
        finally:
            for ref in pending:  # interrupted or failed: do not leave work running on the cluster
                ray.cancel(ref, force=True)

    def _result(self, ref, task):
        ray = self.ray
        try:
            return ray.get(ref)
        except FedleakError as exc:  # raised inside the job: Ray's error is also an instance of the cause
            raise FedleakError(str(getattr(exc, "cause", exc)).splitlines()[-1]) from None
        except ray.exceptions.WorkerCrashedError:
            raise FedleakError(f"job {task}: its Ray worker died {self.max_retries + 1} time(s) "
                               "(raise --max-retries, or check memory)") from None
        except ray.exceptions.OutOfMemoryError:
            raise FedleakError(f"job {task}: Ray's memory monitor killed its worker (the node's memory is nearly "
                               "full); finished jobs are saved — free memory, or use --cpus-per-job to run fewer "
                               "jobs at once, and run again") from None
        except ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None) or exc
            raise RuntimeError(f"job {task} failed on Ray: {type(cause).__name__}: {cause}") from exc
        except ray.exceptions.RayError as exc:  # the cluster itself failed (node died, object lost, ...)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise FedleakError(f"job {task}: Ray failed: {first[:300]}") from None

    def close(self) -> None:
        if self._started and self.ray.is_initialized():
            self.ray.shutdown()
        self._started = False


def make_executor(name: str = "local", **options):
    """``local`` or ``ray`` (options: address, cpus_per_job, gpus_per_job, max_retries, num_cpus)."""
    if name == "local":
        unused = {k: v for k, v in options.items() if v is not None}
        if unused:
            raise FedleakError(f"options {sorted(unused)} only apply to --executor ray")
        return LocalExecutor()
    if name == "ray":
        return RayExecutor(**{k: v for k, v in options.items() if v is not None})
    raise FedleakError(f"unknown executor {name!r}; choose local or ray")
