"""Names a package imports on first use (PEP 562), so that ``import fedleak`` and ``fedleak --help`` load no torch.

``__getattr__ = lazy.attributes(__name__, {"Update": "types", ...}, submodules=("attacks", ...))`` in a package's
``__init__``: ``package.Update`` imports ``package.types`` when first touched and keeps the value as the
package's attribute; ``package.attacks`` imports the submodule. Anything else is an ``AttributeError`` as usual.
"""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Callable, Iterable


def attributes(package: str, names: dict[str, str], submodules: Iterable[str] = ()) -> Callable[[str], object]:
    """The module ``__getattr__`` of ``package``: ``names`` maps a name to the submodule defining it."""
    submodules = frozenset(submodules)

    def __getattr__(name: str):
        if name in submodules:
            return import_module(f".{name}", package)  # the import binds it as the package's attribute
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f".{module}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
