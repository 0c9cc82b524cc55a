"""MNIST (and Fashion-MNIST) from IDX files, plain or gzipped.

IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): a 4-byte magic number — two zero
bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64) and
the number of dimensions — then one big-endian uint32 per dimension, then the data, big-endian,
row-major. Images are ``idx3`` (N, 28, 28) uint8 with 0 = black background; labels ``idx1`` (N,).

``root`` is the folder holding ``train-images-idx3-ubyte[.gz]``, ``train-labels-idx1-ubyte[.gz]``,
``t10k-images-idx3-ubyte[.gz]`` and ``t10k-labels-idx1-ubyte[.gz]`` (also found under
``root/MNIST/raw/`` or ``root/raw/``, torchvision's layout; ``.idx3-`` spellings accepted).
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import FedleakError
from ..types import ClientData, DataSpec
from .common import PARTITION_OPTIONS, check_labels, load_pool, read_bytes, require_root

_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

_INFO = {
    "mnist": {
        "mean": 0.1307, "std": 0.3081, "torchvision": "MNIST",
        "classes": tuple(str(d) for d in range(10)),
    },
    "fashion-mnist": {
        "mean": 0.2860, "std": 0.3530, "torchvision": "FashionMNIST",
        "classes": ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
                    "Sneaker", "Bag", "Ankle boot"),
    },
}

_PREFIX = {"train": "train", "test": "t10k"}
OPTIONS = PARTITION_OPTIONS


def mnist_spec(name: str = "mnist") -> DataSpec:
    info = _INFO[name]
    return DataSpec(name, (1, 28, 28), 10, (info["mean"],), (info["std"],), class_names=info["classes"])


def parse_idx(raw: bytes, source: str = "<idx>") -> np.ndarray:
    """Decode IDX bytes into a native-endian array; errors name ``source``."""
    if len(raw) < 4:
        raise FedleakError(f"{source} is not an IDX file: only {len(raw)} bytes")
    zero, type_code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or type_code not in _IDX_TYPES or ndim == 0:
        raise FedleakError(f"{source} is not an IDX file: bad magic number 0x{raw[:4].hex()}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise FedleakError(f"{source}: IDX header truncated")
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = np.dtype(_IDX_TYPES[type_code])
    expected = math.prod(dims) * dtype.itemsize  # Python ints: a header whose size wraps int64 is caught
    if len(raw) - header != expected:
        raise FedleakError(
            f"{source}: IDX header says {'×'.join(map(str, dims))} values ({expected} bytes) "
            f"but the file holds {len(raw) - header} data bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="))


def _find(folder: Path, split: str, kind: str) -> Optional[Path]:
    ndim = "3" if kind == "images" else "1"
    for sep in ("-", "."):
        for suffix in ("", ".gz"):
            path = folder / f"{_PREFIX[split]}-{kind}{sep}idx{ndim}-ubyte{suffix}"
            if path.is_file():
                return path
    return None


def _expected(split: str) -> str:
    p = _PREFIX[split]
    return (f"a folder holding {p}-images-idx3-ubyte[.gz] and {p}-labels-idx1-ubyte[.gz] "
            "(or MNIST/raw/ inside it)")


def locate(name: str, root, split: str) -> tuple[Path, Path]:
    """The (images, labels) IDX files of ``split`` under ``root``."""
    root = require_root(root, name, _expected(split))
    tv = _INFO[name]["torchvision"]
    for folder in (root, root / "raw", root / tv / "raw", root / name):
        images, labels = _find(folder, split, "images"), _find(folder, split, "labels")
        if images or labels:
            if not (images and labels):
                missing = "labels" if images else "images"
                raise FedleakError(f"{name}: found {images or labels} but no {split} {missing} file in {folder}; "
                                   f"expected {_expected(split)}")
            return images, labels
    raise FedleakError(f"{name}: no IDX files for split {split!r} under {root}; expected {_expected(split)}")


def read_pool(name: str, root, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 1, 28, 28) and int64 labels of ``split``."""
    images_path, labels_path = locate(name, root, split)
    images = parse_idx(read_bytes(images_path), str(images_path))
    labels = parse_idx(read_bytes(labels_path), str(labels_path))
    if images.ndim != 3 or images.dtype != np.uint8:
        raise FedleakError(f"{images_path}: expected uint8 images (N, H, W), got {images.dtype} {images.shape}")
    if images.shape[1:] != (28, 28):
        raise FedleakError(f"{images_path}: expected 28×28 images, got {images.shape[1:]}")
    if labels.ndim != 1 or labels.dtype.kind not in "iu":
        raise FedleakError(f"{labels_path}: expected a 1-D integer label file, got {labels.dtype} {labels.shape}")
    if len(labels) != len(images):
        raise FedleakError(f"{images_path} holds {len(images)} images but {labels_path} {len(labels)} labels")
    return images[:, None], check_labels(labels, 10, str(labels_path))


def load(name: str, root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
         **options) -> tuple[DataSpec, list[ClientData]]:
    """MNIST clients (options: ``partition`` iid/dirichlet/sequential, ``alpha``)."""
    return load_pool(name, root, num_clients, samples_per_client, seed, split, options, read_pool, mnist_spec(name))
