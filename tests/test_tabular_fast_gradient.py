"""TabLeak's fast path (attacks/tabular/mlp_gradient.py, the structural prior in one softmax): the closed-form
gradient of a ReLU MLP equals autograd's, and so does the attack objective's gradient with respect to the records
(one first-order backward instead of autograd's double backward); models it does not cover keep autograd."""

import math

import pytest
import torch

from fedleak.attacks.tabular.mlp_gradient import batched_gradient, mlp_layers
from fedleak.attacks.tabular.restarts import Restarts, cosine_distances, distances, simulate
from fedleak.attacks.tabular.tableak import _StructuralPrior
from fedleak.data.tabular import load
from fedleak.fl.client import local_training, sequential_schedule
from fedleak.models import build
from fedleak.types import Protocol
from test_tabular_attacks import one_thread  # noqa: F401  (autouse: records are tiny matrices, one thread)


@pytest.fixture(scope="module")
def german():
    spec, clients = load("german", num_clients=2, samples_per_client=6, seed=3)
    return spec, clients


def _autograd_distances(ensemble, params, x, labels, schedule, lr, observed):
    layers, ensemble.layers = ensemble.layers, None  # the generic path: vmapped model, double backward
    try:
        return cosine_distances(simulate(ensemble, params, x, labels, schedule, lr), observed)
    finally:
        ensemble.layers = layers


def test_closed_form_gradient_equals_autograd_per_restart(german):
    spec, clients = german
    model = build("tabular-mlp", spec, seed=1)
    layers = mlp_layers(model)
    assert layers == [("fc1.weight", "fc1.bias"), ("fc2.weight", "fc2.bias"), ("fc3.weight", "fc3.bias")]
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = torch.randn(3, 6, spec.schema.width)
    labels = clients[0].labels
    stacked = {k: v.unsqueeze(0).repeat(3, *[1] * v.dim()) for k, v in params.items()}
    for weights in (params, stacked):  # shared by the restarts, or each restart its own copy
        closed = batched_gradient(layers, weights, x, labels)
        for r in range(3):
            alone = local_training(model, params, x[r], labels, [[torch.arange(6)]], 0.01).grad_sum
            for name, g in alone.items():
                assert torch.allclose(closed[name][r], g, rtol=1e-5, atol=1e-7), (r, name)


@pytest.mark.parametrize("protocol", [Protocol("fedsgd", 1, 6, 0.01),
                                      Protocol("fedavg", 2, 3, 0.05, reshuffle=False)])
def test_the_objectives_gradient_equals_the_double_backward(german, protocol):
    """The quantity the attack's optimizer sees: d(Σ_r cosine distance_r)/dz through the structural prior."""
    spec, clients = german
    model = build("tabular-mlp", spec, seed=2)
    params = {k: v.detach() for k, v in model.named_parameters()}
    labels = clients[1].labels
    fedavg = protocol.algorithm == "fedavg"
    schedule = sequential_schedule(6, protocol) if fedavg else [[torch.arange(6)]]
    observed = local_training(model, params, clients[1].inputs, labels, schedule, protocol.lr).grad_sum
    ensemble = Restarts(model, params, 4)
    assert ensemble.layers is not None
    prior = _StructuralPrior(spec.schema, clients[1].inputs, softmax=True)
    z = (torch.rand(4, 6, spec.schema.width, generator=torch.Generator().manual_seed(0)) * 2 - 1).requires_grad_()
    fast = distances(ensemble, params, prior(z), labels, schedule, protocol.lr, observed)
    (g_fast,) = torch.autograd.grad(fast.sum(), z)
    slow = _autograd_distances(ensemble, params, prior(z), labels, schedule, protocol.lr, observed)
    (g_slow,) = torch.autograd.grad(slow.sum(), z)
    assert torch.allclose(fast, slow, atol=1e-6)
    assert torch.allclose(g_fast, g_slow, rtol=1e-4, atol=1e-7)
    assert float(g_fast.abs().max()) > 1e-6  # a gradient that is there
    # the sign trick sees the same directions: every sign agrees where the entry is not ~0
    big = g_slow.abs() > 1e-6 * float(g_slow.abs().max())
    assert torch.equal(g_fast[big].sign(), g_slow[big].sign())


def test_other_models_keep_autograd(german):
    spec, _ = german
    assert mlp_layers(build("ft-transformer", spec, dim=8, blocks=1, heads=2)) is None
    mlp = build("tabular-mlp", spec)
    mlp.loss_fn = lambda logits, y: torch.nn.functional.cross_entropy(logits, y, label_smoothing=0.1)
    assert mlp_layers(mlp) is None  # its own loss: the closed form is for the mean cross-entropy only
    hooked = build("tabular-mlp", spec)
    hooked.fc2.register_forward_hook(lambda *a: None)
    assert mlp_layers(hooked) is None
    assert mlp_layers(torch.nn.Sequential(torch.nn.Linear(3, 2))) is None


def test_one_softmax_over_all_blocks_is_each_blocks_own(german):
    """The reference's categorical_softmax: de-standardize, softmax each block (τ = 1), re-standardize."""
    spec, _ = german
    schema = spec.schema
    z = torch.randn(2, 5, schema.width) * 3
    first, second = schema.categorical_blocks()[:2]
    z[0, 0, first], z[0, 0, second] = 400.0, -400.0  # one record's blocks ~200 apart: exp underflows below the max
    cont = schema.continuous_index()
    z[1, 0, cont[0]], z[1, 1, cont[-1]] = 300.0, -300.0  # sigmoids far out: the categorical blocks underflow
    out = _StructuralPrior(schema, z, softmax=True)(z)
    raw = schema.destandardize(z)
    mean, std = schema._stats(z)
    for block in schema.categorical_blocks():
        expected = (torch.softmax(raw[..., block], dim=-1) - mean[block]) / std[block]
        assert torch.allclose(out[..., block], expected, atol=1e-5)
    low, high = schema.bounds(z)
    assert torch.allclose(out[..., cont], low + (high - low) * torch.sigmoid(z[..., cont]), atol=1e-6)
    assert not math.isnan(float(out.sum()))


@pytest.mark.parametrize("n", [4, 40])  # Gram matrices on both hidden layers / the weight gradient on the first
def test_the_fedsgd_cosine_without_weight_gradients_is_the_same_number(german, n):
    from fedleak.attacks.tabular.mlp_gradient import cosine_distances_mlp

    spec, _ = german
    model = build("tabular-mlp", spec, seed=4)
    params = {k: v.detach() for k, v in model.named_parameters()}
    generator = torch.Generator().manual_seed(n)
    labels = torch.randint(0, 2, (n,), generator=generator)
    observed = local_training(model, params, torch.randn(n, spec.schema.width, generator=generator), labels,
                              [[torch.arange(n)]], 0.01).grad_sum
    x = torch.randn(3, n, spec.schema.width, generator=generator, requires_grad=True)
    layers = mlp_layers(model)
    fast = cosine_distances_mlp(layers, params, x, labels, observed)
    full = cosine_distances(batched_gradient(layers, params, x, labels), observed)
    assert torch.allclose(fast, full, atol=1e-6)
    (g_fast,), (g_full,) = torch.autograd.grad(fast.sum(), x), torch.autograd.grad(full.sum(), x)
    assert torch.allclose(g_fast, g_full, rtol=1e-4, atol=1e-8)


def test_grouped_columns_give_the_same_objective_and_steps(german):
    """The attack optimizes z with grouped columns (categorical blocks, then continuous) against the MLP with its
    first layer's columns permuted alike: same distances, same gradient entry by entry (permuted)."""
    from fedleak.attacks.tabular.restarts import grouped_target

    spec, clients = german
    model = build("tabular-mlp", spec, seed=5)
    params = {k: v.detach() for k, v in model.named_parameters()}
    labels, schedule = clients[0].labels, [[torch.arange(6)]]
    observed = local_training(model, params, clients[0].inputs, labels, schedule, 0.01).grad_sum
    ensemble = Restarts(model, params, 3)
    prior = _StructuralPrior(spec.schema, clients[0].inputs, softmax=True)
    z = torch.randn(3, 6, spec.schema.width, generator=torch.Generator().manual_seed(1), requires_grad=True)
    plain = _autograd_distances(ensemble, params, prior(z), labels, schedule, 0.01, observed)
    (g_plain,) = torch.autograd.grad(plain.sum(), z)
    zg = z.detach().index_select(-1, prior.perm).requires_grad_()
    target = grouped_target(ensemble, params, observed, prior.perm, None)
    grouped = target(prior.grouped(zg), labels, schedule, 0.01, True)
    (g_grouped,) = torch.autograd.grad(grouped.sum(), zg)
    assert torch.allclose(grouped, plain, atol=1e-6)
    assert torch.allclose(g_grouped, g_plain.index_select(-1, prior.perm), rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("n", [3, 60])  # the Gram route on every layer / the formed weight gradients
def test_the_hand_written_backward_passes_gradcheck(german, n):
    """Both hand-written backwards (the cosine to the observed update, the softmax/sigmoid prior) against finite
    differences in float64, with an incoming gradient that is not all ones and labels per restart."""
    from fedleak.attacks.tabular.mlp_gradient import cosine_distances_mlp

    spec, _ = german
    model = build("tabular-mlp", spec, seed=6).double()
    layers = mlp_layers(model)
    params = {k: v.detach() for k, v in model.named_parameters()}
    generator = torch.Generator().manual_seed(n)
    labels = torch.randint(0, 2, (2, n), generator=generator)
    observed = local_training(model, params, torch.randn(n, spec.schema.width, generator=generator,
                                                         dtype=torch.float64), labels[0], [[torch.arange(n)]],
                              0.01).grad_sum
    weight = torch.tensor([0.7, -1.3], dtype=torch.float64)
    x = torch.randn(2, n, spec.schema.width, generator=generator, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: cosine_distances_mlp(layers, params, v, labels, observed) * weight,
                                    (x,), eps=1e-6, atol=1e-9, rtol=1e-6, fast_mode=True)
    prior = _StructuralPrior(spec.schema, x, softmax=True)
    z = (torch.randn(2, n, spec.schema.width, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    assert torch.autograd.gradcheck(lambda v: prior.grouped(v) * torch.linspace(-1, 2, v.shape[-1],
                                                                                   dtype=v.dtype), (z,),
                                    eps=1e-6, atol=1e-9, rtol=1e-6, fast_mode=True)
