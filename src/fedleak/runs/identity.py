"""What an audit result says of its own identity: its format, its configuration's hash, the environment its numbers
depend on (``metrics.json``'s ``format``, ``config_hash`` and ``environment``; ``docs/audit.md``, Reproducibility).

Below both the audit's stages (:mod:`fedleak.audit.run`, the Flower app report) and the modality objects that write
a result of their own (:mod:`fedleak.modality.tabular`), so that neither imports the other for it.
"""

from __future__ import annotations

import hashlib
import json

#: the format every audit's ``metrics.json`` states (images, text, tables, a Flower app)
FORMAT = "fedleak.audit/2"


def config_hash(config: dict) -> str:
    """A short hash of an audit's configuration (canonical JSON), stamped on ``metrics.json``."""
    text = json.dumps(config, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def environment(device) -> dict:
    """What the numbers depend on besides the configuration and seed (``docs/audit.md``, Reproducibility)."""
    import platform

    import torch

    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": str(device),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
            "reproducible_given": "the seed, the same torch build, CPU instruction set, thread count and device; "
                                  "other float rounding changes the optimizations' results"}


__all__ = ["FORMAT", "config_hash", "environment"]
