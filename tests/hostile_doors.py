"""The harness of the door catalogue (``tests/test_hostile_doors.py``): run one hostile input, judge the contract.

The contract (README "Errors and exit codes", ``docs/errors.md``, ``docs/hostile-inputs.md``): a bad input
ends with exit 2 and ONE stderr line naming the input (no traceback, never "internal error"); nothing is
written outside ``--out`` and nothing is left inside it; the Python API raises one
:class:`~fedleak.errors.FedleakError` line. Work is never reached: the data loader, the attack and the
model zoo are replaced by tripwires, so an input that passes validation is caught as "accepted" in
milliseconds instead of running an audit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

import fedleak
from fedleak.errors import FedleakError


class ReachedWork(Exception):
    """Raised by a tripwire: the input passed every check (a hostile input must not)."""


def snapshot(root: Path) -> dict:
    """Every file under ``root`` with its size and modification time."""
    out = {}
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            out[str(path.relative_to(root))] = (stat.st_size, stat.st_mtime_ns)
    return out


def written(before: dict, after: dict, inputs=()) -> list[str]:
    """Files created or changed between two snapshots (``inputs``: paths the case itself prepared)."""
    return sorted(k for k, v in after.items() if before.get(k) != v and not any(k.startswith(i) for i in inputs))


def judge_message(text: str, needle: str) -> str:
    """'' if ``text`` is one line naming ``needle``, else why not."""
    text = text.strip()
    if "Traceback" in text or "internal error" in text.lower():
        return f"traceback/internal error: {text[-300:]!r}"
    if len(text.splitlines()) != 1:
        return f"{len(text.splitlines())} lines: {text[-300:]!r}"
    if needle.lower() not in text.lower():
        return f"does not name {needle!r}: {text!r}"
    return ""


def run_cli(argv, workdir: Path, capsys) -> tuple[int, str]:
    """``fedleak ARGV`` in-process with ``workdir`` as the current folder; (exit code, stderr)."""
    from fedleak.cli import main

    old = os.getcwd()
    os.chdir(workdir)
    try:
        try:
            code = main([str(a) for a in argv])
        except ReachedWork:
            return -1, "REACHED-WORK"
        except SystemExit as exc:  # argparse
            code = exc.code
    finally:
        os.chdir(old)
    return code, capsys.readouterr().err


def check_cli(argv, needle: str, workdir: Path, capsys, out: Path | None = None) -> str:
    """'' if ``fedleak ARGV`` keeps the contract, else the broken promise."""
    before = snapshot(workdir)
    code, err = run_cli(argv, workdir, capsys)
    if code == -1 or "REACHED-WORK" in err:
        return "accepted: reached the work"
    if code != 2:
        return f"exit {code}: {err.strip()[-300:]!r}"
    problem = judge_message(err, needle)
    if problem:
        return problem
    changed = written(before, snapshot(workdir))
    if changed:
        return f"wrote {changed[:3]}"
    if out is not None and out.exists() and any(out.rglob("*")):
        return f"left {sorted(p.name for p in out.rglob('*'))[:3]} in --out"
    return ""


def check_api(call, needle: str) -> str:
    """'' if ``call()`` raises one :class:`FedleakError` line naming ``needle``, else the broken promise."""
    try:
        call()
    except ReachedWork:
        return "accepted: reached the work"
    except FedleakError as exc:
        return judge_message(str(exc), needle)
    except Exception as exc:  # noqa: BLE001  (the finding itself)
        return f"raw {type(exc).__name__}: {str(exc)[:200]!r}"
    return "accepted: returned"


@contextlib.contextmanager
def tripwires(monkeypatch):
    """Replace the first step of real work (data loading, attacks, training) by :class:`ReachedWork`."""
    def reached(*args, **kwargs):
        raise ReachedWork("REACHED-WORK")

    import fedleak
    import fedleak.data as data
    import fedleak.fl as fl
    from fedleak.data import registry

    # fedleak's public names resolve lazily on first use and are then kept: bind the real client_update (its own
    # argument checks are the door under test) before the tripwire replaces fedleak.fl's, or a first use inside
    # this context would keep the tripwire as fedleak.client_update for every later test in the process
    fedleak.client_update  # noqa: B018
    def load(name, root=None, num_clients=10, samples_per_client=50, seed=0, split="train", **options):
        """data.load's own argument checks (its door), then the tripwire instead of reading files."""
        registry.canonical(name)
        registry._integer(num_clients, "num_clients", 1, registry.MAX_CLIENTS)
        if samples_per_client is not None:
            registry._integer(samples_per_client, "samples_per_client (or None)", 1, registry.MAX_SAMPLES_PER_CLIENT)
        registry._integer(seed, "seed", 0)
        reached()

    monkeypatch.setattr(data, "load", load)
    for module in ("fedleak.workflows", "fedleak.runs.experiment", "fedleak.privacy.audit"):
        try:
            mod = __import__(module, fromlist=["_"])
        except Exception:  # noqa: BLE001  (a module another engineer is restructuring)
            continue
        for name in ("client_update", "client_rounds", "train_fedavg"):
            if hasattr(mod, name):
                monkeypatch.setattr(mod, name, reached)
    monkeypatch.setattr(fl, "client_update", reached)
    yield


@pytest.fixture(autouse=True)
def _guarded(monkeypatch):
    """Every case of the catalogue runs with the tripwires in place."""
    with tripwires(monkeypatch):
        yield


@pytest.fixture(scope="module")
def update_dir(tmp_path_factory):
    """A real saved update (digits, 2 samples, femnist-cnn) with its truth, made once."""
    folder = tmp_path_factory.mktemp("upd") / "u"
    fedleak.simulate_update(folder, data="digits", samples=2, algorithm="fedsgd", say=lambda *_: None)
    return folder


def copy_folder(src, dst):
    shutil.copytree(src, dst)
    return dst
