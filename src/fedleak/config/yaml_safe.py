"""Reading a YAML file at the boundary: bounded size, UTF-8, duplicate keys refused, one-line errors.

The loader itself is :class:`fedleak.config.loading._UniqueKeyLoader` (PyYAML's safe loader that
refuses a key given twice in one mapping) through :func:`fedleak.config.loading.parse_yaml`; this
module adds the file handling every ``--config`` needs (missing, unreadable, too large).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FedleakError

#: the largest YAML file read (an audit or experiment config is a few kilobytes)
MAX_YAML_BYTES = 10_000_000


def read_yaml_file(path, what: str = "config"):
    """The YAML document in ``path`` as Python data; every problem one line naming the file."""
    from .loading import parse_yaml

    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not str(path).strip() \
            or "\x00" in str(path):
        raise FedleakError(f"{what} must be a path to a YAML file, got {path!r}")
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"{what} {path} does not exist or is not a file")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise FedleakError(f"{what} {path} is {size} bytes; at most {MAX_YAML_BYTES}")
        text = path.read_bytes()
    except OSError as exc:
        raise FedleakError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return parse_yaml(text, f"{what} {path}")
    except RecursionError:
        raise FedleakError(f"{what} {path} is nested too deeply") from None
