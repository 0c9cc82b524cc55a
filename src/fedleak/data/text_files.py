"""Reading the user's text files: ``.txt`` and ``.jsonl`` (one JSON object a line), checked.

:func:`read_documents` returns ``(file, text, label)`` triples: a ``.txt`` file is one document
(label ``None``); every line of a ``.jsonl`` file is one document with its ``text_field`` and, when
``label_field`` is asked for, an integer label. Bad input is one :class:`~fedleak.errors.FedleakError`
line naming the file (and line): binary or non-UTF-8 bytes, invalid JSON, a missing field, a label
that is not a non-negative integer, a folder without text files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..config.json_safe import loads_bounded
from ..errors import FedleakError

SUFFIXES = (".txt", ".jsonl")
MAX_FILE_BYTES = 1 << 30
MAX_LABEL = 1_000_000


def text_files(root) -> list[Path]:
    """``root`` itself (a ``.txt``/``.jsonl`` file) or the text files of the folder ``root`` (sorted)."""
    root = Path(root)
    if root.is_file():
        if root.suffix.lower() not in SUFFIXES:
            raise FedleakError(f"--data-root {root}: text data must be a .txt or .jsonl file (or a folder of them)")
        return [root]
    if not root.is_dir():
        raise FedleakError(f"--data-root {root}: no such file or folder")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    if not files:
        raise FedleakError(f"--data-root {root}: no .txt or .jsonl files in the folder")
    return files


def read_text(path: Path) -> str:
    """The file's text; binary (NUL bytes) or non-UTF-8 content is an error naming the file."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise FedleakError(f"{path}: {size} bytes, more than the {MAX_FILE_BYTES} a text file may have")
    data = path.read_bytes()
    if b"\x00" in data:
        raise FedleakError(f"{path}: binary file (NUL bytes), not UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FedleakError(f"{path}: not UTF-8 text (invalid byte at offset {exc.start})") from None


def _label(value, where: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LABEL:
        raise FedleakError(f"{where}: label field {field!r} must be an integer from 0 to {MAX_LABEL}, got {value!r}")
    return int(value)


def read_jsonl(path: Path, text_field: str, label_field: Optional[str]) -> list[tuple[str, Optional[int]]]:
    """``(text, label)`` per non-empty line of a ``.jsonl`` file."""
    records = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        obj = loads_bounded(line.encode("utf-8"), where)  # the one JSON reader: depth, NaN, size bounded
        if not isinstance(obj, dict):
            raise FedleakError(f"{where}: each line must be a JSON object, got {type(obj).__name__}")
        if text_field not in obj:
            raise FedleakError(f"{where}: no text field {text_field!r} (choose it with --text-field); "
                               f"fields: {sorted(obj)[:8]}")
        text = obj[text_field]
        if not isinstance(text, str):
            raise FedleakError(f"{where}: text field {text_field!r} must be a string, got {type(text).__name__}")
        label = None
        if label_field is not None:
            if label_field not in obj:
                raise FedleakError(f"{where}: no label field {label_field!r} (choose it with --label-field); "
                                   f"fields: {sorted(obj)[:8]}")
            label = _label(obj[label_field], where, label_field)
        records.append((text, label))
    if not records:
        raise FedleakError(f"{path}: no records")
    return records


def read_documents(root, text_field: str = "text", label_field: Optional[str] = None
                   ) -> list[tuple[Path, str, Optional[int]]]:
    """``(file, text, label)`` for every document under ``root`` (see the module docstring)."""
    for what, value in (("--text-field", text_field), ("--label-field", label_field)):
        if value is not None and (not isinstance(value, str) or not value):
            raise FedleakError(f"{what} must be a non-empty field name, got {value!r}")
    docs = []
    for path in text_files(root):
        if path.suffix.lower() == ".txt":
            docs.append((path, read_text(path), None))
        else:
            docs.extend((path, text, label) for text, label in read_jsonl(path, text_field, label_field))
    return docs
