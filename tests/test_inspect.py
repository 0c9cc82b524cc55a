"""The client-side model inspector: imprint / trap-weight signatures, honest models, the CLI."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import fedleak
from fedleak import FedleakError, Protocol
from fedleak.cli import main
from fedleak.fl.inspect import inspect_model, inspect_state
from fedleak.fl.training import train_fedavg
from fedleak.models.imprint import imprint

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def digits():
    return fedleak.data.load("digits", num_clients=4, samples_per_client=4, seed=0)


@pytest.mark.parametrize("structure,signature", [("cumulative", "imprint-rows"), ("sparse", "imprint-rows"),
                                                 ("one-shot", "imprint-rows"), ("cah", "trap-weights")])
def test_every_imprint_structure_is_found_in_its_layer(digits, structure, signature):
    spec, _ = digits
    model = imprint(fedleak.models.build("lenet", spec, seed=1), spec, bins=32, structure=structure, seed=3)
    inspection = inspect_model(model)
    assert inspection.suspicious
    [finding] = [f for f in inspection.findings if f.confidence >= 0.5]
    assert finding.layer == "imprint.linear.weight" and finding.signature == signature
    assert finding.confidence > 0.99


def test_deep_placement_in_a_resnet_is_found():
    spec = fedleak.DataSpec("rgb", (3, 16, 16), 10, (0.5,) * 3, (0.25,) * 3)
    model = imprint(fedleak.models.build("resnet20", spec, seed=0), spec, bins=16, position="layer2")
    inspection = inspect_model(model)
    signatures = {f.signature for f in inspection.findings}
    assert inspection.suspicious and {"imprint-rows", "linearized-convolution"} <= signatures


@pytest.mark.parametrize("name", ["lenet", "mlp", "femnist-cnn", "resnet20"])
def test_honest_models_pass_at_init_and_after_fedavg_rounds(digits, name):
    spec, clients = digits
    model = fedleak.models.build(name, spec, seed=0)
    assert not inspect_model(model).suspicious, inspect_model(model).summary()
    train_fedavg(model, clients, rounds=2, clients_per_round=2, protocol=Protocol("fedavg", 1, 2, 0.05), seed=0)
    assert not inspect_model(model).suspicious, inspect_model(model).summary()


def test_rank_one_honest_layers_and_zeroed_convolutions_are_not_decisive():
    """A zero-initialized linear layer after one gradient step on one input has parallel rows, but
    all of them share one threshold: no bins. A zeroed convolution (Fixup init) is reported only."""
    layer = torch.nn.Linear(32, 10)
    torch.nn.init.zeros_(layer.weight)
    torch.nn.init.zeros_(layer.bias)
    torch.nn.functional.cross_entropy(layer(torch.randn(1, 32)), torch.tensor([3])).backward()
    with torch.no_grad():
        layer.weight -= 0.1 * layer.weight.grad
        layer.bias -= 0.1 * layer.bias.grad
    zeroed = torch.zeros(8, 8, 3, 3)
    inspection = inspect_state({"fc.weight": layer.weight, "fc.bias": layer.bias, "conv.weight": zeroed})
    assert {f.signature for f in inspection.findings} == {"imprint-rows", "linearized-convolution"}
    assert not inspection.suspicious and all(f.confidence < 0.5 for f in inspection.findings)


def test_renamed_parameters_do_not_hide_the_block(digits):
    spec, _ = digits
    state = imprint(fedleak.models.build("lenet", spec), spec, bins=8).state_dict()
    renamed = {f"layer{i}": v for i, v in enumerate(state.values())}
    assert inspect_state(renamed).suspicious


def test_inspect_bad_input():
    with pytest.raises(FedleakError, match="non-empty mapping"):
        inspect_state({})
    with pytest.raises(FedleakError, match="NaN"):
        inspect_state({"w": torch.full((4, 16), float("nan"))})
    with pytest.raises(FedleakError, match="threshold"):
        inspect_state({"w": torch.zeros(4, 16)}, threshold=0)
    with pytest.raises(FedleakError, match="not a tensor"):
        inspect_state({"w": [1, 2]})
    with pytest.raises(FedleakError, match="torch.nn.Module"):
        inspect_model("lenet")


def test_cli_exit_codes(digits, tmp_path, capsys):
    spec, _ = digits
    honest = fedleak.models.build("lenet", spec, seed=0)
    save_file({k: v.contiguous() for k, v in honest.state_dict().items()}, str(tmp_path / "honest.safetensors"))
    bad = imprint(honest, spec, bins=16)
    save_file({k: v.contiguous() for k, v in bad.state_dict().items()}, str(tmp_path / "bad.safetensors"))
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    assert main(["inspect", str(tmp_path / "honest.safetensors"), "--model", "lenet"]) == 0
    assert "passed" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "bad.safetensors")]) == 1
    out = capsys.readouterr().out
    assert "imprint.linear.weight: imprint-rows" in out and "suspicious" in out
    assert main(["inspect", str(tmp_path / "bad.safetensors"), "--json"]) == 1
    assert '"suspicious": true' in capsys.readouterr().out
    for argv in (["inspect", str(tmp_path / "junk.safetensors")], ["inspect", str(tmp_path / "missing.safetensors")],
                 ["inspect", str(tmp_path / "honest.safetensors"), "--threshold", "2"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("fedleak: error:") and err.count("\n") == 1, err


def test_cli_structure_differs_is_a_finding_and_empty_files_get_no_verdict(digits, tmp_path, capsys):
    """Issue 23 item 4 / issue 21 item 7: a mismatched structure is exit 1; nothing inspectable is exit 2."""
    spec, _ = digits
    bad = imprint(fedleak.models.build("femnist-cnn", spec, seed=0), spec, bins=16)
    save_file({k: v.contiguous() for k, v in bad.state_dict().items()}, str(tmp_path / "evil.safetensors"))
    assert main(["inspect", str(tmp_path / "evil.safetensors"), "--model", "femnist-cnn", "--data", "digits"]) == 1
    out = capsys.readouterr().out
    assert "structure differs: 8 missing, 10 unexpected, 0 reshaped" in out and "suspicious" in out
    save_file({"scale": torch.ones(3), "count": torch.zeros(1)}, str(tmp_path / "vectors.safetensors"))
    assert main(["inspect", str(tmp_path / "vectors.safetensors")]) == 2
    err = capsys.readouterr().err
    assert "inspected nothing" in err and err.count("\n") == 1
