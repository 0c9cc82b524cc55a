"""Weight-only checks for fishing classifiers, and the orientation- and name-free lookups of the inspector.

Fishing (Wen et al., "Fishing for User Data in Large-Batch Federated Learning via Gradient Magnification",
ICML 2022) edits only the classifier — the last linear layer — so its gradient singles out one target:

* **class fishing** (§3.2, :func:`fedleak.models.fishing.fishing`): every non-target row shrunk to zero
  and the target's bias moved far from the rest. Trained or freshly initialized classifiers have rows of
  comparable norm (no class is silenced) and biases within a fraction of a row norm of each other;
* **feature fishing** (§3.3): the target row reduced to (nearly) one feature with a bias at a threshold,
  or one feature column magnified over the others. Trained rows spread their mass over many features.

:func:`fishing_finding` measures three statistics on the classifier, found by shape and order alone (the
last 2-D floating tensor; its bias is any 1-D tensor as long as one of its dimensions, names ignored; a
transposed weight is read the other way round): ``row_ratio`` = largest / median row norm, ``bias_gap``
= largest |bᵢ − median b| in units of the median row norm, ``feature_share`` = the largest share of one
row's squared norm on one feature, and ``column_ratio`` = largest / median column norm. Each limit sits
far beyond what honest models reach (the row-norm limit is max(8, 2C) for C classes, :func:`limits_for`); ``benchmarks/bench_inspect_fishing.py`` measures the honest
values (false-positive rate) and the fishing ones (``benchmarks/results/inspect-fishing.json``), and
``benchmarks/bench_inspect_honest.py`` calibrates them on honest models of the architectures people federate
(VGG-11, ResNet-18, MobileNetV2, ViT-tiny, MLPs in plain torch; ``benchmarks/results/inspect-honest.json``).
"""

from __future__ import annotations

from typing import Mapping, Optional

import torch

from .findings import Finding

#: limits beyond which a statistic singles out one class or feature (honest maxima are measured in
#: benchmarks/results/inspect-fishing.json, far below these)
#: (bias gap 16: honest heads initialized N(0, 0.01) — torchvision's VGG, MobileNetV2 — reach 3.6 row norms
#: after 20 one-class SGD steps in benchmarks/results/inspect-honest.json; fishing silences rows or rests a row
#: on one feature, which the other statistics see whatever the bias)
LIMITS = {"row_ratio": 8.0, "bias_gap": 16.0, "feature_share": 0.8, "column_ratio": 25.0}
def limits_for(classes: int, features: Optional[int] = None) -> dict:
    """:data:`LIMITS` for a classifier of ``classes`` outputs and ``features`` inputs. The row-norm limit grows
    with the classes: a zero-initialized head after one gradient step on one input has rows in ratio C − 1
    (the true class against the others), honest and rank one; fishing silences rows (ratio ∞) or shrinks them
    far more. Below :data:`MIN_SHARE_FEATURES` inputs the one-feature share must reach :data:`SMALL_HEAD_SHARE`:
    a random row of few features puts most of its mass on one by chance (10 classes of 8 features: 8.6 % of
    random heads above 0.8, of 16: 0.03 %, of 24 or more: none in 20,000; above 0.99: none of 8 features),
    while feature fishing rests the row on one feature alone (share 1)."""
    limits = {**LIMITS, "row_ratio": max(LIMITS["row_ratio"], 2.0 * classes)}
    if features is not None and features < MIN_SHARE_FEATURES:
        limits["feature_share"] = SMALL_HEAD_SHARE
    return limits


#: fewest classes and features for the test (a 2-class head can be lopsided by training)
MIN_CLASSES, MIN_FEATURES = 3, 8
#: fewest features for the one-feature share at its limit, and the share a smaller head must reach (:func:`limits_for`)
MIN_SHARE_FEATURES, SMALL_HEAD_SHARE = 32, 0.99
#: the most outputs a classifier has (a larger last layer is an embedding or a decoder, not logits)
MAX_CLASSES = 1000


def bias_candidates(state: Mapping[str, torch.Tensor], length: int, name: str = "",
                    following: Optional[torch.Tensor] = None) -> list[torch.Tensor]:
    """1-D floating tensors of ``length`` values: the one named like ``name``'s bias and the next entry
    first, then every other in the state (names may have been changed; the order may too)."""
    named = state.get(name[: -len("weight")] + "bias") if name.endswith("weight") else None
    out, seen = [], set()
    for tensor in [named, following, *state.values()]:
        if isinstance(tensor, torch.Tensor) and tensor.dim() == 1 and tensor.is_floating_point() \
                and tensor.numel() == length and id(tensor) not in seen:
            seen.add(id(tensor))
            out.append(tensor.detach().double())
    return out


def classifier(state: Mapping[str, torch.Tensor]):
    """``(name, weight (classes, features), bias or None)`` of the last 2-D floating tensor, oriented so
    that its rows are the outputs its bias belongs to; ``None`` without one."""
    entries = [(n, t) for n, t in state.items() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    for index in range(len(entries) - 1, -1, -1):
        name, weight = entries[index]
        if weight.dim() != 2:
            continue
        following = entries[index + 1][1] if index + 1 < len(entries) else None
        w = weight.detach().double()
        rows_bias = bias_candidates(dict(entries[index + 1:]), w.shape[0], name, following)
        if rows_bias:
            return name, w, rows_bias[0]
        cols_bias = bias_candidates(dict(entries[index + 1:]), w.shape[1], name, following)
        if cols_bias:  # stored transposed (features, classes), as ``x @ W`` layers do
            return name, w.T, cols_bias[0]
        return name, w, None
    return None


def fishing_statistics(weight: torch.Tensor, bias: Optional[torch.Tensor]) -> dict:
    """The four statistics of the module docstring for one classifier (rows = classes)."""
    rows = weight.norm(dim=1)
    cols = weight.norm(dim=0)
    scale = float(rows.median())
    top = float(rows.max())
    if top == 0:  # an all-zero classifier (a zero-initialized head, ViT's JAX init) singles out no class
        gap = float((bias - bias.median()).abs().max()) if bias is not None else 0.0
        return {"row_ratio": 0.0, **({"bias_gap": 0.0 if gap == 0 else float("inf")} if bias is not None else {}),
                "feature_share": 0.0, "column_ratio": 0.0}
    stats = {"row_ratio": float("inf") if scale <= 1e-12 * max(top, 1e-300) else top / scale}
    if bias is not None:
        gap = float((bias - bias.median()).abs().max())
        reference = scale if scale > 1e-12 * max(top, 1e-300) else top
        stats["bias_gap"] = 0.0 if gap == 0 else (float("inf") if reference == 0 else gap / reference)
    squares = weight.pow(2)
    live = rows > 1e-12 * max(top, 1e-300)
    stats["feature_share"] = float((squares[live].max(1).values / squares[live].sum(1)).max()) if bool(live.any()) \
        else 0.0
    col_scale = float(cols.median())
    stats["column_ratio"] = float("inf") if col_scale <= 1e-12 * max(float(cols.max()), 1e-300) \
        else float(cols.max()) / col_scale
    return stats


def fishing_finding(state: Mapping[str, torch.Tensor]):
    """A :class:`~fedleak.fl.inspect.Finding` when the classifier singles out one class or feature."""

    found = classifier(state)
    if found is None:
        return None
    name, weight, bias = found
    classes, features = weight.shape
    if not (MIN_CLASSES <= classes <= MAX_CLASSES) or features < MIN_FEATURES:
        return None
    stats = fishing_statistics(weight, bias)
    limits = limits_for(classes, features)
    beyond = {k: v for k, v in stats.items() if v > limits[k]}
    if not beyond:
        return None
    worst = max(beyond, key=lambda k: beyond[k] / limits[k])
    ratio = beyond[worst] / limits[worst]
    confidence = 0.99 if ratio == float("inf") else min(0.99, 0.5 + 0.5 * (1 - 1 / ratio))
    target = int(weight.norm(dim=1).argmax()) if worst in ("row_ratio", "feature_share") else None
    if worst == "bias_gap" and bias is not None:
        target = int((bias - bias.median()).abs().argmax())
    words = {"row_ratio": "one output row dominates the others (non-target classes silenced)",
             "bias_gap": "one output's bias lies far from the others (its class pushed out of the softmax)",
             "feature_share": "an output row rests on a single feature (feature fishing)",
             "column_ratio": "one feature column dominates the classifier (feature fishing)"}
    shown = ", ".join(f"{k} {v:.3g} > {limits[k]:g}" for k, v in beyond.items())
    detail = f"{words[worst]}: {shown}" + (f"; target output {target}" if target is not None else "")
    evidence = {k: (None if v == float("inf") else v) for k, v in stats.items()}
    limits = {k: (None if v == float("inf") else v) for k, v in limits.items()}  # strict JSON in reports
    return Finding(name, "fishing", confidence, detail, {**evidence, "limits": limits, "target": target,
                                                          "classes": classes, "features": features})
