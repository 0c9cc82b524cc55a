"""Class fishing (Wen et al., "Fishing for User Data in Large-Batch Federated Learning via Gradient
Magnification", ICML 2022, §3.2): one target class's gradient magnified in a large batch.

The server edits only the last linear layer of the model it ships — the architecture, names and
shapes stay those of the honest model:

* every non-target class row gets weight 0 and bias 0, so all non-target logits are equal (0)
  whatever the features, and their softmax probabilities are (1 − p_c)/(C − 1);
* the target class c keeps its row and gets bias −``shift``, so p_c ≈ 0 for every input.

For an input of a non-target class y the gradient wrt the features is Σⱼ (pⱼ − 1[j=y])·Wⱼ = 0 — the
non-target rows are zero and p_c·W_c ≈ 0 — so it reaches no layer below the classifier. For an input
of class c it is (p_c − 1)·W_c ≈ −W_c. The whole feature extractor's gradient of a batch of any size is
therefore the gradient of its target-class inputs alone (scaled 1/N): a large-batch aggregate
dominated by one target, ready for a standard gradient inversion (:mod:`fedleak.attacks.fishing`).

The server's secret is the target class (``model.fishing_secrets``, format ``fedleak.fishing/1``).
Feature fishing (Wen et al. §3.3, splitting several inputs of the target class by a feature
threshold over rounds) is not implemented.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..errors import FedleakError
from ..types import DataSpec
from ..types.params import last_linear, weight_and_bias

SECRETS_FORMAT = "fedleak.fishing/1"


def fishing(model: nn.Module, spec: DataSpec, *, target_class: int, shift: float = 30.0) -> nn.Module:
    """A copy of ``model`` whose classifier fishes for ``target_class`` (see the module docstring)."""
    if not isinstance(model, nn.Module) or not isinstance(spec, DataSpec):
        raise FedleakError("fishing needs a torch.nn.Module and a fedleak.DataSpec")
    if isinstance(target_class, bool) or not isinstance(target_class, int) or not 0 <= target_class < spec.num_classes:
        raise FedleakError(f"fishing: target_class must be a class index in 0..{spec.num_classes - 1}, got {target_class!r}")
    if not (isinstance(shift, (int, float)) and 0 < shift < 1e4):
        raise FedleakError(f"fishing: shift must be a positive number below 1e4, got {shift!r}")
    out = copy.deepcopy(model)
    layer = last_linear(out)
    weight_name, bias_name = weight_and_bias(layer)
    if bias_name is None:
        raise FedleakError(f"fishing needs a bias in the last linear layer {layer.module!r}")
    params = dict(out.named_parameters())
    weight, bias = params[weight_name], params[bias_name]
    if weight.shape[0] != spec.num_classes:
        raise FedleakError(f"the last linear layer has {weight.shape[0]} outputs, the data {spec.num_classes} classes")
    with torch.no_grad():
        keep = weight[target_class].clone()
        weight.zero_()
        weight[target_class] = keep
        bias.zero_()
        bias[target_class] = -float(shift)
    out.fishing_secrets = {"format": SECRETS_FORMAT, "target_class": int(target_class), "weight": weight_name,
                           "bias": bias_name, "num_classes": int(spec.num_classes), "shift": float(shift)}
    return out


__all__ = ["SECRETS_FORMAT", "fishing"]
