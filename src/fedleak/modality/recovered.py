"""What the Flower dashboard (:mod:`fedleak.integrations.flower.dashboard`) shows of the latest round's recovered
items, for the modality objects' :meth:`~fedleak.modality.Modality.dashboard_sections`: image grids (beside the
originals, each pair's PSNR, where the client shared its batch) and the decoded text of a text attack.

Moved here from the dashboard (which re-exports both), so that a modality object imports no module of the Flower
integration that asks the modality registry.
"""

from __future__ import annotations

from typing import Sequence

from ..report import image_grid
from ..types import DataSpec, Reconstruction


def _beside_originals(record: dict, rec: Reconstruction, spec: DataSpec):
    """The report's grid (originals on top, matched reconstructions below, each pair's PSNR) where the client
    shared its batch; ``None`` otherwise."""
    if not record.get("truth_file"):
        return None
    from ..audit.report.figures import labelled_grid
    from ..integrations.flower.client import load_truth
    from ..metrics.images import check_pair, evaluate_images
    from .image.execute import example

    truth = load_truth(record["truth_file"])
    check_pair(rec, truth)  # fedleak.metrics.evaluate on an image spec: these checks, then the image metrics
    ex = example(rec, truth, spec, evaluate_images(rec, truth, spec))
    return labelled_grid(ex.originals, ex.reconstructions, ex.psnr, ex.threshold)


def latest_reconstructions(records: Sequence[dict], spec: DataSpec, limit: int = 16) -> list:
    """(caption, image grid) of each attacked reply of the latest round that has one: beside the originals (with
    each pair's PSNR, as in report.html) where the client shared its batch."""
    attacked = [r for r in records if r.get("status") == "attacked" and r.get("reconstruction")]
    if not attacked:
        return []
    last = max(r["round"] for r in attacked)
    images = []
    for record in attacked:
        if record["round"] != last:
            continue
        rec = Reconstruction.load(record["reconstruction"])
        if rec.inputs.dim() != 4 or rec.inputs.shape[0] == 0:
            continue
        caption = f"round {last}, node {record['client']}: {record['attack']}"
        try:
            beside = _beside_originals(record, rec, spec)
        except Exception:  # noqa: BLE001 - a shared batch that cannot be read: the reconstructions alone
            beside = None
        if beside is not None:
            images.append((f"{caption}: originals (top) vs reconstructions (bottom), each with its PSNR", beside))
        else:
            images.append((f"{caption} (no shared batch: reconstructions only)",
                           image_grid(spec.denormalize(rec.inputs[:limit].float()).clamp(0, 1))))
    return images


def latest_texts(records: Sequence[dict], limit: int = 8) -> str:
    """The decoded sequences a text attack recovered from each reply of the latest attacked round."""
    attacked = [r for r in records if r.get("status") == "attacked" and r.get("reconstruction")]
    if not attacked:
        return ""
    last = max(r["round"] for r in attacked)
    parts = []
    for record in attacked:
        if record["round"] != last:
            continue
        texts = Reconstruction.load(record["reconstruction"]).extras.get("text") or []
        lines = "\n".join(f"  {i + 1}. {t}" for i, t in enumerate(texts[:limit]))
        parts.append(f"round {last}, node {record['client']} ({record['attack']}):\n{lines or '  (nothing recovered)'}")
    return "\n\n".join(parts)
