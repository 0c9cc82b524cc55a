"""The one adapter in front of third-party loaders: check what can be checked, translate what they raise.

safetensors, transformers and tokenizers are called only through here (or after the checks here).
Before a call: a ``.safetensors`` file's header is read and checked by us (:func:`safetensors_header`:
the 8-byte length against the file size and :data:`MAX_HEADER_BYTES`, the header through the bounded JSON
reader, each tensor's dtype, shape and byte range), so an empty file, a 2⁶²-byte header or a tensor
outside the file is one line naming the file; JSON files go through :mod:`.json_safe` (NaN and deep
nesting refused). During a call, :func:`translated` turns whatever the library raises into one
:class:`~fedleak.errors.FedleakError` line naming the file and the library's own first line.
"""

from __future__ import annotations

import contextlib
import math
import struct
from pathlib import Path
from typing import Iterator, Optional

from ..errors import FedleakError

#: the largest safetensors header read (a header lists names, dtypes and offsets; 100 MB is generous)
MAX_HEADER_BYTES = 100_000_000
#: safetensors dtype -> bytes per element
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "C64": 8}
#: the dtypes of trainable weights fedleak loads as they are (never cast from another)
FLOATING = ("F64", "F32", "F16", "BF16")


def first_line(exc: BaseException) -> str:
    """An exception as ``Type: first line`` (at most 200 characters)."""
    text = " ".join(str(exc).split("\n")[0].split())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@contextlib.contextmanager
def translated(where: str) -> Iterator[None]:
    """Run a third-party call; anything it raises (but our own errors and interrupts) becomes one line."""
    try:
        yield
    except FedleakError:
        raise
    except (KeyboardInterrupt, MemoryError):
        raise
    except RecursionError:
        raise FedleakError(f"{where}: nested too deeply to read") from None
    except Exception as exc:  # noqa: BLE001  (a library's error, whatever its type: one line naming the file)
        raise FedleakError(f"{where}: {first_line(exc)}") from None


def safetensors_header(path, what: Optional[str] = None) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` of a ``.safetensors`` file, checked without the library.

    Refused, naming the file: fewer than 8 bytes, a header length beyond the file or
    :data:`MAX_HEADER_BYTES`, a header that is not a bounded JSON object, an unknown dtype, a shape
    that is not a list of non-negative integers, a byte range outside the data or of the wrong size.
    """
    from .json_safe import loads_bounded

    path = Path(path)
    what = what or str(path)
    if not path.is_file():
        raise FedleakError(f"{what}: no such file")
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise FedleakError(f"{what}: not a safetensors file ({size} bytes; a header needs at least 8)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES or length > size - 8:
                raise FedleakError(f"{what}: safetensors header claims {length} bytes; the file has {size - 8} "
                                   f"after the length (at most {MAX_HEADER_BYTES} read)")
            raw = handle.read(length)
    except OSError as exc:
        raise FedleakError(f"{what}: cannot read ({exc.strerror or exc})") from None
    header = loads_bounded(raw, f"{what} (safetensors header)", max_depth=8)
    if not isinstance(header, dict):
        raise FedleakError(f"{what}: safetensors header must be a JSON object")
    data_size = size - 8 - length
    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FedleakError(f"{what}: tensor {name[:80]!r} needs exactly dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_BYTES:
            raise FedleakError(f"{what}: tensor {name[:80]!r} has unknown dtype {str(dtype)[:20]!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d
                                                   for d in shape) or len(shape) > 16:
            raise FedleakError(f"{what}: tensor {name[:80]!r} has an invalid shape {str(shape)[:60]}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) and not isinstance(o, bool)
                                                                        for o in offsets)):
            raise FedleakError(f"{what}: tensor {name[:80]!r} has invalid data_offsets")
        start, end = offsets
        if not 0 <= start <= end <= data_size or end - start != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise FedleakError(f"{what}: tensor {name[:80]!r} ({dtype} {shape}) does not fit its bytes "
                               f"{start}..{end} of {data_size}")
        out[name] = (dtype, tuple(shape))
    return out


def read_safetensors(path, what: Optional[str] = None, *, floating: bool = False) -> dict:
    """The tensors of a ``.safetensors`` file after :func:`safetensors_header`; ``floating``: refuse
    non-floating dtypes (weights are never cast)."""
    header = safetensors_header(path, what)
    what = what or str(path)
    if floating:
        odd = [f"{n} ({d})" for n, (d, _) in header.items() if d not in FLOATING]
        if odd:
            raise FedleakError(f"{what}: weights must be floating point (F16, BF16, F32, F64); got "
                               f"{', '.join(odd[:3])}{' and more' if len(odd) > 3 else ''}")
    from safetensors.torch import load_file

    with translated(what):
        return load_file(str(path))


def read_config_json(path, what: Optional[str] = None) -> dict:
    """A model folder's ``config.json``: strict JSON (NaN refused), bounded depth, an object, and the keys
    fedleak reads before transformers does typed (``model_type`` a name, ``architectures`` a list of names)."""
    from typing import Annotated, Any, Optional as Opt

    from pydantic import ConfigDict, Field, create_model

    from .boundary import validate
    from .json_safe import read_json_file

    config = read_json_file(path, max_depth=32)
    name = Annotated[str, Field(strict=True, min_length=1, max_length=200)]
    model = create_model("FolderConfig", __config__=ConfigDict(strict=True, extra="allow"),
                         model_type=(name, ...), architectures=(Opt[list[name]], None),
                         auto_map=(Any, None), trust_remote_code=(Any, None))
    validate(model, config, where=str(what or path))
    _check_sizes(config, str(what or path))
    return config


#: config.json sizes a model cannot have fewer than one of (transformers divides by them or builds len() from them)
POSITIVE_SIZES = ("n_layer", "n_head", "n_embd", "n_positions", "n_ctx", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "hidden_size", "intermediate_size", "vocab_size", "max_position_embeddings",
                  "head_dim", "d_model", "num_layers", "num_heads", "d_ff", "n_inner")


def _check_sizes(config: dict, where: str) -> None:
    """Counts and sizes of ``config.json`` whole and in range before transformers builds from them: a negative
    ``n_layer`` was ``__len__() should return >= 0`` from inside torch, naming neither the file nor the field."""
    for key, value in config.items():
        if isinstance(value, bool) or not isinstance(key, str):
            continue
        sized = key in POSITIVE_SIZES or key.startswith(("n_", "num_")) or key.endswith(("_size", "_layers", "_heads"))
        if not sized or value is None:
            continue
        if key in POSITIVE_SIZES and not isinstance(value, int):
            raise FedleakError(f"{where}: {key} must be a whole number >= 1, got {str(value)[:40]}")
        if isinstance(value, int) and (value < 0 or (key in POSITIVE_SIZES and value < 1)):
            low = 1 if key in POSITIVE_SIZES else 0
            raise FedleakError(f"{where}: {key} must be a whole number >= {low}, got {value}")
