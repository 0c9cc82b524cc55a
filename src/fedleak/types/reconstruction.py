"""What an attack returns (:class:`Reconstruction`), and its safetensors + JSON save/load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch

from ..errors import FedleakError
from ..runs.storage import load_tensors as _load_tensors
from ..runs.storage import check_labels
from ..runs.storage import read_json as _read_json
from ..runs.storage import save_tensors as _save_tensors
from ..runs.storage import write_json as _write_json


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
        where = directory / "reconstruction.safetensors"
        if "inputs" not in tensors:
            raise FedleakError(f"{where} holds no inputs")
        inputs = tensors["inputs"]
        if inputs.dtype in (torch.bool,) or inputs.is_complex() or inputs.dim() < 1 or (
                inputs.is_floating_point() and not bool(torch.isfinite(inputs).all())):
            raise FedleakError(f"{where}: inputs must be finite real tensors, got "
                               f"{str(inputs.dtype).replace('torch.', '')} of shape {tuple(inputs.shape)}")
        labels = check_labels(tensors.get("labels"), str(where), inputs.shape[0])
        extras = meta.get("extras", {})
        if not isinstance(extras, dict):
            raise FedleakError(f"{directory / 'reconstruction.json'}: extras must be a JSON object")
        return cls(inputs, labels, tensors.get("candidates"), extras)
