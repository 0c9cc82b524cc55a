"""LOKI's malicious model: per-client convolutional kernels and bins (Zhao et al., IEEE S&P 2024).

Threat model (LOKI §III): the server is malicious and **ships a different model to every client**
of a round; secure aggregation (Bonawitz et al. 2017) still hides the individual updates, the
server sees only their (N-weighted) sum. LOKI defeats the aggregation by making the updates of
different clients land in *disjoint* parameters:

* **Customized convolutional kernels** (LOKI §IV-B): a convolution in front of the model with
  K·(C+1) output channels, K slices of C+1. Client k's kernels are the identity (a Dirac kernel)
  from input channel c to channel k·(C+1)+c and zero everywhere else, plus one constant
  *indicator* channel k·(C+1)+C (bias β). Every other slice of client k's features is zero.
* **An imprint FC layer with per-client bins** (LOKI §IV-C, Robbing the Fed §3.3): K·B rows,
  rows k·B … k·B+B−1 read only slice k (a dense layer whose off-slice blocks are zero; stored as
  one (K·B, (C+1)·H·W) weight, evaluated slice by slice). Within slice k the rows are the
  cumulative ReLU bins (FedSGD) or the thresholded sparse bins (FedAvg, Fowl et al. §4.3) of
  one linear measurement h. The indicator adds a constant T to every row's input, and the biases
  subtract it: a client's own rows see h(x) + T − T = h(x) and bin it; the rows of every other
  slice see only zeros and stay below their threshold, so they neither fire nor take a gradient.

Hence the FC weight and bias gradient of slice k holds only client k's inputs, and the aggregate
separates by client: the server reads x̂ = ΔW_bin / Δb_bin (Eq. 4) for each client's bins
(:class:`fedleak.attacks.loki.LokiAttack`). The block's output goes back to the model through the
``add`` connection of Robbing the Fed (input + s·Σa), so ∂L/∂aᵢ is one value for every row.

The FC weight and bias are the same for every client (only the convolution differs); the server
keeps its secrets in :meth:`Loki.loki_secrets` (format ``fedleak.loki/1``). ``bins`` (``--bins``
in the audit) is the server's bin budget per client; the FC layer has K·bins rows, and a build
whose layer would exceed :data:`MAX_ENTRIES` entries is refused (:func:`check_budget`).
"""

from __future__ import annotations

import copy
import math
from typing import Optional

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec
from .imprint.bins import bin_box, cumulative_rows, bin_edges, sparse_rows, bin_support
from .imprint.block import Threshold
from .imprint.distribution import Distribution, linear_function
from .imprint.options import LINFUNCS, check_choice, check_positive

SECRETS_FORMAT = "fedleak.loki/1"
STRUCTURES = ("cumulative", "sparse")
#: the FC layer's entries above which building a LOKI model is refused (1 GiB of float32)
MAX_ENTRIES = 2 ** 28


def check_budget(clients, bins, shape) -> None:
    """One line naming K and ``--bins`` when K clients × ``bins`` bins per client do not fit (LOKI's FC size)."""
    clients = check_positive("clients", clients, integer=True)
    bins = check_positive("bins", bins, integer=True)
    if len(shape) != 3:
        raise FedleakError(f"loki routes image inputs (C, H, W) through a convolution, got input shape {tuple(shape)}")
    numel = (int(shape[0]) + 1) * int(shape[1]) * int(shape[2])
    if clients * bins * numel > MAX_ENTRIES:
        most = MAX_ENTRIES // (bins * numel)
        fix = (f"at --bins {bins} at most {most} clients fit" if most else
               f"--bins at most {MAX_ENTRIES // (clients * numel)} for {clients} clients")
        raise FedleakError(f"loki: {clients} clients x {bins} bins per client (--bins) need an FC layer of "
                           f"{clients * bins * numel:,} entries, above {MAX_ENTRIES:,}; {fix}")


class Loki(nn.Module):
    """The model LOKI ships to client ``client`` of ``clients``; parameters ``loki.*`` then ``base.*``."""

    def __init__(self, base: nn.Module, conv: nn.Conv2d, fc: nn.Linear, nonlinearity: nn.Module, clients: int,
                 bins: int, connection_scale: float, secrets: dict, client: int = 0) -> None:
        super().__init__()
        self.loki = nn.ModuleDict({"conv": conv, "fc": fc})
        self.base = base
        self.nonlinearity = nonlinearity
        self.clients, self.bins = int(clients), int(bins)
        self.connection_scale = float(connection_scale)
        self._secrets = copy.deepcopy(secrets)
        self.route(client)

    def route(self, client: int) -> "Loki":
        """Set the convolution to client ``client``'s kernels (identity into its slice), in place."""
        if isinstance(client, bool) or not isinstance(client, int) or not 0 <= client < self.clients:
            raise FedleakError(f"loki: client index must be in 0..{self.clients - 1}, got {client!r}")
        conv = self.loki["conv"]
        channels = conv.in_channels
        width = channels + 1
        kh, kw = conv.kernel_size
        with torch.no_grad():
            conv.weight.zero_()
            conv.bias.zero_()
            for c in range(channels):
                conv.weight[client * width + c, c, kh // 2, kw // 2] = 1.0
            conv.bias[client * width + channels] = self._secrets["indicator"]
        self.client = client
        return self

    def for_client(self, client: int) -> "Loki":
        """A copy routed to ``client`` (what the server sends that client)."""
        return copy.deepcopy(self).route(client)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution's output, (N, K, (C+1)·H·W): slice k holds client k's input (others 0)."""
        return self.loki["conv"](x).flatten(2).view(x.shape[0], self.clients, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.features(x)
        fc = self.loki["fc"]
        weight = fc.weight.view(self.clients, self.bins, -1)
        pre = torch.einsum("nkm,kbm->nkb", f, weight) + fc.bias.view(self.clients, self.bins)
        a = self.nonlinearity(pre)
        offset = self.connection_scale * a.flatten(1).sum(1)
        return self.base(x + offset.view(-1, *([1] * (x.dim() - 1))))

    def loki_secrets(self) -> dict:
        return copy.deepcopy(self._secrets)


def loki(model: nn.Module, spec: DataSpec, *, clients: int, bins: int, structure: str = "cumulative",
         linfunc: str = "randn", surrogate: Optional[torch.Tensor] = None, gain: float = 1.0,
         connection_scale: Optional[float] = None, seed: int = 0) -> Loki:
    """Build LOKI's model for ``clients`` clients with ``bins`` rows each (routed to client 0).

    ``structure``: ``cumulative`` ReLU bins (FedSGD, Fowl et al. §3.3) or ``sparse`` thresholded
    bins (FedAvg, §4.3; use a small ``gain``, e.g. 1e-3, so the lr-scaled update stays above
    float32 rounding). h is :func:`fedleak.models.imprint.linear_function` ``linfunc`` with the
    N(0, 1) assumption, or fitted (Gaussian) on ``surrogate`` inputs of the server. Images only
    (inputs (C, H, W)). Call :meth:`Loki.for_client` for the model of each client.
    """
    if not isinstance(model, nn.Module) or not isinstance(spec, DataSpec):
        raise FedleakError("loki needs a torch.nn.Module and a fedleak.DataSpec")
    structure = check_choice("loki structure", structure, STRUCTURES)
    check_choice("linfunc", linfunc, LINFUNCS)
    clients = check_positive("clients", clients, integer=True)
    bins = check_positive("bins", bins, integer=True)
    gain = check_positive("gain", gain)
    check_budget(clients, bins, spec.shape)
    c, h, w = (int(s) for s in spec.shape)
    width = c + 1
    numel = width * h * w
    first = next(model.parameters(), None)
    if first is None:
        raise FedleakError("the model has no parameters")
    generator = torch.Generator().manual_seed(int(seed))
    u = linear_function(linfunc, c * h * w, generator=generator)
    box = bin_box(spec, tuple(spec.shape))
    if surrogate is not None:
        values = torch.as_tensor(surrogate).flatten(1).double().cpu() @ u
        dist = Distribution.fit("gaussian", values)
    else:
        dist = Distribution("gaussian", 0.0, 1.0)
    support = bin_support(u, box)
    edges = bin_edges(dist, [1.0 / bins] * bins, support)
    pairs = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    # the indicator channel adds T to every row's input; T puts all thresholds above 0
    indicator = 1.0
    shift = max(0.0, -float(edges[0])) + float(edges[-1] - edges[0]) + 1.0
    pairs_shifted = [(a + shift, b + shift) for a, b in pairs]
    full = torch.zeros(numel, dtype=torch.float64)
    full.view(width, h * w)[:c] = u.view(c, h * w)
    full.view(width, h * w)[c] = shift / (indicator * h * w)
    rows, biases, info = (cumulative_rows if structure == "cumulative" else sparse_rows)(full, pairs_shifted, gain)
    nonlinearity: nn.Module = nn.ReLU() if structure == "cumulative" else Threshold(gain, "hardtanh")
    if connection_scale is None:
        connection_scale = 1.0 / (bins * gain)
    connection_scale = check_positive("connection_scale", connection_scale)
    conv = nn.Conv2d(c, clients * width, 3, padding=1)
    fc = nn.Linear(numel, clients * bins)
    with torch.no_grad():
        fc.weight.copy_(rows.repeat(clients, 1))
        fc.bias.copy_(biases.repeat(clients))
    secrets = {
        "format": SECRETS_FORMAT, "structure": structure,
        "nonlinearity": "relu" if structure == "cumulative" else "threshold",
        "weight": "loki.fc.weight", "bias": "loki.fc.bias", "clients": clients, "bins": bins,
        "input_shape": [c, h, w], "indicator": indicator, "shift": shift, "gain": gain,
        "edges": [float(e) for e in edges], "row_scales": [i["row_scale"] for i in info], "linfunc": linfunc,
        "distribution": dist.to_json(), "seed": int(seed),
    }
    result = Loki(copy.deepcopy(model), conv, fc, nonlinearity, clients, bins, connection_scale, secrets)
    result = result.to(device=first.device, dtype=first.dtype)
    result.train(model.training)
    return result


__all__ = ["Loki", "MAX_ENTRIES", "SECRETS_FORMAT", "check_budget", "loki"]
