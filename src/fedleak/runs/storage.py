"""safetensors + JSON files, the only formats :class:`fedleak.types.Update` and
:class:`~fedleak.types.Reconstruction` are stored in (nothing is unpickled).

Reading checks what it reads: a missing, non-UTF-8, malformed or non-object JSON file and a
corrupt safetensors file are :class:`FedleakError` naming the file; :func:`check_tensors` refuses
non-floating-point and non-finite tensors where an update's values enter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import torch

from ..errors import FedleakError

Params = dict[str, torch.Tensor]


def save_tensors(path: Path, groups: dict[str, Optional[Params]]) -> None:
    from safetensors.torch import save_file

    flat: dict[str, torch.Tensor] = {}
    for group, tensors in groups.items():
        for name, tensor in (tensors or {}).items():
            flat[f"{group}/{name}"] = tensor.detach().cpu().contiguous()
    save_file(flat, str(path))


def load_tensors(path: Path) -> dict[str, Params]:
    from ..config.loaders import read_safetensors

    if not path.is_file():
        raise FedleakError(f"missing file {path}")
    flat = read_safetensors(path, f"corrupt safetensors file {path}")
    groups: dict[str, Params] = {}
    for key, tensor in flat.items():
        if "/" not in key:
            raise FedleakError(f"{path}: tensor {key[:80]!r} is not named GROUP/NAME (not a file fedleak wrote)")
        group, _, name = key.partition("/")
        groups.setdefault(group, {})[name] = tensor
    return groups


def read_json(path: Path) -> dict:
    """A JSON object from ``path``: missing, non-UTF-8, malformed, non-object, oversized or too deeply
    nested files are errors naming the file (:mod:`fedleak.config.json_safe`, the one JSON reader)."""
    from ..config.json_safe import read_json_file

    return read_json_file(path)


def check_labels(labels, where: str, count: "int | None" = None):
    """Labels read from a file: a 1-D integer tensor (strings, fractions and floats refused) of ``count`` entries."""
    if labels is None:
        return None
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.is_complex() \
            or labels.dtype == torch.bool:
        dtype = str(getattr(labels, "dtype", type(labels).__name__)).replace("torch.", "")
        raise FedleakError(f"{where}: labels must be an integer tensor, got {dtype}")
    if labels.dim() != 1 or (count is not None and labels.numel() != count):
        raise FedleakError(f"{where}: labels must be one integer per input ({count}), got shape {tuple(labels.shape)}")
    if labels.numel() and int(labels.min()) < 0:
        raise FedleakError(f"{where}: labels must be class indices >= 0, got {int(labels.min())}")
    return labels.long()


def check_tensors(group: str, tensors: object, floating: bool = True) -> None:
    """Tensors of an update: a name → tensor mapping, floating point (when asked) and finite."""
    if not isinstance(tensors, dict):
        raise FedleakError(f"update {group} must map parameter names to tensors, got {type(tensors).__name__}")
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise FedleakError(f"update {group}: {name!r} must be a tensor named by a string, "
                               f"got {type(tensor).__name__}")
        if not tensor.is_floating_point():
            if floating:
                dtype = str(tensor.dtype).replace("torch.", "")
                raise FedleakError(f"update {group} tensor {name!r} has dtype {dtype}; "
                                   "only floating-point tensors are allowed")
            continue
        if not bool(torch.isfinite(tensor).all()):
            raise FedleakError(f"update {group} tensor {name!r} holds non-finite values (NaN or Inf)")


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=json_default))
    tmp.replace(path)


def json_default(obj: Any):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")
