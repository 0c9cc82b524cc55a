"""``checkpoint_every``: activation checkpointing of the unrolled local training (issue #11).

The same result as without (the recorded fixed-seed reconstructions of
``test_speed_equivalence``), far fewer tensors kept for the backward pass, validated like every
other option.
"""

from __future__ import annotations

import weakref

import pytest
import torch

from fedleak import FedleakError
from fedleak.attacks import build
from fedleak.fl import local_training, sequential_schedule
from fedleak.types import Protocol

from test_speed_equivalence import CASES, SIMULATION_CASES, _compare, _setup, golden  # noqa: F401 (fixture)


@pytest.mark.parametrize("name", SIMULATION_CASES)
@pytest.mark.parametrize("every", [1, 3])
def test_attacks_with_checkpointing_give_the_recorded_results(name, every, golden):  # noqa: F811
    torch.set_num_threads(1)
    inputs, losses = CASES[name](checkpoint_every=every)
    _compare(name, inputs, losses, golden)


def _saved_bytes(every: int, x: torch.Tensor):
    """Bytes of the tensors the autograd graph still holds after the forward pass, and the gradient
    w.r.t. ``x`` (saved tensors of graphs already freed, e.g. a segment's first-order steps, drop out)."""
    spec, data, model = _setup(4, batchnorm=False)
    params = {k: v.detach() for k, v in model.named_parameters()}
    protocol = Protocol("fedavg", epochs=3, batch_size=1, lr=0.05)
    schedule = sequential_schedule(4, protocol)
    kept = []

    def pack(t):
        kept.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = local_training(model, params, x, data.labels, schedule, protocol.lr, create_graph=True,
                                checkpoint_every=every)
        loss = sum(g.pow(2).sum() for g in result.grad_sum.values())
    alive = {t.data_ptr(): t.numel() * t.element_size() for t in (r() for r in kept) if t is not None}
    (grad,) = torch.autograd.grad(loss, x)
    return sum(alive.values()), grad


def test_checkpointing_keeps_less_and_gives_the_same_gradient():
    torch.set_num_threads(1)
    x = torch.randn(4, 1, 28, 28, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    full, grad_full = _saved_bytes(0, x)
    every_4, grad_4 = _saved_bytes(4, x)
    assert torch.allclose(grad_4, grad_full, rtol=1e-5, atol=1e-7)
    # 12 unrolled steps; kept: the 3 segment boundaries' weights (this tiny model is mostly weights)
    assert every_4 < full / 3


def test_checkpoint_every_is_validated():
    for attack in ("inverting-gradients", "dimitrov", "awa"):
        with pytest.raises(FedleakError, match="checkpoint_every"):
            build(attack, checkpoint_every=-1)
        with pytest.raises(FedleakError, match="checkpoint_every"):
            build(attack, checkpoint_every=1.5)
    spec, data, model = _setup(2, batchnorm=False)
    params = {k: v.detach() for k, v in model.named_parameters()}
    schedule = [[torch.tensor([0]), torch.tensor([1])]]
    with pytest.raises(FedleakError, match="checkpoint_every"):
        local_training(model, params, data.inputs, data.labels, schedule, 0.1, create_graph=True, checkpoint_every=-2)
    with pytest.raises(FedleakError, match="keep_steps"):
        local_training(model, params, data.inputs, data.labels, schedule, 0.1, create_graph=True,
                       checkpoint_every=1, keep_steps=True)
