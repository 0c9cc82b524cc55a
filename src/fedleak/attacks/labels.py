"""Label and label-count inference from an update's last linear layer.

* :func:`idlg_label` — iDLG (Zhao et al. 2020): for one sample under cross-entropy the true
  class is the only row of the last layer's weight gradient with a negative sum (features after
  ReLU/sigmoid are non-negative); for FedAvg the pseudo-gradient Ĝ = (θˢ−θᶜ)/η keeps that sign.
* :func:`yin_labels` — Yin et al. 2021 (GradInversion): the N classes with the most negative
  per-row minimum; assumes distinct labels.

Label *counts* (Geng et al., Dimitrov et al.'s RecLabels) build on :func:`head_statistics`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.func import functional_call

from ..errors import FedleakError
from ..types.params import last_linear, weight_and_bias
from ..types import DataSpec, Params, Update


def _head_gradient(update: Update, model: nn.Module) -> torch.Tensor:
    weight_name, _ = weight_and_bias(last_linear(model))
    return update.pseudo_gradient()[weight_name]


def idlg_label(update: Update, model: nn.Module) -> torch.Tensor:
    """The single label of a batch of one (iDLG). Returns a (1,) long tensor."""
    grad = _head_gradient(update, model)
    return grad.sum(dim=-1).argmin().reshape(1)


def yin_labels(update: Update, model: nn.Module, num: Optional[int] = None) -> torch.Tensor:
    """N distinct labels ordered by the most negative row minimum (Yin et al. 2021, §3.1)."""
    grad = _head_gradient(update, model)
    num = update.num_samples if num is None else num
    if num > grad.shape[0]:
        raise FedleakError(f"Yin et al.'s rule gives distinct labels only; {num} samples but {grad.shape[0]} classes")
    return grad.min(dim=-1).values.argsort()[:num].sort().values


def head_statistics(model: nn.Module, params: Params, buffers: Params, inputs: torch.Tensor,
                    train_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean softmax p̄ (C,) and mean summed penultimate activation Ō (scalar) over ``inputs``.

    The penultimate features O are the input of the last linear layer (Geng et al.; research
    note §A.6 step 2), captured with a forward hook.
    """
    head = dict(model.named_modules())[last_linear(model).module]
    captured: list[torch.Tensor] = []
    hook = head.register_forward_hook(lambda _m, args, _out: captured.append(args[0]))
    previous = model.training
    model.train(train_mode)
    try:
        with torch.no_grad():
            logits = functional_call(model, {**params, **buffers}, (inputs,))
    finally:
        hook.remove()
        model.train(previous)
    features = captured[-1].flatten(1)
    return torch.softmax(logits, dim=-1).mean(0), features.sum(1).mean()


LABEL_STRATEGIES = ("known", "idlg", "yin", "reclabels", "optimize")


def known_labels(update: Update, num_classes: int) -> torch.Tensor:
    """Labels the threat model lets the server know, from ``update.metadata``.

    ``metadata["labels"]`` (a label list) or ``metadata["label_counts"]`` (per-class counts,
    expanded sorted by class as in Dimitrov et al. §A.4). The experiment runner sets them only
    for settings with known labels (e.g. Dimitrov et al. Table 1); attacks never see the data.
    """
    meta = update.metadata
    if meta.get("labels") is not None:
        return torch.as_tensor(meta["labels"], dtype=torch.long)
    if meta.get("label_counts") is not None:
        counts = torch.as_tensor(meta["label_counts"], dtype=torch.long)
        if counts.numel() != num_classes or int(counts.sum()) != update.num_samples:
            raise FedleakError(f"label_counts in the update metadata must have {num_classes} entries summing to "
                               f"N={update.num_samples}")
        return counts_to_labels(counts)
    raise FedleakError("labels='known' needs the update's metadata to carry 'labels' or 'label_counts' "
                       "(a threat model where the server knows them); use labels='reclabels' to infer them")


def counts_to_labels(counts: torch.Tensor) -> torch.Tensor:
    """Class indices in ascending order, each repeated n_c times (research note §A.6 step 6)."""
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts.long())


def labels_to_counts(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    return torch.bincount(labels.long().flatten(), minlength=num_classes)


def resolve_labels(strategy: str, update: Update, model: nn.Module, spec: "DataSpec | int",
                   **options) -> Optional[torch.Tensor]:
    """Labels for the attack under ``strategy``; ``None`` means optimize them jointly (DLG).

    ``spec`` is the :class:`~fedleak.types.DataSpec` (its input shape feeds RecLabels' dummy
    inputs) or just the number of classes.
    """
    if isinstance(spec, DataSpec):
        num_classes = spec.num_classes
        options.setdefault("input_shape", spec.shape)
    else:
        num_classes = int(spec)
    if strategy == "optimize":
        return None
    if strategy == "known":
        labels = known_labels(update, num_classes)
    elif strategy == "idlg":
        if update.num_samples != 1:
            raise FedleakError(f"iDLG's analytic label needs one sample, the update has N={update.num_samples}; "
                               "use labels='reclabels' or 'yin'")
        labels = idlg_label(update, model)
    elif strategy == "yin":
        labels = yin_labels(update, model)
    elif strategy == "reclabels":
        labels = counts_to_labels(reclabels(update, model, **options))  # noqa: F821 (defined below)
    else:
        raise FedleakError(f"unknown label strategy {strategy!r}; allowed: {', '.join(LABEL_STRATEGIES)}")
    first = next(iter(update.server_params.values()))
    return labels.to(first.device)


# ----------------------------------------------------------------------------------------------
# Label counts: Geng et al.'s estimator and Dimitrov et al.'s RecLabels

RECLABEL_MODES = ("avg", "start", "end")
ROUNDINGS = ("eth", "geng")


def _head_row_sums(update: Update, model: nn.Module) -> torch.Tensor:
    """g_c = Σ_m Ĝ[c, m]: the last layer's pseudo-gradient summed over its input dimension (C,)."""
    return _head_gradient(update, model).sum(dim=-1)


def dummy_inputs(input_shape, num: int, seed: int = 0, device=None, dtype=torch.float32) -> torch.Tensor:
    """M i.i.d. N(0, 1) inputs in *normalized* input space (Dimitrov et al.'s label dummies, research
    note §A.6 step 1), drawn from a generator seeded with ``seed``."""
    if int(num) < 1:
        raise FedleakError(f"the number of dummy samples must be positive, got {num}")
    generator = torch.Generator(device="cpu")
    generator.manual_seed(int(seed))
    x = torch.randn((int(num), *tuple(input_shape)), generator=generator, dtype=torch.float64)
    return x.to(device=device, dtype=dtype)


def geng_raw_counts(row_sums: torch.Tensor, p_bar: torch.Tensor, o_bar: torch.Tensor, num_samples: int,
                    num_steps: int = 1) -> torch.Tensor:
    """Geng et al.'s count estimate (Dimitrov et al. Eq. 2), per local step for FedAvg.

    λ̃_k = N·p̃_k − N·ΔW_k / (s·Õ): ``row_sums`` ΔW_k = Σ_m Ĝ[k, m] of the summed update over ``num_steps``
    s local steps (s = 1 for FedSGD; dividing by s turns the sum into the mean per-step gradient,
    research note §A.6 step 4), ``p_bar`` the mean dummy softmax p̃ (C,), ``o_bar`` the mean summed
    penultimate activation Õ. Unrounded (C,) floats.
    """
    o_bar = torch.as_tensor(o_bar, dtype=p_bar.dtype, device=p_bar.device)
    if not bool(torch.isfinite(o_bar)) or float(o_bar) <= 0:
        raise FedleakError(f"Geng et al.'s estimator needs a positive mean penultimate activation Õ, got {float(o_bar)} "
                           "(dead features on the dummy data?)")
    n = float(num_samples)
    return n * p_bar - n * row_sums.to(p_bar) / (num_steps * o_bar)


def geng_counts(update: Update, model: nn.Module, params: Optional[Params] = None, *, input_shape=None,
                num_dummy: int = 3000, seed: int = 0, rounding: str = "eth") -> torch.Tensor:
    """Geng et al. (2021) label counts with the statistics p̃, Õ taken at ``params``.

    ``params`` = θˢ (default; "Geng et al. θˢ" of Dimitrov et al. Table 2) or any other weights, e.g.
    ``update.final_params()`` for the exact θᶜ. Returns integer counts (C,) summing to N.
    """
    raw = _raw_at(update, model, [params if params is not None else update.server_params], [1.0],
                  input_shape, num_dummy, seed)
    return round_counts(raw, update.num_samples, rounding)


def _input_shape(update: Update, input_shape) -> tuple[int, ...]:
    shape = input_shape if input_shape is not None else update.metadata.get("input_shape")
    if shape is None:
        raise FedleakError("label-count restoration needs the input shape (C, H, W) of the data to draw dummy "
                           "inputs: pass input_shape=spec.shape")
    return tuple(int(s) for s in shape)


def _raw_at(update: Update, model: nn.Module, points: list[Params], weights: list[float], input_shape,
            num_dummy: int, seed: int) -> torch.Tensor:
    """Σ_i weights_i · λ̃(points_i), with the same dummy set at every parameter point."""
    first = next(iter(update.server_params.values()))
    x = dummy_inputs(_input_shape(update, input_shape), num_dummy, seed, first.device, first.dtype)
    rows = _head_row_sums(update, model)
    raw = torch.zeros_like(rows)
    for params, weight in zip(points, weights):
        p_bar, o_bar = head_statistics(model, params, update.buffers, x)
        raw = raw + weight * geng_raw_counts(rows, p_bar, o_bar, update.num_samples, update.num_steps)
    return raw


def reclabels_raw(update: Update, model: nn.Module, num_dummy: int = 3000, mode: str = "avg", seed: int = 0,
                  input_shape=None) -> torch.Tensor:
    """Unrounded RecLabels counts (Dimitrov et al. §4.5; research note §A.6 steps 1–4).

    The dummy statistics p̃, Õ are computed once at θˢ and once at θᶜ = θˢ − η·Ĝ on the same M
    N(0,1) dummies and linearly interpolated over the s = E·⌈N/m⌉ local steps with coefficients
    c_t = t/s, t = 0..s−1 (the authors' code; the paper's text writes the interpolation in the
    opposite direction). Geng et al.'s estimate (Eq. 2) is taken at every step and averaged:

    * ``avg`` — all s steps (RecLabels, "Ours" in Table 2, ``aaai_avg``);
    * ``start`` — t = 0 only, i.e. Geng et al. at θˢ ("Geng et al. θˢ", ``aaai_st``);
    * ``end`` — t = s−1 only, coefficient (s−1)/s ("Geng et al. θᶜ" as in the authors' code, ``aaai_en``;
      for s = 1 it coincides with ``start``).
    """
    if mode not in RECLABEL_MODES:
        raise FedleakError(f"unknown RecLabels mode {mode!r}; allowed: {', '.join(RECLABEL_MODES)}")
    first = next(iter(update.server_params.values()))
    x = dummy_inputs(_input_shape(update, input_shape), num_dummy, seed, first.device, first.dtype)
    rows = _head_row_sums(update, model)
    s = update.num_steps
    p0, o0 = head_statistics(model, update.server_params, update.buffers, x)
    if mode == "start" or s == 1:
        coefs = torch.zeros(1, dtype=p0.dtype, device=p0.device)
    else:
        p1, o1 = head_statistics(model, update.final_params(), update.buffers, x)
        coefs = torch.arange(s, dtype=p0.dtype, device=p0.device) / s
        if mode == "end":
            coefs = coefs[-1:]
    if mode != "start" and s > 1:
        p_t = (1 - coefs)[:, None] * p0[None] + coefs[:, None] * p1[None]
        o_t = (1 - coefs) * o0 + coefs * o1
    else:
        p_t, o_t = p0[None], o0.reshape(1)
    raw = torch.stack([geng_raw_counts(rows, p_t[i], o_t[i], update.num_samples, s) for i in range(len(coefs))])
    return raw.mean(0)


def reclabels(update: Update, model: nn.Module, num_dummy: int = 3000, mode: str = "avg", seed: int = 0,
              rounding: str = "eth", input_shape=None) -> torch.Tensor:
    """RecLabels (Dimitrov et al. §4.5): integer label counts (C,) summing to N.

    :func:`reclabels_raw` followed by :func:`round_counts` (``rounding`` ``eth``: the authors' rule;
    ``geng``: Geng et al.'s). ``input_shape`` is the data's (C, H, W) for the dummy inputs.
    """
    raw = reclabels_raw(update, model, num_dummy=num_dummy, mode=mode, seed=seed, input_shape=input_shape)
    return round_counts(raw, update.num_samples, rounding)


def round_counts(raw: torch.Tensor, total: int, rounding: str = "eth") -> torch.Tensor:
    """Round raw counts to non-negative integers summing to ``total`` (``eth`` or ``geng`` rule)."""
    if rounding == "eth":
        return round_counts_eth(raw, total)
    if rounding == "geng":
        return round_counts_geng(raw, total)
    raise FedleakError(f"unknown count rounding {rounding!r}; allowed: {', '.join(ROUNDINGS)}")


def _check_raw(raw: torch.Tensor, total: int) -> torch.Tensor:
    raw = torch.as_tensor(raw).detach().double().cpu().flatten()
    if raw.numel() == 0 or not bool(torch.isfinite(raw).all()):
        raise FedleakError("raw label counts must be a non-empty vector of finite numbers")
    if int(total) < 0:
        raise FedleakError(f"the number of labels must be non-negative, got {total}")
    return raw


def round_counts_eth(raw: torch.Tensor, total: int) -> torch.Tensor:
    """Dimitrov et al.'s rounding (research note §A.6 step 5).

    f = max(⌊n⌋, 0), r = N − Σf. If r ≥ 0, +1 to the r classes with the largest fractional parts
    n − f. If r < 0, −1 from the |r| classes with f ≥ 1 that have the smallest fractional parts;
    when fewer such classes exist, the remaining units come off the classes with the largest f.
    Returns a long tensor (C,) on the device of ``raw`` summing to ``total``.
    """
    device = raw.device if isinstance(raw, torch.Tensor) else None
    raw = _check_raw(raw, total)
    total = int(total)
    floor = raw.floor().clamp(min=0)
    frac = raw - floor
    counts = floor.clone()
    remainder = total - int(floor.sum())
    if remainder > 0:
        # r can exceed C only when the raw counts are far below N; spread whole rounds first.
        rounds, rest = divmod(remainder, raw.numel())
        counts += rounds
        if rest:
            counts[torch.argsort(frac, descending=True, stable=True)[:rest]] += 1
    elif remainder < 0:
        excess = -remainder
        candidates = floor >= 1
        frac = torch.where(candidates, frac, torch.ones_like(frac))
        first = min(excess, int(candidates.sum()))
        counts[torch.argsort(frac, stable=True)[:first]] -= 1
        left = excess - first
        if left > 0:  # more units than candidate classes: take them off the largest classes, one per round
            counts = _take_rounds(counts, floor, left)
    return counts.long().to(device)


def _take_rounds(counts: torch.Tensor, floor: torch.Tensor, left: int) -> torch.Tensor:
    """Remove ``left`` units from ``counts`` in rounds, one unit from every positive class per round (the
    classes with the largest ``floor`` first in the last, partial round) — in closed form, not one loop per
    round: raw counts of 3.5·10⁶ for a batch of 16 would take |raw|/C rounds (issue 27).

    k whole rounds remove R(k) = Σ_c min(counts_c, k); the largest k with R(k) ≤ left is found by bisection,
    then the remaining units (fewer than the classes still positive) come off the largest-``floor`` ones.
    """
    def removed(k: int) -> int:
        return int(torch.minimum(counts, torch.full_like(counts, float(k))).sum())

    low, high = 0, int(counts.max()) if counts.numel() else 0
    while low < high:  # largest k with removed(k) <= left
        mid = (low + high + 1) // 2
        if removed(mid) <= left:
            low = mid
        else:
            high = mid - 1
    left -= removed(low)
    counts = counts - torch.minimum(counts, torch.full_like(counts, float(low)))
    if left > 0:
        order = torch.argsort(torch.where(counts > 0, floor, torch.full_like(floor, -1.0)), descending=True,
                              stable=True)
        counts[order[:left]] -= 1
    return counts


#: raw counts whose magnitudes sum to more than this many times N are not counts of N labels (issue 27)
PLAUSIBLE_FACTOR = 4.0


def plausible_counts(raw, total: int) -> Optional[str]:
    """Why raw label counts are not a plausible estimate for ``total`` labels (``None`` when they are): every
    value finite and Σ|raw| ≤ :data:`PLAUSIBLE_FACTOR` · N. Callers mark a result built from implausible counts
    uncertain instead of trusting its rounding."""
    raw = torch.as_tensor(raw).detach().double().flatten()
    if raw.numel() == 0 or not bool(torch.isfinite(raw).all()):
        return "the raw label counts are not finite"
    size = float(raw.abs().sum())
    if size > PLAUSIBLE_FACTOR * max(int(total), 1):
        return (f"the raw label counts sum to {size:.3g} in magnitude for {int(total)} labels (more than "
                f"{PLAUSIBLE_FACTOR:g}× N): the linear system does not describe this update")
    return None


def round_counts_geng(raw: torch.Tensor, total: int) -> torch.Tensor:
    """Geng et al.'s rounding (research note §D.2), returned as counts (C,) summing to ``total``.

    r = round(λ), residual ρ = |λ − r| (divided by r when r ≥ 1); classes are visited in ascending
    ρ and contribute r copies until more than N labels are collected; if fewer, classes not yet
    present are added once each in descending ρ (then any class, largest λ first); truncated to N.
    """
    device = raw.device if isinstance(raw, torch.Tensor) else None
    raw = _check_raw(raw, total)
    total = int(total)
    rounded = torch.round(raw)
    residual = (raw - rounded).abs()
    residual = torch.where(rounded >= 1, residual / rounded.clamp(min=1), residual)
    labels: list[int] = []
    for c in torch.argsort(residual, stable=True).tolist():
        if len(labels) > total:
            break
        labels.extend([c] * max(int(rounded[c]), 0))
    if len(labels) < total:
        present = set(labels)
        for c in torch.argsort(residual, descending=True, stable=True).tolist():
            if len(labels) >= total:
                break
            if c not in present:
                labels.append(c)
        order = torch.argsort(raw, descending=True, stable=True).tolist()
        i = 0
        while len(labels) < total:
            labels.append(order[i % len(order)])
            i += 1
    counts = torch.bincount(torch.as_tensor(labels[:total], dtype=torch.long), minlength=raw.numel())
    return counts.to(device)
