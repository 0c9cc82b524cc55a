"""One experiment job's result file: where it lives, when it may be reused, how it is written.

A job file ``OUT/jobs/<setting>/<variant>/<client>.json`` (names through
:func:`fedleak.runs.naming.file_name`) is written atomically (temporary file, then rename), so a
killed run leaves either the whole record or none. On resume a file is reused only if it parses,
holds every field of a finished record with its type (the strict schema :func:`_record_model`: an edited
``"psnr": "high"`` is refused), carries a ``record_digest`` (every file fedleak writes is sealed with one
by :func:`sealed`: a file whose digest was deleted or nulled is not fedleak's) that matches its content
(content edited by hand is refused) and carries the ``job_hash`` of the job as configured now (:func:`job_hash`); anything else is renamed to ``<client>.json.stale[-N]`` (never deleted) and the
job runs again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Optional

import torch

from .naming import file_name

#: bump when the meaning of a record changes, so older files are recomputed rather than mixed in
RECORD_VERSION = 1
REQUIRED_FIELDS = ("setting", "variant", "attack", "client", "client_index", "num_samples", "seconds", "job_hash")
#: metric settings that change a record (``save_images`` only changes the picture)
RECORD_METRICS = ("threshold", "clip", "lpips")


def job_path(out: Path, setting: str, variant: str, client_id: str) -> Path:
    return (Path(out) / "jobs" / file_name(setting, "setting name") / file_name(variant, "variant name")
            / f"{file_name(client_id, 'client id')}.json")


def data_digest(inputs: torch.Tensor, labels: torch.Tensor) -> str:
    """SHA-256 of a client's private data (its exact bytes): a job's data, whatever its source path."""
    h = hashlib.sha256()
    for tensor in (inputs, labels):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def job_hash(identity: dict) -> str:
    """Hash of a job's fully resolved configuration (canonical JSON, keys sorted)."""
    text = json.dumps({"record_version": RECORD_VERSION, **identity}, sort_keys=True, default=str,
                      separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def finite(obj):
    """``obj`` with every non-finite float (a NaN loss, an infinite PSNR) as ``None``: strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _jsonable(obj):
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def write_json(path: Path, payload: dict) -> None:
    """Write ``payload`` atomically: a reader sees the old file, or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(finite(payload), indent=1, allow_nan=False, default=_jsonable))
    tmp.replace(path)


_NUMBER_KEYS = ("mse", "psnr", "ssim", "lpips", "iip", "rec_percent", "threshold", "label_count_error",
                "label_accuracy", "rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy",
                "accuracy", "categorical_accuracy", "continuous_accuracy", "exact_match_rate")


@functools.lru_cache(maxsize=1)
def _record_model():
    """The strict schema of a job record (:mod:`fedleak.config.boundary`): what a resumed run and the
    report read back is typed exactly as :meth:`Runner.compute` wrote it; other keys pass."""
    from typing import Annotated, Union

    from pydantic import ConfigDict, Field, create_model

    from ..config.boundary import MAX_FLOAT, MAX_INT

    name = (Annotated[str, Field(strict=True, min_length=1, max_length=10_000)], ...)
    count = Annotated[int, Field(strict=True, ge=0, le=MAX_INT)]
    number = Optional[Union[Annotated[int, Field(strict=True)],
                            Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-MAX_FLOAT, le=MAX_FLOAT)]]]
    fields = {"setting": name, "variant": name, "attack": name, "client": (Union[name[0], count], ...),
              "client_index": (count, ...), "num_samples": (count, ...),
              "seconds": (Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)], ...),
              "job_hash": name, "config_hash": (Optional[str], None), "record_digest": (Optional[str], None),
              "num_inputs": (Optional[count], None), "num_reconstructed": (Optional[count], None),
              "psnr_per_input": (Optional[list[number]], None), "ssim_per_input": (Optional[list[number]], None),
              "protocol": (Optional[dict], None), "rounds": (Optional[dict], None),
              "attack_extras": (Optional[dict], None), "threat": (Optional[str], None),
              **{k: (number, None) for k in _NUMBER_KEYS}}
    return create_model("JobRecord", __config__=ConfigDict(strict=True, extra="allow"), **fields)


def record_digest(record: dict) -> str:
    """SHA-256 of a record's content (canonical JSON; ``config_hash`` and the digest itself left out)."""
    body = {k: v for k, v in finite(record).items() if k not in ("config_hash", "record_digest")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_jsonable)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def sealed(record: dict) -> dict:
    """``record`` with its :func:`record_digest`, as written to a job file."""
    return {**record, "record_digest": record_digest(record)}


def read_record(path: Path) -> tuple[Optional[dict], str]:
    """``(record, "")`` for a finished, well-formed job file, else ``(None, why)``."""
    from ..config.json_safe import read_json_file
    from ..errors import FedleakError

    try:
        record = read_json_file(path, obj=False)
    except FedleakError as exc:
        return None, f"unreadable ({exc}: an interrupted write?)"
    if not isinstance(record, dict):
        return None, "not a job record"
    missing = [k for k in REQUIRED_FIELDS if k not in record]
    if missing:
        return None, f"incomplete (no {', '.join(missing)})"
    from ..config.boundary import validate

    try:
        validate(_record_model(), record, where="job record")
    except FedleakError as exc:
        return None, f"not a valid record ({exc})"
    digest = record.get("record_digest")
    if digest is None:  # every file fedleak writes is sealed: one without its digest is not fedleak's
        return None, "not written by fedleak (no record_digest: deleted or null), so not trusted"
    if digest != record_digest(record):
        return None, "edited after it was written (its record_digest does not match its content)"
    return record, ""


def reusable(path: Path, expected_hash: str) -> tuple[Optional[dict], str]:
    """The record at ``path`` if it may stand for the job with ``expected_hash``; else why not."""
    if not path.exists():
        return None, ""
    record, why = read_record(path)
    if record is None:
        return None, why
    if record.get("job_hash") != expected_hash:
        return None, "computed with a different configuration"
    return record, ""


def keep_aside(path: Path) -> Path:
    """Rename a job file (and its picture) to the first free ``*.stale[-N]`` name; return it."""
    path = Path(path)
    for n in range(1, 10_000):
        suffix = ".stale" if n == 1 else f".stale-{n}"
        target = path.with_name(path.name + suffix)
        if not target.exists():
            path.replace(target)
            png = path.with_suffix(".png")
            if png.exists():
                png.replace(png.with_name(png.name + suffix))
            return target
    raise RuntimeError(f"too many stale copies of {path}")


def load_results(out) -> tuple[list[dict], list[tuple[Path, dict]], int]:
    """Every finished job record under ``OUT/jobs``: ``(rows, [(path, row)], unreadable count)``."""
    rows, located, bad = [], [], 0
    for path in sorted(Path(out).glob("jobs/*/*/*.json")):
        record, _ = read_record(path)
        if record is None:
            bad += 1
            continue
        rows.append(record)
        located.append((path, record))
    return rows, located, bad
