"""The listings' static text (:mod:`fedleak.listing_data`) from the real registries, and its check.

``fedleak attacks`` / ``models`` / ``datasets`` / ``presets`` print :mod:`fedleak.listing_data` so that they
start without torch (issue 46); this module builds that text from the registries themselves
(:func:`fedleak.attacks.available`, :data:`fedleak.models.MODELS`, :data:`fedleak.data.DATASETS`,
:func:`fedleak.config.presets`), and ``tests/test_startup.py`` fails when the two differ. After adding an
attack, model, dataset or preset run ``python -m fedleak.listings`` to rewrite the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

FILE = Path(__file__).with_name("listing_data.py")


def registries() -> dict[str, dict[str, str]]:
    """Every listing as the registries give it (imports torch and every attack module)."""
    from .attacks import available
    from .attacks.text.membership import MEMBERSHIP_ATTACKS
    from .config import presets
    from .data import DATASETS
    from .models import MODELS

    return {"PRESETS": dict(presets()), "ATTACKS": dict(available()), "MODELS": dict(MODELS),
            "DATASETS": dict(DATASETS), "MEMBERSHIP": dict(MEMBERSHIP_ATTACKS)}


def source(listings: dict[str, dict[str, str]]) -> str:
    """The text of :mod:`fedleak.listing_data` for ``listings``."""
    out = ['"""The listings `fedleak presets|attacks|models|datasets` print (generated: `python -m fedleak.listings`;',
           'tests/test_startup.py checks them against the registries)."""', ""]
    for name, entries in listings.items():
        out.append(f"{name} = {{")
        out += [f"    {key!r}: {text!r}," for key, text in entries.items()]
        out += ["}", ""]
    return "\n".join(out)


def stale() -> list[str]:
    """The listings whose static text differs from the registries (empty when in step)."""
    from . import listing_data

    return [name for name, entries in registries().items() if getattr(listing_data, name, None) != entries]


if __name__ == "__main__":
    FILE.write_text(source(registries()))
    print(f"wrote {FILE}")
    sys.exit(0)
