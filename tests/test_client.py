"""The one client update (Alg. 1): FedSGD, FedAvg against a hand-written loop, defenses, errors."""

import pytest
import torch
import torch.nn.functional as F

import fedleak
from fedleak.fl import Defense, batch_schedule, client_update, local_training, sequential_schedule
from fedleak.types import ClientData, Protocol


@pytest.fixture
def setup():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=12, seed=3)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    return spec, clients[0], model


def hand_written_fedavg(model, data, protocol, seed):
    """Plain SGD with torch.autograd on a deep copy, the batch order drawn like the client's."""
    import copy

    net = copy.deepcopy(model).double()
    gen = torch.Generator().manual_seed(seed)
    n, m = len(data), protocol.batch_size
    for _ in range(protocol.epochs):
        order = torch.randperm(n, generator=gen)
        for start in range(0, n, m):
            idx = order[start:start + m]
            net.zero_grad()
            F.cross_entropy(net(data.inputs[idx].double()), data.labels[idx]).backward()
            with torch.no_grad():
                for p in net.parameters():
                    p -= protocol.lr * p.grad
    return {k: v.detach() for k, v in net.named_parameters()}


def test_fedavg_matches_hand_written_sgd(setup):
    _, data, model = setup
    protocol = Protocol("fedavg", epochs=3, batch_size=5, lr=0.05)  # 5 does not divide 12: last batch of 2
    update = client_update(model.double(), ClientData(data.inputs.double(), data.labels), protocol, seed=7)
    expected = hand_written_fedavg(model, data, protocol, seed=7)
    for name, value in expected.items():
        assert torch.allclose(update.client_params[name], value, atol=1e-6, rtol=0), name
    assert update.num_steps == 9


def test_fedsgd_is_the_full_batch_gradient(setup):
    _, data, model = setup
    update = client_update(model, data, Protocol("fedsgd"))
    model.zero_grad()
    F.cross_entropy(model(data.inputs), data.labels).backward()
    for name, p in model.named_parameters():
        assert torch.allclose(update.gradient[name], p.grad, atol=1e-6)
    assert update.is_fedsgd and update.num_steps == 1


def test_pseudo_gradient_is_the_sum_of_step_gradients(setup):
    _, data, model = setup
    protocol = Protocol("fedavg", epochs=2, batch_size=4, lr=0.01)
    update = client_update(model.double(), ClientData(data.inputs.double(), data.labels), protocol, seed=1)
    gen = torch.Generator().manual_seed(1)
    schedule = batch_schedule(len(data), protocol, gen)
    params = {k: v.detach() for k, v in model.named_parameters()}
    result = local_training(model, params, data.inputs.double(), data.labels, schedule, protocol.lr)
    for name, g in update.pseudo_gradient().items():
        assert torch.allclose(g, result.grad_sum[name], atol=1e-8)


def test_schedules():
    protocol = Protocol("fedavg", epochs=2, batch_size=4, lr=0.1)
    victim = batch_schedule(10, protocol, torch.Generator().manual_seed(0))
    assert [len(b) for b in victim[0]] == [4, 4, 2]
    assert sorted(torch.cat(victim[1]).tolist()) == list(range(10))
    assert not torch.equal(torch.cat(victim[0]), torch.cat(victim[1]))  # fresh permutation per epoch
    attacker = sequential_schedule(10, protocol, per_epoch_inputs=True)
    assert torch.cat(attacker[1]).tolist() == list(range(10, 20))
    static = batch_schedule(10, Protocol("fedavg", epochs=2, batch_size=4, reshuffle=False))
    assert torch.cat(static[0]).tolist() == list(range(10))


def test_simulation_is_differentiable_with_respect_to_inputs(setup):
    _, data, model = setup
    params = {k: v.detach() for k, v in model.named_parameters()}
    x = data.inputs[:4].clone().requires_grad_(True)
    schedule = [[torch.arange(2), torch.arange(2, 4)]] * 2
    result = local_training(model, params, x, data.labels[:4], schedule, 0.1, create_graph=True)
    loss = sum(g.pow(2).sum() for g in result.grad_sum.values())
    (grad_x,) = torch.autograd.grad(loss, x)
    assert grad_x.abs().sum() > 0


def test_deterministic_given_seed_and_defenses_change_update(setup):
    _, data, model = setup
    protocol = Protocol("fedavg", epochs=2, batch_size=4, lr=0.01)
    a = client_update(model, data, protocol, seed=5)
    b = client_update(model, data, protocol, seed=5)
    assert all(torch.equal(a.client_params[k], b.client_params[k]) for k in a.client_params)
    for defense in ("dp_gaussian_0.01", "dp_laplacian_0.01", "random_pruning_0.5", Defense("none", clip=0.1)):
        d = client_update(model, data, protocol, seed=5, defense=defense)
        diff = max((d.client_params[k] - a.client_params[k]).abs().max() for k in a.client_params)
        assert diff > 0, defense
        assert d.metadata["defense"]["kind"] in ("gaussian", "laplacian", "pruning", "none")


def test_defense_without_noise_equals_plain_update(setup):
    _, data, model = setup
    protocol = Protocol("fedavg", epochs=1, batch_size=4, lr=0.01)
    plain = client_update(model, data, protocol, seed=2)
    # a clip so large it never binds goes through the per-example (vmap) path
    clipped = client_update(model, data, protocol, seed=2, defense=Defense("none", clip=1e9))
    for k in plain.client_params:
        assert torch.allclose(plain.client_params[k], clipped.client_params[k], atol=1e-6)


def test_laplace_noise_has_the_right_scale():
    noisy = Defense("laplacian", 0.5).apply({"w": torch.zeros(200000, 1)}, torch.Generator().manual_seed(0))["w"]
    assert abs(noisy.abs().mean().item() - 0.5) < 0.01  # E|Laplace(0, b)| = b


@pytest.mark.parametrize("bad, message", [
    (dict(algorithm="fedprox"), "unknown algorithm"),
    (dict(epochs=0), "epochs"),
    (dict(lr=float("nan")), "lr"),
    (dict(batch_size=0), "batch_size"),
])
def test_protocol_validation(bad, message):
    with pytest.raises(fedleak.FedleakError, match=message):
        Protocol(**bad)


def test_bad_client_data(setup):
    _, data, model = setup
    with pytest.raises(fedleak.FedleakError, match="NaN"):
        bad = data.inputs.clone()
        bad[0, 0, 0, 0] = float("nan")
        client_update(model, ClientData(bad, data.labels), Protocol())
    with pytest.raises(fedleak.FedleakError, match="labels"):
        ClientData(data.inputs, data.labels[:3])
    with pytest.raises(fedleak.FedleakError, match="cannot be trained"):
        client_update(model, ClientData(torch.zeros(2, 3, 32, 32), torch.zeros(2, dtype=torch.long)), Protocol())
    with pytest.raises(fedleak.FedleakError, match="defense"):
        client_update(model, data, Protocol(), defense="dp_magic_0.1")
