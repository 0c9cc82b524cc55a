"""Data that ships inside installed packages, so fedleak runs with no download.

* ``digits`` — scikit-learn's ``load_digits()`` (1,797 8×8 handwritten digits, UCI "Optical
  Recognition of Handwritten Digits", values 0..16) rendered like FEMNIST: scaled to ``[0, 1]``,
  upsampled bilinearly to 20×20 and centred in a 28×28 frame (the 20×20 box in 28×28 of NIST/MNIST
  preprocessing), then inverted so the background is 1.0 (white) and ink dark, as in LEAF's
  FEMNIST. It keeps FEMNIST's 62 classes (labels 0-9 are FEMNIST's digit classes) and its
  normalization, so the FEMNIST models of Dimitrov et al. apply unchanged.
* ``photos`` — colour sample photographs bundled with scikit-image (``skimage.data``; the ones
  that need no ``pooch`` download) cut into 32×32 RGB patches: each photo's centre square is
  resized to 64, 96, 128, 160 and 192 px and tiled into non-overlapping 32×32 crops (90 patches
  per photo). The label is the source photo; normalization is CIFAR-10's.

Both are split into a fixed train/test part (every fifth sample is test) and partitioned into
clients like the file datasets (``partition`` option, default IID by a seeded permutation).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import FedleakError, check_options
from ..types import ClientData, DataSpec
from .cifar import _INFO as _CIFAR_INFO
from .common import PARTITION_OPTIONS, check_split, make_clients, partition_args
from .leaf import CLASS_NAMES as FEMNIST_CLASSES
from .leaf import MEAN as FEMNIST_MEAN
from .leaf import STD as FEMNIST_STD

OPTIONS = PARTITION_OPTIONS

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
          "retina", "stereo_motorcycle")
PATCH = 32
SCALES = (64, 96, 128, 160, 192)


def digits_spec() -> DataSpec:
    return DataSpec("digits", (1, 28, 28), len(FEMNIST_CLASSES), (FEMNIST_MEAN,), (FEMNIST_STD,),
                    class_names=FEMNIST_CLASSES)


def photos_spec() -> DataSpec:
    info = _CIFAR_INFO["cifar10"]
    return DataSpec("photos", (3, PATCH, PATCH), len(PHOTOS), info["mean"], info["std"], class_names=PHOTOS)


def _test_mask(n: int) -> np.ndarray:
    return np.arange(n) % 5 == 4


def _pick(pixels: np.ndarray, labels: np.ndarray, split: str) -> tuple[np.ndarray, np.ndarray]:
    keep = _test_mask(len(labels)) if split == "test" else ~_test_mask(len(labels))
    return pixels[keep], labels[keep]


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``load_digits()`` images (1,797 × 8 × 8, float64) and targets (int64), read from the file it
    reads (``sklearn/datasets/data/digits.csv.gz``) without importing scikit-learn: the import costs 1.4–2 CPU-s in
    every fresh process that loads the digits (the CLI, each Flower ClientApp process); equal arrays, checked in
    ``tests/test_data.py``. A scikit-learn without that file: its own ``load_digits``."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec and spec.origin else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.images, digits.target
    data = np.loadtxt(path, delimiter=",")  # 64 pixel columns, then the target (load_digits' own parsing)
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)


@lru_cache(maxsize=1)
def digits_pool() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits as float32 (N, 1, 28, 28) in [0, 1] (white background) and labels."""
    images, target = _load_digits()
    small = torch.from_numpy(images.astype(np.float32) / 16.0)[:, None]
    big = F.interpolate(small, size=(20, 20), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    ink = F.pad(big, (4, 4, 4, 4))
    pixels = (1.0 - ink).numpy()
    pixels.setflags(write=False)
    labels = target.astype(np.int64)
    labels.setflags(write=False)
    return pixels, labels


def _photo(name: str) -> np.ndarray:
    import skimage.data

    try:
        image = getattr(skimage.data, name)()
    except Exception as exc:  # a missing bundled file or an optional dependency
        raise FedleakError(f"photos: scikit-image sample {name!r} is not available offline ({exc})") from None
    if isinstance(image, tuple):  # stereo_motorcycle -> (left, right, disparity)
        image = image[0]
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] < 3:
        raise FedleakError(f"photos: scikit-image sample {name!r} is not a colour image")
    return image[..., :3].astype(np.uint8)


def _patches(image: np.ndarray) -> list[np.ndarray]:
    from PIL import Image

    h, w = image.shape[:2]
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    square = Image.fromarray(image[top:top + side, left:left + side])
    crops = []
    for scale in SCALES:
        resized = np.asarray(square.resize((scale, scale), Image.BILINEAR))
        for y in range(0, scale, PATCH):
            for x in range(0, scale, PATCH):
                crops.append(resized[y:y + PATCH, x:x + PATCH].transpose(2, 0, 1))
    return crops


@lru_cache(maxsize=1)
def photos_pool() -> tuple[np.ndarray, np.ndarray]:
    """All patches as uint8 (N, 3, 32, 32) and their photo index, in a fixed order."""
    pixels, labels = [], []
    for index, name in enumerate(PHOTOS):
        crops = _patches(_photo(name))
        pixels.extend(crops)
        labels.extend([index] * len(crops))
    pixels_np = np.ascontiguousarray(np.stack(pixels))
    labels_np = np.asarray(labels, dtype=np.int64)
    pixels_np.setflags(write=False)
    labels_np.setflags(write=False)
    return pixels_np, labels_np


def load(name: str, root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
         **options) -> tuple[DataSpec, list[ClientData]]:
    """Clients of an embedded dataset (options: ``partition``, ``alpha``); ``root`` is ignored."""
    check_options(f"dataset {name!r}", options, OPTIONS)
    check_split(split)
    partition_args(options)
    if name == "digits":
        spec, (pixels, labels) = digits_spec(), digits_pool()
    else:
        spec, (pixels, labels) = photos_spec(), photos_pool()
    pixels, labels = _pick(pixels, labels, split)
    return spec, make_clients(spec, pixels, labels, num_clients, samples_per_client, seed, options)
