"""Shared parts of the exact (tuning-free) attacks on a fully connected layer: ``analytic-fc``, ``spear``, ``ilrg`` (:mod:`.label_counts`).

A linear layer ``z = W x + b`` with a batch of B inputs ``X`` (B × n) has, for the mean loss of FedSGD,

    ∇W = ∇Zᵀ X   (m × n, rank ≤ B)        ∇b = ∇Zᵀ 1        (Phong et al. 2017, §III; Dimitrov et al. 2024, Eq. 1)

where ∇Z (B × m) is the loss gradient with respect to the layer's outputs. This module finds the layer, reads
its two gradients from the update, and — once an attack has proposed the inputs ``X`` — recovers the labels
and **verifies** the recovery: it recomputes, from ``X`` and the labels alone, the gradient of the layer and of
every layer after it, and compares it with what the client sent. A recovery counts as *certain* only when this
recomputed gradient matches (relative error below ``tolerance``): the check needs no ground truth, so an
auditor can state "proved" without having seen the data.

**Two facts, two fields.** ``extras["exactness"]["holds"]`` is the attack's *precondition* only (its exactness
condition held for this update: one step, the rank, the rows or directions found), as in every attack that
reports one (DAGER, iLRG); ``extras["certain"]`` is the *proof* (precondition held and the recomputed update
matched, ``exactness["verification"]["matches"]``). A precondition that held without a match keeps
``holds`` true and says why the recovery is not proved in ``reason``.

**Which layer, and what "known extractor" means.** By default the first parameterized layer, which must be
an ``nn.Linear`` with a bias (``--model mlp``: ``fc1``): then ``X`` are the flattened client images. With
``layer=NAME`` any ``nn.Linear`` with a bias can be attacked; when layers with parameters come before it
(a feature extractor), the server is assumed to know their weights (it sent them: honest FedSGD) and what is
recovered is the layer's *input*, the extractor's features of each image, not the images — those are kept
in ``extras["features"]`` and the reconstruction's images are the dataset mean (nothing claimed about pixels).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Optional

import torch
from torch import nn
from torch.func import functional_call

from ..errors import FedleakError
from ..fl.client import cross_entropy
from ..types import DataSpec, Reconstruction, Update
from ..types.params import layers

#: relative gradient error below which a recovery is certain (float32 gradients: ~1e-6 reached in practice)
TOLERANCE = 1e-3
#: features kept in ``extras`` only up to this many numbers (JSON)
MAX_FEATURE_NUMBERS = 200_000


def fc_layer(model: nn.Module, name: Optional[str] = None) -> tuple[str, bool]:
    """``(module path, is_first)`` of the attacked linear layer (default: the first parameterized layer)."""
    found = layers(model)
    if not found:
        raise FedleakError(f"model {type(model).__name__} has no parameters")
    if name is None or name == "":
        layer = found[0]
    else:
        layer = next((item for item in found if item.module == name), None)
        if layer is None:
            fcs = [item.module for item in found if item.kind == "fc"]
            raise FedleakError(f"option 'layer': no linear layer {name!r} in the model (linear layers: {fcs})")
    module = model.get_submodule(layer.module)
    if not isinstance(module, nn.Linear) or module.bias is None:
        what = "the first layer" if name in (None, "") else f"layer {layer.module!r}"
        raise FedleakError(f"option 'layer': {what} is {type(module).__name__}, not a linear layer with a bias; "
                           f"name a linear layer with layer=NAME")
    return layer.module, layer is found[0]


def single_step(update: Update) -> Optional[str]:
    """Why the update is not one gradient at θˢ (``None`` when it is)."""
    if update.is_fedsgd:
        return None
    if update.num_steps == 1:
        return None
    return (f"FedAvg update of {update.num_steps} local steps: ∇W sums gradients taken at {update.num_steps} "
            f"different weights, so it is not ∇Zᵀ X at one point (SPEAR++'s FedAvg extension is not implemented)")


def fc_gradients(update: Update, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(∇W, ∇b)`` of ``layer`` in float64 (FedSGD gradient, or the pseudo-gradient of a one-step update)."""
    grads = update.pseudo_gradient()
    return grads[f"{layer}.weight"].detach().double(), grads[f"{layer}.bias"].detach().double()


def numerical_rank(matrix: torch.Tensor, rel: float = 1e-5) -> tuple[int, list]:
    """Rank of ``matrix`` (singular values above ``rel`` × the largest) and its leading singular values."""
    values = torch.linalg.svdvals(matrix)
    if values.numel() == 0 or values[0] <= 0:
        return 0, []
    rank = int((values > rel * values[0]).sum())
    return rank, [float(v) for v in values[: min(len(values), rank + 2)]]


@contextmanager
def _input_replaced(model: nn.Module, layer: str, inputs: torch.Tensor, outputs: list):
    """Feed ``inputs`` to ``layer`` whatever reaches it, and collect its output in ``outputs``."""
    module = model.get_submodule(layer)
    pre = module.register_forward_pre_hook(lambda _m, args: (inputs, *args[1:]))
    post = module.register_forward_hook(lambda _m, _a, out: outputs.append(out))
    try:
        yield
    finally:
        pre.remove()
        post.remove()


def _tail_names(model: nn.Module, layer: str) -> list[str]:
    found = layers(model)
    start = next(i for i, item in enumerate(found) if item.module == layer)
    return [name for item in found[start:] for name in item.param_names]


def _forward(model, update: Update, layer: str, x: torch.Tensor, spec: DataSpec, params=None):
    outputs: list = []
    dummy = torch.zeros((x.shape[0], *spec.shape), dtype=x.dtype, device=x.device)
    state = {**(params if params is not None else update.server_params), **update.buffers}
    with _input_replaced(model, layer, x, outputs):
        logits = functional_call(model, state, (dummy,))
    return logits, outputs[0]


def labels_from_output_gradient(model: nn.Module, update: Update, layer: str, x: torch.Tensor,
                                grad_z: torch.Tensor, spec: DataSpec) -> tuple[torch.Tensor, float]:
    """Each sample's label from its output gradient ∇z_i (B × m) given its recovered input x_i.

    For the mean cross-entropy, ∇z_i = Jᵢᵀ (p_i − e_{y_i}) / B with Jᵢ = ∂logits_i/∂z_i: every class is
    tried (one batched backward pass) and the one whose predicted ∇z_i is nearest wins. Returns the labels
    and the worst relative mismatch of the chosen class.
    """
    b = x.shape[0]
    with torch.enable_grad(), _mode_of(model, update):
        logits, z = _forward(model, update, layer, x.detach().clone().requires_grad_(True), spec)
        classes = logits.shape[1]
        eye = torch.eye(classes, dtype=logits.dtype, device=logits.device)
        outputs = eye[:, None, :].expand(classes, b, classes)
        jac = torch.autograd.grad(logits, z, grad_outputs=outputs, is_grads_batched=True)[0]  # C × B × m
    probs = logits.detach().softmax(1)  # B × C
    expected = torch.einsum("bc,cbm->bm", probs, jac)  # Σ_c p_ic J_ic
    predicted = (expected[:, None, :] - jac.permute(1, 0, 2)) / b  # B × C × m
    target = grad_z.to(predicted)[:, None, :]
    # directions only: a globally scaled update (clipping) keeps every sample's ∇z_i direction
    predicted = predicted / predicted.norm(dim=2, keepdim=True).clamp_min(1e-30)
    target = target / target.norm(dim=2, keepdim=True).clamp_min(1e-30)
    errors = (predicted - target).norm(dim=2)
    best = errors.min(dim=1)
    return best.indices, float(best.values.max())


@contextmanager
def _mode_of(model: nn.Module, update: Update):
    previous = model.training
    model.train(update.protocol.train_mode)
    try:
        yield
    finally:
        model.train(previous)


def verify(model: nn.Module, update: Update, layer: str, x: torch.Tensor, labels: torch.Tensor,
           spec: DataSpec, tolerance: float = TOLERANCE, images: Optional[torch.Tensor] = None) -> dict:
    """Recompute the update from the recovered inputs and labels; compare it with the one sent.

    With ``images`` (the first layer attacked: the recovered inputs are the client's images) the whole update
    is recomputed through the one client-update function (:func:`fedleak.fl.client.local_training`, one step)
    and every parameter compared. Otherwise (a later layer: its recovered inputs are features) the gradient of
    ``layer`` and every later layer is recomputed from ``x`` fed to that layer (parameters before it depend on
    the images, not only on the layer's input, and are not compared).

    Returns ``{"relative_error", "matches", "tolerance", "parameters", "method"}``: the relative L2 error over
    those parameters and whether it is below ``tolerance`` (``matches``; the attack's precondition is
    ``exactness["holds"]``, a separate fact).
    """
    observed = update.pseudo_gradient()
    if images is not None:
        from ..fl.client import local_training, sequential_schedule

        names = list(update.server_params)
        schedule = sequential_schedule(images.shape[0], update.protocol)
        result = local_training(model, {k: v.detach() for k, v in update.server_params.items()}, images,
                                labels.to(images.device), schedule, update.protocol.lr, buffers=update.buffers,
                                train_mode=update.protocol.train_mode)
        grads = [result.grad_sum.get(k) for k in names]
        method = "the whole update recomputed through fedleak.fl.client.local_training"
    else:
        names = _tail_names(model, layer)
        params = {k: v.detach().clone().requires_grad_(k in names) for k, v in update.server_params.items()}
        with torch.enable_grad(), _mode_of(model, update):
            logits, _ = _forward(model, update, layer, x.to(next(iter(params.values()))), spec, params)
            loss = cross_entropy(logits, labels.to(logits.device))
            grads = torch.autograd.grad(loss, [params[k] for k in names], allow_unused=True)
        method = f"the gradient of {layer} and every later layer recomputed from the recovered features"
    rec = torch.cat([(g if g is not None else torch.zeros_like(observed[k])).reshape(-1).double()
                     for k, g in zip(names, grads)])
    obs = torch.cat([observed[k].reshape(-1).double() for k in names])
    den = float(obs.norm())
    error = float((rec - obs).norm()) / den if den > 0 else float("inf")
    # up to one global factor (a clipped update, Flower's fixed clipping): the recovered batch still explains it
    scale = float(rec @ obs) / max(float(rec @ rec), 1e-300)
    scaled = float((scale * rec - obs).norm()) / den if den > 0 else float("inf")
    return {"relative_error": error, "matches": bool(min(error, scaled) < tolerance), "tolerance": tolerance,
            "parameters": len(names), "global_scale": scale, "relative_error_after_scale": scaled, "method": method}


def output_gradient(grad_w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """∇Z (B × m) from ∇W = ∇Zᵀ X given the recovered X (least squares)."""
    return torch.linalg.lstsq(x.T, grad_w.T).solution


def finish(model: nn.Module, update: Update, spec: DataSpec, layer: str, first: bool, x: Optional[torch.Tensor],
           grad_z: Optional[torch.Tensor], exactness: dict, extras: dict, tolerance: float = TOLERANCE) -> Reconstruction:
    """Labels, verification and the :class:`Reconstruction` for recovered layer inputs ``x`` (B × n, float64)."""
    dtype = next(iter(update.server_params.values())).dtype
    device = next(iter(update.server_params.values())).device
    labels = None
    if x is not None and not bool(torch.isfinite(x).all()):
        x, grad_z = None, None
        exactness["holds"] = False  # part of the precondition: the inputs it reads out exist as finite numbers
        exactness["reason"] = f"{exactness.get('reason', '')}; the recovered inputs are not finite".lstrip("; ")
    if x is not None and x.shape[0] > 0:
        xs = x.to(device=device, dtype=dtype)
        if grad_z is None:
            grad_z = output_gradient(fc_gradients(update, layer)[0], x)
        labels, label_error = labels_from_output_gradient(model, update, layer, xs, grad_z, spec)
        images = xs.reshape(xs.shape[0], *spec.shape) if first and xs.shape[1] == spec.input_numel else None
        check = (verify(model, update, layer, xs, labels, spec, tolerance, images=images)
                 if x.shape[0] == update.num_samples else None)
        exactness["label_mismatch"] = label_error
        if check is not None:
            exactness["verification"] = check
        verified = check is not None and check["matches"]
        if exactness.get("holds") and not verified:  # the precondition stays as stated; the recovery is not proved
            exactness["reason"] = (f"{exactness.get('reason', '')}; but the gradient recomputed from the recovered "
                                   f"inputs and labels does not match the update"
                                   + (f" (relative error {check['relative_error']:.2e} ≥ {tolerance:g})"
                                      if check else " (only part of the batch recovered)")).lstrip("; ")
    extras["exactness"] = exactness
    # ``holds`` is the precondition only; ``certain`` is the proof (the recomputed update matched)
    extras["certain"] = bool(exactness.get("holds") and exactness.get("verification", {}).get("matches"))
    extras["layer"] = layer
    extras["recovered"] = "inputs" if first else "features"
    count = 0 if x is None else x.shape[0]
    if first and x is not None and x.shape[1] == spec.input_numel:
        inputs = x.to(device=device, dtype=dtype).reshape(count, *spec.shape)
    else:
        inputs = torch.zeros((count, *spec.shape), device=device, dtype=dtype)
        if x is not None and x.numel() <= MAX_FEATURE_NUMBERS:
            extras["features"] = x.float().tolist()
        extras["labels_only"] = True
    return Reconstruction(inputs, labels.cpu() if labels is not None else None, extras=extras)
