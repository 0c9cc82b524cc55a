"""The few value types shared by every module (see ``DESIGN.md``).

* :class:`DataSpec` — what the server knows about the data: shape, classes, normalization.
* :class:`ClientData` — one client's private samples (normalized inputs + labels). Ground truth:
  it never enters an attack.
* :class:`Protocol` — the FL protocol the client runs (FedSGD / FedAvg, E, m, η).
* :class:`Update` — what the server observes from one client: θˢ, θᶜ or the gradient, the
  protocol, N. Saved as safetensors + JSON.
* :class:`Reconstruction` — what an attack returns. Saved as safetensors + JSON.

Layout: :mod:`.limits` (aliases, size limits), :mod:`.data` (DataSpec, ClientData),
:mod:`.protocol`, :mod:`.update` (Update and its save/load), :mod:`.reconstruction`.
"""

from .data import ClientData, DataSpec
from .limits import ALGORITHMS, MAX_CLASSES, MAX_EPOCHS, MAX_INPUT_NUMEL, MAX_SAMPLES, MAX_SIDE, Params
from .protocol import Protocol
from .reconstruction import Reconstruction
from .update import Update

__all__ = [
    "ALGORITHMS", "ClientData", "DataSpec", "MAX_CLASSES", "MAX_EPOCHS", "MAX_INPUT_NUMEL", "MAX_SAMPLES",
    "MAX_SIDE", "Params", "Protocol", "Reconstruction", "Update",
]
