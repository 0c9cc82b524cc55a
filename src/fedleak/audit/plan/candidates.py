"""The user's candidate documents for the membership measurement (``--candidates FILE``), read and checked when
the audit is planned, before any data is loaded (:mod:`fedleak.audit.execute.membership` uses them)."""

from __future__ import annotations

from pathlib import Path

from ...errors import FedleakError


def read_candidates(path) -> list[str]:
    """The non-empty lines of a UTF-8 file; an unreadable, empty or non-UTF-8 file is one line."""
    p = Path(path)
    if not p.is_file():
        raise FedleakError(f"--candidates {path}: no such file")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FedleakError(f"--candidates {path}: not UTF-8 text (byte {exc.start})") from None
    docs = [line.strip() for line in text.splitlines() if line.strip()]
    if len(docs) < 2:
        raise FedleakError(f"--candidates {path}: {'empty' if not docs else 'one document'}; the membership test "
                           f"needs at least 2 candidate documents (one per non-empty line)")
    return docs
