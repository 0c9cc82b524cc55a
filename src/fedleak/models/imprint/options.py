"""The imprint block's option names and their validation (Fowl et al. 2022, §3.3, §4.2-4.3, App. A.2).

Shared by every module of :mod:`fedleak.models.imprint`: the allowed linear functions, CDFs,
structures, connections, thresholds and placements, and the one-line :class:`FedleakError`
checks of user options.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...errors import FedleakError

LINFUNCS = ("mean", "randn", "dct")
CDFS = ("gaussian", "laplace", "empirical")
STRUCTURES = ("cumulative", "sparse", "one-shot", "cah")
CONNECTIONS = ("add", "linear")
THRESHOLDS = ("hardtanh", "two-relu")
ONE_SHOT = ("sparse", "cumulative")
SIDES = ("before", "after")
SECRETS_FORMAT = "fedleak.imprint/1"


def check_choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise FedleakError(f"imprint option {name!r} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def check_positive(name: str, value: Any, integer: bool = False):
    """A positive option under the boundary's rules and bounds (:mod:`fedleak.config.boundary`): an
    integer option takes an ``int`` (``2.0`` and ``2.5`` refused) up to ``MAX_INT``; a number is finite
    and at most ``MAX_FLOAT``."""
    from ...config.boundary import MAX_FLOAT, MAX_INT

    if integer:
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_INT
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
            and 0 < value <= MAX_FLOAT
    if not ok:
        kind = f"a positive integer up to {MAX_INT}" if integer else f"a positive number up to {MAX_FLOAT:g}"
        raise FedleakError(f"imprint option {name!r} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)
