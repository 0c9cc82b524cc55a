"""Import every attack module once so that each registers its attacks and variants."""

import importlib
import pkgutil
from pathlib import Path

for _module in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if not _module.name.startswith("_") and _module.name != "catalogue":
        importlib.import_module(f"{__package__}.{_module.name}")
