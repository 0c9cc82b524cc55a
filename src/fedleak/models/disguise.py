"""Disguised malicious models: the inspector measured against structures it was not written from.

fedleak's inspector (:mod:`fedleak.fl.inspect`) looks for the exact signatures of Robbing the Fed
(parallel imprint rows) and of trap weights (a fixed share of negative entries per row). A server
that knows those checks can hide them while the attack keeps working. Built here:

* :func:`disguised_imprint` — a cumulative imprint block (Fowl et al. 2022 §3.3) whose rows are

  - ``perturb``: perturbed by relative noise (the bins still cut h nearly where intended, the rows
    are no longer parallel to 10⁻³),
  - ``honest_rows``: hidden among that many honestly initialized rows at random positions,
  - ``mix``: read through a 1×1 convolution that mixes the input channels with a random orthogonal
    matrix Q and adds ``dead`` channels that are always zero; each row gets large random entries
    on the dead channels (no effect on the function, but rows share no direction) and measures h
    through Qᵀ (channel-mixed imprint).

  :func:`read_disguised` is the server's readout (Eq. 4 differences on the bin rows in the
  server's order, x̂ = ΔW/Δb, un-mixed by Qᵀ).
* :func:`honest_looking_trap` — trap weights (Boenisch et al. 2023 §4) whose per-row share of
  negative entries is drawn from Binomial(m, ½), as independent signs would give, instead of
  exactly one half; the sign-share χ² test then sees honest statistics.

Each builder is deterministic in ``seed``. These are test material for the inspector; the attacks
fedleak runs are :mod:`fedleak.models.imprint` and :mod:`fedleak.models.loki`.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec, Update
from .imprint.bins import bin_box, cumulative_rows, bin_edges, bin_support
from .imprint.distribution import Distribution, linear_function


class DisguisedImprint(nn.Module):
    """x → 1×1 mixing convolution → imprint FC (bin rows hidden among honest rows) → x + s·Σa → base."""

    def __init__(self, base: nn.Module, mix: nn.Conv2d, fc: nn.Linear, connection_scale: float, secrets: dict):
        super().__init__()
        self.mix, self.fc, self.base = mix, fc, base
        self.connection_scale = float(connection_scale)
        self._secrets = secrets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.fc(self.mix(x).flatten(1)))
        return self.base(x + self.connection_scale * a.sum(1).view(-1, *([1] * (x.dim() - 1))))

    def disguise_secrets(self) -> dict:
        return copy.deepcopy(self._secrets)


def disguised_imprint(model: nn.Module, spec: DataSpec, *, bins: int = 64, perturb: float = 0.0,
                      honest_rows: int = 0, mix: bool = False, dead: int = 3, dead_scale: float = 3.0,
                      seed: int = 0) -> DisguisedImprint:
    """A cumulative imprint block disguised as described in the module docstring."""
    if len(spec.shape) != 3:
        raise FedleakError(f"disguised_imprint takes image inputs (C, H, W), got {spec.shape}")
    c, h, w = (int(s) for s in spec.shape)
    dead = dead if mix else 0
    g = torch.Generator().manual_seed(int(seed))
    u = linear_function("randn", c * h * w, generator=g)
    edges = bin_edges(Distribution("gaussian", 0.0, 1.0), [1.0 / bins] * bins, bin_support(u, bin_box(spec, (c, h, w))))
    pairs = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    q = torch.linalg.qr(torch.randn(c, c, generator=g, dtype=torch.float64))[0] if mix else torch.eye(c, dtype=torch.float64)
    u_mixed = (q @ u.view(c, h * w))  # ⟨u, x⟩ = Σ_p (Q u_p)ᵀ (Q x_p) for orthogonal Q
    full = torch.zeros(c + dead, h * w, dtype=torch.float64)
    full[:c] = u_mixed
    rows, biases, _ = cumulative_rows(full.reshape(-1), pairs, 1.0)
    norm = float(u_mixed.norm())
    if perturb > 0:
        noise = torch.randn(bins, c * h * w, generator=g, dtype=torch.float64)
        rows.view(bins, c + dead, h * w)[:, :c] += perturb * norm * noise.view(bins, c, h * w) / math.sqrt(c * h * w)
    if dead:
        noise = torch.randn(bins, dead * h * w, generator=g, dtype=torch.float64)
        rows.view(bins, c + dead, h * w)[:, c:] = dead_scale * norm * noise.view(bins, dead, h * w) / math.sqrt(dead * h * w)
    total = bins + int(honest_rows)
    fc = nn.Linear((c + dead) * h * w, total)  # honest (Kaiming-uniform) rows everywhere first
    positions = torch.randperm(total, generator=g)[:bins]
    with torch.no_grad():
        fc.weight[positions] = rows.to(fc.weight.dtype)
        fc.bias[positions] = biases.to(fc.bias.dtype)
    conv = nn.Conv2d(c, c + dead, 1)
    with torch.no_grad():
        conv.weight.zero_()
        conv.weight[:c, :, 0, 0] = q.to(conv.weight.dtype)
        conv.bias.zero_()
    first = next(model.parameters())
    secrets = {"bin_rows": positions.tolist(), "mix": q.tolist(), "channels": c, "dead": dead,
               "input_shape": [c, h, w], "weight": "fc.weight", "bias": "fc.bias"}
    out = DisguisedImprint(copy.deepcopy(model), conv, fc, 1.0 / total, secrets)
    return out.to(device=first.device, dtype=first.dtype)


def read_disguised(update: Update, model: DisguisedImprint) -> torch.Tensor:
    """The server's readout of a :func:`disguised_imprint` update: candidates x̂ (normalized images)."""
    from ..attacks.imprint.readout import bin_sums

    s = model.disguise_secrets()
    if update.is_fedsgd:
        weight, bias = update.gradient[s["weight"]], update.gradient[s["bias"]]
    else:
        weight = update.client_params[s["weight"]] - update.server_params[s["weight"]]
        bias = update.client_params[s["bias"]] - update.server_params[s["bias"]]
    rows = torch.as_tensor(s["bin_rows"], device=weight.device)
    sums_w, sums_b = bin_sums(weight[rows], bias[rows], "cumulative", "relu")
    keep = sums_b.abs() > 1000 * torch.finfo(sums_b.dtype).eps * float(bias.abs().max())
    c, h, w = s["input_shape"]
    f = (sums_w[keep] / sums_b[keep, None]).view(-1, c + s["dead"], h * w)[:, :c]
    q = torch.as_tensor(s["mix"], dtype=f.dtype, device=f.device)
    return torch.einsum("ij,nip->njp", q, f).reshape(-1, c, h, w)  # x_p = Qᵀ f_p


def honest_looking_trap(model: nn.Module, spec: DataSpec, *, bins: int = 64, seed: int = 0) -> nn.Module:
    """A ``cah`` imprint whose per-row negative counts follow Binomial(m, ½) (see the module docstring)."""
    from .imprint import imprint

    trap = imprint(model, spec, bins=bins, structure="cah", seed=seed)
    weight = trap.imprint.linear.weight
    g = torch.Generator().manual_seed(int(seed) + 1)
    k, m = weight.shape
    std = torch.tensor(spec.std, dtype=torch.float64).view(-1, 1, 1).expand(*spec.shape).reshape(-1)
    with torch.no_grad():
        magnitudes = torch.randn(k, m, generator=g, dtype=torch.float64).abs() * 0.5  # cah_sigma
        counts = (torch.rand(k, m, generator=g, dtype=torch.float64) < 0.5).sum(1)  # Binomial(m, 1/2) per row
        order = torch.rand(k, m, generator=g, dtype=torch.float64).argsort(1)
        new = torch.where(order < counts[:, None], -magnitudes, 0.95 * magnitudes)  # pixel-space rows (cah_scale)
        mean = torch.tensor(spec.mean, dtype=torch.float64).view(-1, 1, 1).expand(*spec.shape).reshape(-1)
        trap.imprint.linear.bias.copy_((new @ mean).to(weight.dtype))
        weight.copy_((new * std).to(weight.dtype))
    return trap


__all__ = ["DisguisedImprint", "disguised_imprint", "honest_looking_trap", "read_disguised"]
