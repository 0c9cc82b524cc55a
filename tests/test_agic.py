"""AGIC (Xu et al. 2022): the one-batch approximation (Eq. 4), greedy update matching on a known
permutation with the label filter (§IV-B), the layer-weighted attack, and the multi-epoch path."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from fedleak import ClientData, DataSpec, FedleakError, Protocol
from fedleak.attacks import available, build
from fedleak.attacks.agic import Agic, greedy_match, pooled_mse
from fedleak.attacks.targets import gradient_target
from fedleak.data import load
from fedleak.fl import client_rounds
from fedleak.fl.client import client_update
from fedleak.metrics import evaluate, psnr_matrix

torch.set_num_threads(1)


class TinyNet(nn.Module):
    """Three ReLU convolutions and a linear head for 1×28×28 digits (no BatchNorm)."""

    def __init__(self, width: int = 8, classes: int = 62) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, width, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        self.relu2 = nn.ReLU()
        self.conv3 = nn.Conv2d(width, width, 3, padding=1, stride=2)
        self.relu3 = nn.ReLU()
        self.fc = nn.Linear(width * 196, classes)

    def forward(self, x):
        x = self.relu1(self.conv1(x))
        x = self.relu2(self.conv2(x))
        x = self.relu3(self.conv3(x))
        return self.fc(x.flatten(1))


@pytest.fixture(scope="module")
def digits():
    spec, clients = load("digits", num_clients=1, samples_per_client=12, seed=0)
    data = clients[0]
    # four samples with distinct labels (Yin et al.'s rule assumes distinct labels, as AGIC §V-A)
    keep, seen = [], set()
    for i, y in enumerate(data.labels.tolist()):
        if y not in seen:
            keep.append(i)
            seen.add(y)
    index = torch.tensor(keep[:4])
    return spec, ClientData(data.inputs[index], data.labels[index])


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyNet()


def _mean_image_psnr(data: ClientData, spec: DataSpec) -> float:
    """PSNR of the 'nothing recovered' guess (the dataset mean image) — the bar to beat."""
    from fedleak import Reconstruction

    return evaluate(Reconstruction(torch.zeros_like(data.inputs)), data, spec)["psnr"]


# ----------------------------------------------------------------------------------------------
# matching


def test_greedy_match_recovers_a_known_permutation():
    gen = torch.Generator().manual_seed(3)
    a = torch.rand(7, 3, 8, 8, generator=gen)
    perm = [3, 0, 5, 1, 6, 4, 2]
    b = a[perm] + 0.05 * torch.randn(7, 3, 8, 8, generator=gen)
    pairs = greedy_match(a, b)
    assert len(pairs) == 7
    assert sorted(i for i, _ in pairs) == list(range(7)) and sorted(j for _, j in pairs) == list(range(7))
    assert all(perm[j] == i for i, j in pairs)
    # the most similar pair comes first
    cost = pooled_mse(a, b)
    assert pairs[0] == tuple(divmod(int(cost.argmin()), 7))


def test_pooled_mse_matches_a_direct_computation():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(3, 2, 8, 8, generator=gen), torch.rand(4, 2, 8, 8, generator=gen)
    pa, pb = nn.functional.avg_pool2d(a, 2), nn.functional.avg_pool2d(b, 2)
    direct = ((pa[:, None] - pb[None]) ** 2).flatten(2).mean(-1)
    assert torch.allclose(pooled_mse(a, b, pool=2), direct, rtol=1e-5, atol=1e-9)
    unpooled = ((a[:, None] - b[None]) ** 2).flatten(2).mean(-1)
    assert torch.allclose(pooled_mse(a, b, pool=1), unpooled, rtol=1e-5, atol=1e-9)
    # pooling averages out pixel noise: a noisy copy is closer after pooling
    noisy = a + 0.3 * torch.randn(a.shape, generator=gen)
    assert float(pooled_mse(a[:1], noisy[:1], 2)) < float(pooled_mse(a[:1], noisy[:1], 1)) / 2


def test_label_filter_overrides_similarity_and_falls_back():
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(3, 1, 8, 8, generator=gen)
    b = a.clone()  # b[j] is identical to a[j] ...
    allowed = torch.tensor([[False, True, False], [True, False, False], [False, False, True]])
    pairs = greedy_match(a, b, allowed=allowed)  # ... but the labels forbid (0,0) and (1,1)
    assert sorted(pairs) == [(0, 1), (1, 0), (2, 2)]
    # a row the filter blocks entirely is matched afterwards (fallback) or left out
    blocked = torch.tensor([[False, False, False], [True, True, False], [False, False, True]])
    assert sorted(greedy_match(a, b, allowed=blocked)) == [(0, 0), (1, 1), (2, 2)]
    assert sorted(greedy_match(a, b, allowed=blocked, fallback=False)) == [(1, 1), (2, 2)]
    with pytest.raises(FedleakError, match="label mask"):
        greedy_match(a, b, allowed=torch.ones(2, 3, dtype=torch.bool))


# ----------------------------------------------------------------------------------------------
# the one-batch approximation and the attack


def test_one_batch_approximation_matches_the_fedavg_update(digits, model):
    """Eq. 4: with a small local lr, ΔW/(−μ) after T steps ≈ the gradient of the T batches at W."""
    spec, data = digits
    update = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=1, lr=1e-4), seed=0)
    observed, simulate, n = gradient_target(update, model)
    assert n == 4 and update.num_steps == 4
    simulated = simulate(data.inputs, data.labels)
    a = torch.cat([observed[k].flatten() for k in observed])
    b = torch.cat([simulated[k].detach().flatten() for k in observed])
    assert float(torch.cosine_similarity(a, b, dim=0)) > 0.999
    assert float(b.norm() / a.norm()) == pytest.approx(1.0, abs=0.01)  # scale s = T: Σ of T mean gradients


def test_agic_reconstructs_a_fedavg_update_and_infers_labels(digits, model):
    spec, data = digits
    update = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=1, lr=1e-4), seed=0)
    rec = build("agic", iterations=150, beta=4.0, seed=0).reconstruct(update, model, spec)
    assert rec.inputs.shape == data.inputs.shape
    assert sorted(rec.labels.tolist()) == sorted(data.labels.tolist())  # Yin et al. on ΔW/(−μ)
    assert rec.extras["label_strategy"] == "yin" and rec.extras["target"] == "one-batch"
    assert rec.extras["layer_weights"]["max"] > rec.extras["layer_weights"]["min"]
    metrics = evaluate(rec, data, spec)
    assert metrics["psnr"] > _mean_image_psnr(data, spec) + 1.5, metrics["psnr"]


def test_layer_weights_change_the_objective_only_through_alpha(digits, model):
    spec, data = digits
    update = client_update(model, data.subset(1), Protocol("fedsgd"), seed=0)
    plain = build("agic-no-weights", iterations=20).reconstruct(update, model, spec)
    same = build("agic", iterations=20, beta=1.0, relu_modifier=False).reconstruct(update, model, spec)
    assert torch.allclose(plain.inputs, same.inputs)  # β = 1 without modifier = unweighted cosine
    weighted = build("agic", iterations=20, beta=8.0).reconstruct(update, model, spec)
    assert not torch.allclose(plain.inputs, weighted.inputs)


def test_one_batch_cost_does_not_grow_with_local_steps(digits, model):
    """The approximation runs one forward/backward on the N dummy images per iteration whatever
    the number T of local steps; the simulation runs T (AGIC §V-C, Fig. 8b). Counted exactly with
    a forward hook (the benchmark measures the seconds)."""
    spec, data = digits
    calls: list[int] = []
    hook = model.conv1.register_forward_hook(lambda _m, args, _o: calls.append(args[0].shape[0]))
    try:
        counts = {}
        for batch in (4, 2, 1):  # T = 1, 2, 4 local steps on the same 4 images
            update = client_update(model, data, Protocol("fedavg", epochs=1, batch_size=batch, lr=1e-4))
            for name in ("agic", "invg-simulation"):
                calls.clear()
                build(name, iterations=5, labels="yin").reconstruct(update, model, spec)
                counts[(name, update.num_steps)] = (len(calls), sum(calls))
    finally:
        hook.remove()
    for steps in (1, 2, 4):
        assert counts[("agic", steps)] == (5, 5 * 4)  # one forward of all 4 images per iteration
        assert counts[("invg-simulation", steps)] == (5 * steps, 5 * 4)  # T forwards of 4/T images


# ----------------------------------------------------------------------------------------------
# several epochs


def test_client_rounds_chain_the_rounds(digits, model):
    spec, data = digits
    protocol = Protocol("fedavg", epochs=1, batch_size=1, lr=1e-4)
    updates = client_rounds(model, data, protocol, epochs=2, samples_per_round=2, seed=0)
    assert [u.metadata["epoch"] for u in updates] == [0, 0, 1, 1]
    assert all(u.num_samples == 2 for u in updates)
    for prev, nxt in zip(updates, updates[1:]):  # each round starts from the last round's weights
        assert all(torch.equal(prev.client_params[k], nxt.server_params[k]) for k in prev.client_params)
    with pytest.raises(FedleakError, match="divide"):
        client_rounds(model, data, protocol, epochs=2, samples_per_round=3)


def test_reconstruct_rounds_matches_samples_across_epochs(digits, model):
    spec, data = digits
    protocol = Protocol("fedavg", epochs=1, batch_size=2, lr=1e-4)
    updates = client_rounds(model, data, protocol, epochs=2, seed=0)  # one round of all 4 samples per epoch
    attack = Agic(iterations=60, pre_iterations=120, beta=4.0, label_filter="image")
    rec = attack.reconstruct_rounds(updates, model, spec)
    assert rec.inputs.shape == data.inputs.shape
    assert rec.candidates.shape == (2, *data.inputs.shape)
    chains = rec.extras["chains"]
    assert len(chains) == 4 and all(len(chain) == 2 for chain in chains)
    assert sorted(rec.labels.tolist()) == sorted(data.labels.tolist())
    # every chain pairs the epoch-1 and epoch-2 candidates of the same true sample
    truth = spec.denormalize(data.inputs).clamp(0, 1)
    for e in range(2):
        nearest = psnr_matrix(spec.denormalize(rec.candidates[e]).clamp(0, 1), truth).argmax(1)
        if e == 0:
            first = nearest
        else:
            assert torch.equal(nearest, first)
    assert evaluate(rec, data, spec)["psnr"] > _mean_image_psnr(data, spec) + 1.5
    with pytest.raises(FedleakError, match="epoch"):
        attack.reconstruct_rounds([u.__class__(u.server_params, u.protocol, u.num_samples, u.client_params)
                                   for u in updates], model, spec)


def test_registered_variants_and_option_errors():
    names = available()
    for name in ("agic", "agic-no-weights", "invg-simulation", "dlg-adam"):
        assert name in names
    assert build("invg-simulation").options.target == "simulation"
    assert build("agic-no-weights").options.layer_weights is False
    with pytest.raises(FedleakError, match="allowed: constant, exp, linear, log"):
        build("agic", shape="cubic")
    with pytest.raises(FedleakError, match="label_filter"):
        build("agic", label_filter="maybe")
    with pytest.raises(FedleakError, match="'beta' of attack 'agic' must be a positive"):
        build("agic", beta=0)
    with pytest.raises(FedleakError, match="'tv' of attack 'agic' must be a (finite|non-negative)"):
        build("agic", tv=float("nan"))
    with pytest.raises(FedleakError, match="unknown option"):
        build("agic", gamma=0.1)


def test_runner_attacks_the_rounds_of_two_epochs(tmp_path):
    """A ``rounds`` section makes a job observe the client's updates over two epochs and attack them
    jointly (AGIC Table III, "epochs 1,2"); an attack without ``reconstruct_rounds`` is refused."""
    from fedleak.config import parse_config
    from fedleak.runs.experiment import Runner

    raw = {"name": "rounds", "data": {"dataset": "digits", "num_clients": 1, "samples_per_client": 2},
           "model": {"name": "lenet"}, "protocol": {"algorithm": "fedavg", "epochs": 1, "batch_size": 1, "lr": 1e-3},
           "threat": {"labels": "labels"}, "rounds": {"epochs": 2},
           "variants": {"agic": {"attack": "agic", "options": {"iterations": 40, "beta": 4.0}}}}
    summary = Runner(parse_config(raw), tmp_path, show_progress=False, log=lambda *_: None).run()
    [row] = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["rounds"] == {"epochs": 2} and row["num_reconstructed"] == 2
    extras = row["attack_extras"]
    assert extras["label_strategy"] == "known" and extras["mode"] == "rounds" and extras["num_updates"] == 2
    assert extras["epochs"] == [0, 1]
    # the random start scores 11.3 dB on these two images; 40 joint iterations reach 12.2
    assert summary["means"]["psnr"] == row["psnr"] > 11.8, row["psnr_per_input"]
    raw["variants"] = {"ig": {"attack": "inverting-gradients", "options": {"iterations": 2}}}
    with pytest.raises(FedleakError, match="several rounds"):
        Runner(parse_config(raw), tmp_path / "ig", show_progress=False, log=lambda *_: None).run()
    raw["rounds"] = {"epochs": 0}
    with pytest.raises(FedleakError, match="rounds.epochs"):
        parse_config(raw)
