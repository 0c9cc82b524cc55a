"""Reading the CIFAR python pickles without running arbitrary code.

A pickle can name any importable callable (``os.system``, ...) and have it called while loading, so
the unrestricted pickle loader must never see an untrusted file. :class:`RestrictedUnpickler` resolves only the
globals numpy needs to rebuild an ``ndarray`` (the recipe of ``ndarray.__reduce__``:
``multiarray._reconstruct`` + ``ndarray`` + ``dtype``; ``numeric._frombuffer`` for protocol-5
pickles; ``multiarray.scalar`` for numpy scalars), under both the numpy 1.x (``numpy.core``)
and numpy 2.x (``numpy._core``) module names, plus ``_codecs.encode`` limited to latin-1, which
Python 3 uses for ``bytes`` in protocol 0-2 pickles. Everything else raises
:class:`FedleakError`. Dicts, lists, strings, bytes and numbers need no globals.
"""

from __future__ import annotations

import codecs
import io
import pickle
from pathlib import Path

import numpy as np

from ..errors import FedleakError
from .common import read_bytes


def _latin1_encode(text, encoding="utf-8", errors="strict"):
    if encoding not in ("latin1", "latin-1", "iso-8859-1"):
        raise FedleakError(f"refusing pickle: _codecs.encode with encoding {encoding!r}")
    return codecs.encode(text, encoding, errors)


def _numpy_globals() -> dict:
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric
    allowed = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        # Python 3 writes ``bytes`` into protocol 0-2 pickles as _codecs.encode(str, "latin1"),
        # so arrays re-pickled by Python 3 at those protocols need it; it only converts text.
        ("_codecs", "encode"): _latin1_encode,
    }
    for module in ("numpy.core", "numpy._core"):
        allowed[(f"{module}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{module}.multiarray", "scalar")] = multiarray.scalar
        allowed[(f"{module}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


_ALLOWED = _numpy_globals()


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays and plain containers, and nothing else."""

    def __init__(self, file, source: str = "<pickle>"):
        super().__init__(file, encoding="bytes")
        self.source = source

    def find_class(self, module: str, name: str):
        found = _ALLOWED.get((module, name))
        if found is None:
            raise FedleakError(
                f"refusing to load {self.source}: the pickle references {module}.{name}, which is not "
                "one of the numpy array types a CIFAR file needs"
            )
        return found

    def persistent_load(self, pid):
        raise FedleakError(f"refusing to load {self.source}: it uses persistent ids")


def load_pickle(path: Path):
    """Unpickle ``path`` (``.gz`` allowed) with :class:`RestrictedUnpickler`; errors name the file."""
    raw = read_bytes(path)
    try:
        return RestrictedUnpickler(io.BytesIO(raw), str(path)).load()
    except FedleakError as exc:  # every refusal names the file, whichever check refused it
        if str(path) in str(exc):
            raise
        raise FedleakError(f"{path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any decoding failure of a data file names the file
        detail = " ".join(str(exc).split())[:200]
        raise FedleakError(f"corrupt pickle file {path}: {type(exc).__name__}: {detail} (CIFAR data is "
                           "read from the official python batches or an .npz file)") from None
