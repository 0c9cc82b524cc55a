"""``fedleak dp-audit --train FILE.py``: the user's own Opacus training, loaded from their file (issue #42).

The file defines ``train(model, dataset)`` (their training loop with ``PrivacyEngine.make_private``; returns the
engine), ``model()`` (their ``nn.Module``) and ``dataset()`` (their torch ``Dataset``); the audit is
:func:`fedleak.privacy.opacus_audit.audit_opacus`. Running the file is running the user's own code, as they asked.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ..errors import FedleakError


def load_train_file(path) -> tuple:
    """(train, model, dataset) from the user's file; one line naming what is missing or failing."""
    file = Path(path)
    if not file.is_file() or file.suffix != ".py":
        raise FedleakError(f"--train: {file} is not a .py file")
    spec = importlib.util.spec_from_file_location(f"fedleak_user_train_{abs(hash(str(file.resolve())))}", file)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - the user's file: any error is theirs, in one line
        raise FedleakError(f"--train: {file} failed to import ({type(exc).__name__}: {exc})") from None
    missing = [name for name in ("train", "model", "dataset") if not callable(getattr(module, name, None))]
    if missing:
        raise FedleakError(f"--train: {file} must define {', '.join(missing)} (train(model, dataset) -> PrivacyEngine, "
                           "model() -> nn.Module, dataset() -> Dataset)")
    try:
        model, dataset = module.model(), module.dataset()
    except Exception as exc:  # noqa: BLE001
        raise FedleakError(f"--train: {file}'s model() or dataset() failed ({type(exc).__name__}: {exc})") from None
    return module.train, model, dataset
