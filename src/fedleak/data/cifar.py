"""CIFAR-10 / CIFAR-100 from the official python pickles or from an ``.npz`` subset.

Formats:

* The official "python version" (Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html):
  ``cifar-10-batches-py/{data_batch_1..5,test_batch}`` and ``cifar-100-python/{train,test}``. Each
  file is a pickled dict with ``b"data"`` — a uint8 array (N, 3072), each row a 32×32 image stored
  channel-major (1024 R, 1024 G, 1024 B values, each row-major) — and ``b"labels"`` (CIFAR-10) or
  ``b"fine_labels"`` (CIFAR-100). They are read with the restricted unpickler of
  :mod:`fedleak.data.safe_pickle`, never with the unrestricted pickle loader.
* An ``.npz`` (read with ``allow_pickle=False``) with ``<split>_x`` uint8 pixels (N, 32, 32, 3)
  (NHWC, or NCHW, or flat rows as above) and labels ``<split>_y`` (CIFAR-100: ``<split>_fine_y``);
  when ``<split>_idx`` is present the label array covers the whole official split and the images
  are its rows ``<split>_idx`` (the layout of ``shared/data/cifar*/cifar*_exact_subset.npz``).

``root`` may be the folder holding the batches folder, the batches folder itself, an ``.npz``
file, or a folder holding ``<name>*.npz`` (directly or in a ``<name>/`` subfolder).
"""

from __future__ import annotations

import re
import zipfile
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import FedleakError
from ..types import ClientData, DataSpec
from .common import PARTITION_OPTIONS, check_labels, load_pool, require_root
from .safe_pickle import load_pickle

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

CIFAR100_CLASSES = tuple("""
apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus butterfly
camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch crab crocodile cup
dinosaur dolphin elephant flatfish forest fox girl hamster house kangaroo keyboard lamp lawn_mower
leopard lion lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange orchid
otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine possum rabbit raccoon ray
road rocket rose sea seal shark shrew skunk skyscraper snail snake spider squirrel streetcar
sunflower sweet_pepper table tank telephone television tiger tractor train trout tulip turtle
wardrobe whale willow_tree wolf woman worm
""".split())

_INFO = {
    "cifar10": {
        "folder": "cifar-10-batches-py",
        "files": {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]},
        "label_key": "labels",
        "npz_labels": ("{split}_y",),
        "mean": (0.4914, 0.4822, 0.4465),
        "std": (0.2470, 0.2435, 0.2616),
        "classes": CIFAR10_CLASSES,
    },
    "cifar100": {
        "folder": "cifar-100-python",
        "files": {"train": ["train"], "test": ["test"]},
        "label_key": "fine_labels",
        "npz_labels": ("{split}_fine_y", "{split}_y"),
        "mean": (0.5071, 0.4867, 0.4408),
        "std": (0.2675, 0.2565, 0.2761),
        "classes": CIFAR100_CLASSES,
    },
}

OPTIONS = PARTITION_OPTIONS


def cifar_spec(name: str) -> DataSpec:
    info = _INFO[name]
    return DataSpec(name, (3, 32, 32), len(info["classes"]), info["mean"], info["std"],
                    class_names=info["classes"])


def _expected(name: str) -> str:
    info = _INFO[name]
    files = ", ".join(info["files"]["train"] + info["files"]["test"])
    return (f"a folder holding {info['folder']}/ (files {files}), that folder itself, "
            f"a {name}*.npz file, or a folder holding one")


def _npz_in(folder: Path, name: str) -> Optional[Path]:
    pattern = re.compile(rf"^{name}([_\-.].*)?\.npz$", re.IGNORECASE)
    for where in (folder, folder / name):
        if where.is_dir():
            found = sorted(p for p in where.iterdir() if p.is_file() and pattern.match(p.name))
            if found:
                return found[0]
    return None


def locate(name: str, root, split: str) -> tuple[str, object]:
    """``("pickle", [files])`` or ``("npz", path)`` for ``root`` (see the module docstring)."""
    info = _INFO[name]
    root = require_root(root, name, _expected(name))
    if root.is_file():
        return ("npz", root) if root.suffix == ".npz" else ("pickle", [root])
    for folder in (root / info["folder"], root):
        files = [folder / f for f in info["files"][split]]
        if any(f.exists() for f in files):
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise FedleakError(f"{name}: missing file(s) {', '.join(missing)}; expected {_expected(name)}")
            return "pickle", files
    npz = _npz_in(root, name)
    if npz is not None:
        return "npz", npz
    raise FedleakError(f"{name}: found no data under {root}; expected {_expected(name)}")


def _rows_to_nchw(pixels: np.ndarray, where: str) -> np.ndarray:
    if pixels.dtype != np.uint8:
        raise FedleakError(f"{where}: pixels must be uint8, got {pixels.dtype}")
    if pixels.ndim == 2 and pixels.shape[1] == 3072:
        return pixels.reshape(-1, 3, 32, 32)
    if pixels.ndim == 4 and pixels.shape[1:] == (32, 32, 3):
        return np.ascontiguousarray(pixels.transpose(0, 3, 1, 2))
    if pixels.ndim == 4 and pixels.shape[1:] == (3, 32, 32):
        return pixels
    raise FedleakError(f"{where}: expected rows of 3072 values or 32×32×3 images, got shape {pixels.shape}")


def _get(batch: dict, key: str):
    for k in (key.encode(), key):
        if k in batch:
            return batch[k]
    return None


def read_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """One official CIFAR pickle -> uint8 (N, 3, 32, 32) and int64 labels."""
    batch = load_pickle(path)
    if not isinstance(batch, dict):
        raise FedleakError(f"{path} is not a CIFAR batch: it holds a {type(batch).__name__}, not a dict")
    data, labels = _get(batch, "data"), _get(batch, label_key)
    if not isinstance(data, np.ndarray) or labels is None:
        raise FedleakError(f"{path} is not a CIFAR batch: it needs keys b'data' (array) and b'{label_key}'")
    pixels = _rows_to_nchw(data, str(path))
    raw = np.asarray(labels) if not isinstance(labels, np.ndarray) else labels
    if raw.dtype.kind not in "iu" or raw.dtype == np.bool_:  # strings, fractions: no silent cast
        raise FedleakError(f"{path}: labels must be integers, got {raw.dtype} values")
    try:
        labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise FedleakError(f"{path}: malformed labels ({exc})") from None
    if len(labels) != len(pixels):
        raise FedleakError(f"{path}: {len(pixels)} images but {len(labels)} labels")
    return pixels, labels


def read_npz(path: Path, name: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The ``split`` images and labels of a CIFAR ``.npz`` (see the module docstring)."""
    try:
        with open(path, "rb") as handle, np.load(handle, allow_pickle=False) as archive:
            keys = set(archive.files)
            x_key = f"{split}_x"
            if x_key not in keys:
                raise FedleakError(f"{path} holds no {split} images (no key {x_key!r}; keys: {sorted(keys)})")
            label_keys = [k.format(split=split) for k in _INFO[name]["npz_labels"]]
            y_key = next((k for k in label_keys if k in keys), None)
            if y_key is None:
                raise FedleakError(f"{path} holds no {split} labels (none of {label_keys}; keys: {sorted(keys)})")
            pixels = _rows_to_nchw(archive[x_key], f"{path}[{x_key}]")
            labels = archive[y_key]
            if labels.dtype.kind not in "iu":  # strings, fractions: no silent cast
                raise FedleakError(f"{path}: labels {y_key!r} must be integers, got {labels.dtype}")
            labels = labels.astype(np.int64).reshape(-1)
            idx_key = f"{split}_idx"
            if idx_key in keys:
                index = archive[idx_key].astype(np.int64).reshape(-1)
                if len(index) != len(pixels) or (index.size and (index.min() < 0 or index.max() >= len(labels))):
                    raise FedleakError(f"{path}: {idx_key} does not index {y_key} for every image")
                labels = labels[index]
    except FedleakError:
        raise
    except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, KeyError) as exc:
        raise FedleakError(f"corrupt npz file {path}: {exc}") from None
    if len(labels) != len(pixels):
        raise FedleakError(f"{path}: {len(pixels)} images but {len(labels)} labels")
    return pixels, labels


def read_pool(name: str, root, split: str) -> tuple[np.ndarray, np.ndarray]:
    """All images (uint8 NCHW) and labels of ``split`` found under ``root``, in file order."""
    kind, where = locate(name, root, split)
    if kind == "npz":
        pixels, labels = read_npz(where, name, split)
        source = where
    else:
        parts = [read_batch(path, _INFO[name]["label_key"]) for path in where]
        pixels = np.concatenate([p for p, _ in parts])
        labels = np.concatenate([l for _, l in parts])
        source = where[0].parent
    if len(pixels) == 0:  # named here: downstream it is only "an empty dataset"
        raise FedleakError(f"{source}: holds no {split} images")
    labels = check_labels(labels, len(_INFO[name]["classes"]), str(source))
    return pixels, labels


def load(name: str, root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
         **options) -> tuple[DataSpec, list[ClientData]]:
    """CIFAR clients (options: ``partition`` iid/dirichlet/sequential, ``alpha``)."""
    return load_pool(name, root, num_clients, samples_per_client, seed, split, options, read_pool, cifar_spec(name))
