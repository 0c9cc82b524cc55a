"""Helpers shared by the loaders: reading (possibly gzipped) files with clear errors, the
train/test and partition arguments, and turning a pool of pixels into :class:`ClientData`.

A *pool* is what a file-format loader returns: ``pixels`` (N, C, H, W) as uint8 (0..255) or
float in ``[0, 1]``, and int64 ``labels`` (N,). :func:`make_clients` partitions it and normalizes
every client's inputs with the dataset's :class:`DataSpec` (``x = (u - mean) / std``).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import FedleakError, check_options, unknown_choice
from ..types import ClientData, DataSpec
from . import partition as _partition

SPLITS = ("train", "test")

# Options understood by every loader that partitions a pool of samples.
PARTITION_OPTIONS = ("partition", "alpha")


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise unknown_choice("split", split, SPLITS)
    return split


def read_bytes(path: Path) -> bytes:
    """The file's bytes, un-gzipped when its name ends in ``.gz``; errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"missing file {path}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as handle:
                return handle.read()
        return path.read_bytes()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise FedleakError(f"corrupt gzip file {path}: {exc or 'truncated'}") from None
    except OSError as exc:
        raise FedleakError(f"cannot read {path}: {exc}") from None


#: archive formats a data root may not be (they are unpacked first); .gz alone is a gzipped data file
ARCHIVES = (".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".7z", ".rar", ".bz2",
            ".xz", ".zst")


def require_root(root, name: str, expected: str) -> Path:
    """``root`` as an existing :class:`Path`, or an error describing the expected layout."""
    if root is None:
        raise FedleakError(f"dataset {name!r} needs root=<path>; expected {expected}")
    if isinstance(root, bool) or not isinstance(root, (str, os.PathLike)) or "\x00" in str(root):
        raise FedleakError(f"dataset {name!r}: root must be a path, got {root!r}")
    path = Path(root).expanduser()
    if not path.exists():
        raise FedleakError(f"dataset {name!r}: root {path} does not exist; expected {expected}")
    archive = next((a for a in ARCHIVES if path.name.lower().endswith(a)), None)
    if path.is_file() and archive:
        raise FedleakError(f"dataset {name!r}: root {path} is a {archive} archive, which fedleak does not open; "
                           f"unpack it and pass the folder. Accepted: {expected}")
    return path


def to_float(pixels) -> torch.Tensor:
    """uint8 0..255 or float 0..1 pixels -> float32 tensor in [0, 1]."""
    array = np.asarray(pixels)
    if array.dtype == np.uint8:
        return torch.from_numpy(array.astype(np.float32) / 255.0)
    array = np.ascontiguousarray(array, dtype=np.float32)
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def normalized(spec: DataSpec, pixels) -> torch.Tensor:
    """Pixels (N, C, H, W) -> normalized float32 model inputs."""
    return spec.normalize(to_float(pixels)).contiguous()


def partition_args(options: dict) -> tuple[str, float]:
    """``partition`` (default ``"iid"``) and ``alpha`` (default 0.5, used by ``"dirichlet"`` only)."""
    method = options.get("partition", "iid")
    if method not in _partition.PARTITIONS:
        raise unknown_choice("partition", method, _partition.PARTITIONS)
    alpha = options.get("alpha", 0.5)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
        raise FedleakError(f"option 'alpha' must be a positive number, got {alpha!r}")
    return method, float(alpha)


def make_clients(spec: DataSpec, pixels, labels, num_clients: int, samples_per_client: Optional[int],
                 seed: int, options: dict, prefix: str = "client") -> list[ClientData]:
    """Partition a pool (see module docstring) and build normalized clients ``<prefix>-<k>``."""
    method, alpha = partition_args(options)
    labels = np.asarray(labels, dtype=np.int64)
    parts = _partition.split(method, labels, num_clients, samples_per_client, seed=seed, alpha=alpha)
    return clients_from_indices(spec, pixels, labels, parts, prefix)


def load_pool(name: str, root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
              options: dict, read_pool, spec: DataSpec) -> tuple[DataSpec, list[ClientData]]:
    """The ``load`` of a dataset that is one pixel pool per split (CIFAR, MNIST): check the
    options and split, read the pool with ``read_pool(name, root, split)``, partition it."""
    check_options(f"dataset {name!r}", options, PARTITION_OPTIONS)
    check_split(split)
    partition_args(options)
    pixels, labels = read_pool(name, root, split)
    return spec, make_clients(spec, pixels, labels, num_clients, samples_per_client, seed, options)


def clients_from_indices(spec: DataSpec, pixels, labels, parts: Sequence[np.ndarray],
                         prefix: str = "client") -> list[ClientData]:
    labels = np.asarray(labels, dtype=np.int64)
    clients = []
    for k, index in enumerate(parts):
        inputs = normalized(spec, np.asarray(pixels)[index])
        clients.append(ClientData(inputs, torch.from_numpy(labels[index].copy()), f"{prefix}-{k}"))
    if not clients:
        raise FedleakError(f"dataset {spec.name!r} yielded no clients")
    return clients


def check_labels(labels: np.ndarray, num_classes: int, where: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise FedleakError(
            f"{where}: labels must lie in 0..{num_classes - 1}, found {int(labels.min())}..{int(labels.max())}"
        )
    return labels.astype(np.int64)
