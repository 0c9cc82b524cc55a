"""Layer weights for update-matching distances: AGIC (Xu et al. 2022) and AWA (Song et al. 2023).

Every function works on the layers found by :func:`fedleak.types.params.layers` (parameterized modules
in registration order, each of kind ``conv`` / ``bn`` / ``fc`` / ``other``) and returns weights
keyed by parameter name (``named_parameters()``), the form :func:`~fedleak.attacks.losses.update_distance`
takes. All parameters of one module (weight and bias) share that module's weight.

**AGIC** (Xu et al., SRDS 2022, §IV-C):

* Eq. 7 — convolution i of N_conv (first to last) gets ``l_i = 1 + (β−1)(i−1)/(N_conv−1)``, the
  line through (1, 1) and (N_conv, β); :func:`conv_line` also gives Table I's other shapes
  through the same two points (``log``: a·log x + b, ``exp``: a·eˣ + b, ``constant``: 1).
  Table I's *decreasing* rows are the same shapes with β = 0.5 < 1 (:data:`TABLE_I`).
* Eq. 8 — with ReLU networks the zero modifier ``z_i = 1/(1 − p_i)``, p_i the fraction of exact
  zeros in layer i's *received* gradient; fully connected layers get ``mean_i l_i`` (without
  modifier).
* (our choice, research note agic-awa.md §3) BatchNorm parameters take the weight α of the
  convolution they follow (``bn="conv"``; ``"mean"`` gives them the FC weight, ``"one"`` 1);
  layers of kind ``other`` get the FC weight.

**AWA** (Song, Wang, Zuazua, arXiv 2308.06822, §4.2):

* Eq. 24 — type-wise linearly increasing weights: the j-th of N_t layers of type
  t ∈ {conv, bn, fc} gets ``ω_t · j / N_t`` (our choice of the exact line: through 0 and ω_t at the
  last layer of the type; the paper's formula was lost from our copy). ``other`` layers weigh 1.
* Eqs. 25–30 — enhancement: relative errors of each layer's mean and variance between the dummy
  and the true update; the ⌈p_μ·L⌉ layers with the largest mean error and the ⌈p_σ·L⌉ with the
  largest variance error; their intersection gets weight ω_enh (:func:`enhancement_subset`,
  :class:`EnhancedWeights`).
"""

from __future__ import annotations

import math
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import torch
from torch import nn

from ..errors import FedleakError, unknown_choice
from ..types.params import Layer, layers
from ..types import Params

AGIC_SHAPES = ("constant", "linear", "log", "exp")
BN_POLICIES = ("conv", "mean", "one")
AWA_TYPES = ("conv", "bn", "fc")

#: AGIC Table I rows (monotonicity-convexity) -> (shape, β) through (1, 1) and (N_conv, β).
TABLE_I: dict[str, tuple[str, float]] = {
    "constant": ("constant", 1.0),
    "decrease-convex": ("log", 0.5),     # −a·log x + b
    "decrease-concave": ("exp", 0.5),    # −a·eˣ + b
    "decrease-linear": ("linear", 0.5),  # −a·x + b
    "increase-convex": ("exp", 2.0),     # a·eˣ + b
    "increase-concave": ("log", 2.0),    # a·log x + b
    "increase-linear": ("linear", 2.0),  # a·x + b  (AGIC's choice, Eq. 7)
}


# ----------------------------------------------------------------------------------------------
# AGIC


def conv_line(num_conv: int, beta: float, shape: str = "linear") -> list[float]:
    """Weights l_1..l_N of the N convolution layers: a ``shape`` curve through (1, 1) and (N, β).

    ``linear`` is AGIC Eq. 7; ``log`` (a·log x + b), ``exp`` (a·eˣ + b) and ``constant`` (y = 1)
    are the other shapes of Table I. β < 1 gives the decreasing rows. With one convolution the
    two points coincide in x and its weight is 1.
    """
    if shape not in AGIC_SHAPES:
        raise unknown_choice("AGIC weight shape", shape, AGIC_SHAPES)
    if int(num_conv) != num_conv or num_conv < 0:
        raise FedleakError(f"number of convolution layers must be a non-negative integer, got {num_conv}")
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise FedleakError(f"AGIC weight ratio beta must be a positive finite number, got {beta!r}")
    n = int(num_conv)
    if n == 0:
        return []
    if n == 1 or shape == "constant":
        return [1.0] * n
    out = []
    for i in range(1, n + 1):
        if shape == "linear":
            t = (i - 1) / (n - 1)
        elif shape == "log":
            t = math.log(i) / math.log(n)
        else:  # exp: (eˣ − e)/(eᴺ − e), written with e^(x−N) so that large N does not overflow
            t = (math.exp(i - n) - math.exp(1 - n)) / (1.0 - math.exp(1 - n))
        out.append(1.0 + (beta - 1.0) * t)
    return out


def zero_fraction(tensors: Iterable[torch.Tensor], tol: float = 0.0) -> float:
    """Fraction p of entries with |g| ≤ ``tol`` (exact zeros by default) over all ``tensors``."""
    zeros = total = 0
    for t in tensors:
        zeros += int((t.detach().abs() <= tol).sum())
        total += t.numel()
    if total == 0:
        raise FedleakError("zero_fraction: no gradient entries")
    return zeros / total


def relu_modifier(p: float) -> float:
    """AGIC's zero modifier z = 1/(1 − p) (Eq. 8). A layer whose gradient is all zeros carries no
    information whatever its weight; it gets z = 1 instead of an infinite weight."""
    if not 0.0 <= p <= 1.0:
        raise FedleakError(f"zero proportion must lie in [0, 1], got {p}")
    return 1.0 if p >= 1.0 else 1.0 / (1.0 - p)


def uses_relu(model: nn.Module) -> bool:
    """Whether the model has ReLU modules (AGIC applies the zero modifier to ReLU CNNs only)."""
    return any(isinstance(m, (nn.ReLU, nn.ReLU6, nn.LeakyReLU)) for m in model.modules())


def agic_layer_weights(model: nn.Module, observed: Optional[Params] = None, *, beta: float = 50.0,
                       shape: str = "linear", relu: Optional[bool] = None, zero_tol: float = 0.0,
                       bn: str = "conv") -> dict[str, float]:
    """AGIC's layer weights α (Xu et al. Eqs. 7–8) keyed by parameter name.

    ``observed`` is the received (approximated) gradient, used for the zero proportions p_i;
    ``relu=None`` applies the modifier when the model has ReLU modules (and ``observed`` is
    given). Convolutions: α_i = l_i·z_i; fully connected (and ``other``) layers: mean_i l_i;
    BatchNorm per ``bn`` (see module docstring).
    """
    if bn not in BN_POLICIES:
        raise unknown_choice("BatchNorm weight policy", bn, BN_POLICIES)
    found = layers(model)
    convs = [layer for layer in found if layer.kind == "conv"]
    line = conv_line(len(convs), beta, shape)
    mean_l = sum(line) / len(line) if line else 1.0
    apply_relu = uses_relu(model) if relu is None else bool(relu)
    if apply_relu and observed is None:
        raise FedleakError("AGIC's ReLU modifier needs the received gradient (observed) for the zero proportions")
    conv_alpha: dict[str, float] = {}
    for layer, l_i in zip(convs, line):
        z = relu_modifier(zero_fraction([observed[n] for n in layer.param_names], zero_tol)) if apply_relu else 1.0
        conv_alpha[layer.module] = l_i * z
    weights: dict[str, float] = {}
    previous_conv: Optional[float] = None
    first_conv = next(iter(conv_alpha.values()), 1.0)
    for layer in found:
        if layer.kind == "conv":
            w = previous_conv = conv_alpha[layer.module]
        elif layer.kind == "bn":
            if bn == "conv":
                w = previous_conv if previous_conv is not None else first_conv
            elif bn == "mean":
                w = mean_l
            else:
                w = 1.0
        else:
            w = mean_l
        for name in layer.param_names:
            weights[name] = float(w)
    return weights


# ----------------------------------------------------------------------------------------------
# AWA


def awa_base_weights(model: nn.Module, omega_conv: float, omega_bn: float, omega_fc: float) -> dict[str, float]:
    """AWA Eq. 24: the j-th of N_t layers of type t gets ω_t·j/N_t; ``other`` layers weigh 1."""
    omegas = {"conv": omega_conv, "bn": omega_bn, "fc": omega_fc}
    for kind, value in omegas.items():
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise FedleakError(f"AWA weight omega_{kind} must be a positive finite number, got {value!r}")
    found = layers(model)
    totals = {kind: sum(layer.kind == kind for layer in found) for kind in AWA_TYPES}
    seen = {kind: 0 for kind in AWA_TYPES}
    weights: dict[str, float] = {}
    for layer in found:
        if layer.kind in omegas:
            seen[layer.kind] += 1
            w = omegas[layer.kind] * seen[layer.kind] / totals[layer.kind]
        else:
            w = 1.0
        for name in layer.param_names:
            weights[name] = float(w)
    return weights


def _flat(tensors: Params, layer: Layer) -> torch.Tensor:
    return torch.cat([tensors[n].detach().reshape(-1) for n in layer.param_names])


def relative_errors(simulated: Params, observed: Params, model_layers: Sequence[Layer],
                    eps: float = 1e-12) -> tuple[torch.Tensor, torch.Tensor]:
    """AWA Eqs. 25–26 per layer: |mean(Δθ') − mean(Δθ)|/|mean(Δθ)| and |var(Δθ') − var(Δθ)|/var(Δθ).

    Variances are population variances over the layer's entries; ``eps`` guards zero
    denominators. Returns two float64 tensors of length L on the CPU.
    """
    e_mu, e_sigma = [], []
    for layer in model_layers:
        a, b = _flat(simulated, layer).double(), _flat(observed, layer).double()
        e_mu.append(float((a.mean() - b.mean()).abs() / (b.mean().abs() + eps)))
        e_sigma.append(float((a.var(unbiased=False) - b.var(unbiased=False)).abs() / (b.var(unbiased=False) + eps)))
    return torch.tensor(e_mu, dtype=torch.float64), torch.tensor(e_sigma, dtype=torch.float64)


def _top(values: torch.Tensor, proportion: float) -> set[int]:
    count = math.ceil(proportion * values.numel() - 1e-9)
    if count <= 0:
        return set()
    # stable: ties keep the earlier layer first
    order = sorted(range(values.numel()), key=lambda i: (-float(values[i]), i))
    return set(order[:count])


def enhancement_subset(e_mu: torch.Tensor, e_sigma: torch.Tensor, p_mu: float, p_sigma: float) -> set[int]:
    """AWA Eqs. 28–30: indices of the ⌈p_μ·L⌉ largest e^μ ∩ the ⌈p_σ·L⌉ largest e^σ."""
    for name, p in (("p_mu", p_mu), ("p_sigma", p_sigma)):
        if not (isinstance(p, (int, float)) and 0.0 <= p <= 1.0):
            raise FedleakError(f"AWA proportion {name} must lie in [0, 1], got {p!r}")
    if e_mu.numel() != e_sigma.numel():
        raise FedleakError(f"AWA errors: {e_mu.numel()} mean errors but {e_sigma.numel()} variance errors")
    return _top(e_mu, p_mu) & _top(e_sigma, p_sigma)


class EnhancedWeights(Mapping[str, float]):
    """AWA's layer weights (Eq. 27): the Eq. 24 base weights, with ω_enh on the enhanced subset.

    A read-only mapping name -> weight that :func:`update_distance` reads every step;
    :meth:`refresh` recomputes the subset from the current dummy update (AWA recomputes it during
    the attack; how often is our choice, see :class:`fedleak.attacks.awa.Awa`).
    """

    def __init__(self, model: nn.Module, base: Mapping[str, float], omega_enh: float, p_mu: float, p_sigma: float):
        if not (isinstance(omega_enh, (int, float)) and math.isfinite(omega_enh) and omega_enh > 0):
            raise FedleakError(f"AWA weight omega_enh must be a positive finite number, got {omega_enh!r}")
        self.layers = layers(model)
        self.base = dict(base)
        self.omega_enh = float(omega_enh)
        self.p_mu, self.p_sigma = float(p_mu), float(p_sigma)
        self.enhanced: set[int] = set()
        self._current = dict(self.base)
        self.refreshes = 0

    def refresh(self, simulated: Params, observed: Params) -> set[int]:
        e_mu, e_sigma = relative_errors(simulated, observed, self.layers)
        self.enhanced = enhancement_subset(e_mu, e_sigma, self.p_mu, self.p_sigma)
        current = dict(self.base)
        for index in self.enhanced:
            for name in self.layers[index].param_names:
                current[name] = self.omega_enh
        self._current = current
        self.refreshes += 1
        return self.enhanced

    def enhanced_modules(self) -> list[str]:
        return [self.layers[i].module for i in sorted(self.enhanced)]

    def __getitem__(self, name: str) -> float:
        return self._current[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current)

    def __len__(self) -> int:
        return len(self._current)
