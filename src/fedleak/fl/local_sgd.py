"""Local SGD: the steps of the one client update (Alg. 1 of Dimitrov et al., "Data Leakage in Federated Averaging").

The victim (:func:`fedleak.fl.client.client_update`) and every attacker's simulation call :func:`local_training`:

* the victim draws the batch order from a seeded generator (:func:`batch_schedule`), a fresh permutation at
  the start of every epoch (the paper's ``--rand_batch``, research note §A.3);
* an attacker passes its own explicit ``schedule`` (:func:`sequential_schedule`: e.g. per-epoch dummy
  variables, SimUpdate, Dimitrov et al. §4) and ``create_graph=True`` so the whole unrolled simulation is
  differentiable with respect to the dummy inputs and labels.

Each step is plain SGD on the mean cross-entropy of the minibatch, w ← w − η·(1/|b|)·Σ∇ℓ, no
momentum, no lr decay. The result carries the final weights θᶜ and the summed gradient
Σ_t g_t = (θˢ − θᶜ)/η (the pseudo-gradient the server computes, formed as that one difference;
for a single step, FedSGD, it is the step's gradient and no update is computed). With
``checkpoint_every`` an attacker's unrolled simulation keeps memory bounded (activation
checkpointing). Defenses (:mod:`fedleak.fl.defenses`) act on per-example gradients,
computed with ``torch.func.vmap``.

This module knows nothing of clients, seeds or :class:`~fedleak.types.Update`: that is
:mod:`fedleak.fl.client`, which re-exports every public name here.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable
from torch.func import functional_call

from ..errors import FedleakError
from ..types import Params, Protocol
from ..types.params import NORM_TYPES
from .defenses import Defense
from .per_example import per_example_gradients


Schedule = list[list[torch.Tensor]]  # epochs × batches × sample indices


def batch_schedule(num_samples: int, protocol: Protocol, generator: Optional[torch.Generator] = None) -> Schedule:
    """The victim's batch order: per epoch, consecutive minibatches of a permutation.

    A fresh permutation is drawn at the start of every epoch (including the first) when
    ``protocol.reshuffle``; otherwise the data order is used every epoch. The last batch is
    smaller when m does not divide N (research note §A.3). FedSGD is one batch of all N.
    """
    size = protocol.batch_size_for(num_samples)
    schedule = []
    for _ in range(protocol.local_epochs()):
        if protocol.algorithm == "fedavg" and protocol.reshuffle:
            order = torch.randperm(num_samples, generator=generator)
        else:
            order = torch.arange(num_samples)
        schedule.append(list(order.split(size)))
    return schedule


def sequential_schedule(num_samples: int, protocol: Protocol, epochs: Optional[int] = None,
                        per_epoch_inputs: bool = False) -> Schedule:
    """The attacker's fixed schedule: consecutive slices, the same order every epoch.

    With ``per_epoch_inputs`` the dummy tensor holds E·N images, epoch e using images
    ``[e·N, (e+1)·N)`` (SimUpdate's per-epoch variables, Dimitrov et al. §4.1); otherwise every
    epoch reuses the same N images (the "Shared" baseline).
    """
    size = protocol.batch_size_for(num_samples)
    epochs = protocol.local_epochs() if epochs is None else epochs
    base = torch.arange(num_samples)
    return [list((base + (e * num_samples if per_epoch_inputs else 0)).split(size)) for e in range(epochs)]


class LocalResult:
    """θ after local training, the summed gradient Σ_t g_t, and optionally every step's gradient.

    Both are computed on first use from what the loop kept: with one step the gradient sum *is*
    the step's gradient and θᶜ = θˢ − η·g is formed only if asked for (FedSGD never asks); with
    several steps the sum is the one difference (θˢ − θᶜ)/η, the pseudo-gradient the server
    computes, instead of a running sum carried through every step.
    """

    def __init__(self, start: Params, lr: float, num_steps: int, step_grads: list[Params], *,
                 params: Optional[Params] = None, before_last: Optional[Params] = None,
                 last_grad: Optional[Params] = None) -> None:
        self._start, self._lr, self._params = start, lr, params
        self._before_last, self._last_grad = before_last, last_grad
        self.num_steps = num_steps
        self.step_grads = step_grads

    @property
    def params(self) -> Params:
        if self._params is None:
            self._params = {k: v - self._lr * self._last_grad[k] for k, v in self._before_last.items()}
        return self._params

    @property
    def grad_sum(self) -> Params:
        if self.num_steps == 1 and self._last_grad is not None:
            return self._last_grad
        final = self.params
        return {k: (self._start[k] - final[k]) / self._lr for k in self._start}


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy; ``labels`` are class indices (N,) or probabilities (N, C) (DLG's soft labels)."""
    return F.cross_entropy(logits, labels)


def model_loss(model: nn.Module) -> Callable:
    """The loss a client trains ``model`` with: its ``loss_fn(output, labels)`` if it has one
    (the Hugging Face wrappers of :mod:`fedleak.models.hf`), else :func:`cross_entropy`."""
    own = getattr(model, "loss_fn", None)
    if not callable(own):  # a wrapper around such a model (a malicious server's imprinted model: .base)
        own = getattr(getattr(model, "base", None), "loss_fn", None)
    return own if callable(own) else cross_entropy


@contextmanager
def _mode(model: nn.Module, train: bool):
    previous = model.training
    model.train(train)
    try:
        yield
    finally:
        model.train(previous)


def has_batchnorm(model: nn.Module) -> bool:
    return any(isinstance(m, NORM_TYPES) and not isinstance(m, nn.LayerNorm) for m in model.modules())


def local_training(
    model: nn.Module,
    params: Params,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    schedule: Sequence[Sequence[torch.Tensor]],
    lr: float,
    *,
    buffers: Optional[Params] = None,
    create_graph: bool = False,
    defense: Optional[Defense] = None,
    generator: Optional[torch.Generator] = None,
    loss_fn: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
    keep_steps: bool = False,
    train_mode: bool = True,
    checkpoint_every: int = 0,
    private_buffers: bool = False,
    optimizer: str = "sgd",
) -> LocalResult:
    """Run local SGD (Alg. 1) from ``params`` over ``schedule``; functional, optionally differentiable.

    ``params`` are the starting weights (θˢ, not modified); ``inputs``/``labels`` the data the
    schedule indexes into. With ``create_graph`` the returned weights and gradient sum stay
    connected to ``inputs``/``labels`` (and to ``params`` if they require grad) for attacks that
    differentiate through the simulation. ``buffers`` (BatchNorm statistics) are never modified:
    in train mode BatchNorm writes its running statistics, so they are copied first unless the
    caller says they are its own scratch copy (``private_buffers``, e.g. a target that calls this
    every attack iteration; train-mode outputs never read the running statistics).

    ``checkpoint_every`` = k > 0 (with ``create_graph``) keeps only every k-th step's weights of
    the unrolled simulation and rebuilds a segment's k steps with their graph during the backward
    pass (activation checkpointing, as :mod:`torch.utils.checkpoint`, written as one autograd
    function because every step itself differentiates: the generic non-reentrant checkpoint would
    recompute a segment once per inner gradient). Memory grows with T/k + k steps instead of T;
    the result is the same; the forward pass runs the steps once more, without a graph. The
    returned tensors support one backward pass (what an attack does), not higher-order ones.

    ``optimizer="adamw"``: each step is AdamW's (:class:`_AdamW`, a fresh state, constant lr) instead of
    plain SGD; the gradient sum is then the pseudo-gradient (θˢ − θᶜ)/η the server computes, no longer a sum
    of gradients.
    """
    defense = defense if defense is not None else Defense()
    if loss_fn is None:  # the model's own loss (a text model's next-token loss), else cross-entropy
        loss_fn = model_loss(model)
    if checkpoint_every < 0 or int(checkpoint_every) != checkpoint_every:
        raise FedleakError(f"checkpoint_every must be a non-negative integer, got {checkpoint_every!r}")
    if buffers and train_mode and not private_buffers:
        buffers = {k: v.clone() for k, v in buffers.items()}
    buffers = buffers or {}
    if params:  # the data go where the weights are (an attacker's host-side token ids, a CPU label vector)
        device = next(iter(params.values())).device
        inputs, labels = inputs.to(device), labels.to(device)
    batches = [batch.to(inputs.device) for epoch in schedule for batch in epoch]
    if not batches:
        raise FedleakError("the batch schedule is empty: no local step was taken")
    start = {k: (v if create_graph else v.detach()) for k, v in params.items()}
    adam = _AdamW(lr) if optimizer == "adamw" else None
    if optimizer not in ("sgd", "adamw"):
        raise FedleakError(f"unknown optimizer {optimizer!r}; allowed: sgd, adamw")
    with _mode(model, train_mode):
        if create_graph and checkpoint_every and len(batches) > 1:
            if adam is not None:
                raise FedleakError("checkpoint_every simulates plain SGD steps; optimizer='adamw' cannot use it")
            if keep_steps:
                raise FedleakError("keep_steps cannot be combined with checkpoint_every")
            final = _checkpointed_steps(model, start, buffers, inputs, labels, batches, lr, loss_fn,
                                        int(checkpoint_every))
            return LocalResult(start, lr, len(batches), [], params=final)
        current, steps = start, []
        for i, batch in enumerate(batches):
            x, y = inputs.index_select(0, batch), labels.index_select(0, batch)
            if defense.active:
                g = _defended_batch_gradient(model, current, buffers, x, y, loss_fn, defense, generator)
            else:
                g = _batch_gradient(model, current, buffers, x, y, loss_fn, create_graph)
            if keep_steps:
                steps.append(g)
            if adam is not None:
                current = adam.step(current, g)
                if i == len(batches) - 1:
                    return LocalResult(start, lr, len(batches), steps, params=current)
            elif i == len(batches) - 1:  # the last update is formed only when θᶜ is asked for
                return LocalResult(start, lr, len(batches), steps, before_last=current, last_grad=g)
            else:
                current = {k: current[k] - lr * g[k] for k in current}
            if not create_graph:
                current = {k: v.detach() for k, v in current.items()}
    raise AssertionError("unreachable")


class _AdamW:
    """AdamW's step as ``torch.optim.AdamW`` computes it (Loshchilov & Hutter, ICLR 2019, Alg. 2; bias-corrected
    moments, decoupled weight decay), functional: w ← w − η·λ·w − η·m̂/(√v̂ + ε), at the Hugging Face Trainer's
    defaults (β = (0.9, 0.999), ε = 1e-8, λ = 0). A fresh state per round, as a Trainer built per round has."""

    def __init__(self, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.t, self.m, self.v = 0, {}, {}

    def step(self, current: Params, g: Params) -> Params:
        b1, b2 = self.betas
        self.t += 1
        out = {}
        for k, w in current.items():
            self.m[k] = b1 * self.m.get(k, 0) + (1 - b1) * g[k]
            self.v[k] = b2 * self.v.get(k, 0) + (1 - b2) * g[k] * g[k]
            m_hat = self.m[k] / (1 - b1 ** self.t)
            v_hat = self.v[k] / (1 - b2 ** self.t)
            w = w * (1 - self.lr * self.weight_decay) if self.weight_decay else w
            out[k] = w - self.lr * m_hat / (v_hat.sqrt() + self.eps)
        return out


def _checkpointed_steps(model, start: Params, buffers: Params, inputs, labels, batches, lr, loss_fn,
                        every: int) -> Params:
    """The unrolled steps in segments of ``every``; a segment's graph exists only during its backward.

    The forward pass of a segment computes its steps' gradients without a graph (plain first-order
    SGD); the backward pass recomputes them with ``create_graph`` and differentiates the segment's
    end weights with respect to its start weights, inputs and labels (:class:`_Segment`). Only the
    segment boundaries' weights are kept between the passes.
    """
    names = list(start)

    def run(chunk, tensors, create_graph: bool):
        current = dict(zip(names, tensors[:len(names)]))
        x_all, y_all = tensors[len(names)], tensors[len(names) + 1]
        for batch in chunk:
            x, y = x_all.index_select(0, batch), y_all.index_select(0, batch)
            g = _batch_gradient(model, current, buffers, x, y, loss_fn, create_graph)
            current = {k: current[k] - lr * g[k] for k in names}
        return tuple(current[k] for k in names)

    current = start
    for first in range(0, len(batches), every):
        chunk = batches[first:first + every]
        flat = _Segment.apply(lambda tensors, graph, chunk=chunk: run(chunk, tensors, graph),
                              *(current[k] for k in names), inputs, labels)
        current = dict(zip(names, flat))
    return current


class _Segment(torch.autograd.Function):
    """A few unrolled SGD steps, recomputed with their graph in the backward pass (checkpointing)."""

    @staticmethod
    def forward(ctx, run, *tensors):
        ctx.run = run
        ctx.save_for_backward(*tensors)
        with torch.enable_grad():  # the steps' own gradients, no graph kept
            out = run(tensors, False)
        return tuple(o.detach() for o in out)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grad_outputs):
        needs = ctx.needs_input_grad[1:]
        leaves = [t.detach().requires_grad_(bool(n)) for t, n in zip(ctx.saved_tensors, needs)]
        wanted = [leaf for leaf, n in zip(leaves, needs) if n]
        with torch.enable_grad():
            out = ctx.run(leaves, True)
            grads = iter(torch.autograd.grad(out, wanted, grad_outputs, allow_unused=True) if wanted else ())
        return (None, *(next(grads) if n else None for n in needs))


def _leaves(current: Params, create_graph: bool) -> Params:
    """Tensors to differentiate with respect to: the graph-connected ones, or fresh leaves."""
    if create_graph:
        return {k: (v if v.requires_grad else v.detach().requires_grad_(True)) for k, v in current.items()}
    return {k: v.detach().requires_grad_(True) for k, v in current.items()}


def _batch_gradient(model, current, buffers, x, y, loss_fn, create_graph) -> Params:
    leaves = _leaves(current, create_graph)
    total: list = [None] * len(leaves)
    with torch.enable_grad():
        for xc, yc, weight in _micro_batches(model, x, y, create_graph):
            logits = functional_call(model, {**leaves, **buffers}, (xc,))
            loss = loss_fn(logits, yc) * weight
            grads = torch.autograd.grad(loss, list(leaves.values()), create_graph=create_graph, allow_unused=True)
            total = [g if t is None else (t if g is None else t + g) for t, g in zip(total, grads)]
    return {k: (g if g is not None else torch.zeros_like(leaves[k])) for k, g in zip(leaves, total)}


def _micro_batches(model, x, y, create_graph: bool):
    """Gradient accumulation: the minibatch in slices of ``model.micro_batch`` samples, each slice's mean loss
    weighted by its share of the minibatch's loss terms (``model.loss_terms``: a text model's counted targets),
    so the summed gradient is the minibatch's mean-loss gradient — what a deployment's gradient accumulation
    computes, in the memory of one slice (FlowerTune's 16 × 512 tokens do not fit 24 GiB in one forward).
    One slice when the model sets no micro-batch, for an attacker's differentiable simulation, and with
    BatchNorm (batch statistics differ per slice)."""
    micro = getattr(model, "micro_batch", None)
    if not micro or create_graph or len(x) <= micro or has_batchnorm(model):
        return [(x, y, 1.0)]
    terms = getattr(model, "loss_terms", None)
    count = (lambda a, b: float(terms(a, b))) if callable(terms) else (lambda a, b: float(len(a)))
    whole = count(x, y) or 1.0
    return [(x[i:i + micro], y[i:i + micro], count(x[i:i + micro], y[i:i + micro]) / whole)
            for i in range(0, len(x), micro)]


def _defended_batch_gradient(model, current, buffers, x, y, loss_fn, defense, generator) -> Params:
    """Per-example gradients (vmap), the defense on each, then the minibatch mean (App. A.10)."""
    if has_batchnorm(model):
        raise FedleakError("per-example gradient defenses need a model without BatchNorm (per-example "
                           "gradients are undefined with batch statistics); use e.g. femnist-cnn or lenet")
    per_example = per_example_gradients(model, current, buffers, x, y, loss_fn)
    per_example = defense.apply(per_example, generator)
    return {k: g.mean(0) for k, g in per_example.items()}
