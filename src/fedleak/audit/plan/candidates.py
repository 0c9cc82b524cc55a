"""The user's candidate documents for the membership measurement (``--candidates FILE``), read and checked when
the audit is planned, before any data is loaded (:mod:`fedleak.audit.execute.membership` uses them)."""

from __future__ import annotations

from pathlib import Path

from ...errors import FedleakError


#: the most candidate documents (each is scored through the model: 200,000 ran torch out of memory) and bytes
MAX_DOCUMENTS, MAX_BYTES = 10_000, 64 * 2 ** 20


def read_candidates(path) -> list[str]:
    """The non-empty lines of a UTF-8 file; an unreadable, empty, oversized or non-UTF-8 file is one line."""
    p = Path(path)
    if not p.is_file():
        raise FedleakError(f"--candidates {path}: no such file")
    if p.stat().st_size > MAX_BYTES:
        raise FedleakError(f"--candidates {path}: {p.stat().st_size} bytes; at most {MAX_BYTES} are read")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FedleakError(f"--candidates {path}: not UTF-8 text (byte {exc.start})") from None
    docs = [line.strip() for line in text.splitlines() if line.strip()]
    if len(docs) < 2:
        raise FedleakError(f"--candidates {path}: {'empty' if not docs else 'one document'}; the membership test "
                           f"needs at least 2 candidate documents (one per non-empty line)")
    if len(docs) > MAX_DOCUMENTS:
        raise FedleakError(f"--candidates {path}: {len(docs)} documents; at most {MAX_DOCUMENTS} (each is scored "
                           "through the model)")
    return docs
