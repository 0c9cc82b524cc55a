"""Images in class folders: ``root/<class_name>/*.{png,jpg,jpeg,bmp}``.

The layout of torchvision's ``ImageFolder``: classes are the sub-folder names, sorted, and a
class's index is its position in that order; files are read in sorted name order. When
``root/train/`` or ``root/test/`` exist they are used for the splits, otherwise ``root`` itself is
the train split. Every image is converted to RGB (``channels=3``) or grey (``channels=1``),
resized so its shorter side is ``image_size`` and centre-cropped to ``image_size``×``image_size``.
Normalization is the per-channel mean/std of the split's images unless ``mean``/``std`` are given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image

from ..errors import FedleakError, check_options
from ..types import ClientData, DataSpec
from .common import PARTITION_OPTIONS, check_split, make_clients, partition_args, require_root

EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp")
OPTIONS = ("image_size", "channels", "mean", "std") + PARTITION_OPTIONS
EXPECTED = "root/<class_name>/*.png|jpg|jpeg|bmp (optionally under root/train/ and root/test/)"


def _positive_int(options: dict, key: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FedleakError(f"option {key!r} must be a positive integer, got {value!r}")
    return value


def _stats(options: dict, key: str, channels: int) -> Optional[tuple[float, ...]]:
    value = options.get(key)
    if value is None:
        return None
    values = (value,) * channels if isinstance(value, (int, float)) else tuple(value)
    if len(values) != channels or not all(isinstance(v, (int, float)) for v in values):
        raise FedleakError(f"option {key!r} needs one number per channel ({channels}), got {value!r}")
    return tuple(float(v) for v in values)


def _split_root(root, split: str) -> Path:
    root = require_root(root, "imagefolder", EXPECTED)
    if (root / split).is_dir():
        return root / split
    if split == "train":
        return root
    raise FedleakError(f"imagefolder: no {split}/ folder under {root}; expected {EXPECTED}")


def scan(root, split: str = "train") -> tuple[tuple[str, ...], list[Path], np.ndarray]:
    """Class names, image paths and labels (class-major, sorted) of a split."""
    folder = _split_root(root, split)
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise FedleakError(f"imagefolder: {folder} has no class sub-folders; expected {EXPECTED}")
    paths, labels = [], []
    for index, name in enumerate(classes):
        files = sorted(p for p in (folder / name).iterdir()
                       if p.is_file() and p.suffix.lower() in EXTENSIONS and not p.name.startswith("."))
        if not files:
            raise FedleakError(f"imagefolder: class folder {folder / name} holds no {'/'.join(EXTENSIONS)} images")
        paths.extend(files)
        labels.extend([index] * len(files))
    return tuple(classes), paths, np.asarray(labels, dtype=np.int64)


#: PIL modes of high-bit-depth single-channel images, and their full scale (read as float, never clipped to 8 bits)
_DEEP_MODES = {"I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I;16N": 65535.0, "I": 65535.0}


def _fit(image, size: int):
    """Shorter side resized to ``size``, then centre-cropped to ``size`` × ``size``."""
    w, h = image.size
    scale = size / min(w, h)
    new_w, new_h = max(size, round(w * scale)), max(size, round(h * scale))
    image = image.resize((new_w, new_h), Image.BILINEAR)
    left, top = (new_w - size) // 2, (new_h - size) // 2
    return image.crop((left, top, left + size, top + size))


def read_image(path: Path, size: int, channels: int) -> np.ndarray:
    """One image as uint8 (C, size, size), or float32 in [0, 1] for a 16-bit image (its depth is kept:
    converting it to 8-bit grey would clip every value above 255); shorter side resized to ``size``,
    centre-cropped."""
    try:
        with Image.open(path) as image:
            if image.mode in _DEEP_MODES:
                values = np.asarray(image, dtype=np.float64)
                if values.size and (values.min() < 0 or values.max() > _DEEP_MODES[image.mode]):
                    raise FedleakError(f"image {path}: {image.mode} pixel values outside 0..65535 "
                                       "(only 8- and 16-bit images are read)")
                deep = Image.fromarray((values / _DEEP_MODES[image.mode]).astype(np.float32), mode="F")
                array = np.clip(np.asarray(_fit(deep, size), dtype=np.float32), 0.0, 1.0)
                array = array[None]
                return array if channels == 1 else np.repeat(array, 3, axis=0)
            if image.mode == "F":
                raise FedleakError(f"image {path}: floating-point pixels (mode F) are not read; use 8- or 16-bit")
            image = image.convert("RGB" if channels == 3 else "L")
            array = np.asarray(_fit(image, size), dtype=np.uint8)
    except FedleakError:
        raise
    except Exception as exc:  # noqa: BLE001 - PIL's decoders raise SyntaxError, struct.error, ... on broken files
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise FedleakError(f"cannot read image {path}: {detail}") from None
    return array[None] if channels == 1 else array.transpose(2, 0, 1)


def _spec(classes: Sequence[str], size: int, channels: int, mean, std) -> DataSpec:
    return DataSpec("imagefolder", (channels, size, size), len(classes), tuple(mean), tuple(std),
                    class_names=tuple(classes))


def _options(options: dict) -> tuple[int, int, Optional[tuple], Optional[tuple]]:
    size = _positive_int(options, "image_size", 32)
    channels = options.get("channels", 3)
    if channels not in (1, 3) or isinstance(channels, bool):
        raise FedleakError(f"option 'channels' must be 3 (RGB) or 1 (grey), got {channels!r}")
    return size, channels, _stats(options, "mean", channels), _stats(options, "std", channels)


def _pixel_stats(pixels: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    values = pixels.astype(np.float64) / (255.0 if pixels.dtype == np.uint8 else 1.0)
    mean = values.mean(axis=(0, 2, 3))
    std = values.std(axis=(0, 2, 3))
    std = np.where(std > 1e-6, std, 1.0)  # a constant channel: keep the scale
    return tuple(float(m) for m in mean), tuple(float(s) for s in std)


def read_pool(root, split: str, size: int, channels: int):
    classes, paths, labels = scan(root, split)
    images = [read_image(p, size, channels) for p in paths]
    if any(image.dtype != np.uint8 for image in images):  # 16-bit images among them: all as float in [0, 1]
        images = [image.astype(np.float32) / 255.0 if image.dtype == np.uint8 else image for image in images]
    pixels = np.stack(images)
    return classes, pixels, labels


def spec(root, split: str = "train", **options) -> DataSpec:
    """The spec of an image folder (reads the images only when mean/std must be computed)."""
    check_options("dataset 'imagefolder'", options, OPTIONS)
    size, channels, mean, std = _options(options)
    if mean is not None and std is not None:
        classes, _, _ = scan(root, split)
    else:
        classes, pixels, _ = read_pool(root, split, size, channels)
        data_mean, data_std = _pixel_stats(pixels)
        mean, std = mean or data_mean, std or data_std
    return _spec(classes, size, channels, mean, std)


def load(root, num_clients: int, samples_per_client: Optional[int], seed: int, split: str,
         **options) -> tuple[DataSpec, list[ClientData]]:
    """Image-folder clients (options: ``image_size``, ``channels``, ``mean``, ``std``,
    ``partition``, ``alpha``)."""
    check_options("dataset 'imagefolder'", options, OPTIONS)
    check_split(split)
    partition_args(options)
    size, channels, mean, std = _options(options)
    classes, pixels, labels = read_pool(root, split, size, channels)
    if mean is None or std is None:
        data_mean, data_std = _pixel_stats(pixels)
        mean, std = mean or data_mean, std or data_std
    data_spec = _spec(classes, size, channels, mean, std)
    return data_spec, make_clients(data_spec, pixels, labels, num_clients, samples_per_client, seed, options)
