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

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

import torch

from .errors import FedleakError

Params = dict[str, torch.Tensor]

ALGORITHMS = ("fedsgd", "fedavg")


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
        if len(self.shape) != 3:
            raise FedleakError(f"DataSpec.shape must be (C, H, W), got {self.shape}")
        channels = self.shape[0]
        if len(self.mean) != channels or len(self.std) != channels:
            raise FedleakError(
                f"DataSpec mean/std need one value per channel ({channels}), "
                f"got mean={self.mean}, std={self.std}"
            )
        if any(s <= 0 for s in self.std):
            raise FedleakError(f"DataSpec std must be positive, got {self.std}")

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
        data = dict(data)
        for key in ("shape", "mean", "std", "pixel_range"):
            data[key] = tuple(data[key])
        if data.get("class_names") is not None:
            data["class_names"] = tuple(data["class_names"])
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
        if self.algorithm not in ALGORITHMS:
            raise FedleakError(f"unknown algorithm {self.algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise FedleakError(f"epochs must be a positive integer, got {self.epochs}")
        if self.batch_size is not None and (int(self.batch_size) != self.batch_size or self.batch_size < 1):
            raise FedleakError(f"batch_size must be a positive integer or None, got {self.batch_size}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise FedleakError(f"lr must be a positive finite number, got {self.lr}")
        if not isinstance(self.train_mode, bool):
            raise FedleakError(f"train_mode must be true or false, got {self.train_mode!r}")

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
        known = {f.name for f in fields(cls)}
        extra = set(data) - known
        if extra:
            raise FedleakError(f"unknown protocol field(s) {sorted(extra)}; allowed: {sorted(known)}")
        return cls(**data)


# ----------------------------------------------------------------------------------------------
# safetensors + JSON storage


def _save_tensors(path: Path, groups: dict[str, Optional[Params]]) -> None:
    from safetensors.torch import save_file

    flat: dict[str, torch.Tensor] = {}
    for group, tensors in groups.items():
        for name, tensor in (tensors or {}).items():
            flat[f"{group}/{name}"] = tensor.detach().cpu().contiguous()
    save_file(flat, str(path))


def _load_tensors(path: Path) -> dict[str, Params]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FedleakError(f"missing file {path}")
    try:
        flat = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise FedleakError(f"corrupt safetensors file {path}: {exc}") from None
    groups: dict[str, Params] = {}
    for key, tensor in flat.items():
        group, _, name = key.partition("/")
        groups.setdefault(group, {})[name] = tensor
    return groups


def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FedleakError(f"missing file {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FedleakError(f"corrupt JSON file {path}: {exc}") from None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=_json_default))
    tmp.replace(path)


def _json_default(obj: Any):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"cannot store {type(obj).__name__} in JSON")


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
        if (self.client_params is None) == (self.gradient is None):
            raise FedleakError("an Update holds exactly one of client_params (FedAvg) or gradient (FedSGD)")
        result = self.client_params if self.client_params is not None else self.gradient
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
        if int(self.num_samples) < 1:
            raise FedleakError(f"num_samples must be positive, got {self.num_samples}")

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
        groups = _load_tensors(directory / "update.safetensors")
        if "server" not in groups:
            raise FedleakError(f"{directory / 'update.safetensors'} holds no server parameters")
        return cls(
            server_params=groups["server"], protocol=Protocol.from_json(meta["protocol"]),
            num_samples=int(meta["num_samples"]), client_params=groups.get("client"),
            gradient=groups.get("gradient"), buffers=groups.get("buffers", {}),
            metadata=meta.get("metadata", {}),
        )


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
