"""What the server observes from one client (:class:`Update`), and its safetensors + JSON save/load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..errors import FedleakError
from ..runs.storage import check_tensors as _check_tensors
from ..runs.storage import load_tensors as _load_tensors
from ..runs.storage import read_json as _read_json
from ..runs.storage import save_tensors as _save_tensors
from ..runs.storage import write_json as _write_json
from .data import DataSpec
from .limits import MAX_SAMPLES, Params, _is_int
from .protocol import Protocol


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
        from .metadata import check_metadata

        check_metadata(self.metadata)
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
        import os

        if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)) or not str(directory) \
                or "\x00" in str(directory):
            raise FedleakError(f"Update.load(): directory must be a path to an update folder, got {directory!r}")
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
        from .metadata import check_metadata

        check_metadata(metadata, f"{where}: metadata")
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
