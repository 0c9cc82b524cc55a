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
        self.first: Optional[tuple] = None  # (time, step) of the running job's first reported step
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
        """Seconds left: from the mean job time once a job finished, else from the first job's iteration rate."""
        now, left = time.perf_counter(), len(self.pending) - self.run_done
        if self.run_done:
            per_job = (self.job_start - self.start) / self.run_done
            return max(0.0, per_job * left - (now - self.job_start if self.local else 0.0))
        rate = self.rate()
        if rate is not None:
            step, total, _ = self.step
            return (total - step) * rate + (left - 1) * total * rate
        return None

    def rate(self) -> Optional[float]:
        """Seconds per iteration of the running job, measured from its first reported step (set-up excluded)."""
        if self.step is None or self.first is None or self.step[0] <= self.first[1]:
            return None
        return (time.perf_counter() - self.first[0]) / (self.step[0] - self.first[1])

    def heartbeat_line(self) -> str:
        from .heartbeat import duration

        job = self.current()
        where = f"job {self.done + 1}/{self.total} {job}" if job is not None else \
            f"{self.done}/{self.total} jobs finished, {len(self.pending) - self.run_done} running or queued"
        it = ""
        if self.step is not None and job is not None:
            step, total, loss = self.step
            it = f": iteration {step}/{total}, loss {loss:.4g}"
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

    def inner(self, step: int, total: int, loss: float) -> None:
        """Optimization steps of the running job (local executor only)."""
        self.step = (step, total, loss)
        if self.first is None:
            self.first = (time.perf_counter(), step)
        job = self.current()
        self.emit({"event": "step", "job": str(job) if job else None, "step": step, "total": total, "loss": loss})
        if self.bar is not None:
            self.bar.set_postfix_str(f"it {step}/{total} loss {loss:.3g}", refresh=False)
            self.bar.refresh() if step % 50 == 0 or step == total else None
            return
        elapsed, rate = time.perf_counter() - self.job_start, self.rate()
        measured = step - self.first[1]
        if not self.calibrated and self.run_done == 0 and rate is not None and (
                step >= total or (measured >= 10 and time.perf_counter() - self.first[0] >= 1.0)):
            from .heartbeat import duration

            self.calibrated = True
            self.say(f"estimate: ~{duration(self.eta() + elapsed)} for the {len(self.pending)} job(s) "
                     f"({rate:.3g} s per iteration measured over {measured} iterations of job 1; an estimate: "
                     "jobs of other variants or settings may differ)")
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
