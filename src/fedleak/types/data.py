"""What the server knows about the data (:class:`DataSpec`) and one client's private samples (:class:`ClientData`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Optional

import torch

from ..errors import FedleakError
from .limits import MAX_CLASSES, MAX_INPUT_NUMEL, MAX_SIDE, _is_int, _numbers

MODALITIES = ("image", "text", "tabular")


@dataclass(frozen=True)
class DataSpec:
    """Shape, classes and normalization of a dataset.

    Inputs fed to models are normalized per channel, ``x = (u - mean) / std``, where ``u`` is the
    image in ``[0, 1]`` (``pixel_range``). Metrics and priors that need pixels call
    :meth:`denormalize`.
    """

    name: str
    shape: tuple[int, ...]  # (C, H, W)
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    pixel_range: tuple[float, float] = (0.0, 1.0)
    class_names: Optional[tuple[str, ...]] = None
    #: ``"image"`` or ``"text"``. Text specs have shape (1, 1, L) (L tokens), mean (0.0,), std (1.0,);
    #: inputs are token ids; ``num_classes`` is the number of labels of a classifier or the
    #: vocabulary size of a causal LM.
    modality: str = "image"
    #: The tokenizer's vocabulary size (text only; ``None`` for images).
    vocab_size: Optional[int] = None
    #: The padding token id of a text spec (positions holding it are not scored), else ``None``.
    pad_id: Optional[int] = None
    #: A tabular spec's schema as JSON text (:class:`fedleak.data.tabular.TabularSchema`: columns, categories,
    #: the z-scoring of every encoded entry); shape (1, 1, width), inputs (N, width). ``None`` otherwise.
    tabular: Optional[str] = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise FedleakError(f"DataSpec.name must be a string, got {self.name!r}")
        shape = self.shape
        if isinstance(shape, (str, bytes)) or not isinstance(shape, (list, tuple)) or len(shape) != 3 \
                or not all(_is_int(v) and 1 <= v <= MAX_SIDE for v in shape):
            raise FedleakError(f"DataSpec.shape must be (C, H, W) with integers from 1 to {MAX_SIDE}, got {shape!r}")
        if math.prod(shape) > MAX_INPUT_NUMEL:
            raise FedleakError(f"DataSpec.shape {tuple(shape)} is too large (more than {MAX_INPUT_NUMEL} values)")
        if not _is_int(self.num_classes) or not 1 <= self.num_classes <= MAX_CLASSES:
            raise FedleakError(f"DataSpec.num_classes must be an integer from 1 to {MAX_CLASSES}, "
                               f"got {self.num_classes!r}")
        mean, std = _numbers(self.mean, "DataSpec.mean"), _numbers(self.std, "DataSpec.std")
        pixel_range = _numbers(self.pixel_range, "DataSpec.pixel_range")
        channels = shape[0]
        if len(mean) != channels or len(std) != channels:
            raise FedleakError(
                f"DataSpec mean/std need one value per channel ({channels}), "
                f"got mean={self.mean}, std={self.std}"
            )
        if any(s <= 0 for s in std):
            raise FedleakError(f"DataSpec std must be positive, got {self.std}")
        if len(pixel_range) != 2 or not pixel_range[0] < pixel_range[1]:
            raise FedleakError(f"DataSpec.pixel_range must be (low, high) with low < high, got {self.pixel_range!r}")
        names = self.class_names
        if names is not None and (isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple))
                                  or not all(isinstance(n, str) for n in names)):
            raise FedleakError(f"DataSpec.class_names must be a list of strings or null, got {names!r}")
        if self.modality not in MODALITIES:
            raise FedleakError(f"DataSpec.modality must be one of {', '.join(MODALITIES)}, got {self.modality!r}")
        if self.vocab_size is not None and (not _is_int(self.vocab_size) or not 1 <= self.vocab_size <= MAX_CLASSES):
            raise FedleakError(f"DataSpec.vocab_size must be an integer from 1 to {MAX_CLASSES} or null, "
                               f"got {self.vocab_size!r}")
        if self.pad_id is not None and (not _is_int(self.pad_id) or self.pad_id < 0):
            raise FedleakError(f"DataSpec.pad_id must be a non-negative integer or null, got {self.pad_id!r}")
        if self.modality == "text" and (shape[0] != 1 or shape[1] != 1):
            raise FedleakError(f"a text DataSpec has shape (1, 1, seq_len), got {tuple(shape)}")
        if (self.modality == "tabular") != (self.tabular is not None):
            raise FedleakError("a tabular DataSpec needs its schema (tabular=<JSON text>), and only a tabular one")
        if self.tabular is not None:
            if not isinstance(self.tabular, str) or shape[0] != 1 or shape[1] != 1 \
                    or self.schema.width != shape[2]:
                raise FedleakError(f"a tabular DataSpec has shape (1, 1, width) matching its schema, got {tuple(shape)}")
        # frozen: store the checked values as tuples (hashable, equal whether built from lists or tuples)
        object.__setattr__(self, "shape", tuple(int(v) for v in shape))
        object.__setattr__(self, "num_classes", int(self.num_classes))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "pixel_range", pixel_range)
        if names is not None:
            object.__setattr__(self, "class_names", tuple(names))
        if self.vocab_size is not None:
            object.__setattr__(self, "vocab_size", int(self.vocab_size))

    @property
    def is_text(self) -> bool:
        return self.modality == "text"

    @property
    def schema(self):
        """The :class:`~fedleak.data.tabular.TabularSchema` of a tabular spec (``None`` otherwise)."""
        if self.tabular is None:
            return None
        from ..data.tabular.schema import parse_schema
        return parse_schema(self.tabular)

    @property
    def seq_len(self) -> int:
        """Tokens per sequence of a text spec (its last shape entry)."""
        return self.shape[-1]

    def _stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = (1,) * (like.dim() - 3) + (-1, 1, 1)
        mean = torch.as_tensor(self.mean, dtype=like.dtype, device=like.device).view(shape)
        std = torch.as_tensor(self.std, dtype=like.dtype, device=like.device).view(shape)
        return mean, std

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """Pixels in ``pixel_range`` -> model inputs."""
        mean, std = self._stats(images)
        return (images - mean) / std

    def denormalize(self, inputs: torch.Tensor) -> torch.Tensor:
        """Model inputs -> pixels (not clipped)."""
        mean, std = self._stats(inputs)
        return inputs * std + mean

    @property
    def input_numel(self) -> int:
        return math.prod(self.shape)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "DataSpec":
        """The spec stored by :meth:`to_json`; a missing or unknown key is an error naming it."""
        if not isinstance(data, dict):
            raise FedleakError(f"a data spec must be a JSON object, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        extra = sorted(set(data) - set(known))
        if extra:
            raise FedleakError(f"unknown data spec field(s) {extra}; allowed: {known}")
        missing = [k for k in ("name", "shape", "num_classes", "mean", "std") if k not in data]
        if missing:
            raise FedleakError(f"data spec is missing {', '.join(map(repr, missing))}")
        return cls(**data)


@dataclass
class ClientData:
    """One client's private samples: normalized ``inputs`` (N, C, H, W) and ``labels`` (N,).

    Text clients hold token ids (N, L) in ``inputs`` (int64, or floats holding integers as the toy
    corpus of :mod:`fedleak.data.text` does); ``labels`` (N,) int64 are class labels for a
    classifier, the token following each sequence for a causal LM (−100 where the text ends).
    """

    inputs: torch.Tensor
    labels: torch.Tensor
    client_id: str = "client-0"

    def __post_init__(self) -> None:
        if self.inputs.dim() < 2:
            raise FedleakError(f"client inputs need a batch dimension, got shape {tuple(self.inputs.shape)}")
        if self.labels.dim() != 1 or self.labels.shape[0] != self.inputs.shape[0]:
            raise FedleakError(
                f"client {self.client_id}: {self.inputs.shape[0]} inputs but labels of shape "
                f"{tuple(self.labels.shape)}"
            )
        if self.inputs.shape[0] == 0:
            raise FedleakError(f"client {self.client_id} has no samples")

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def to(self, device=None, dtype=None) -> "ClientData":
        # token ids (integer inputs of a text client) keep their integer dtype
        cast = dtype and self.inputs.is_floating_point()
        inputs = self.inputs.to(device=device, dtype=dtype) if cast else self.inputs.to(device)
        return ClientData(inputs, self.labels.to(device), self.client_id)

    def subset(self, n: int) -> "ClientData":
        """The first ``n`` samples (the evaluation protocol of Dimitrov et al., App. A.8)."""
        return ClientData(self.inputs[:n], self.labels[:n], self.client_id)
