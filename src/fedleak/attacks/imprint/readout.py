"""Reading inputs out of an imprint block's update (Fowl et al. 2022, §3.3, Eq. 2, Eq. 4, §4.3, App. A.4-A.5).

The server's secrets (:func:`resolve_secrets`), the block's rows in bin order
(:func:`block_update`), per-bin sums (:func:`bin_sums`: Eq. 4's successive differences for ReLU
rows), and the checks and mappings applied to the candidates x̂ = ΔW/Δb: merging duplicate CAH
rows, the single-input evidence (in its bin, in the box, on the pixel grid / token table), and
the way back from the block's input to model inputs (deeper placements, text).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec, Update


def resolve_secrets(update: Update, model: nn.Module) -> dict:
    """The server's imprint secrets: ``update.metadata["imprint"]``, else ``model.imprint_secrets()``."""
    secrets = update.metadata.get("imprint") if isinstance(update.metadata, dict) else None
    if secrets is None and hasattr(model, "imprint_secrets"):
        secrets = model.imprint_secrets()
    if secrets is None:
        raise FedleakError("the imprint attack needs the server's secrets: attack a model built with "
                           "fedleak.models.imprint (or 'imprint' from the model zoo), or put its "
                           "imprint_secrets() into update.metadata['imprint']")
    if not isinstance(secrets, dict) or secrets.get("format") != "fedleak.imprint/1":
        raise FedleakError("imprint secrets are not in the fedleak.imprint/1 format")
    return secrets


def block_update(update: Update, secrets: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's weight and bias update, rows in bin order: (k, m) and (k,).

    FedSGD: the gradient; FedAvg: the weight change θᶜ − θˢ (−η times the summed gradient).
    """
    names = (secrets["weight"], secrets["bias"])
    for name in names:
        if name not in update.server_params:
            raise FedleakError(f"the update has no parameter {name!r} named in the imprint secrets")
    if update.is_fedsgd:
        weight, bias = update.gradient[names[0]], update.gradient[names[1]]
    else:
        weight = update.client_params[names[0]] - update.server_params[names[0]]
        bias = update.client_params[names[1]] - update.server_params[names[1]]
    order = torch.as_tensor(secrets["order"], dtype=torch.long, device=weight.device)
    rows = weight.shape[0]
    if weight.dim() != 2 or bias.shape != (rows,) or sorted(order.tolist()) != list(range(rows)):
        raise FedleakError(f"imprint secrets do not match the block: {rows} rows, order of length {order.numel()}")
    if weight.shape[1] != math.prod(secrets["input_shape"]):
        raise FedleakError(f"imprint block has {weight.shape[1]} inputs but the secrets say shape "
                           f"{secrets['input_shape']}")
    return weight[order], bias[order]


def bin_sums(weight: torch.Tensor, bias: torch.Tensor, structure: str, nonlinearity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-bin sums Σ_{t in bin} γₜ·xₜ and Σ γₜ: Eq. 4's successive differences for ReLU rows."""
    if nonlinearity == "relu" and structure != "cah":
        weight = torch.cat([weight[:-1] - weight[1:], weight[-1:]])
        bias = torch.cat([bias[:-1] - bias[1:], bias[-1:]])
    return weight, bias


def _server_rows(update: Update, secrets: dict) -> tuple[torch.Tensor, torch.Tensor]:
    order = torch.as_tensor(secrets["order"], dtype=torch.long, device=update.server_params[secrets["weight"]].device)
    return update.server_params[secrets["weight"]][order], update.server_params[secrets["bias"]][order]


def _dedupe(candidates: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge CAH rows that recovered the same input (several trap rows can fire for one input)."""
    if candidates.shape[0] < 2:
        return candidates, rows
    norms = candidates.norm(dim=1).clamp_min(torch.finfo(candidates.dtype).tiny)
    dist = torch.cdist(candidates, candidates) / norms[:, None]
    same = dist < 1e-3
    keep = []
    taken = torch.zeros(candidates.shape[0], dtype=torch.bool, device=candidates.device)
    for i in range(candidates.shape[0]):
        if not taken[i]:
            keep.append(i)
            taken |= same[i]
    index = torch.tensor(keep, dtype=torch.long, device=candidates.device)
    return candidates[index], rows[index]


def _single_checks(candidates: torch.Tensor, bins: torch.Tensor, update: Update, secrets: dict, spec: DataSpec,
                   levels: int) -> dict:
    """Evidence that a candidate is one input, not a mixture (in its bin, in the box, on the grid)."""
    count = candidates.shape[0]
    true = torch.ones(count, dtype=torch.bool, device=candidates.device)
    in_bin = true.clone()
    info = secrets["bins"]
    if count and info and info[0].get("low") is not None:
        rows, _ = _server_rows(update, secrets)
        scales = torch.tensor([info[b]["row_scale"] for b in bins.tolist()], dtype=candidates.dtype,
                              device=candidates.device)
        h = (rows[bins] * candidates).sum(1) / scales
        low = torch.tensor([info[b]["low"] for b in bins.tolist()], dtype=h.dtype, device=h.device)
        high = torch.tensor([info[b]["high"] for b in bins.tolist()], dtype=h.dtype, device=h.device)
        slack = 1e-3 * (high - low)
        in_bin = (h >= low - slack) & (h <= high + slack)
    in_box = true.clone()
    on_grid = true.clone()
    grid_error = [None] * count
    if count and secrets.get("box") is not None and secrets.get("features") is None:
        images = candidates.view(count, *secrets["input_shape"])
        pixels = spec.denormalize(images).flatten(1)
        lo, hi = spec.pixel_range
        slack = 1e-3 * (hi - lo)
        in_box = ((pixels >= lo - slack) & (pixels <= hi + slack)).all(1)
        if levels:
            grid = (pixels - lo) / (hi - lo) * levels
            error = (grid - grid.round()).pow(2).mean(1).sqrt()
            on_grid = error < 0.15
            grid_error = [float(e) for e in error.tolist()]
            if count >= 4 and not bool(on_grid.any()):  # none of several on the grid: data not 8-bit
                on_grid = true.clone()
    if count and secrets.get("tokens") is not None:
        embedding = update.server_params[secrets["tokens"]["embedding"]]
        vectors = candidates.view(count, -1, embedding.shape[1])
        table = embedding.to(vectors.dtype)
        nearest = torch.cdist(vectors, table).min(-1).values
        spacing = torch.cdist(table, table).fill_diagonal_(float("inf")).min(1).values.median()
        on_grid = nearest.max(1).values <= 0.02 * spacing
    return {"single": in_bin & in_box & on_grid, "in_bin": in_bin.tolist(), "in_box": in_box.tolist(),
            "on_grid": on_grid.tolist(), "grid_error": grid_error}


def _to_model_inputs(candidates: torch.Tensor, update: Update, secrets: dict, spec: DataSpec) -> torch.Tensor:
    """Candidates at the block → model inputs (images; token ids for text)."""
    count = candidates.shape[0]
    shape = secrets["input_shape"]
    tokens = secrets.get("tokens")
    if tokens is not None:
        embedding = update.server_params[tokens["embedding"]]
        vectors = candidates.view(count, -1, embedding.shape[1])
        if count == 0:
            return candidates.new_zeros(0, vectors.shape[1])
        ids = torch.cdist(vectors, embedding.to(vectors.dtype)).argmin(-1)
        return ids.to(candidates.dtype)
    features = secrets.get("features")
    if features is None:
        return candidates.view(count, *shape)
    c, h, w = features["input_shape"]
    stride = int(features["stride"])
    maps = candidates.view(count, *shape)[:, : features["channels"]] - features["shift"]
    maps = maps.repeat_interleave(stride, dim=2).repeat_interleave(stride, dim=3)[:, :, :h, :w]
    if maps.shape[1:] != (c, h, w):
        raise FedleakError(f"cannot map features of shape {tuple(shape)} back to inputs {features['input_shape']}")
    return maps.contiguous()
