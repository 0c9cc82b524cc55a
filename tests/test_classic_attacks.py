"""DLG, iDLG and Inverting Gradients on real images: what they actually recover."""

import pytest
import torch

import fedleak
from fedleak.attacks.labels import idlg_label
from fedleak.types import Protocol

from conftest import shared_path


@pytest.fixture(scope="module")
def cifar_image():
    root = shared_path("cifar10", "cifar10_exact_subset.npz")
    spec, clients = fedleak.data.load("cifar10", root=root, split="test", num_clients=1, samples_per_client=1,
                                      partition="sequential")
    return spec, clients[0]


def test_idlg_recovers_a_cifar10_image_from_a_lenet_gradient(cifar_image):
    spec, client = cifar_image
    model = fedleak.models.build("lenet", spec, seed=0)
    update = fedleak.client_update(model, client, Protocol("fedsgd"))
    assert idlg_label(update, model).tolist() == client.labels.tolist()
    rec = fedleak.attacks.build("idlg", iterations=100).reconstruct(update, model, spec)
    scores = fedleak.metrics.evaluate(rec, client, spec)
    assert scores["psnr"] > 30.0
    assert rec.labels.tolist() == client.labels.tolist()


def test_inverting_gradients_on_fedsgd_batch_of_one(cifar_image):
    spec, client = cifar_image
    model = fedleak.models.build("lenet", spec, seed=0)
    update = fedleak.client_update(model, client, Protocol("fedsgd"))
    rec = fedleak.attacks.build("inverting-gradients", iterations=1500, tv=1e-3).reconstruct(update, model, spec)
    scores = fedleak.metrics.evaluate(rec, client, spec)
    # A non-convex optimization: the CPU kernels torch picks (ATEN_CPU_CAPABILITY) round differently and send it
    # down another trajectory. benchmarks/bench_cpu_kernels.py → benchmarks/results/cpu_kernels_ig.jsonl
    # (docs/performance.md) measured this run at 25.85 dB / SSIM 0.910 (avx2) and 29.43 dB / 0.959 (default
    # kernels, near the "28.9 dB" once written here) on one machine, the same numbers from the commit that wrote
    # 28.9 (no code change lowered it), and 20.71 dB / 0.792 with attack seed 1 (avx2); issue 27 reports
    # 23.08 dB / 0.835 (avx512) and 24.17 dB (avx2) on another machine. The floor sits below the lowest of these
    # five trajectories with a margin of ~3.7 dB PSNR and ~0.09 SSIM.
    assert scores["psnr"] > 17.0
    assert scores["ssim"] > 0.70


def test_dlg_optimizes_labels_jointly():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=1, seed=0)
    model = fedleak.models.build("lenet", spec, seed=1)
    update = fedleak.client_update(model, clients[0], Protocol("fedsgd"))
    rec = fedleak.attacks.build("dlg", iterations=30).reconstruct(update, model, spec)
    assert rec.inputs.shape == clients[0].inputs.shape
    assert rec.extras["label_strategy"] == "optimize"
    assert rec.extras["loss_history"][-1] < rec.extras["loss_history"][0]


def test_inverting_gradients_simulates_fedavg_with_shared_images():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=4, seed=0)
    client = clients[0]
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    update = fedleak.client_update(model, client, Protocol("fedavg", epochs=2, batch_size=2, lr=0.05))
    update.metadata["label_counts"] = torch.bincount(client.labels, minlength=spec.num_classes).tolist()
    rec = fedleak.attacks.build("inverting-gradients", iterations=200, tv=1e-3).reconstruct(update, model, spec)
    assert rec.extras["target"] == "simulation" and rec.extras["label_strategy"] == "known"
    assert sorted(rec.labels.tolist()) == sorted(client.labels.tolist())
    assert fedleak.metrics.evaluate(rec, client, spec)["psnr"] > 12.0


def test_attack_option_errors():
    with pytest.raises(fedleak.FedleakError, match="unknown attack 'igg'"):
        fedleak.attacks.build("igg")
    with pytest.raises(fedleak.FedleakError, match="unknown option"):
        fedleak.attacks.build("inverting-gradients", iteratons=10)
    with pytest.raises(fedleak.FedleakError, match="option 'iterations' of attack .* must be an integer"):
        fedleak.attacks.build("inverting-gradients", iterations="many")
    with pytest.raises(fedleak.FedleakError, match="option .distance.*allowed: cosine, l1, l2"):
        fedleak.attacks.build("inverting-gradients", distance="l7")
    # numeric bounds are declared per attack class and checked when it is built
    for name, option, value in (("dimitrov", "reg_inv", -1.0), ("dimitrov", "tv", float("inf")),
                                ("imprint", "tolerance", -0.1), ("awa", "bayes_trials", -2),
                                ("reclabels", "label_samples", 0), ("agic", "pool", 0)):
        with pytest.raises(fedleak.FedleakError, match=f"option '{option}' of attack .* must be "):
            fedleak.attacks.build(name, **{option: value})
    with pytest.raises(fedleak.FedleakError, match="option 'reg_inv' of attack 'fedavg-leakage' must be a number"):
        fedleak.attacks.build("dimitrov", reg_inv="lots")


def test_auto_label_strategy_follows_what_the_server_knows():
    from fedleak.attacks.base import auto_label_strategy

    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=3, seed=0)
    model = fedleak.models.build("lenet", spec, seed=0)
    update = fedleak.client_update(model, clients[0], Protocol("fedsgd"))
    one = fedleak.client_update(model, clients[0].subset(1), Protocol("fedsgd"))
    told = fedleak.client_update(model, clients[0], Protocol("fedsgd"), metadata={"labels": [0, 1, 2]})
    assert auto_label_strategy("auto", told, 10) == "known"
    assert auto_label_strategy("auto", update, 10) == "yin"           # N ≤ C
    assert auto_label_strategy("auto", update, 2) == "reclabels"      # N > C
    assert auto_label_strategy("auto", one, 10, few="idlg") == "idlg"
    assert auto_label_strategy("auto", update, 10, few="idlg") == "reclabels"
    assert auto_label_strategy("optimize", told, 10) == "optimize"


def test_update_that_does_not_match_the_model_is_rejected():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=2, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    other = fedleak.models.build("lenet", spec, seed=0)
    update = fedleak.client_update(model, clients[0], Protocol("fedsgd"))
    attack = fedleak.attacks.build("inverting-gradients", iterations=1)
    with pytest.raises(fedleak.FedleakError, match="does not match model"):
        attack.reconstruct(update, other, spec)
    update.gradient["fc2.bias"][0] = float("nan")
    with pytest.raises(fedleak.FedleakError, match="NaN"):
        attack.reconstruct(update, model, spec)
    with pytest.raises(fedleak.FedleakError, match="iDLG's analytic label needs one sample"):
        fedleak.attacks.build("idlg", iterations=1).reconstruct(
            fedleak.client_update(model, clients[0], Protocol("fedsgd")), model, spec)
