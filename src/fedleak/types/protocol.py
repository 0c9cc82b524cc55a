"""The FL protocol a client runs: FedSGD or FedAvg with E local epochs, mini-batch m, learning rate η."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Optional

from ..errors import FedleakError
from .limits import ALGORITHMS, MAX_EPOCHS, MAX_SAMPLES, _is_int, _is_real

#: the client's local optimizer (:func:`fedleak.fl.local_sgd.local_training`)
OPTIMIZERS = ("sgd", "adamw")


@dataclass(frozen=True)
class Protocol:
    """The local training protocol of a client (Alg. 1 of Dimitrov et al.).

    ``fedsgd``: one gradient of the mean loss over all N samples (``epochs``/``batch_size``
    ignored). ``fedavg``: ``epochs`` E passes of plain SGD with lr ``lr`` over minibatches of
    ``batch_size`` m (``None`` = full batch); a fresh permutation every epoch when ``reshuffle``
    (the paper's ``--rand_batch``), else the data order every epoch; the last batch is smaller
    when m does not divide N. ``train_mode``: BatchNorm layers use the batch statistics during
    local training (``model.train()``, default) or the running statistics the server sent
    (``model.eval()``, as in Inverting Gradients' / AGIC's reference setups). ``optimizer``: ``sgd``
    (Alg. 1's plain steps, default) or ``adamw`` (a fresh AdamW state each round at a constant lr, the
    Hugging Face Trainer's defaults: β = (0.9, 0.999), ε = 1e-8, no weight decay — FlowerTune's client,
    which builds a new Trainer every round with ``lr_scheduler_type`` constant).
    """

    algorithm: str = "fedsgd"
    epochs: int = 1
    batch_size: Optional[int] = None
    lr: float = 0.004
    reshuffle: bool = True
    train_mode: bool = True
    optimizer: str = "sgd"

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
        if self.optimizer not in OPTIMIZERS:
            raise FedleakError(f"unknown optimizer {self.optimizer!r}; allowed: {', '.join(OPTIMIZERS)}")
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
        out = asdict(self)
        if out["optimizer"] == "sgd":  # the default stays out: saved updates and job hashes are unchanged
            del out["optimizer"]
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Protocol":
        if not isinstance(data, dict):
            raise FedleakError(f"a protocol must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        extra = set(data) - known
        if extra:
            raise FedleakError(f"unknown protocol field(s) {sorted(extra)}; allowed: {sorted(known)}")
        return cls(**data)
