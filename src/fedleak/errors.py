"""The one error type users see.

Every check at a boundary (unknown names, shape mismatches, non-finite values, missing or
corrupt files, invalid configs) raises :class:`FedleakError` with a message that names the
problem and, where there is a fixed set of choices, the allowed values. The CLI turns it into
a one-line message and exit code 2 instead of a traceback.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Iterable


class FedleakError(ValueError):
    """A user-facing error: bad input, bad configuration, or missing data."""


def unknown_choice(kind: str, name: object, allowed: Iterable[str]) -> FedleakError:
    """Build the error for an unknown name, listing the allowed ones and a close match."""
    allowed = sorted(allowed)
    hint = get_close_matches(str(name), allowed, n=1)
    suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
    return FedleakError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}.{suggestion}")


def check_options(kind: str, given: dict, allowed: Iterable[str]) -> None:
    """Raise if ``given`` has keys outside ``allowed`` (used for attack and config options)."""
    allowed = set(allowed)
    extra = sorted(set(given) - allowed)
    if extra:
        raise FedleakError(
            f"unknown option(s) {', '.join(map(repr, extra))} for {kind}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
