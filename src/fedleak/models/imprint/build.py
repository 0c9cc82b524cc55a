"""Building an imprinted model from any model: :func:`imprint` (Fowl et al. 2022, §3.3, §4.1-4.3).

Validates the options, places the block (:mod:`.placement`), fits or assumes the distribution of
h (:mod:`.distribution`), designs the rows (:mod:`.bins`), permutes them (§3.3) and records the
server's secrets (format ``fedleak.imprint/1``).
"""

from __future__ import annotations

import copy
import math
from typing import Optional

import torch
from torch import nn

from ...errors import FedleakError
from ...types import DataSpec
from .bins import bin_box, _design, bin_support
from .block import Imprinted, ImprintBlock, Threshold, _submodule
from .distribution import Distribution, linear_function
from .options import CDFS, CONNECTIONS, LINFUNCS, ONE_SHOT, SECRETS_FORMAT, SIDES, STRUCTURES, check_choice, check_positive
from .placement import _features_at, _input_shape_at, _tokens, linearize_resnet


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
    structure = check_choice("structure", structure, STRUCTURES)
    check_choice("linfunc", linfunc, LINFUNCS)
    check_choice("cdf", cdf, CDFS)
    check_choice("connection", connection, CONNECTIONS)
    check_choice("one_shot", one_shot, ONE_SHOT)
    check_choice("side", side, SIDES)
    bins = check_positive("bins", bins, integer=True)
    gain = check_positive("gain", gain)
    shift = check_positive("shift", shift)
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
        from ..resnet import ResNet

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

    box = bin_box(spec, shape) if not position else None
    if surrogate is not None:
        feats = _features_at(base, position, side, surrogate) if position else surrogate
        h_values = feats.flatten(1).double().cpu() @ w
        dist = Distribution.fit(cdf, h_values)
    else:
        dist = Distribution(cdf, (loc if loc is not None else 0.0) + offset, scale if scale is not None else 1.0)
    support = bin_support(w, box)

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
    connection_scale = check_positive("connection_scale", connection_scale)
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
