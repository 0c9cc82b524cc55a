"""Dimitrov et al.'s FedAvg attack: epoch prior, MatchEpoch, schedules, variants, end to end."""

import math

import pytest
import torch

from fedleak.attacks import build
from fedleak.attacks.fedavg import (PAPER_PRIOR_WEIGHTS, FedAvgLeakage, batch_label_sequences, fac_schedule,
                                    label_consistent_schedule, layer_weights)
from fedleak.attacks.labels import labels_to_counts
from fedleak.attacks.losses import EPOCH_PRIORS, EpochOrderPrior
from fedleak.attacks.postprocess import match_epochs
from fedleak.data import load
from fedleak.errors import FedleakError
from fedleak.fl import batch_schedule, client_update
from fedleak.metrics import evaluate
from fedleak.models import build as build_model
from fedleak.types import DataSpec, Protocol

FEMNIST_LIKE = DataSpec("femnist", (1, 28, 28), 62, (0.9642384386141873,), (0.15767843198426892,))
CIFAR_LIKE = DataSpec("cifar100", (3, 32, 32), 100, (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
TINY = DataSpec("tiny", (2, 6, 6), 4, (0.5, 0.5), (0.25, 0.25))


def _images(n, spec=TINY, seed=0):
    return torch.randn((n, *spec.shape), generator=torch.Generator().manual_seed(seed))


# -- epoch order-invariant prior ----------------------------------------------------------------

@pytest.mark.parametrize("kind", EPOCH_PRIORS)
def test_epoch_prior_is_invariant_to_order_within_epochs(kind):
    epochs, n = 3, 5
    prior = EpochOrderPrior(kind, epochs, in_channels=2, channels=8, seed=1)
    x = _images(epochs * n)
    value = prior(x)
    g = torch.Generator().manual_seed(2)
    shuffled = torch.cat([x[e * n:(e + 1) * n][torch.randperm(n, generator=g)] for e in range(epochs)])
    assert float(value) > 0
    assert torch.allclose(prior(shuffled), value, rtol=1e-5, atol=1e-7)
    # epochs that hold the same images in different orders cost nothing
    base = x[:n]
    permuted = torch.cat([base[torch.randperm(n, generator=g)] for _ in range(epochs)])
    assert float(prior(permuted)) < 1e-6 * float(value)  # zero up to float rounding
    # and it is differentiable with respect to the images
    y = x.clone().requires_grad_(True)
    prior(y).backward()
    assert y.grad is not None and float(y.grad.abs().sum()) > 0


def test_epoch_prior_values_and_fixed_random_conv():
    x = torch.zeros(4, 1, 2, 2)
    x[2:] = 1.0  # epoch 2 is all ones, epoch 1 all zeros
    # 1/E² Σ over ordered pairs: two off-diagonal pairs of distance 1 out of 4 → 0.5
    assert float(EpochOrderPrior("l2_mean", 2, 1)(x)) == pytest.approx(0.5)
    assert float(EpochOrderPrior("l1_max", 2, 1)(x)) == pytest.approx(0.5)
    a = EpochOrderPrior("l2_mean_conv", 2, 3, channels=96, seed=7)
    b = EpochOrderPrior("l2_mean_conv", 2, 3, channels=96, seed=7)
    c = EpochOrderPrior("l2_mean_conv", 2, 3, channels=96, seed=8)
    assert a.weight.shape == (96, 3, 3, 3) and torch.equal(a.weight, b.weight) and not torch.equal(a.weight, c.weight)
    assert float(a.weight.std()) == pytest.approx(1 / math.sqrt(27), rel=0.15)  # LeCun normal, fan-in 27
    assert a.summaries(_images(6, CIFAR_LIKE)).shape == (2, 96, 32, 32)
    with pytest.raises(FedleakError, match="epoch prior"):
        EpochOrderPrior("l3_mean", 2, 1)
    with pytest.raises(FedleakError, match="E=3"):
        EpochOrderPrior("l2_mean", 3, 1)(torch.zeros(4, 1, 2, 2))


# -- MatchEpoch -------------------------------------------------------------------------------------

def test_match_epochs_undoes_permutations_and_averages():
    epochs, n = 4, 6
    base = _images(n)
    g = torch.Generator().manual_seed(3)
    perms, blocks = [], []
    for e in range(epochs):
        perm = torch.arange(n) if e == 0 else torch.randperm(n, generator=g)
        perms.append(perm)
        blocks.append(base[perm] + 0.05 * torch.randn(base.shape, generator=g))
    result = match_epochs(torch.cat(blocks), epochs, TINY)
    for e in range(epochs):
        # aligned[e][k] is the image of epoch e that shows base image k
        assert torch.equal(perms[e][result.orders[e]], torch.arange(n))
    assert result.aligned.shape == (epochs, n, *TINY.shape)
    assert torch.allclose(result.inputs, result.aligned.mean(0))
    # averaging the aligned noisy copies gets closer to the truth than one copy
    assert (result.inputs - base).pow(2).mean() < 0.5 * (blocks[0] - base).pow(2).mean()
    with pytest.raises(FedleakError, match="E=4"):
        match_epochs(torch.zeros(10, *TINY.shape), 4, TINY)


# -- pieces of the objective ---------------------------------------------------------------------

def test_scale_ramp_and_layer_weights():
    femnist = fac_schedule(1.0, 2.0, 200)
    assert femnist(0) == pytest.approx(2 ** (1 / 200))  # the first step already ramps
    assert femnist(198) < 2.0 and femnist(199) == pytest.approx(2.0) and femnist(399) == 2.0
    cifar = fac_schedule(4.0, 2.0, 200)
    assert cifar(0) < 4.0 and cifar(250) == 2.0
    model = build_model("femnist-cnn", FEMNIST_LIKE)
    w = layer_weights(model)
    assert w["conv1.weight"] == w["conv1.bias"] == 1.0
    assert w["conv2.weight"] == pytest.approx(math.exp(-1)) and w["fc2.bias"] == pytest.approx(math.exp(-3))
    assert set(layer_weights(model, "uniform").values()) == {1.0}


def test_paper_hyperparameters_per_dataset():
    attack = build("dimitrov")
    femnist = attack.resolved(FEMNIST_LIKE)
    assert (femnist["lr"], femnist["decay"], femnist["decay_interval"], femnist["prior"], femnist["reg_inv"]) == \
        (0.4, 0.995, 10, "l2_mean", 1000.0)
    cifar = attack.resolved(CIFAR_LIKE)
    assert (cifar["lr"], cifar["tv"], cifar["clip"], cifar["fac_start"], cifar["prior"], cifar["reg_inv"]) == \
        (0.1, 2e-4, 10.0, 4.0, "l2_max_conv", 6.075)
    assert build("dimitrov", prior="l1_max", lr=0.3).resolved(FEMNIST_LIKE)["reg_inv"] == PAPER_PRIOR_WEIGHTS["femnist"]["l1_max"]
    assert build("dimitrov", prior="l1_max", lr=0.3).resolved(FEMNIST_LIKE)["lr"] == 0.3
    assert build("dimitrov-shared").resolved(FEMNIST_LIKE)["prior"] == "none"


def test_options_are_validated():
    with pytest.raises(FedleakError, match="per-epoch"):
        build("dimitrov-shared", prior="l2_mean")
    with pytest.raises(FedleakError, match="simulation"):
        build("dimitrov", simulation="full_many")
    with pytest.raises(FedleakError, match="unknown option"):
        build("dimitrov", prior_weight=3)
    with pytest.raises(FedleakError, match="non-negative"):
        build("dimitrov", tv=-1)


# -- known batch labels (Table 8) ------------------------------------------------------------------

def test_batch_labels_and_label_consistent_shared_schedule():
    spec = DataSpec("tiny", (1, 4, 4), 3, (0.0,), (1.0,))
    labels = torch.tensor([0, 1, 1, 2, 2, 2])
    protocol = Protocol("fedavg", epochs=2, batch_size=2)
    schedule = batch_schedule(6, protocol, torch.Generator().manual_seed(0))
    nested = [[labels[b].tolist() for b in epoch] for epoch in schedule]
    model = build_model("mlp", spec, hidden=(4,))
    update = client_update(model, __import__("fedleak").types.ClientData(torch.zeros(6, 1, 4, 4), labels), protocol,
                           metadata={"batch_labels": nested})
    sequences = batch_label_sequences(update, 3)
    assert [s.tolist() for s in sequences] == [sum(epoch, []) for epoch in nested]
    shared = torch.tensor([0, 1, 1, 2, 2, 2])
    plan = label_consistent_schedule(shared, sequences, 2)
    for epoch, seq in zip(plan, sequences):
        order = torch.cat(epoch)
        assert sorted(order.tolist()) == list(range(6))       # each shared image once per epoch
        assert torch.equal(shared[order], seq)                # with the batch's known label
    bad = dict(update.metadata, batch_labels=[[[0, 1]], [[1, 1]]])
    update.metadata = bad
    with pytest.raises(FedleakError, match="epoch 0 has 2 labels"):
        batch_label_sequences(update, 3)


# -- end to end ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def digits_update():
    torch.set_num_threads(1)
    spec, clients = load("digits", None, num_clients=1, samples_per_client=4, seed=0)
    client = clients[0]
    model = build_model("femnist-cnn", spec, seed=0)
    protocol = Protocol("fedavg", epochs=2, batch_size=2, lr=0.004)
    counts = labels_to_counts(client.labels, spec.num_classes).tolist()
    update = client_update(model, client, protocol, seed=0, metadata={"label_counts": counts})
    return spec, client, model, update


def test_end_to_end_reconstruction_reaches_psnr_bar(digits_update):
    spec, client, model, update = digits_update
    rec = build("dimitrov", iterations=150).reconstruct(update, model, spec)
    assert rec.inputs.shape == client.inputs.shape
    assert rec.candidates.shape == (2, 4, *spec.shape)
    assert sorted(rec.labels.tolist()) == sorted(client.labels.tolist())
    assert rec.extras["label_source"] == "known" and rec.extras["k_batches"] == 4
    scores = evaluate(rec, client, spec, clip=False)
    # the dataset-mean image scores ≈ 10.9 dB and random inputs ≈ 9.7 dB on this client
    assert scores["psnr"] > 16.5


def test_deterministic_given_seed(digits_update):
    spec, client, model, update = digits_update
    a = build("dimitrov", iterations=4, seed=3).reconstruct(update, model, spec)
    b = build("dimitrov", iterations=4, seed=3).reconstruct(update, model, spec)
    c = build("dimitrov", iterations=4, seed=4).reconstruct(update, model, spec)
    assert torch.equal(a.inputs, b.inputs) and not torch.equal(a.inputs, c.inputs)


def test_baselines_and_label_restoration_run(digits_update):
    spec, client, model, update = digits_update
    for name in ("dimitrov-shared", "dimitrov-fedsgd-epoch", "dimitrov-fedsgd", "dimitrov-no-prior"):
        rec = build(name, iterations=3).reconstruct(update, model, spec)
        assert rec.inputs.shape == client.inputs.shape and bool(torch.isfinite(rec.inputs).all())
    blind = type(update)(update.server_params, update.protocol, update.num_samples, client_params=update.client_params)
    rec = build("dimitrov-no-prior", iterations=2, label_samples=64).reconstruct(blind, model, spec)
    assert rec.extras["label_source"] == "reclabels" and int(rec.labels.numel()) == 4
    assert isinstance(build("dimitrov"), FedAvgLeakage)


# -- FedAvg server training (Table 7) ----------------------------------------------------------------

def test_train_fedavg_is_the_mean_of_client_updates():
    from fedleak.fl.training import train_fedavg
    from fedleak.types.params import params_of
    from fedleak.types import ClientData

    spec = DataSpec("tiny", (1, 4, 4), 3, (0.0,), (1.0,))
    g = torch.Generator().manual_seed(0)
    clients = [ClientData(torch.randn(6, 1, 4, 4, generator=g), torch.randint(0, 3, (6,), generator=g), f"c{i}")
               for i in range(4)]
    protocol = Protocol("fedavg", epochs=2, batch_size=3, lr=0.1)
    model = build_model("mlp", spec, hidden=(5,))
    start = params_of(model)
    assert train_fedavg(model, clients, 0, 2, protocol) is model
    assert all(torch.equal(start[k], v) for k, v in params_of(model).items())
    seen = []
    trained = train_fedavg(model, clients, 2, 4, protocol, seed=5, progress=lambda r, t: seen.append((r, t)))
    assert seen == [(1, 2), (2, 2)]
    # one round with every client equals the plain mean of their client updates from the start weights
    one = build_model("mlp", spec, hidden=(5,))
    train_fedavg(one, clients, 1, 4, protocol, seed=5)
    fresh = build_model("mlp", spec, hidden=(5,))
    import numpy as np
    chosen = np.random.default_rng(5).choice(4, size=4, replace=False).tolist()
    manual = [client_update(fresh, clients[i], protocol, seed=5 * 1_000_003 + j).client_params for j, i in enumerate(chosen)]
    for name, value in params_of(one).items():
        assert torch.allclose(value, torch.stack([m[name] for m in manual]).mean(0), atol=1e-6)
    assert not all(torch.equal(start[k], v) for k, v in params_of(trained).items())
    with pytest.raises(FedleakError, match="FedAvg"):
        train_fedavg(model, clients, 1, 2, Protocol("fedsgd"))


# -- presets ---------------------------------------------------------------------------------------------

def test_dimitrov_presets_are_consistent():
    from pathlib import Path

    import yaml

    from fedleak.fl import Defense

    folder = Path(__import__("fedleak").__file__).parent / "presets"
    files = sorted(folder.glob("dimitrov-*.yaml"))
    assert {f.stem for f in files} >= {"dimitrov-table1-femnist", "dimitrov-table1-cifar100", "dimitrov-table2-femnist",
                                       "dimitrov-table3-femnist", "dimitrov-table3-cifar100", "dimitrov-table4-femnist",
                                       "dimitrov-table4-cifar100", "dimitrov-table6-femnist", "dimitrov-table7-femnist",
                                       "dimitrov-table8-femnist"}
    for path in files:
        preset = yaml.safe_load(path.read_text())
        assert preset["name"] == path.stem
        for variant in preset["variants"].values():
            build(variant["attack"], **variant.get("options", {}))  # registered, options valid
        settings = [s["name"] for s in preset.get("settings", [])] or ["default"]
        for setting in preset.get("settings", []):
            Defense.parse(setting.get("defense", preset["defense"]))
            Protocol.from_json({**preset["protocol"], **setting.get("protocol", {})})
        assert set(preset["paper"]) == set(settings), path.name
        for row in preset["paper"].values():
            assert set(row) == set(preset["variants"]), path.name
    t1 = yaml.safe_load((folder / "dimitrov-table1-femnist.yaml").read_text())
    assert t1["paper"]["E10-m5"]["ours-prior"] == {"rec_percent": 65.5, "psnr": 21.5}


def test_cosine_variant_of_the_paper_text_recovers_images(digits_update):
    spec, client, model, update = digits_update
    rec = build("dimitrov-cosine", iterations=100).reconstruct(update, model, spec)
    assert rec.extras["distance"] == "cosine" and rec.extras["layer_weights"] == "uniform"
    assert evaluate(rec, client, spec, clip=False)["psnr"] > 16.5


def test_known_batch_labels_drive_the_simulation(digits_update):
    spec, client, model, update = digits_update
    schedule = batch_schedule(len(client), update.protocol, torch.Generator().manual_seed(0))
    told = type(update)(update.server_params, update.protocol, update.num_samples,
                        client_params=update.client_params,
                        metadata={"batch_labels": [[client.labels[b].tolist() for b in epoch] for epoch in schedule]})
    for name in ("dimitrov", "dimitrov-shared"):
        rec = build(name, iterations=2).reconstruct(told, model, spec)
        assert rec.extras["label_source"] == "batches" and rec.extras["label_order"] == "batches"
        assert sorted(rec.labels.tolist()) == sorted(client.labels.tolist())
