"""User-given names (settings, variants, client ids) as file names: the one mapping.

:func:`file_name` is injective and its result is always a single, ordinary path component: letters,
digits, ``_`` and ``-`` are kept, every other character becomes ``%HH`` for each byte of its UTF-8
encoding (``%`` itself included, so the escape is unambiguous), except a ``.`` that is not the
first character. Hence ``..`` becomes ``%2E.``, ``a/b`` becomes ``a%2Fb`` and ``a b`` becomes
``a%20b``: no name climbs out of the output folder and two different names never share a file.
Names longer than :data:`MAX_LENGTH` after escaping are cut and suffixed with a hash of the full
name (still injective up to a SHA-256 collision). Because case-insensitive file systems (macOS,
Windows) would merge ``A`` and ``a``, :func:`check_distinct` rejects names that differ only in
case, with a message naming both.
"""

from __future__ import annotations

import hashlib
import string
from typing import Iterable

from ..errors import FedleakError

_KEEP = frozenset(string.ascii_letters + string.digits + "_-")
MAX_LENGTH = 120


def file_name(name, what: str = "name") -> str:
    """``name`` as one safe path component (see the module docstring); empty names are refused."""
    text = str(name)
    if not text:
        raise FedleakError(f"{what} must not be empty")
    parts = []
    for position, char in enumerate(text):
        if char in _KEEP or (char == "." and position > 0):
            parts.append(char)
        else:
            parts.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")))
    safe = "".join(parts)
    if len(safe) > MAX_LENGTH:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        safe = f"{safe[:MAX_LENGTH - 17]}~{digest}"
    return safe


def check_distinct(names: Iterable, what: str) -> None:
    """Refuse duplicate names and names whose files would coincide on a case-insensitive disk."""
    seen: dict[str, str] = {}
    for name in names:
        key = file_name(name, what).casefold()
        if key in seen:
            other = seen[key]
            problem = "is given twice" if other == str(name) else f"and {other!r} map to the same file name"
            raise FedleakError(f"{what} {str(name)!r} {problem}; rename one")
        seen[key] = str(name)
