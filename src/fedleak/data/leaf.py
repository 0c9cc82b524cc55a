"""FEMNIST in LEAF's JSON format; every writer is one client.

LEAF (Caldas et al. 2018, https://github.com/TalwalkarLab/leaf) stores FEMNIST as JSON files
(optionally gzipped) with the keys ``users`` (writer ids), ``num_samples`` and
``user_data[user] = {"x": [[784 floats]], "y": [labels]}``. A row of ``x`` is a 28×28 image in
row-major order with values in ``[0, 1]`` and 1.0 = white background; ``y`` is one of 62 classes
(0-9 digits, 10-35 upper case, 36-61 lower case). LEAF writes ``data/train/*.json`` and
``data/test/*.json``.

Client selection follows Dimitrov et al., "Data Leakage in Federated Averaging" (TMLR 2022),
App. A.8: each client is one writer and contributes its *first* ``N`` samples in file order;
inputs are normalized with the FEMNIST mean/std used there.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from ..errors import FedleakError, check_options, unknown_choice
from ..types import ClientData, DataSpec
from .common import check_split, normalized, read_bytes, require_root

MEAN = 0.9642384386141873
STD = 0.15767843198426892
NUM_CLASSES = 62
CLASS_NAMES = tuple(string.digits + string.ascii_uppercase + string.ascii_lowercase)
CLIENT_ORDERS = ("sorted", "shuffled")
OPTIONS = ("client_order", "min_samples")
EXPECTED = ("a LEAF FEMNIST folder with train/ and test/ subfolders of *.json or *.json.gz files "
            "(keys users, num_samples, user_data), or a folder of such files")


def femnist_spec() -> DataSpec:
    return DataSpec("femnist", (1, 28, 28), NUM_CLASSES, (MEAN,), (STD,), class_names=CLASS_NAMES)


def _is_json(path: Path) -> bool:
    return path.is_file() and (path.name.endswith(".json") or path.name.endswith(".json.gz"))


def find_files(root, split: str) -> list[Path]:
    """The JSON files of ``split`` under ``root`` (see :data:`EXPECTED`), sorted by name."""
    root = require_root(root, "femnist", EXPECTED)
    if _is_json(root):
        return [root]
    for folder in (root / split, root / "data" / split, root):
        if folder.is_dir():
            files = sorted(p for p in folder.iterdir() if _is_json(p))
            if files:
                return files
    raise FedleakError(f"femnist: no *.json or *.json.gz files for split {split!r} under {root}; expected {EXPECTED}")


def read_file(path: Path) -> dict:
    """Parse and check one LEAF JSON file; returns ``{user: (x list, y list)}`` in file order."""
    from ..config.json_safe import loads_bounded

    raw = read_bytes(path)
    data = loads_bounded(raw if isinstance(raw, bytes) else bytes(raw), str(path), max_bytes=4_000_000_000,
                         max_depth=8)
    if not isinstance(data, dict) or not isinstance(data.get("user_data"), dict):
        raise FedleakError(f"{path} is not a LEAF file: it has no 'user_data' mapping")
    users = data.get("users", list(data["user_data"]))
    out = {}
    for user in users:
        record = data["user_data"].get(user)
        if not isinstance(record, dict) or "x" not in record or "y" not in record:
            raise FedleakError(f"{path}: user {user!r} has no 'x'/'y' data")
        x, y = record["x"], record["y"]
        if len(x) != len(y):
            raise FedleakError(f"{path}: user {user!r} has {len(x)} images but {len(y)} labels")
        out[str(user)] = (x, y)
    return out


def _to_arrays(x: list, y: list, path: Path, user: str) -> tuple[np.ndarray, np.ndarray]:
    for i, row in enumerate(x):
        if not isinstance(row, list) or len(row) != 28 * 28:
            size = len(row) if isinstance(row, list) else type(row).__name__
            raise FedleakError(f"{path}: user {user!r} sample {i} must be a row of 784 values, got {size}")
    bad = next((v for v in y if isinstance(v, bool) or not isinstance(v, int)), None)
    if bad is not None:  # a string or a fraction is not a class index (no silent cast)
        raise FedleakError(f"{path}: user {user!r} has a label {bad!r}; labels must be integers")
    try:
        images = np.asarray(x, dtype=np.float32)
        labels = np.asarray(y, dtype=np.int64)
    except (ValueError, TypeError) as exc:
        raise FedleakError(f"{path}: user {user!r} has malformed rows ({exc})") from None
    if images.ndim != 2 or images.shape[1] != 28 * 28:
        raise FedleakError(f"{path}: user {user!r} rows must hold 784 values, got shape {images.shape}")
    if labels.ndim != 1 or (labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES)):
        raise FedleakError(f"{path}: user {user!r} has labels outside 0..{NUM_CLASSES - 1}")
    if not np.isfinite(images).all():
        raise FedleakError(f"{path}: user {user!r} has non-finite pixel values")
    return images.reshape(-1, 1, 28, 28), labels


def load(root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
         **options) -> tuple[DataSpec, list[ClientData]]:
    """Writers of a LEAF FEMNIST split as clients (options: ``client_order``, ``min_samples``)."""
    check_options("dataset 'femnist'", options, OPTIONS)
    check_split(split)
    order = options.get("client_order", "shuffled")
    if order not in CLIENT_ORDERS:
        raise unknown_choice("client_order", order, CLIENT_ORDERS)
    min_samples = options.get("min_samples", 1)
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise FedleakError(f"option 'min_samples' must be a positive integer, got {min_samples!r}")

    # Parse file by file, keeping per writer its sample count and only the first
    # ``samples_per_client`` rows (as float32), so memory stays small on big splits.
    counts: dict[str, int] = {}
    kept: dict[str, list] = {}  # user -> [(images, labels), ...] in file order
    for path in find_files(root, split):
        for user, (x, y) in read_file(path).items():
            have = sum(len(lab) for _, lab in kept.get(user, []))
            room = len(y) if samples_per_client is None else max(0, samples_per_client - have)
            counts[user] = counts.get(user, 0) + len(y)
            pieces = kept.setdefault(user, [])
            if room > 0 and len(y) > 0:  # first N samples in file order (Dimitrov et al. A.8)
                pieces.append(_to_arrays(x[:room], y[:room], path, user))

    users = sorted(u for u in counts if counts[u] >= min_samples)
    if order == "shuffled":
        users = [users[i] for i in np.random.default_rng(seed).permutation(len(users))]
    users = users[:num_clients]
    if not users:
        raise FedleakError(f"femnist: no writer with at least {min_samples} samples in split {split!r}")

    spec = femnist_spec()
    clients = []
    for user in users:
        images = np.concatenate([img for img, _ in kept[user]])
        labels = np.concatenate([lab for _, lab in kept[user]])
        clients.append(ClientData(normalized(spec, images), torch.from_numpy(labels), user))
    return spec, clients
