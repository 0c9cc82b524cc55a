"""Import every attack module once so that each registers its attacks and variants."""

import importlib
import pkgutil

from . import __path__ as _package_path

for _module in pkgutil.iter_modules(_package_path):
    if not _module.name.startswith("_"):
        importlib.import_module(f"{__package__}.{_module.name}")
