"""One writer per output folder: a lock file in ``--out`` holding the writer's PID.

:class:`OutLock` is taken before a command's first write into ``OUT`` and released when it ends.
The lock is ``OUT/.fedleak.lock``, created with ``O_CREAT | O_EXCL`` (atomic on every local file
system) and holding ``{"pid", "host", "command", "started"}``. A second live process refuses with
one line naming the other's PID; a lock whose process no longer exists on this host (a crashed or
killed run) is stale and taken over. A lock from another host is refused (its PID cannot be
checked from here) with the file to remove once that run is known to be over.

Leaving: the lock file is removed; when the command created ``OUT`` itself and ``OUT`` is empty
afterwards (it failed on bad input before writing anything), ``OUT`` is removed too, so a failed
run leaves no empty folder behind. Staging folders (``OUT/.staging-*``) of a crashed run are
removed when the next run takes the lock (:func:`clear_stale_staging`).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Optional

from ..errors import FedleakError

LOCK_NAME = ".fedleak.lock"
STAGING_PREFIX = ".staging-"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def read_lock(path: Path) -> Optional[dict]:
    """The lock's JSON, or ``None`` if it is unreadable (a lock being written, or garbage)."""
    try:
        data = json.loads(path.read_text()[:10_000])
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class OutLock:
    """``with OutLock(out, "fedleak run"):`` — exclusive use of ``out`` by this process (module docstring)."""

    def __init__(self, out, command: str = "fedleak") -> None:
        self.out = Path(out)
        self.path = self.out / LOCK_NAME
        self.command = command
        self.created_out = False
        self.held = False

    def acquire(self) -> "OutLock":
        if not self.out.exists():
            try:
                self.out.mkdir(parents=True)
                self.created_out = True
            except FileExistsError:
                pass
        payload = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": self.command,
                              "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        for _ in range(5):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._check_other()
                continue  # the stale lock was removed: try again
            with os.fdopen(fd, "w") as handle:
                handle.write(payload)
            self.held = True
            clear_stale_staging(self.out)
            return self
        raise FedleakError(f"{self.out} is locked ({self.path}) and the lock could not be taken over; remove it "
                           "if no fedleak run is writing there")

    def _check_other(self) -> None:
        """Refuse for a live owner; remove a stale lock (its process is gone)."""
        info = read_lock(self.path)
        if info is None:  # being written this instant, or garbage: look again once
            time.sleep(0.05)
            info = read_lock(self.path)
            if info is None:
                age = time.time() - self.path.stat().st_mtime if self.path.exists() else 0
                if age < 5:
                    raise FedleakError(f"{self.out} is being used by another fedleak process (lock {self.path})")
                self.path.unlink(missing_ok=True)
                return
        pid, host = info.get("pid"), info.get("host")
        if not isinstance(pid, int) or isinstance(pid, bool):
            self.path.unlink(missing_ok=True)
            return
        if host not in (None, socket.gethostname()):
            raise FedleakError(f"{self.out} is in use by PID {pid} on host {host} ({info.get('command', 'fedleak')}); "
                               f"if that run is over, remove {self.path}")
        if _alive(pid):
            raise FedleakError(f"{self.out} is in use by another fedleak process, PID {pid} "
                               f"({info.get('command', 'fedleak')}, started {info.get('started', '?')}); wait for it "
                               "or use another --out")
        print(f"fedleak: taking over the stale lock of PID {pid} in {self.out} (that run is gone)", file=sys.stderr)
        self.path.unlink(missing_ok=True)

    def release(self) -> None:
        if self.held:
            info = read_lock(self.path)
            if info is not None and info.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False
        if self.created_out:
            try:
                self.out.rmdir()  # only if empty: a run that wrote nothing leaves no folder
            except OSError:
                pass

    def __enter__(self) -> "OutLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def clear_stale_staging(out: Path) -> None:
    """Remove ``OUT/.staging-*`` folders (a crashed run's; the caller holds the lock, so none is live)."""
    try:
        entries = list(Path(out).iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(STAGING_PREFIX) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


def staging_dir(out: Path) -> Path:
    """A fresh staging folder inside ``out`` (same file system: the final moves are renames, never copies)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out))
