"""LOKI (Zhao et al., IEEE S&P 2024): each client's inputs read back from a secure aggregate.

The server shipped every client its own model (:func:`fedleak.models.loki.loki`: per-client
convolutional kernels routing the input into a client-specific channel slice, and per-client bins
of one imprint FC layer). The aggregate of K clients' updates then holds, in the FC rows of slice
k, client k's contribution alone (up to the factor Nₖ/ΣN, which cancels in the ratio). For every
slice the attack takes the rows' weight and bias update (FedSGD gradient, FedAvg weight change),
forms the per-bin sums (Robbing the Fed, Eq. 4: differences of successive cumulative rows; sparse
rows alone) and returns x̂ = ΔW_bin/Δb_bin without the indicator channel — verbatim for an input
alone in its bin of its client's slice. No optimization; the update of the rest of the model is
not used.

Single-input evidence per candidate (as :mod:`fedleak.attacks.imprint`): h(x̂) in its own bin, x̂
in the valid pixel box and on the 8-bit grid. When there are more candidates than the N inputs,
single-looking ones and then the largest mean |ΔW| are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec, Reconstruction, Update
from .base import Attack, AttackOptions, register
from .imprint.readout import bin_sums


@dataclass(frozen=True)
class LokiOptions(AttackOptions):
    """``tolerance``: a bin is empty when |Δb| ≤ tolerance·max|Δb| (0: 1000·machine eps);
    ``levels``: quantization levels for the on-grid check (0 disables it)."""

    tolerance: float = 0.0
    levels: int = 255


def loki_secrets(update: Update, model: nn.Module) -> dict:
    """The server's LOKI secrets: ``update.metadata["loki"]``, else ``model.loki_secrets()``."""
    secrets = update.metadata.get("loki") if isinstance(update.metadata, dict) else None
    if secrets is None and hasattr(model, "loki_secrets"):
        secrets = model.loki_secrets()
    if not isinstance(secrets, dict) or secrets.get("format") != "fedleak.loki/1":
        raise FedleakError("the loki attack needs a model built with fedleak.models.loki (its loki_secrets()) "
                           "or the secrets in update.metadata['loki']")
    return secrets


def _rows(update: Update, secrets: dict) -> tuple[torch.Tensor, torch.Tensor]:
    names = secrets["weight"], secrets["bias"]
    for name in names:
        if name not in update.server_params:
            raise FedleakError(f"the update has no parameter {name!r} named in the loki secrets")
    if update.is_fedsgd:
        return update.gradient[names[0]], update.gradient[names[1]]
    return (update.client_params[names[0]] - update.server_params[names[0]],
            update.client_params[names[1]] - update.server_params[names[1]])


def _checks(images: torch.Tensor, x_h: torch.Tensor, lows, highs, spec: DataSpec, levels: int) -> torch.Tensor:
    """in own bin & in pixel box & on the 8-bit grid (skipped when no candidate of ≥ 4 is on it)."""
    slack = 1e-3 * (highs - lows)
    single = (x_h >= lows - slack) & (x_h <= highs + slack)
    if images.shape[0]:
        pixels = spec.denormalize(images).flatten(1)
        lo, hi = spec.pixel_range
        single &= ((pixels >= lo - 1e-3 * (hi - lo)) & (pixels <= hi + 1e-3 * (hi - lo))).all(1)
        if levels:
            grid = (pixels - lo) / (hi - lo) * levels
            on_grid = (grid - grid.round()).pow(2).mean(1).sqrt() < 0.15
            if images.shape[0] < 4 or bool(on_grid.any()):
                single &= on_grid
    return single


class LokiAttack(Attack):
    """Analytic per-client readout of a LOKI model's aggregate (Zhao et al. 2024; Fowl et al. Eq. 4)."""

    Options = LokiOptions
    name = "loki"
    non_negative = ("tolerance", "levels")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        start = time.perf_counter()
        s = loki_secrets(update, model)
        k, b = int(s["clients"]), int(s["bins"])
        c, h, w = s["input_shape"]
        weight, bias = _rows(update, s)
        weight, bias = weight.view(k, b, -1), bias.view(k, b)
        scale = float(bias.abs().max()) if bias.numel() else 0.0
        tolerance = self.options.tolerance or 1000 * torch.finfo(bias.dtype).eps
        edges = torch.tensor(s["edges"], dtype=weight.dtype, device=weight.device)
        u = update.server_params[s["weight"]][0].view(c + 1, h * w)[:c].reshape(-1)
        u = u / float(s["row_scales"][0])  # row 0 of slice 0 = row_scale · [u, indicator]
        cands, bins_of, client_of, scores, singles = [], [], [], [], []
        for slice_ in range(k):
            sums_w, sums_b = bin_sums(weight[slice_], bias[slice_], s["structure"], s["nonlinearity"])
            nonempty = (sums_b.abs() > tolerance * scale).nonzero().flatten() if scale > 0 else []
            if len(nonempty) == 0:
                continue
            x = (sums_w[nonempty] / sums_b[nonempty, None]).view(-1, c + 1, h * w)[:, :c].reshape(-1, c * h * w)
            images = x.view(-1, c, h, w)
            singles.append(_checks(images, x @ u, edges[nonempty], edges[nonempty + 1], spec, self.options.levels))
            cands.append(images)
            scores.append(sums_w[nonempty].abs().mean(1))
            bins_of += nonempty.tolist()
            client_of += [slice_] * len(nonempty)
        if not cands:
            return Reconstruction(weight.new_zeros(0, c, h, w), None,
                                  extras={"attack": "loki", "clients": k, "bins_per_client": b, "candidates": 0,
                                          "seconds": time.perf_counter() - start})
        images, score, single = torch.cat(cands), torch.cat(scores), torch.cat(singles)
        keep = torch.arange(images.shape[0], device=images.device)
        if images.shape[0] > update.num_samples:
            rank = torch.argsort(score + single.to(score.dtype) * (score.max() + 1), descending=True)
            keep = rank[: update.num_samples].sort().values
        extras = {"attack": "loki", "clients": k, "bins_per_client": b, "structure": s["structure"],
                  "candidates": int(images.shape[0]), "client_of_candidate": [client_of[i] for i in keep.tolist()],
                  "bin_of_candidate": [bins_of[i] for i in keep.tolist()],
                  "single_candidates": [bool(single[i]) for i in keep.tolist()],
                  "source": "gradient" if update.is_fedsgd else "weight difference",
                  "seconds": time.perf_counter() - start}
        return Reconstruction(images[keep].detach(), None, extras=extras)


register("loki", LokiAttack,
         "LOKI (Zhao et al., S&P 2024): per-client conv kernels and imprint bins (the server ships each client its "
         "own model); every client's inputs read back verbatim from the secure aggregate")
