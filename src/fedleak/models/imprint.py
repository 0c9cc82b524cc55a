"""Malicious imprint modules: Fowl et al., "Robbing the Fed" (ICLR 2022), and CAH trap weights.

The server sends a model with an *imprint block* (§3.3): a linear layer with bias followed by a
nonlinearity, whose k rows all measure the same linear function h of their input, with biases
at the quantiles of h's distribution. Each row therefore "switches on" for the inputs in a known
interval ("bin") of h, and the gradient (or FedAvg weight change) of the block's weight and bias
holds the sum of the inputs in each bin; an input alone in its bin is read back verbatim by
:mod:`fedleak.attacks.imprint` (Eq. 4), without any optimization.

What is here (the server's side):

* :func:`linear_function` — h: mean brightness, a DCT-II basis vector, a Gaussian random
  direction (App. A.2).
* :class:`Distribution` — the server's belief about h: Gaussian or unit-variance Laplacian CDF
  (loc/scale assumed or fitted), or an empirical CDF fitted on a few surrogate inputs (App. A.2,
  Fig. 5), smoothed by a Gaussian kernel so that quantiles exist at any mass.
* :class:`ImprintBlock` — linear + ReLU (cumulative bins, §3.3) or a thresholding nonlinearity
  (``hardtanh`` or two ReLUs, the sparse FedAvg variant of §4.3), followed by a connection whose
  effect is identical for every row, so ∂L/∂bᵢ is the same function of each input for all rows
  (App. B): ``add`` (the input plus a multiple of the summed activations) or ``linear`` (a linear
  layer with identical row elements).
* :class:`Imprinted` — a model with the block in front (§3.3, §4.1) or in front of / after any
  submodule (§4.3 "flexible placement"; after the token embeddings of a language model, App.
  A.4). It exposes the server's secrets with :meth:`Imprinted.imprint_secrets`.
* :func:`imprint` — builds one from any model; structures ``cumulative`` (§3.3), ``sparse``
  (§4.3), ``one-shot`` (§4.2, bins fused to two rows) and ``cah`` (the trap weights of Boenisch et
  al., "When the Curious Abandon Honesty", compared in App. A.8).
* :func:`linearize_resnet` — the deeper placement of §4.3 / App. A.5: the layers of a ResNet in
  front of the block become near-identity maps (BatchNorm reset, residual paths zeroed, first and
  shortcut convolutions Dirac on the first three channels, ReLUs bypassed by bias shifting).

**Secrets.** Which parameters form the block, the row order (rows are randomly permuted, §3.3)
and the bin edges are the server's secrets. They are fixed when the model is built and returned
by ``model.imprint_secrets()`` (a JSON-able dict, format ``fedleak.imprint/1``); the attack takes
them from ``update.metadata["imprint"]`` when the server recorded them there, else from the model
it is given (the server's own copy). Nothing in them depends on client data.
"""

from __future__ import annotations

import copy
import sys
import types
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec
from .registry import build as build_model
from .registry import register

LINFUNCS = ("mean", "randn", "dct")
CDFS = ("gaussian", "laplace", "empirical")
STRUCTURES = ("cumulative", "sparse", "one-shot", "cah")
CONNECTIONS = ("add", "linear")
THRESHOLDS = ("hardtanh", "two-relu")
ONE_SHOT = ("sparse", "cumulative")
SIDES = ("before", "after")
SECRETS_FORMAT = "fedleak.imprint/1"

__all__ = [
    "Distribution", "ImprintBlock", "Imprinted", "Threshold", "imprint", "linear_function",
    "linearize_resnet", "LINFUNCS", "CDFS", "STRUCTURES", "CONNECTIONS",
]


def _choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise FedleakError(f"imprint option {name!r} must be one of {', '.join(allowed)}; got {value!r}")
    return value


def _positive(name: str, value: Any, integer: bool = False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if integer:
        ok = ok and float(value).is_integer()
    if not ok:
        kind = "a positive integer" if integer else "a positive number"
        raise FedleakError(f"imprint option {name!r} must be {kind}, got {value!r}")
    return int(value) if integer else float(value)


# ----------------------------------------------------------------------------------------------
# the measured quantity h and the server's belief about its distribution


def linear_function(kind: str, numel: int, *, mode: int = 32,
                    generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """The weights ``w`` (float64, ``numel``) of the linear measurement h(x) = ⟨w, x⟩ (App. A.2).

    * ``mean``: average brightness, w = 1/m (§3.3).
    * ``dct``: the DCT-II basis vector of frequency ``mode`` over the flattened input (a cosine
      wave, as the paper's "32nd DCT coefficient" and breaching's ``fourier``), unit norm.
    * ``randn``: a Gaussian random direction, standardized to mean 0 and std 1/√m, so h is close
      to N(0, 1) for unit-variance inputs (App. A.2, Fig. 6 right).
    """
    _choice("linfunc", kind, LINFUNCS)
    numel = _positive("input size", numel, integer=True)
    if kind == "mean":
        return torch.full((numel,), 1.0 / numel, dtype=torch.float64)
    if kind == "dct":
        if isinstance(mode, bool) or not isinstance(mode, int) or not 0 < mode < numel:
            raise FedleakError(f"imprint option 'mode' must be an integer in 1..{numel - 1}, got {mode!r}")
        j = torch.arange(numel, dtype=torch.float64)
        w = torch.cos(math.pi / numel * (j + 0.5) * mode)
        return w / w.norm()
    if numel < 2:
        raise FedleakError("a random linear function needs at least 2 input features")
    r = torch.randn(numel, generator=generator, dtype=torch.float64)
    return (r - r.mean()) / r.std() / math.sqrt(numel)


@dataclass(frozen=True)
class Distribution:
    """The server's model of the distribution of h (§3.3: "some information about the CDF").

    ``gaussian``: N(loc, scale²). ``laplace``: Laplace with mean ``loc`` and standard deviation
    ``scale`` (b = scale/√2; App. A.2 uses b = 1/√2 for unit variance). ``empirical``: the CDF of
    the surrogate values ``samples`` smoothed by a Gaussian kernel of width ``bandwidth``
    (Silverman's rule), so that quantiles of any mass exist (App. A.2, Fig. 5: a small amount of
    surrogate data suffices). ``loc``/``scale`` default to 0/1, the paper's assumption for
    normalized data.
    """

    kind: str = "gaussian"
    loc: float = 0.0
    scale: float = 1.0
    samples: tuple = ()
    bandwidth: float = 0.0

    def __post_init__(self) -> None:
        _choice("cdf", self.kind, CDFS)
        if not (math.isfinite(self.loc) and math.isfinite(self.scale) and self.scale > 0):
            raise FedleakError(f"distribution loc/scale must be finite with scale > 0, got {self.loc}, {self.scale}")
        if self.kind == "empirical" and (len(self.samples) < 2 or not self.bandwidth > 0):
            raise FedleakError("an empirical CDF needs at least 2 distinct surrogate values")

    @classmethod
    def fit(cls, kind: str, values) -> "Distribution":
        """Fit ``kind`` to surrogate values of h (mean/std, or the kernel-smoothed empirical CDF)."""
        _choice("cdf", kind, CDFS)
        h = np.sort(np.asarray(torch.as_tensor(values).detach().double().cpu(), dtype=np.float64).ravel())
        if h.size < 2 or not np.isfinite(h).all():
            raise FedleakError(f"fitting the distribution of h needs at least 2 finite surrogate values, got {h.size}")
        loc, scale = float(h.mean()), float(h.std())
        if not scale > 0:
            raise FedleakError("the surrogate values of h are all equal; cannot fit a distribution")
        if kind != "empirical":
            return cls(kind, loc, scale)
        iqr = float(np.subtract(*np.percentile(h, [75, 25])))
        spread = min(scale, iqr / 1.349) if iqr > 0 else scale
        bandwidth = 0.9 * spread * h.size ** -0.2
        return cls(kind, loc, scale, tuple(h.tolist()), bandwidth)

    def cdf(self, x) -> np.ndarray:
        x = torch.as_tensor(np.asarray(x, dtype=np.float64))
        if self.kind == "gaussian":
            return torch.special.ndtr((x - self.loc) / self.scale).numpy()
        if self.kind == "laplace":
            z = (x - self.loc) * math.sqrt(2.0) / self.scale
            return torch.where(z < 0, 0.5 * torch.exp(z), 1 - 0.5 * torch.exp(-z)).numpy()
        samples = torch.tensor(self.samples, dtype=torch.float64)
        return torch.special.ndtr((x[..., None] - samples) / self.bandwidth).mean(-1).numpy()

    def quantile(self, q) -> np.ndarray:
        """F⁻¹(q) for masses ``q`` in (0, 1)."""
        q = np.asarray(q, dtype=np.float64)
        if np.any((q <= 0) | (q >= 1)):
            raise FedleakError("quantiles are defined for masses strictly between 0 and 1")
        p = torch.as_tensor(q)
        if self.kind == "gaussian":
            return (self.loc + self.scale * torch.special.ndtri(p)).numpy()
        if self.kind == "laplace":
            b = self.scale / math.sqrt(2.0)
            return (self.loc - b * torch.sign(p - 0.5) * torch.log1p(-2 * (p - 0.5).abs())).numpy()
        samples = np.asarray(self.samples)
        lo = np.full(q.shape, samples[0] - 40 * self.bandwidth)
        hi = np.full(q.shape, samples[-1] + 40 * self.bandwidth)
        for _ in range(100):  # bisection on the smooth, strictly increasing CDF
            mid = 0.5 * (lo + hi)
            below = self.cdf(mid) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        return 0.5 * (lo + hi)

    def far(self, side: int) -> float:
        """A value of h beyond which the distribution has (numerically) no mass."""
        if self.kind == "empirical":
            spread = self.samples[-1] - self.samples[0] + self.scale
            return float(self.samples[-1] + spread) if side > 0 else float(self.samples[0] - spread)
        return self.loc + side * 40.0 * self.scale

    def to_json(self) -> dict:
        return {"kind": self.kind, "loc": self.loc, "scale": self.scale,
                "surrogates": len(self.samples), "bandwidth": self.bandwidth}


# ----------------------------------------------------------------------------------------------
# the block


class Threshold(nn.Module):
    """g(t) = min(max(t, 0), gain): the thresholding nonlinearity of the sparse variant (§4.3).

    ``hardtanh``: ``nn.Hardtanh(0, gain)``; ``two-relu``: ReLU(t) − ReLU(t − gain), the same
    function built from two ReLUs (the paper's "combination of two ReLUs").
    """

    def __init__(self, gain: float = 1.0, kind: str = "hardtanh") -> None:
        super().__init__()
        self.gain = float(gain)
        self.kind = _choice("threshold", kind, THRESHOLDS)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        if self.kind == "hardtanh":
            return nn.functional.hardtanh(t, 0.0, self.gain)
        return nn.functional.relu(t) - nn.functional.relu(t - self.gain)

    def extra_repr(self) -> str:
        return f"gain={self.gain}, kind={self.kind}"


class ImprintBlock(nn.Module):
    """Linear (m → k) + nonlinearity + a connection back to the input shape (§3.3, App. B).

    ``connection="add"``: output = x + s·Σᵢ aᵢ (every entry of x gets the same scalar; "the sum of
    the outputs of the imprint module can be added to the next layer", §3.3), so the downstream
    network still sees the input. ``connection="linear"``: output = V·a + c reshaped to the input
    shape, with V's rows made of identical elements (App. B). In both, ∂L/∂aᵢ is the same for all
    rows i, which Eq. 4's differences of successive rows need.
    """

    def __init__(self, input_shape: Sequence[int], bins: int, nonlinearity: nn.Module,
                 connection: str = "add", connection_scale: float = 1.0) -> None:
        super().__init__()
        self.input_shape = tuple(int(s) for s in input_shape)
        numel = math.prod(self.input_shape)
        self.linear = nn.Linear(numel, bins)
        self.nonlinearity = nonlinearity
        self.connection = _choice("connection", connection, CONNECTIONS)
        self.connection_scale = float(connection_scale)
        self.out = nn.Linear(bins, numel) if connection == "linear" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[1:]) != self.input_shape:
            raise FedleakError(f"imprint block expects inputs of shape (N, {', '.join(map(str, self.input_shape))}), "
                               f"got {tuple(x.shape)}")
        a = self.nonlinearity(self.linear(x.flatten(1)))
        if self.out is not None:
            return self.out(a).view_as(x)
        offset = self.connection_scale * a.sum(1)
        return x + offset.view(-1, *([1] * (x.dim() - 1)))


class _Before:
    """Forward pre-hook running the block on a submodule's input (deep-copies with the model)."""

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, module, args):
        return (self.block(args[0]), *args[1:])


class _After:
    """Forward hook running the block on a submodule's output."""

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, module, args, output):
        return self.block(output)


class Imprinted(nn.Module):
    """A model carrying an imprint block; parameters ``imprint.*`` then ``base.*``.

    With ``position=""`` the block runs on the model input (§3.3); otherwise in front of
    (``side="before"``) or after the submodule ``base.<position>`` (§4.3, App. A.4), wired by a
    forward hook so that the base model keeps its parameter names. :meth:`imprint_secrets` returns
    what the server knows about the block (see the module docstring).
    """

    def __init__(self, base: nn.Module, block: ImprintBlock, secrets: dict, position: str = "",
                 side: str = "before") -> None:
        super().__init__()
        self.imprint = block
        self.base = base
        self.position = position
        self.side = _choice("side", side, SIDES)
        self._secrets = copy.deepcopy(secrets)
        if position:
            target = _submodule(base, position)
            if side == "before":
                target.register_forward_pre_hook(_Before(block))
            else:
                target.register_forward_hook(_After(block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x if self.position else self.imprint(x))

    def imprint_secrets(self) -> dict:
        """The server's secrets about the block (JSON-able; format ``fedleak.imprint/1``)."""
        return copy.deepcopy(self._secrets)


def _submodule(model: nn.Module, path: str) -> nn.Module:
    try:
        return model.get_submodule(path)
    except AttributeError:
        names = [n for n, _ in model.named_modules() if n]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise FedleakError(f"model {type(model).__name__} has no submodule {path!r}; submodules: {shown}") from None


# ----------------------------------------------------------------------------------------------
# deeper placement in a ResNet (§4.3, App. A.5)


def linearize_resnet(model: nn.Module, position: str, shift: float = 10.0, channels: int = 3) -> int:
    """Make every layer of a fedleak ResNet in front of ``position`` a near-identity map, in place.

    App. A.5: BatchNorm parameters and buffers reset to the identity, residual paths zeroed, the
    first convolution and the shortcut convolutions set to identity (Dirac) maps on the first
    ``channels`` channels (all others zero); the nonlinearities are bypassed by bias shifting
    (Goldblum et al. 2020): the BatchNorms feeding a ReLU add ``shift`` to those channels, so the
    features stay positive. Downsampling stays (stride-2 shortcuts keep every second pixel), so
    the block sees the input subsampled by the returned stride, plus ``shift``. In train mode the
    BatchNorms still standardize each channel with the batch statistics (an affine map shared by
    the whole batch).
    """
    from .zoo import ResNet

    if not isinstance(model, ResNet):
        raise FedleakError(f"linearizing the layers in front of a deep imprint block is implemented for the "
                           f"fedleak ResNet family (resnet18, resnet20, ...), not {type(model).__name__}")
    names = [n for n, _ in model.named_modules()]
    if position not in names or position in ("", "conv1", "bn1", "relu"):
        stages = [n for n in names if n.startswith("layer") and n.count(".") <= 1] + ["avgpool"]
        raise FedleakError(f"cannot place a linearized imprint block at {position!r}; use a stage or block of "
                           f"the ResNet: {', '.join(stages)}")
    if model.conv1.in_channels < channels or model.conv1.out_channels < channels:
        raise FedleakError(f"linearization keeps {channels} channels; the stem has "
                           f"{model.conv1.in_channels}->{model.conv1.out_channels}")
    from .zoo import BasicBlock

    index = names.index(position)
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, BasicBlock)]
    for name, _ in blocks:
        if position.startswith(name + "."):
            raise FedleakError(f"position {position!r} is inside the residual block {name!r}; "
                               f"place the block in front of a whole block or stage")
    with torch.no_grad():
        _dirac(model.conv1, channels)
        _identity_bn(model.bn1, channels, shift)
        stride = 1
        for name, block in blocks:
            if names.index(name) >= index:
                break
            block.conv1.weight.zero_()
            block.conv2.weight.zero_()
            _identity_bn(block.bn1, 0, 0.0)
            _identity_bn(block.bn2, 0, 0.0)
            if block.downsample is not None:
                conv, bn = block.downsample[0], block.downsample[1]
                _dirac(conv, channels)
                _identity_bn(bn, channels, shift)
                stride *= conv.stride[0]
    return stride


def _dirac(conv: nn.Conv2d, channels: int) -> None:
    conv.weight.zero_()
    kh, kw = conv.kernel_size
    for c in range(channels):
        conv.weight[c, c, kh // 2, kw // 2] = 1.0
    if conv.bias is not None:
        conv.bias.zero_()


def _identity_bn(bn: nn.BatchNorm2d, channels: int, shift: float) -> None:
    bn.weight.fill_(1.0)
    bn.bias.zero_()
    bn.bias[:channels] = shift
    bn.running_mean.zero_()
    bn.running_var.fill_(1.0)


# ----------------------------------------------------------------------------------------------
# building an imprinted model


def _input_shape_at(model: nn.Module, spec: DataSpec, position: str, side: str, example: Optional[torch.Tensor]):
    """Shape (without batch) of the tensor the block sees at ``position``."""
    if not position:
        return tuple(spec.shape)
    captured = {}
    target = _submodule(model, position)

    def grab(module, args, output=None):
        captured["x"] = (output if side == "after" else args[0])

    handle = target.register_forward_hook(grab) if side == "after" else target.register_forward_pre_hook(grab)
    first = next(model.parameters())
    if example is None:
        example = torch.zeros(2, *spec.shape, dtype=first.dtype, device=first.device)
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(example[:2])
    finally:
        handle.remove()
        model.train(training)
    if "x" not in captured or not isinstance(captured["x"], torch.Tensor):
        raise FedleakError(f"submodule {position!r} was not called with a tensor in the forward pass")
    return tuple(captured["x"].shape[1:])


def _features_at(model: nn.Module, position: str, side: str, inputs: torch.Tensor) -> torch.Tensor:
    """What the block would see at ``position`` for ``inputs`` (train mode, as the client trains)."""
    if not position:
        return inputs
    probe = copy.deepcopy(model)  # train-mode BatchNorm would update the model's running statistics
    captured = {}

    def grab(module, args, output=None):
        captured["x"] = (output if side == "after" else args[0]).detach()

    target = probe.get_submodule(position)
    target.register_forward_hook(grab) if side == "after" else target.register_forward_pre_hook(grab)
    probe.train()
    with torch.no_grad():
        probe(inputs)
    return captured["x"]


def _box(spec: DataSpec, shape: tuple, dtype=torch.float64) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
    """Per-entry bounds of valid normalized images of ``spec`` (``None`` for other inputs)."""
    if tuple(shape) != tuple(spec.shape):
        return None
    lo, hi = spec.pixel_range
    mean = torch.tensor(spec.mean, dtype=dtype).view(-1, 1, 1)
    std = torch.tensor(spec.std, dtype=dtype).view(-1, 1, 1)
    low = ((lo - mean) / std).expand(*shape).reshape(-1)
    high = ((hi - mean) / std).expand(*shape).reshape(-1)
    return low, high


def _support(w: torch.Tensor, box) -> Optional[tuple[float, float]]:
    """min and max of h = ⟨w, x⟩ over the box of valid inputs."""
    if box is None:
        return None
    low, high = box
    a, b = w * low, w * high
    return float(torch.minimum(a, b).sum()), float(torch.maximum(a, b).sum())


def _edges(dist: Distribution, masses: Sequence[float], support) -> np.ndarray:
    """Bin edges e₀ < … < e_k with the given bin masses (Σ = 1); outer edges at the support."""
    cum = np.cumsum(np.asarray(masses, dtype=np.float64))[:-1]
    inner = dist.quantile(np.clip(cum, 1e-15, 1 - 1e-15))
    low = support[0] if support is not None else dist.far(-1)
    high = support[1] if support is not None else dist.far(+1)
    low, high = min(low, inner[0] - 1e-9 * abs(inner[0]) - 1e-12), max(high, inner[-1] + 1e-9 * abs(inner[-1]) + 1e-12)
    edges = np.concatenate([[low], inner, [high]])
    if not np.all(np.diff(edges) > 0):
        raise FedleakError("the bin edges are not increasing (too many bins for the fitted distribution of h?)")
    return edges


def imprint(
    model: nn.Module,
    spec: DataSpec,
    *,
    bins: int = 128,
    structure: str = "cumulative",
    linfunc: str = "mean",
    cdf: str = "gaussian",
    surrogate: Optional[torch.Tensor] = None,
    loc: Optional[float] = None,
    scale: Optional[float] = None,
    position: Optional[str] = None,
    side: str = "before",
    linearize: Optional[bool] = None,
    shift: float = 10.0,
    connection: str = "add",
    connection_scale: Optional[float] = None,
    gain: float = 1.0,
    threshold: str = "hardtanh",
    permute: bool = True,
    mode: int = 32,
    target: float = 0.5,
    one_shot: str = "sparse",
    cah_sigma: float = 0.5,
    cah_scale: float = 0.95,
    cah_bias: float = 0.0,
    seed: int = 0,
) -> Imprinted:
    """Return a copy of ``model`` with an imprint block (the server's malicious model).

    Structures:

    * ``cumulative`` (§3.3): k rows ⟨Wᵢ, x⟩ + bᵢ = gain·(h(x) − cᵢ) with ReLU, c₀ below every
      valid input and cᵢ = F⁻¹(i/k); row i fires for h > cᵢ, and the difference of successive rows'
      gradients isolates bin [cᵢ, cᵢ₊₁) (Eq. 4).
    * ``sparse`` (§4.3): rows gain·(h(x) − cᵢ)/δᵢ with δᵢ = cᵢ₊₁ − cᵢ, i.e. bias bᵢ = −gain·cᵢ/δᵢ,
      and the thresholding nonlinearity g(t) = clamp(t, 0, gain): only inputs inside bin i get a
      gradient in row i, so no differences are needed and bins drift little during FedAvg's local
      steps (``gain`` is the paper's row scaling c₀).
    * ``one-shot`` (§4.2): k *virtual* equal-mass bins fused into two rows. ``one_shot="sparse"``
      (default): two thresholded rows holding the two virtual bins on either side of the quantile
      ``target`` — two one-shot bins of mass 1/k each, placed where the server knows the density of
      h well. ``one_shot="cumulative"``: the paper's construction, two ReLU rows at F⁻¹(target) and
      F⁻¹(target + 1/k): one bin of mass 1/k plus the remaining mass above it (use
      ``target = 1 − 2/k`` to make the remainder a second one-shot bin).
    * ``cah``: the trap weights of Boenisch et al. (App. A.8): for each row a random half of the
      (pixel-space) inputs get −|N(0, σ²)|, the others ``cah_scale``·|N(0, σ²)|, bias ``cah_bias``,
      ReLU; rows are not bins.

    h is :func:`linear_function` ``linfunc``; its distribution :class:`Distribution` ``cdf`` is
    fitted on ``surrogate`` inputs (a few normalized inputs the server owns) when given, else uses
    ``loc``/``scale`` (defaults 0/1, the paper's assumption). ``position`` places the block in
    front of (``side="before"``) or after that submodule instead of in front of the model; for a
    fedleak ResNet the layers in front are linearized (``linearize``, default True there) and h
    measures the first three channels of the features minus ``shift``. Rows are randomly permuted
    (``permute``). The ``add`` connection scale defaults to 1/(k·gain). Device and dtype follow
    ``model``; the result is deterministic in ``seed``.
    """
    if not isinstance(model, nn.Module):
        raise FedleakError(f"imprint needs a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(spec, DataSpec):
        raise FedleakError(f"imprint needs a fedleak.DataSpec, got {type(spec).__name__}")
    if isinstance(model, Imprinted):
        raise FedleakError("this model already carries an imprint block")
    structure = _choice("structure", structure, STRUCTURES)
    _choice("linfunc", linfunc, LINFUNCS)
    _choice("cdf", cdf, CDFS)
    _choice("connection", connection, CONNECTIONS)
    _choice("one_shot", one_shot, ONE_SHOT)
    _choice("side", side, SIDES)
    bins = _positive("bins", bins, integer=True)
    gain = _positive("gain", gain)
    shift = _positive("shift", shift)
    if structure in ("cumulative", "sparse", "cah") and bins < 2:
        raise FedleakError(f"an imprint block needs at least 2 bins, got {bins}")
    if structure == "one-shot" and bins < 3:
        raise FedleakError(f"the one-shot block fuses k >= 3 virtual bins, got {bins}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise FedleakError(f"imprint seed must be an integer, got {seed!r}")
    if cdf == "empirical" and surrogate is None:
        raise FedleakError("cdf='empirical' needs surrogate inputs to fit the distribution of h")
    if surrogate is not None and (loc is not None or scale is not None):
        raise FedleakError("give either surrogate inputs or loc/scale for the distribution of h, not both")

    first = next(model.parameters(), None)
    if first is None:
        raise FedleakError("the model has no parameters")
    dtype, device = first.dtype, first.device
    base = copy.deepcopy(model)
    position = position or ""
    if position:
        _submodule(base, position)
    if linearize is None:
        from .zoo import ResNet

        linearize = bool(position) and isinstance(base, ResNet)
    features = None
    if linearize:
        if not position:
            raise FedleakError("linearize=True needs a position for the block")
        stride = linearize_resnet(base, position, shift=shift)
        features = {"channels": 3, "shift": shift, "stride": stride, "input_shape": list(spec.shape)}
    if surrogate is not None:
        surrogate = torch.as_tensor(surrogate).to(device=device, dtype=dtype)
        if not position and tuple(surrogate.shape[1:]) != tuple(spec.shape):
            raise FedleakError(f"surrogate inputs have shape {tuple(surrogate.shape)}, expected (N, "
                               f"{', '.join(map(str, spec.shape))})")
        if surrogate.dim() < 2 or surrogate.shape[0] < 2:
            raise FedleakError("fitting the distribution of h needs at least 2 surrogate inputs")
    shape = _input_shape_at(base, spec, position, side, surrogate)
    numel = math.prod(shape)

    generator = torch.Generator().manual_seed(seed)
    # h: on the features' first three channels (deep placement), else on the whole block input.
    if features is not None:
        sub_shape = (3, *shape[1:])
        w_sub = linear_function(linfunc, math.prod(sub_shape), mode=mode, generator=generator)
        w = torch.zeros(shape, dtype=torch.float64)
        w[:3] = w_sub.view(sub_shape)
        w = w.reshape(-1)
        offset = shift * float(w_sub.sum())  # h of the features = h of the subsampled input + offset
    else:
        w = linear_function(linfunc, numel, mode=mode, generator=generator)
        offset = 0.0

    box = _box(spec, shape) if not position else None
    if surrogate is not None:
        feats = _features_at(base, position, side, surrogate) if position else surrogate
        h_values = feats.flatten(1).double().cpu() @ w
        dist = Distribution.fit(cdf, h_values)
    else:
        dist = Distribution(cdf, (loc if loc is not None else 0.0) + offset, scale if scale is not None else 1.0)
    support = _support(w, box)

    rows_w, rows_b, secrets_bins, masses = _design(structure, bins, w, dist, support, gain, one_shot, target,
                                                   spec, shape, box, generator, cah_sigma, cah_scale, cah_bias)
    k = rows_w.shape[0]
    order = torch.randperm(k, generator=generator) if permute else torch.arange(k)
    if structure == "cah":
        nonlinearity: nn.Module = nn.ReLU()
    elif structure == "sparse" or (structure == "one-shot" and one_shot == "sparse"):
        nonlinearity = Threshold(gain, threshold)
    else:
        nonlinearity = nn.ReLU()
    if connection_scale is None:
        connection_scale = 1.0 / (k * gain)
    connection_scale = _positive("connection_scale", connection_scale)
    block = ImprintBlock(shape, k, nonlinearity, connection, connection_scale)
    with torch.no_grad():
        weight = torch.empty_like(rows_w)
        bias = torch.empty_like(rows_b)
        weight[order] = rows_w
        bias[order] = rows_b
        block.linear.weight.copy_(weight)
        block.linear.bias.copy_(bias)
        if block.out is not None:
            block.out.weight.fill_(connection_scale)
            block.out.bias.zero_()
    block = block.to(device=device, dtype=dtype)

    prefix = "imprint.linear."
    secrets = {
        "format": SECRETS_FORMAT,
        "structure": structure,
        "nonlinearity": "relu" if isinstance(nonlinearity, nn.ReLU) else "threshold",
        "weight": prefix + "weight",
        "bias": prefix + "bias",
        "input_shape": list(shape),
        "order": order.tolist(),
        "bins": secrets_bins,
        "masses": masses,
        "linfunc": linfunc,
        "distribution": dist.to_json(),
        "gain": gain,
        "position": position,
        "side": side,
        "features": features,
        "box": None if box is None else [list(spec.pixel_range), list(spec.mean), list(spec.std)],
        "virtual_bins": bins if structure == "one-shot" else None,
        "one_shot": one_shot if structure == "one-shot" else None,
        "tokens": _tokens(base, position, side),
        "seed": seed,
    }
    result = Imprinted(base, block, secrets, position, side).to(device=device)
    result.train(model.training)
    return result


def _tokens(base: nn.Module, position: str, side: str) -> Optional[dict]:
    """Text placement (App. A.4): a block right after a token embedding reads embeddings back."""
    if position and side == "after" and isinstance(base.get_submodule(position), nn.Embedding):
        return {"embedding": f"base.{position}.weight"}
    return None


def _design(structure, bins, w, dist, support, gain, one_shot, target, spec, shape, box, generator,
            cah_sigma, cah_scale, cah_bias):
    """Rows (in bin order), their biases, per-bin secrets and design masses for ``structure``."""
    if structure == "cah":
        return _trap_weights(bins, spec, shape, box, generator, cah_sigma, cah_scale, cah_bias)
    if structure == "one-shot":
        target = float(target)
        if not 0 < target < 1:
            raise FedleakError(f"one-shot target must be a quantile in (0, 1), got {target}")
        m = 1.0 / bins
        if one_shot == "sparse":
            if not (m < target < 1 - m):
                raise FedleakError(f"one-shot target {target} leaves no room for two bins of mass 1/{bins}")
            edges = dist.quantile([target - m, target, target + m])
            pairs = [(edges[0], edges[1]), (edges[1], edges[2])]
            return _sparse_rows(w, pairs, gain) + ([m, m],)
        if not target + m < 1:
            raise FedleakError(f"one-shot target {target} + 1/{bins} must stay below 1")
        edges = dist.quantile([target, target + m])
        upper = support[1] if support is not None else dist.far(+1)
        pairs = [(edges[0], edges[1]), (edges[1], upper)]
        return _cumulative_rows(w, pairs, gain) + ([m, 1.0 - target - m],)
    masses = [1.0 / bins] * bins
    edges = _edges(dist, masses, support)
    pairs = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    if structure == "cumulative":
        return _cumulative_rows(w, pairs, gain) + (masses,)
    return _sparse_rows(w, pairs, gain) + (masses,)


def _cumulative_rows(w, pairs, gain):
    lows = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    rows = gain * w.expand(len(pairs), -1).clone()
    biases = -gain * lows
    info = [{"low": float(a), "high": float(b), "row_scale": gain} for a, b in pairs]
    return rows, biases, info


def _sparse_rows(w, pairs, gain):
    lows = torch.tensor([p[0] for p in pairs], dtype=torch.float64)
    widths = torch.tensor([p[1] - p[0] for p in pairs], dtype=torch.float64)
    if not bool((widths > 0).all()):
        raise FedleakError("sparse imprint bins need positive widths")
    scales = gain / widths
    rows = scales[:, None] * w[None, :]
    biases = -scales * lows
    info = [{"low": float(a), "high": float(b), "row_scale": float(s)} for (a, b), s in zip(pairs, scales)]
    return rows, biases, info


def _trap_weights(bins, spec, shape, box, generator, sigma, scale, bias):
    """CAH trap weights (Boenisch et al. 2021, §4; breaching PR #15's sign sampling).

    In pixel space u = x·std + mean (u ≥ 0 for images), each row has a random half of negative
    entries −|N(0, σ²)| and the rest scale·|N(0, σ²)|; as a layer on normalized inputs this is
    W·diag(std) with bias b + W·mean.
    """
    sigma = _positive("cah_sigma", sigma)
    scale = _positive("cah_scale", scale)
    numel = math.prod(shape)
    mags = torch.randn(bins, numel, generator=generator, dtype=torch.float64).abs() * sigma
    negative = torch.rand(bins, numel, generator=generator, dtype=torch.float64).argsort(1) < numel // 2
    rows = torch.where(negative, -mags, scale * mags)
    biases = torch.full((bins,), float(bias), dtype=torch.float64)
    if box is not None:
        mean = torch.tensor(spec.mean, dtype=torch.float64).view(-1, 1, 1).expand(*shape).reshape(-1)
        std = torch.tensor(spec.std, dtype=torch.float64).view(-1, 1, 1).expand(*shape).reshape(-1)
        biases = biases + rows @ mean
        rows = rows * std
    info = [{"low": None, "high": None, "row_scale": None} for _ in range(bins)]
    return rows, biases, info, [None] * bins


# ----------------------------------------------------------------------------------------------
# the registered malicious model


@register("imprint", "Robbing the Fed (Fowl et al. 2022): an imprint block (cumulative / sparse / one-shot / "
                     "CAH trap weights) in front of or inside a zoo model (base option, default resnet18)")
def imprinted(spec: DataSpec, *, base: str = "resnet18", base_options: Optional[dict] = None, bins: int = 128,
              structure: str = "cumulative", linfunc: str = "mean", cdf: str = "gaussian",
              loc: Optional[float] = None, scale: Optional[float] = None, position: Optional[str] = None,
              side: str = "before", connection: str = "add", connection_scale: Optional[float] = None,
              gain: float = 1.0, threshold: str = "hardtanh", permute: bool = True, mode: int = 32,
              target: float = 0.5, one_shot: str = "sparse", cah_sigma: float = 0.5, cah_scale: float = 0.95,
              surrogate_root: Optional[str] = None, surrogate_split: str = "test",
              surrogate_count: int = 256) -> Imprinted:
    """``fedleak.models.build("imprint", spec, seed, base=..., bins=..., ...)``: see :func:`imprint`.

    The base model and the block are both deterministic in the build seed. With
    ``surrogate_root`` the distribution of h is fitted on ``surrogate_count`` inputs of the
    dataset ``spec.name`` from ``surrogate_split`` (the server's own data, e.g. the test split),
    else ``loc``/``scale`` describe it.
    """
    if not isinstance(base, str) or base == "imprint":
        raise FedleakError(f"imprint option 'base' must name a zoo model, got {base!r}")
    seeds = torch.randint(0, 2**31 - 1, (2,)).tolist()
    model = build_model(base, spec, seed=int(seeds[0]), **(base_options or {}))
    surrogate = None
    if surrogate_root is not None:
        from ..data import load

        count = _positive("surrogate_count", surrogate_count, integer=True)
        _, clients = load(spec.name, root=surrogate_root, num_clients=1, samples_per_client=count, seed=0,
                          split=surrogate_split)
        surrogate = clients[0].inputs
    return imprint(model, spec, bins=bins, structure=structure, linfunc=linfunc, cdf=cdf, surrogate=surrogate,
                   loc=loc, scale=scale, position=position, side=side, connection=connection,
                   connection_scale=connection_scale, gain=gain, threshold=threshold, permute=permute, mode=mode,
                   target=target, one_shot=one_shot, cah_sigma=cah_sigma, cah_scale=cah_scale, seed=int(seeds[1]))


class _CallableModule(types.ModuleType):
    """Lets ``fedleak.models.imprint(model, spec, bins=k, ...)`` call :func:`imprint` while
    ``fedleak.models.imprint`` stays this module (``fedleak.models.imprint.ImprintBlock`` etc.)."""

    def __call__(self, *args, **kwargs) -> Imprinted:
        return imprint(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
