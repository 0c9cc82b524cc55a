"""``fedleak inspect FILE [--model NAME --data D]``: one received model file, every check that applies.

* The weight signatures of :mod:`fedleak.fl.inspect` (imprint rows, trap weights, linearized
  convolutions) on any ``.safetensors`` file.
* With ``--model``: the structure the client expects. Missing, unexpected or reshaped tensors are a
  finding (exit 1), not bad input: a structure that differs is what an imprint block or LOKI's
  routing layers look like to the client.
* With ``--model`` and a matching structure: SEER's D-SNR (:mod:`fedleak.fl.dsnr`) on a batch of
  the client's own data (``--data``, ``--data-root``; ``dsnr_batch`` examples, 0 to skip).

A file in which nothing could be inspected gets no verdict (one line, exit 2); unreadable files and
bad arguments stay exit 2.
"""

from __future__ import annotations

from typing import Optional

from ..errors import FedleakError
from .inspect import (Inspection, inspect_state, load_state, require_inspected, structure_finding,
                      with_findings)


def inspect_file(path, *, model: Optional[str] = None, data: str = "digits", data_root=None,
                 threshold: float = 0.5, dsnr_batch: int = 16, seed: int = 0) -> tuple[Inspection, Optional[dict]]:
    """The inspection of ``path`` and, when D-SNR ran, its measurement (see the module docstring)."""
    if isinstance(dsnr_batch, bool) or not isinstance(dsnr_batch, int) or not (dsnr_batch == 0 or 2 <= dsnr_batch <= 1024):
        raise FedleakError(f"--dsnr-batch must be 0 (skip) or an integer from 2 to 1024, got {dsnr_batch!r}")
    if model:
        from .. import models

        models.check(model)  # a model name checked before the file is read
    state = load_state(path)
    try:
        return _inspected(path, state, model=model, data=data, data_root=data_root, threshold=threshold,
                          dsnr_batch=dsnr_batch, seed=seed)
    except FedleakError as exc:  # what is wrong inside the file, named with the file
        text = str(exc)
        raise FedleakError(text if str(path) in text else f"{path}: {text}") from None


def _inspected(path, state, *, model, data, data_root, threshold, dsnr_batch, seed):
    inspection = inspect_state(state, threshold)
    measured = None
    if model:
        from .. import data as datasets
        from .. import models
        from .dsnr import dsnr_findings, measure

        spec = datasets.spec_for(data, root=data_root)
        expected = models.build(model, spec, seed=seed)
        found = structure_finding(state, expected)
        if found is not None:
            inspection = with_findings(inspection, [found])
        elif dsnr_batch:
            expected.load_state_dict({k: v.to(expected.state_dict()[k].dtype) for k, v in state.items()})
            _, clients = datasets.load(data, root=data_root, num_clients=1, samples_per_client=dsnr_batch, seed=seed)
            batch = clients[0]
            measured = measure(expected, batch.inputs, batch.labels)
            inspection = with_findings(inspection, dsnr_findings(expected, batch.inputs, batch.labels))
            measured.pop("layers")
    return require_inspected(inspection, str(path)), measured


__all__ = ["inspect_file"]
