"""The few value types shared by every module (see ``DESIGN.md``).

* :class:`DataSpec` — what the server knows about the data: shape, classes, normalization.
* :class:`ClientData` — one client's private samples (normalized inputs + labels). Ground truth:
  it never enters an attack.
* :class:`Protocol` — the FL protocol the client runs (FedSGD / FedAvg, E, m, η).
* :class:`Update` — what the server observes from one client: θˢ, θᶜ or the gradient, the
  protocol, N. Saved as safetensors + JSON.
* :class:`Reconstruction` — what an attack returns. Saved as safetensors + JSON.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

import torch

from .errors import FedleakError
from .storage import check_tensors as _check_tensors
from .storage import load_tensors as _load_tensors
from .storage import read_json as _read_json
from .storage import save_tensors as _save_tensors
from .storage import write_json as _write_json

Params = dict[str, torch.Tensor]

ALGORITHMS = ("fedsgd", "fedavg")

#: Bounds that stop absurd sizes where values enter (before any memory is spent).
MAX_SIDE = 16384  # channels, height or width of one input
MAX_INPUT_NUMEL = 2 ** 28
MAX_CLASSES = 1_000_000
MAX_EPOCHS = 100_000
MAX_SAMPLES = 1_000_000_000


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(value: object, what: str) -> tuple:
    """A list/tuple of finite numbers as a tuple of floats, else an error naming ``what``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) \
            or not all(_is_real(v) for v in value):
        raise FedleakError(f"{what} must be a list of finite numbers, got {value!r}")
    return tuple(float(v) for v in value)


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
        # frozen: store the checked values as tuples (hashable, equal whether built from lists or tuples)
        object.__setattr__(self, "shape", tuple(int(v) for v in shape))
        object.__setattr__(self, "num_classes", int(self.num_classes))
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "pixel_range", pixel_range)
        if names is not None:
            object.__setattr__(self, "class_names", tuple(names))

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
    """One client's private samples: normalized ``inputs`` (N, C, H, W) and ``labels`` (N,)."""

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
        inputs = self.inputs.to(device=device, dtype=dtype) if dtype else self.inputs.to(device)
        return ClientData(inputs, self.labels.to(device), self.client_id)

    def subset(self, n: int) -> "ClientData":
        """The first ``n`` samples (the evaluation protocol of Dimitrov et al., App. A.8)."""
        return ClientData(self.inputs[:n], self.labels[:n], self.client_id)


@dataclass(frozen=True)
class Protocol:
    """The local training protocol of a client (Alg. 1 of Dimitrov et al.).

    ``fedsgd``: one gradient of the mean loss over all N samples (``epochs``/``batch_size``
    ignored). ``fedavg``: ``epochs`` E passes of plain SGD with lr ``lr`` over minibatches of
    ``batch_size`` m (``None`` = full batch); a fresh permutation every epoch when ``reshuffle``
    (the paper's ``--rand_batch``), else the data order every epoch; the last batch is smaller
    when m does not divide N. ``train_mode``: BatchNorm layers use the batch statistics during
    local training (``model.train()``, default) or the running statistics the server sent
    (``model.eval()``, as in Inverting Gradients' / AGIC's reference setups).
    """

    algorithm: str = "fedsgd"
    epochs: int = 1
    batch_size: Optional[int] = None
    lr: float = 0.004
    reshuffle: bool = True
    train_mode: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.algorithm, str) or self.algorithm not in ALGORITHMS:
            raise FedleakError(f"unknown algorithm {self.algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        if not _is_int(self.epochs) or not 1 <= self.epochs <= MAX_EPOCHS:
            raise FedleakError(f"epochs must be an integer from 1 to {MAX_EPOCHS}, got {self.epochs!r}")
        if self.batch_size is not None and (not _is_int(self.batch_size) or not 1 <= self.batch_size <= MAX_SAMPLES):
            raise FedleakError(f"batch_size must be a positive integer or null, got {self.batch_size!r}")
        if not (_is_real(self.lr) and self.lr > 0):
            raise FedleakError(f"lr must be a positive finite number, got {self.lr!r}")
        if not isinstance(self.reshuffle, bool):
            raise FedleakError(f"reshuffle must be true or false, got {self.reshuffle!r}")
        if not isinstance(self.train_mode, bool):
            raise FedleakError(f"train_mode must be true or false, got {self.train_mode!r}")
        object.__setattr__(self, "epochs", int(self.epochs))
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "lr", float(self.lr))

    def batch_size_for(self, num_samples: int) -> int:
        if self.algorithm == "fedsgd" or self.batch_size is None:
            return num_samples
        return min(self.batch_size, num_samples)

    def batches_per_epoch(self, num_samples: int) -> int:
        return math.ceil(num_samples / self.batch_size_for(num_samples))

    def local_epochs(self) -> int:
        return 1 if self.algorithm == "fedsgd" else self.epochs

    def num_steps(self, num_samples: int) -> int:
        """Total local SGD steps s = E·⌈N/m⌉ (1 for FedSGD)."""
        return self.local_epochs() * self.batches_per_epoch(num_samples)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Protocol":
        if not isinstance(data, dict):
            raise FedleakError(f"a protocol must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        extra = set(data) - known
        if extra:
            raise FedleakError(f"unknown protocol field(s) {sorted(extra)}; allowed: {sorted(known)}")
        return cls(**data)


@dataclass
class Update:
    """What the server receives from one client in one round.

    ``server_params`` θˢ are the weights the server sent (keyed by ``named_parameters()``);
    ``client_params`` θᶜ the weights the client returned (FedAvg) and ``gradient`` the gradient it
    returned (FedSGD); exactly one of the two is set. ``buffers`` are the model buffers the server
    sent (BatchNorm running statistics). ``num_samples`` is N, known to the server as in FedAvg's
    weighting. ``metadata`` holds anything else (client id, defense, rounds) and never ground truth
    used by attacks.
    """

    server_params: Params
    protocol: Protocol
    num_samples: int
    client_params: Optional[Params] = None
    gradient: Optional[Params] = None
    buffers: Params = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, Protocol):
            raise FedleakError(f"Update.protocol must be a fedleak Protocol, got {type(self.protocol).__name__}")
        if not _is_int(self.num_samples) or not 1 <= self.num_samples <= MAX_SAMPLES:
            raise FedleakError(f"num_samples must be an integer from 1 to {MAX_SAMPLES}, got {self.num_samples!r}")
        if not isinstance(self.metadata, dict):
            raise FedleakError(f"Update.metadata must be a mapping, got {type(self.metadata).__name__}")
        if (self.client_params is None) == (self.gradient is None):
            raise FedleakError("an Update holds exactly one of client_params (FedAvg) or gradient (FedSGD)")
        result = self.client_params if self.client_params is not None else self.gradient
        _check_tensors("server parameters", self.server_params)
        _check_tensors("client parameters" if self.client_params is not None else "gradient", result)
        _check_tensors("buffers", self.buffers if self.buffers is not None else {}, floating=False)
        if set(result) != set(self.server_params):
            missing = sorted(set(self.server_params) - set(result))
            extra = sorted(set(result) - set(self.server_params))
            raise FedleakError(f"update parameters do not match server parameters (missing {missing}, extra {extra})")
        for name, tensor in result.items():
            if tensor.shape != self.server_params[name].shape:
                raise FedleakError(
                    f"update tensor {name!r} has shape {tuple(tensor.shape)}, "
                    f"server parameter has {tuple(self.server_params[name].shape)}"
                )

    @property
    def is_fedsgd(self) -> bool:
        return self.gradient is not None

    @property
    def num_steps(self) -> int:
        return self.protocol.num_steps(self.num_samples)

    def pseudo_gradient(self) -> Params:
        """The summed local gradient Ĝ = (θˢ − θᶜ)/η (Dimitrov et al. §3); the gradient for FedSGD."""
        if self.gradient is not None:
            return self.gradient
        lr = self.protocol.lr
        return {k: (self.server_params[k] - self.client_params[k]) / lr for k in self.server_params}

    def delta(self) -> Params:
        """The weight change θᶜ − θˢ (−η·g for FedSGD)."""
        if self.client_params is not None:
            return {k: self.client_params[k] - self.server_params[k] for k in self.server_params}
        return {k: -self.protocol.lr * g for k, g in self.gradient.items()}

    def final_params(self) -> Params:
        """θᶜ, the client's weights after local training (θˢ − η·g for FedSGD)."""
        if self.client_params is not None:
            return self.client_params
        return {k: self.server_params[k] - self.protocol.lr * g for k, g in self.gradient.items()}

    def to(self, device=None, dtype=None) -> "Update":
        def move(p: Optional[Params]) -> Optional[Params]:
            if p is None:
                return None
            return {k: (v.to(device=device, dtype=dtype) if v.is_floating_point() and dtype else v.to(device)) for k, v in p.items()}

        return Update(move(self.server_params), self.protocol, self.num_samples, move(self.client_params),
                      move(self.gradient), move(self.buffers) or {}, dict(self.metadata))

    # -- storage --------------------------------------------------------------------------
    def save(self, directory) -> Path:
        """Write ``update.safetensors`` and ``update.json`` into ``directory``."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        _save_tensors(directory / "update.safetensors", {
            "server": self.server_params, "client": self.client_params,
            "gradient": self.gradient, "buffers": self.buffers,
        })
        _write_json(directory / "update.json", {
            "format": "fedleak.update/1", "protocol": self.protocol.to_json(),
            "num_samples": int(self.num_samples), "metadata": self.metadata,
            "kind": "gradient" if self.is_fedsgd else "weights",
        })
        return directory

    @classmethod
    def load(cls, directory) -> "Update":
        directory = Path(directory)
        if not directory.exists():
            raise FedleakError(f"missing update directory {directory}")
        meta = _read_json(directory / "update.json")
        if meta.get("format") != "fedleak.update/1":
            raise FedleakError(f"{directory / 'update.json'} is not a fedleak update (format {meta.get('format')!r})")
        where = directory / "update.json"
        for key in ("protocol", "num_samples"):
            if key not in meta:
                raise FedleakError(f"{where} is missing {key!r}")
        try:
            protocol = Protocol.from_json(meta["protocol"])
        except FedleakError as exc:
            raise FedleakError(f"{where}: protocol: {exc}") from None
        if not _is_int(meta["num_samples"]):
            raise FedleakError(f"{where}: num_samples must be an integer, got {meta['num_samples']!r}")
        metadata = meta.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise FedleakError(f"{where}: metadata must be a JSON object, got {type(metadata).__name__}")
        if "spec" in metadata:  # checked here so `fedleak attack` fails before building a model
            try:
                DataSpec.from_json(metadata["spec"])
            except (FedleakError, TypeError) as exc:
                raise FedleakError(f"{where}: metadata.spec: {exc}") from None
        groups = _load_tensors(directory / "update.safetensors")
        if "server" not in groups:
            raise FedleakError(f"{directory / 'update.safetensors'} holds no server parameters")
        extra = sorted(set(groups) - {"server", "client", "gradient", "buffers"})
        if extra:
            raise FedleakError(f"{directory / 'update.safetensors'} holds unknown tensor group(s) {extra}")
        try:
            return cls(
                server_params=groups["server"], protocol=protocol, num_samples=meta["num_samples"],
                client_params=groups.get("client"), gradient=groups.get("gradient"),
                buffers=groups.get("buffers", {}), metadata=metadata,
            )
        except FedleakError as exc:
            raise FedleakError(f"{directory}: {exc}") from None


@dataclass
class Reconstruction:
    """What an attack recovers.

    ``inputs`` are normalized like model inputs (N', C, H, W); ``labels`` the labels the attack
    used or inferred (``None`` if it has none); ``candidates`` optional per-epoch reconstructions
    (E, N', C, H, W) before they were combined; ``extras`` JSON-able diagnostics (loss history,
    which bins held one input, timings, …).
    """

    inputs: torch.Tensor
    labels: Optional[torch.Tensor] = None
    candidates: Optional[torch.Tensor] = None
    extras: dict = field(default_factory=dict)

    def save(self, directory) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        tensors = {"inputs": self.inputs}
        if self.labels is not None:
            tensors["labels"] = self.labels
        if self.candidates is not None:
            tensors["candidates"] = self.candidates
        _save_tensors(directory / "reconstruction.safetensors", {"rec": tensors})
        _write_json(directory / "reconstruction.json", {"format": "fedleak.reconstruction/1", "extras": self.extras})
        return directory

    @classmethod
    def load(cls, directory) -> "Reconstruction":
        directory = Path(directory)
        meta = _read_json(directory / "reconstruction.json")
        if meta.get("format") != "fedleak.reconstruction/1":
            raise FedleakError(f"{directory} is not a fedleak reconstruction")
        tensors = _load_tensors(directory / "reconstruction.safetensors").get("rec", {})
        if "inputs" not in tensors:
            raise FedleakError(f"{directory / 'reconstruction.safetensors'} holds no inputs")
        return cls(tensors["inputs"], tensors.get("labels"), tensors.get("candidates"), meta.get("extras", {}))
