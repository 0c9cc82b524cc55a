"""fedleak's SVT filters against the ``svt_privacy.py`` of several NVFlare releases, bit for bit.

Only one NVFlare can be installed (the test extra pins 2.8–2.9, whose class ``tests/test_nvflare_filters.py``
runs). The older algorithms fedleak offers (``svt-legacy``: NVFlare 2.0.18 … 2.7.3; ``svt-2.0``: 2.0.0 … 2.0.16)
are checked here (``svt_legacy_privacy``'s ``release`` argument naming the variant) against the files of the
released wheels, loaded beside the installed NVFlare's APIs::

    pip download nvflare==2.0.16 nvflare==2.7.3 nvflare==2.9.0 --no-deps -d WHEELS
    python benchmarks/check_nvflare_versions.py --wheels WHEELS --out benchmarks/results/nvflare_versions.json

For every wheel: the SHA-256 of its ``svt_privacy.py``, and for three settings × two local-step counts whether
NVFlare's ``SVTPrivacy`` (global ``np.random`` seeded with s) and fedleak's function (``RandomState(s)``) give
identical arrays. NVFlare 2.0 used ``np.float`` (removed from numpy 2); it is set to Python's ``float`` first.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fedleak.fl import nvflare_filters as nf

FILE = "nvflare/app_common/filters/svt_privacy.py"
SETTINGS = [dict(fraction=0.1, epsilon=1.0, noise_var=0.1, gamma=1e-3, tau=1e-4),
            dict(fraction=0.3, epsilon=0.1, noise_var=1.0, gamma=1e-5, tau=1e-6),
            dict(fraction=0.05, epsilon=100.0, noise_var=0.5, gamma=1e-3, tau=1.25e-3)]  # re-queries in every release


def _kind(version: tuple) -> str:
    if version >= (2, 8):
        return "svt"
    return "svt-legacy" if version >= (2, 0, 18) else "svt-2.0"


def _diff() -> dict:
    g = np.random.RandomState(1)
    return {"b": (g.randn(500) * 1e-3).astype(np.float32), "a": (g.randn(40, 30) * 1e-3).astype(np.float32),
            "s": np.float32(0.5), "c": g.randn(333).astype(np.float32)}


def _theirs(module, setting: dict, steps: int, seed: int) -> dict:
    from nvflare.apis.dxo import DXO, DataKind, MetaKey, from_shareable
    from nvflare.apis.fl_context import FLContext
    from nvflare.apis.shareable import Shareable

    dxo = DXO(DataKind.WEIGHT_DIFF, data=_diff(), meta={MetaKey.NUM_STEPS_CURRENT_ROUND: steps})
    filt = module.SVTPrivacy(**setting)
    np.random.seed(seed)
    if hasattr(filt, "process_dxo"):
        return filt.process_dxo(dxo, Shareable(), FLContext()).data
    return from_shareable(filt.process(dxo.to_shareable(), FLContext())).data


def _ours(kind: str, release: str, setting: dict, steps: int, seed: int) -> dict:
    rng = np.random.RandomState(seed)
    if kind == "svt":
        return nf.svt_privacy(_diff(), steps=steps, rng=rng, **setting)[0]
    return nf.svt_legacy_privacy(_diff(), steps=steps, rng=rng, release=release, **setting)


def check(wheel: Path, scratch: Path) -> dict:
    version = wheel.name.split("-")[1]
    source = zipfile.ZipFile(wheel).read(FILE)
    path = scratch / f"svt_{version.replace('.', '_')}.py"
    path.write_bytes(source)
    np.float = float  # NVFlare 2.0's np.float
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    number = tuple(int(x) for x in version.split("."))
    kind = _kind(number)
    release = "2.0" if kind == "svt-2.0" else ("2.0.18" if number < (2, 1) else "2.3")
    cases = []
    for setting in SETTINGS:
        for steps in (1, 3):
            theirs, ours = _theirs(module, setting, steps, 7), _ours(kind, release, setting, steps, 7)
            cases.append({"setting": setting, "steps": steps,
                          "identical": all(np.array_equal(theirs[k], ours[k]) for k in theirs)})
    return {"nvflare": version, "fedleak_kind": kind, "release_argument": release, "sha256": hashlib.sha256(source).hexdigest(),
            "identical": all(c["identical"] for c in cases), "cases": cases}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheels", type=Path, required=True, help="folder of nvflare-*.whl files")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    scratch = args.out.parent / ".nvflare_check"
    scratch.mkdir(exist_ok=True)
    try:
        rows = [check(w, scratch) for w in sorted(args.wheels.glob("nvflare-*.whl"))]
    finally:
        for f in scratch.glob("*.py"):
            f.unlink()
        scratch.rmdir()
    args.out.write_text(json.dumps({"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    "numpy": np.__version__, "rows": rows}, indent=1) + "\n")
    for r in rows:
        print(f"nvflare {r['nvflare']:>7} → {r['fedleak_kind']:<10} identical: {r['identical']}  {r['sha256'][:12]}")


if __name__ == "__main__":
    main()
