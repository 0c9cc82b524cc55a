"""Progress of an experiment run (:class:`_Progress`) and the interrupt message, both true to the disk.

On a terminal a tqdm bar over the jobs; off a terminal log lines (also to the ``fedleak`` logger):
the plan before work, a measured time estimate, one line per finished job and a heartbeat at least
every ``FEDLEAK_PROGRESS_INTERVAL`` seconds (default 30) with the job counter, the running attack's
iteration and loss and an ETA (:mod:`fedleak.runs.heartbeat`).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Optional

logger = logging.getLogger("fedleak")


class _Progress:
    """Progress of a run: a tqdm bar on a terminal; else log lines (and the ``fedleak`` logger).

    Off a terminal: the plan before work, one line per finished job, a time estimate once the first
    job's first iterations are measured, and a heartbeat line at least every
    :func:`fedleak.runs.heartbeat.interval` seconds (job counter, the attack's iteration and loss,
    ETA). ``callback`` (the API's ``progress=``) receives every event as a dict.
    """

    def __init__(self, total: int, reused: int, pending: list, show: bool, name: str, log, local: bool = True,
                 callback=None) -> None:
        from .heartbeat import Heartbeat

        self.total, self.done, self.reused, self.pending = total, reused, reused, pending
        self.log, self.local, self.callback, self.bar, self.beat = log, local, callback, None, None
        self.start = self.job_start = time.perf_counter()
        self.step: Optional[tuple] = None
        self.unit, self.step_time = "iteration", 0.0
        self.first: Optional[tuple] = None  # (time, step) of the running loop's first reported step
        self.calibrated = False
        self._say_lock = threading.Lock()  # the heartbeat thread and the run's thread write whole lines
        if show:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=reused, desc=name, unit="job", dynamic_ncols=True)
        else:
            self.beat = Heartbeat(self.heartbeat_line, self.say)

    def say(self, text: str) -> None:
        with self._say_lock:
            self.log(text)
            logger.info(text)
        if self.beat is not None:
            self.beat.wrote()

    def emit(self, event: dict) -> None:
        if self.callback is not None:
            self.callback(event)

    @property
    def run_done(self) -> int:
        return self.done - self.reused

    def current(self) -> Optional[object]:
        return self.pending[self.run_done] if self.local and self.run_done < len(self.pending) else None

    def eta(self) -> Optional[float]:
        """Seconds left, recomputed from measurements on every call (so it is corrected, not only raised).

        The running job: its iterations left times its own measured seconds per iteration (set-up
        excluded: from its second report on); before that, the mean finished job's time minus what it
        has run. The jobs after it: the mean finished job's time, or before any finished, the running
        job's measured set-up plus its iterations times its rate.
        """
        now, left = time.perf_counter(), len(self.pending) - self.run_done
        if left <= 0:
            return 0.0
        per_job = (self.job_start - self.start) / self.run_done if self.run_done else None
        if not self.local:  # Ray: jobs run side by side, no iteration reports reach the driver
            return None if per_job is None else max(0.0, per_job * left)
        rate = self.rate()
        if rate is not None:
            step, total, _ = self.step
            current = max(max(total - step, 0) * rate - (now - self.step_time), 0.0)  # counts down between reports
            # before a job finished: this job's measured set-up (up to its first report) plus its iterations
            per_other = per_job if per_job is not None else (self.first[0] - self.job_start) + total * rate
        elif per_job is not None:
            current, per_other = max(per_job - (now - self.job_start), 0.0), per_job
        else:
            return None
        return current + (left - 1) * per_other

    def rate(self) -> Optional[float]:
        """Seconds per step of the running loop, from its first to its latest report (set-up excluded)."""
        if self.step is None or self.first is None or self.step[0] <= self.first[1]:
            return None
        return (self.step_time - self.first[0]) / (self.step[0] - self.first[1])

    def heartbeat_line(self) -> str:
        from .heartbeat import duration

        job = self.current()
        where = f"job {self.done + 1}/{self.total} {job}" if job is not None else \
            f"{self.done}/{self.total} jobs finished, {len(self.pending) - self.run_done} running or queued"
        it = ": preparing (data, model, client update, attack set-up)" if job is not None else ""
        if self.step is not None and job is not None:
            step, total, loss = self.step
            it = f": {self.unit} {step}/{total}" + (f", loss {loss:.4g}" if loss is not None else "")
        eta = self.eta()
        line = (f"[{time.perf_counter() - self.start:6.0f} s] {where}{it}"
                + (f"; ETA ~{duration(eta)} (estimate)" if eta is not None else ""))
        self.emit({"event": "heartbeat", "line": line, "done": self.done, "total": self.total, "eta_s": eta})
        return line

    def planned(self, jobs: list, variants) -> None:
        """The plan, before any work: jobs, what is reused, the attacks' iteration budgets."""
        budgets = ", ".join(f"{v.name}: {v.attack}" + (f" {v.options['iterations']} it." if "iterations" in v.options
                                                        else "") for v in variants)
        self.emit({"event": "plan", "jobs": len(self.pending), "total": self.total, "reused": self.reused})
        if self.bar is None:
            settings = len({j.setting for j in jobs})
            clients = len({j.client_index for j in jobs})
            self.say(f"plan: {len(self.pending)} job(s) to run, {self.reused} of {self.total} already finished "
                     f"({settings} setting(s) x {len({j.variant for j in jobs})} variant(s) x {clients} client(s)); "
                     f"variants {budgets}; a time estimate follows once the first iterations are measured")

    def inner(self, step: int, total: int, loss: Optional[float]) -> None:
        """Steps of the running job's attack loop (local executor only): iterations, or an exact search's units."""
        from ..attacks.progress import current_unit

        self.unit = current_unit()
        if self.step is not None and (step < self.step[0] or total != self.step[1]):
            self.first = None  # a new loop inside the job (another restart, the next phase): measure afresh
        self.step, self.step_time = (step, total, loss), time.perf_counter()
        if self.first is None:
            self.first = (self.step_time, step)
        job = self.current()
        self.emit({"event": "step", "job": str(job) if job else None, "step": step, "total": total, "loss": loss})
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.unit} {step}/{total}" + (f" loss {loss:.3g}" if loss is not None else ""),
                                     refresh=False)
            self.bar.refresh() if step % 50 == 0 or step == total else None
            return
        elapsed, rate = time.perf_counter() - self.job_start, self.rate()
        measured = step - self.first[1]
        if not self.calibrated and self.run_done == 0 and rate is not None and (
                step >= total or measured >= 3 or time.perf_counter() - self.first[0] >= 5.0):
            from .heartbeat import duration

            self.calibrated = True
            self.say(f"estimate: ~{duration(self.eta() + elapsed)} for the {len(self.pending)} job(s) "
                     f"({rate:.3g} s per {self.unit} measured over {measured} steps of job 1; an estimate, "
                     "corrected on every line: jobs of other variants or settings may differ)")
        if self.beat is not None and self.beat.due():
            self.say(self.heartbeat_line())

    def finished(self, job, record: dict) -> None:
        self.done += 1
        self.job_start, self.step, self.first = time.perf_counter(), None, None
        self.emit({"event": "job", "job": str(job), "done": self.done, "total": self.total,
                   "seconds": record.get("seconds"), "psnr": record.get("psnr")})
        if self.bar is not None:
            self.bar.update(1)
            return
        from .heartbeat import duration

        psnr = record.get("psnr")
        score = f"PSNR {psnr:.2f} dB, " if isinstance(psnr, (int, float)) else ""
        eta = self.eta() if self.done < self.total else None
        self.say(f"[{self.done}/{self.total}] {job}: {score}{record.get('seconds', 0):.1f} s "
                 f"(elapsed {time.perf_counter() - self.start:.0f} s"
                 + (f", ETA ~{duration(eta)}" if eta is not None else "") + ")")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.beat is not None:
            self.beat.close()


def interrupted_message(out: Path, total: int) -> str:
    """What Ctrl-C leaves on disk, counted from the disk: finished job files under ``OUT/jobs``."""
    jobs = out / "jobs"
    finished = sorted(jobs.rglob("*.json")) if jobs.is_dir() else []
    if finished:
        return (f"interrupted: {len(finished)} of {total} job file(s) are saved under {jobs} "
                "— run the same command again to resume")
    return f"interrupted before any job finished (no job file under {out}) — run the same command again to start"
