"""Model zoo: ``build(name, spec, seed=0, **options)`` and the registry of names.

>>> from fedleak.models import build, MODELS
>>> model = build("femnist-cnn", spec)          # float32, CPU, train mode, deterministic in seed

``MODELS`` maps every name to a one-line description; ``register(name, description)`` is the
decorator other modules (``models/imprint/``) use to add models. See :mod:`.zoo` for the
networks and the papers they follow.
"""

from __future__ import annotations

from importlib.util import find_spec

from .registry import MODELS, build, check, model_options, register
from .zoo import (
    BasicBlock,
    ConvNet,
    DimitrovCNN,
    LeNetZhu,
    MLP,
    ResNet,
    lecun_normal_,
)

__all__ = [
    "MODELS", "build", "check", "model_options", "register",
    "BasicBlock", "ConvNet", "DimitrovCNN", "LeNetZhu", "MLP", "ResNet", "lecun_normal_",
]

# The malicious imprint models register themselves on import; load them with the zoo so that
# MODELS is complete. Done last: the imprint package may import ``register`` from this package.
if find_spec(f"{__name__}.imprint") is not None:
    from . import imprint  # noqa: E402,F401
if find_spec(f"{__name__}.text") is not None:
    from . import text  # noqa: E402,F401  (registers "text-transformer", the LM of Fowl et al. App. A.4)
if find_spec(f"{__name__}.tabular") is not None:
    from . import tabular  # noqa: E402,F401  (registers tabular-mlp and ft-transformer)
if find_spec(f"{__name__}.hf") is not None:
    from . import hf  # noqa: E402,F401  (registers minilm, gpt2-tiny, llama-tiny, gpt2-small; transformers loads lazily)
