"""One label-count stack: the attacks that recover how many samples of each class a client holds, and nothing
else. Four strategies of one attack (:class:`LabelCountAttack`), each a registered name:

* **RecLabels** (``reclabels``; Dimitrov et al. 2022, Table 2 "Ours") and **Geng et al. 2021** at θˢ
  (``geng-server``) or θᶜ (``geng-client``): counts from the last layer's statistics on dummy inputs
  (the estimators of :mod:`fedleak.attacks.labels`);
* **iLRG** (``ilrg``, FedSGD) and **RLU** (``rlu``, FedAvg): counts from a linear system on the last layer's
  gradient (:func:`class_system`, :func:`solve_counts`).

The reconstruction's ``labels`` are the counts expanded in class order; its ``inputs`` are the dataset mean
(all zeros in normalized space) for every sample, since these attacks recover no inputs (only the label
metrics are meaningful). Rounding to integers summing to N is :func:`fedleak.attacks.labels.round_counts`.

The linear system (iLRG, RLU):
Label counts from the last layer's gradient by a linear system: iLRG (FedSGD) and RLU (FedAvg).

**iLRG** — Ma, Sun, Cui, Li, Guan, Liu, "Instance-wise Batch Label Restoration via Gradients in Federated
Learning", ICLR 2023. From the gradient of the final layer only (logits = W o + b, mean cross-entropy):

1. *class-wise embeddings* (§3.2): row c of ∇W over ∇b_c, ô_c = ∇W_c / ∇b_c — the g_ic-weighted mean of the
   batch's embeddings, which for an untrained model (posteriors nearly uniform) is dominated by the
   instances of class c;
2. *post-softmax probabilities* (§3.2): p̂_c = softmax(W ô_c + b), the posterior of an instance of class c;
3. *the linear system* (§3.3): with every instance of class k represented by (ô_k, p̂_k),
   B ∇b = Σ_k n_k (p̂_k − e_k) and B ∇W_c = Σ_k n_k (p̂_kc − δ_kc) ô_k for every class c — C + C·d equations
   in the C counts n. fedleak solves the C bias equations by least squares (the Moore–Penrose pseudoinverse)
   under Σ_k n_k = B, and rounds to integers summing to B (the weight equations, measured on CIFAR-100 with
   the MLP and the CNN, add error where the embeddings of a class vary; they are kept for the residual).

The system is exact when the instances of each class share one embedding; on an untrained model it is
close, which is the paper's setting (its reported accuracy on untrained networks is ~100% up to large
batches). The attack reports the system's relative residual with the integer counts; the counts are
marked *certain* only when that residual is below ``tolerance`` (the integer solution then explains the
gradient, up to float error) — otherwise they are an estimate. ``extras["exactness"]["holds"]`` is the
precondition alone (a FedSGD update: one gradient step), as for every attack; ``extras["certain"]`` the proof.

**RLU** — Chen and Vikalo, "Recovering Labels from Local Updates in Federated Learning", ICML 2024: label
counts from a multi-epoch FedAvg update. The same system is set on the *average* per-step head gradient
(the pseudo-gradient over s steps, ×B/s for s steps of full batches of B/⌈N/m⌉) with the class embeddings and
posteriors taken at the interpolated weights (θˢ + θᶜ)/2 (the middle of the client's trajectory, the
approximation RLU makes of the changing posteriors). It is an estimate, never certain.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..types import DataSpec, Reconstruction, Update
from ..types.params import last_linear, weight_and_bias
from .base import Attack, AttackOptions, register
from .labels import RECLABEL_MODES, ROUNDINGS, counts_to_labels, plausible_counts, reclabels, round_counts


class LabelCountAttack(Attack):
    """The label-count stack: a strategy estimates the counts (:meth:`estimate`); the reconstruction is the
    same for every strategy (mean inputs, the counts expanded as labels, the strategy's extras)."""

    def estimate(self, update: Update, model: nn.Module, spec: DataSpec) -> tuple:
        """``(counts or None, extras)`` of this strategy."""
        raise NotImplementedError

    #: where the (zero) inputs take their device and dtype from: ``"model"`` or ``"update"``
    inputs_like = "update"

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        counts, found = self.estimate(update, model, spec)
        first = next(model.parameters()) if self.inputs_like == "model" else next(iter(update.server_params.values()))
        inputs = torch.zeros((update.num_samples, *spec.shape), device=first.device, dtype=first.dtype)
        extras = {"attack": getattr(self, "variant", self.name), "labels_only": True, **found}
        return Reconstruction(inputs, None if counts is None else counts_to_labels(counts.cpu()), extras=extras)


@dataclass(frozen=True)
class StatisticsOptions(AttackOptions):
    """RecLabels / Geng et al. options (research note §A.6)."""

    mode: str = "avg"
    label_samples: int = 3000
    rounding: str = "eth"


class StatisticsLabelCounts(LabelCountAttack):
    """RecLabels (``avg``) or Geng et al. at θˢ (``start``) / θᶜ (``end``), Dimitrov et al. Table 2."""

    Options = StatisticsOptions
    name = "label-counts"

    choices = {"mode": RECLABEL_MODES, "rounding": ROUNDINGS}
    positive = ("label_samples",)
    inputs_like = "model"

    def estimate(self, update: Update, model: nn.Module, spec: DataSpec) -> tuple:
        o = self.options
        counts = reclabels(update, model, num_dummy=o.label_samples, mode=o.mode, seed=o.seed, rounding=o.rounding,
                           input_shape=spec.shape)
        return counts, {"mode": o.mode, "label_counts": counts.tolist()}


@dataclass(frozen=True)
class LinearOptions(AttackOptions):
    """iLRG / RLU: which weights the posteriors use (``server`` or ``middle``) and the certainty tolerance."""

    at: str = "server"
    rounding: str = "eth"
    tolerance: float = 1e-3


def class_system(grad_w: torch.Tensor, grad_b: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """``(A, y, embeddings, posteriors)``: A n = y is iLRG's system for the mean gradient (§3.3), scaled by B."""
    classes = grad_w.shape[0]
    safe = torch.where(grad_b.abs() > 1e-30, grad_b, torch.full_like(grad_b, 1e-30))
    embeddings = grad_w / safe[:, None]  # ô_c (C × d)
    posteriors = F.linear(embeddings, weight, bias).softmax(dim=1)  # p̂_k (C × C): row k
    delta = posteriors - torch.eye(classes, dtype=grad_w.dtype)  # (p̂_k − e_k), row k
    # ∇b: column k of A_b is (p̂_k − e_k); ∇W_c: coefficient of n_k is (p̂_kc − δ_kc) ô_k
    a_bias = delta.T  # C × C
    a_weight = torch.einsum("kc,kd->cdk", delta, embeddings).reshape(-1, classes)  # (C·d) × C
    a = torch.cat([a_bias, a_weight])
    y = torch.cat([grad_b, grad_w.reshape(-1)])
    return a, y, embeddings, posteriors


def solve_counts(a: torch.Tensor, y: torch.Tensor, total: int, rounding: str):
    """Least-squares counts n (B·mean-gradient units), rounded; relative residual of the integer counts."""
    scale = y.abs().max().clamp_min(1e-300)
    a, y = a / scale, y / scale
    classes = a.shape[1]
    # Σ_k n_k = B exactly (§3.3): without it, n + t·p̄ is nearly a solution for any t while posteriors are flat
    start = torch.full((classes,), 1.0 / classes, dtype=a.dtype)
    basis = torch.linalg.qr(torch.eye(classes, dtype=a.dtype) - 1.0 / classes)[0][:, : classes - 1]
    z = torch.linalg.lstsq(a @ basis, (y - a @ start)[:, None]).solution[:, 0]
    raw = (start + basis @ z) * total
    counts = round_counts(raw, total, rounding)
    residual = float((a @ counts.to(a) / total - y).norm() / y.norm().clamp_min(1e-300))  # scale-free
    return raw, counts, residual


class LinearLabelCounts(LabelCountAttack):
    """iLRG (Ma et al., ICLR 2023) for FedSGD; RLU (Chen & Vikalo, ICML 2024) with ``at="middle"``."""

    Options = LinearOptions
    name = "ilrg"
    choices = {"at": ("server", "middle"), "rounding": ROUNDINGS}
    positive = ("tolerance",)

    def estimate(self, update: Update, model: nn.Module, spec: DataSpec) -> tuple:
        o = self.options
        weight_name, bias_name = weight_and_bias(last_linear(model))
        exactness = {"holds": False, "method": "iLRG (Ma et al., ICLR 2023) §3" if o.at == "server"
                     else "RLU (Chen & Vikalo, ICML 2024)"}
        total = update.num_samples
        if bias_name is None:
            exactness["reason"] = "the last linear layer has no bias"
            return None, {"exactness": exactness, "certain": False}
        grads = update.pseudo_gradient()
        steps = update.num_steps
        # mean per-step gradient of a batch of B = N/⌈N/m⌉ samples ≈ summed gradient / s
        batches = max(1, steps // max(1, update.protocol.local_epochs()))
        per_step = total / batches
        grad_w = grads[weight_name].detach().double() / steps
        grad_b = grads[bias_name].detach().double() / steps
        params = update.server_params if o.at == "server" else {
            k: (update.server_params[k] + update.final_params()[k]) / 2 for k in update.server_params}
        weight, bias = params[weight_name].detach().double(), params[bias_name].detach().double()
        a, y, _, posteriors = class_system(grad_w, grad_b, weight, bias)
        classes = grad_b.shape[0]  # the counts are solved from the C bias equations (module docstring)
        raw, counts, residual = solve_counts(a[:classes], y[:classes], max(1, round(per_step)), o.rounding)
        if batches > 1:  # RLU: counts per step's batch, scaled to the client's N
            raw = raw * batches
            counts = round_counts(raw, total, o.rounding)
        exactness.update({"residual": residual, "tolerance": o.tolerance, "steps": steps,
                          "posterior_max": float(posteriors.max())})
        implausible = plausible_counts(raw, total)
        # the precondition (one gradient step, the setting of the paper's system) apart from its proof (the
        # integer counts explain the gradient): ``holds`` is the first, ``certain`` the second
        exactness["holds"] = bool(update.is_fedsgd)
        certain = bool(exactness["holds"] and residual < o.tolerance and implausible is None)
        exactness["reason"] = (f"uncertain: {implausible}" if implausible else
            f"the integer counts explain the last layer's gradient (relative residual {residual:.1e} < {o.tolerance:g})"
            if certain else
            (f"relative residual {residual:.1e} ≥ {o.tolerance:g}: the instances of a class do not share one embedding "
             f"(trained model or varied inputs), counts are an estimate" if update.is_fedsgd else
             f"FedAvg update of {steps} steps: RLU's counts are an estimate (posteriors change during training)"))
        return counts, {"exactness": exactness, "certain": certain, "label_counts": counts.tolist(),
                        "raw_counts": [float(v) for v in raw]}


register("reclabels", StatisticsLabelCounts, "Dimitrov et al. 2022 RecLabels: label counts only (Table 2 'Ours')",
         mode="avg")
register("geng-server", StatisticsLabelCounts,
         "Geng et al. 2021 label counts with statistics at the server weights θˢ (Table 2)", mode="start")
register("geng-client", StatisticsLabelCounts,
         "Geng et al. 2021 label counts with statistics at the client weights θᶜ (Table 2; the authors' code)",
         mode="end")
register("ilrg", LinearLabelCounts, "iLRG (Ma et al., ICLR 2023): label counts from the last layer's gradient by "
         "a linear system; certain when the integer counts explain the gradient", at="server")
register("rlu", LinearLabelCounts, "RLU (Chen & Vikalo, ICML 2024): label counts from a multi-epoch FedAvg update "
         "by the same system at interpolated weights (an estimate)", at="middle")
