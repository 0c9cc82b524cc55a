"""fedleak: measure how much private data leaks from federated learning client updates."""

from .errors import FedleakError
from .types import ClientData, DataSpec, Protocol, Reconstruction, Update

__version__ = "0.1.0"

__all__ = ["FedleakError", "ClientData", "DataSpec", "Protocol", "Reconstruction", "Update", "__version__"]
