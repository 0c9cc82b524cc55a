"""The one check of an output folder (``--out``), made before a command does any work.

A command that writes results takes ``--out DIR``; :func:`prepare_out_dir` refuses, with one
line naming the path, a ``DIR`` that is an existing file, lies under a file, or cannot be
created or written (permissions, read-only file system). It creates nothing: the command makes
the folder when it first writes, so a command that fails validation leaves no empty folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import FedleakError


def prepare_out_dir(path, option: str = "--out") -> Path:
    """``path`` as a :class:`Path` after checking that it is, or can become, a writable folder."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise FedleakError(f"{option} must be a folder path, got {path!r}")
    if str(path).strip() == "":
        raise FedleakError(f"{option} needs a folder name, got {path!r}")
    if "\x00" in str(path):
        raise FedleakError(f"{option} {str(path)!r} contains a NUL character")
    out = Path(os.fspath(path)).expanduser()
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise FedleakError(f"{option} {out} exists and is not a folder")
        if not os.access(out, os.W_OK | os.X_OK):
            raise FedleakError(f"{option} {out} is not writable")
        return out
    ancestor = out.absolute().parent
    while not ancestor.exists():
        if ancestor.is_symlink():
            raise FedleakError(f"{option} {out} lies under a broken link {ancestor}")
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise FedleakError(f"{option} {out} lies under {ancestor}, which is not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise FedleakError(f"{option} {out} cannot be created: {ancestor} is not writable")
    return out


#: environment variables of libraries that write caches under $HOME or $TMPDIR, and their folder in OUT/.cache
CACHE_VARIABLES = {"MPLCONFIGDIR": "matplotlib", "TORCHINDUCTOR_CACHE_DIR": "torchinductor",
                   "TRITON_CACHE_DIR": "triton", "TORCH_EXTENSIONS_DIR": "torch_extensions"}


def contain_caches(out) -> dict:
    """Point the caches of matplotlib (its font cache) and torch's compiler inside ``OUT/.cache`` (for the
    variables the user has not set), so a command writes nothing outside ``--out``; returns what was set.

    Nothing is created here: each library makes its folder when it first writes, which is after the
    command's input checks (a run that fails on bad input leaves nothing)."""
    cache = Path(os.fspath(out)).expanduser().absolute() / ".cache"
    changed = {}
    for variable, folder in CACHE_VARIABLES.items():
        if not os.environ.get(variable):
            os.environ[variable] = changed[variable] = str(cache / folder)
    return changed
