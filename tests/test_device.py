"""Device tests (``@pytest.mark.gpu``): every attack family end to end on an accelerator.

They run on CUDA when it is available and are skipped otherwise. ``FEDLEAK_TEST_DEVICE=cpu`` (or any
torch device) runs the same checks on that device instead, which is how they are kept working on a
machine without a GPU (``FEDLEAK_TEST_DEVICE=cpu python -m pytest -m gpu tests/test_device.py``).

What they hold, for the device under test:

* the one client update computes the same FedSGD gradient and FedAvg weights as on the CPU, within
  float32 tolerance;
* every attack family (DLG/iDLG, Inverting Gradients, Dimitrov et al., AGIC, AWA, the label-count
  attacks, the imprint readout) runs end to end with model, update and reconstruction on the device;
* an optimization attack synchronizes with the host a bounded number of times, not once per
  iteration (CUDA only: ``torch.cuda.set_sync_debug_mode`` reports every synchronizing call);
* ``fedleak audit --device`` finishes on the device.
"""

from __future__ import annotations

import os
import warnings

import pytest
import torch

from fedleak import Protocol
from fedleak.attacks import build
from fedleak.data import load
from fedleak.fl import client_update
from fedleak.metrics import evaluate
from fedleak.models import build as build_model


def _device_under_test() -> str | None:
    wanted = os.environ.get("FEDLEAK_TEST_DEVICE")
    if wanted:
        return wanted
    return "cuda" if torch.cuda.is_available() else None


DEVICE = _device_under_test()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE is None, reason="no CUDA device (set FEDLEAK_TEST_DEVICE to run on another)")]


@pytest.fixture(scope="module")
def digits():
    return load("digits", num_clients=2, samples_per_client=4, seed=0)


def _on_device(tensors) -> bool:
    return all(t.device.type == torch.device(DEVICE).type for t in tensors)


@pytest.mark.parametrize("protocol", [Protocol("fedsgd"), Protocol("fedavg", epochs=2, batch_size=2, lr=0.004)],
                         ids=["fedsgd", "fedavg"])
def test_client_update_matches_the_cpu(digits, protocol):
    spec, clients = digits
    model = build_model("femnist-cnn", spec, seed=0)
    cpu = client_update(model, clients[0], protocol, seed=3)
    dev = client_update(model.to(DEVICE), clients[0].to(DEVICE), protocol, seed=3)
    model.to("cpu")
    ours, theirs = (cpu.gradient, dev.gradient) if protocol.algorithm == "fedsgd" else (cpu.client_params,
                                                                                          dev.client_params)
    assert _on_device(theirs.values())
    for name, value in ours.items():
        torch.testing.assert_close(theirs[name].cpu(), value, rtol=1e-4, atol=1e-5, msg=name)


FAMILIES = [
    ("idlg", "lenet", "fedsgd", {"iterations": 5}),
    ("inverting-gradients", "femnist-cnn", "fedsgd", {"iterations": 10}),
    ("dimitrov", "femnist-cnn", "fedavg", {"iterations": 5, "labels": "reclabels"}),
    ("agic", "femnist-cnn", "fedavg", {"iterations": 5}),
    ("awa-no-bo", "femnist-cnn", "fedavg", {"iterations": 5}),
    ("reclabels", "femnist-cnn", "fedavg", {}),
]


@pytest.mark.parametrize("name,model_name,algorithm,options", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_attack_family_runs_on_the_device(digits, name, model_name, algorithm, options):
    spec, clients = digits
    data = clients[1].subset(1) if name == "idlg" else clients[1]
    protocol = Protocol("fedsgd") if algorithm == "fedsgd" else Protocol("fedavg", epochs=2, batch_size=2, lr=0.004)
    model = build_model(model_name, spec, seed=0).to(DEVICE)
    update = client_update(model, data.to(DEVICE), protocol, seed=0,
                           metadata={"label_counts": torch.bincount(data.labels, minlength=spec.num_classes).tolist()})
    rec = build(name, seed=0, **options).reconstruct(update, model, spec)
    if name == "reclabels":
        assert rec.labels is not None and int(rec.labels.numel()) == len(data)
        return
    assert _on_device([rec.inputs]) and bool(torch.isfinite(rec.inputs).all())
    scores = evaluate(rec, data.to(DEVICE), spec)
    assert scores["psnr"] == scores["psnr"]  # a number, computed on the device's tensors


def test_imprint_reads_back_verbatim_on_the_device(digits):
    from fedleak.models.imprint import imprint

    spec, clients = digits
    model = imprint(build_model("femnist-cnn", spec, seed=0), spec, bins=32).to(DEVICE)
    update = client_update(model, clients[0].to(DEVICE), Protocol("fedsgd"), seed=0)
    rec = build("imprint").reconstruct(update, model, spec)
    assert _on_device([rec.inputs])
    assert evaluate(rec, clients[0].to(DEVICE), spec)["psnr"] > 60.0


@pytest.mark.skipif(DEVICE is None or not str(DEVICE).startswith("cuda"), reason="host synchronization is a CUDA notion")
def test_optimization_loop_does_not_synchronize_every_iteration(digits):
    spec, clients = digits
    model = build_model("femnist-cnn", spec, seed=0).to(DEVICE)
    update = client_update(model, clients[0].to(DEVICE), Protocol("fedsgd"), seed=0,
                           metadata={"labels": clients[0].labels.tolist()})

    def synchronizations(iterations: int) -> int:
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                build("inverting-gradients", iterations=iterations, restarts=1, seed=0).reconstruct(update, model, spec)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    short, long = synchronizations(20), synchronizations(60)
    assert long - short < 20, f"{long - short} host synchronizations for 40 more iterations"


def test_audit_cli_runs_on_the_device(tmp_path):
    from fedleak.cli import main

    code = main(["audit", "--quick", "--device", str(DEVICE), "--no-malicious", "--algorithm", "fedsgd",
                 "--out", str(tmp_path / "report")])
    assert code == 0
    assert (tmp_path / "report" / "metrics.json").exists()


def test_exact_text_attack_recovers_on_the_device():
    """DAGER (exact, span checks on the device's tensors) recovers a gpt2-tiny FedSGD batch whole there too."""
    pytest.importorskip("transformers")
    spec, clients = load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = build_model("gpt2-tiny", spec, seed=0, dropout="off").to(DEVICE)
    client = clients[0].to(DEVICE)
    update = client_update(model, client, Protocol("fedsgd", lr=0.01), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    assert evaluate(rec, client, spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0  # share of the batch
