"""Where a benchmark writes by default: a NEW file beside the tracked results, never over them.

``fresh("attacks.json")`` is ``benchmarks/results/attacks-<host>-<YYYYmmdd-HHMMSS>.json``; the
tracked files (``attacks.json``, ...) that the docs cite change only when ``--out`` names them.
"""

import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def fresh(name: str) -> str:
    stem, suffix = name.rsplit(".", 1)
    host = "".join(c if c.isalnum() or c in "-_" else "_" for c in platform.node()) or "host"
    return str(RESULTS / f"{stem}-{host}-{time.strftime('%Y%m%d-%H%M%S')}.{suffix}")
