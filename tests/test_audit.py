"""`fedleak audit` on the user's own model, checkpoint, data and protocol; bad input; the Python API."""

import json

import pytest
import torch
import yaml
from safetensors.torch import save_file
from torch import nn

import fedleak
from fedleak.audit.plan.model_loading import prepare_model
from fedleak.cli import main

FAST = ["--algorithm", "fedsgd", "--samples", "2", "--iterations", "60", "--no-malicious", "--quiet"]


def tiny_cnn(spec):
    """The user's model: one conv layer and a linear classifier, built from the DataSpec."""
    c, h, w = spec.shape
    return nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * h * w, spec.num_classes))


def no_argument_mlp():
    """A factory without arguments (digits: 1×28×28, the 62 FEMNIST classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 32), nn.ReLU(), nn.Linear(32, 62))


def raising_factory(spec):
    raise ValueError("no GPU found")


def not_a_module(spec):
    return 42


def run_cli(*args):
    return main([str(a) for a in args])


def test_module_factory_model_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "rep"
    assert run_cli("audit", "--model", "test_audit:tiny_cnn", *FAST, "--out", out) == 0
    result = json.loads((out / "metrics.json").read_text())
    assert result["model"] == "test_audit:tiny_cnn"
    spec = fedleak.data.spec_for("digits")
    assert result["parameters"] == sum(p.numel() for p in tiny_cnn(spec).parameters())
    ig = result["scenarios"]["fedsgd"]["attacks"]["inverting-gradients"]
    assert len(ig["psnr_per_input"]) == 2 and ig["psnr"] > 15  # a 1-conv ReLU net leaks its 2 images
    assert result["verdicts"]["honest-but-curious"] in ("high", "medium")
    assert "malicious" not in result["verdicts"]
    printed = capsys.readouterr().out
    assert "Recognizable images (%)" in printed and "Honest-but-curious server:" in printed
    # a factory without arguments, by file path
    assert run_cli("audit", "--model", f"{__file__}:no_argument_mlp", *FAST, "--out", tmp_path / "mlp") == 0
    assert json.loads((tmp_path / "mlp" / "metrics.json").read_text())["parameters"] == 28 * 28 * 32 + 32 + 32 * 62 + 62


def test_checkpoint_round_trip(tmp_path, capsys):
    spec = fedleak.data.spec_for("digits")
    trained = fedleak.models.build("femnist-cnn", spec, seed=7)
    with torch.no_grad():
        for p in trained.parameters():
            p.mul_(0.5)  # not any seed's initialization
    state = {k: v.contiguous() for k, v in trained.state_dict().items()}
    save_file(state, str(tmp_path / "w.safetensors"))
    torch.save(state, tmp_path / "w.pt")
    for path in (tmp_path / "w.safetensors", tmp_path / "w.pt"):
        loaded = prepare_model("femnist-cnn", spec, seed=0, weights=str(path)).state_dict()
        assert loaded.keys() == state.keys() and all(torch.equal(loaded[k], state[k]) for k in state)
    # through the CLI, from a YAML config with the same keys as the flags
    config = tmp_path / "audit.yaml"
    config.write_text(yaml.safe_dump({"weights": str(tmp_path / "w.pt"), "algorithm": "fedsgd", "samples": 2,
                                      "iterations": 20, "malicious": False}))
    assert run_cli("audit", "--config", config, "--quiet", "--out", tmp_path / "rep") == 0
    result = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    assert result["config"]["weights"] == str(tmp_path / "w.pt") and result["config"]["samples"] == 2
    assert result["config"]["iterations"] == 20


class Payload:
    """Anything but tensors: weights_only=True must refuse to unpickle it."""


def _pickled(path):
    torch.save({"conv.weight": torch.zeros(1), "payload": Payload()}, path)
    return path


def _write(path, text):
    path.write_text(text)
    return path


BAD = [
    (lambda t: ["--model", "no_such_module_xyz:build"], "cannot be imported"),
    (lambda t: ["--model", f"{_write(t / 'broken.py', 'import nothing_here_xyz')}:f"], "failed to import"),
    (lambda t: ["--model", f"{__file__}:raising_factory"], "raised ValueError: no GPU found"),
    (lambda t: ["--model", f"{__file__}:not_a_module"], "returned int, not a torch.nn.Module"),
    (lambda t: ["--model", "lenet", "--weights", str(t / "femnist.safetensors")], "do not fit the model: missing: "),
    (lambda t: ["--weights", str(_write(t / "w.txt", "x"))], "unsupported format"),
    (lambda t: ["--weights", str(_pickled(t / "evil.pt"))], "cannot be read with weights_only=True"),
    (lambda t: ["--data", "photos", "--model", f"{__file__}:no_argument_mlp"], "does not fit model"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=nan"], "must be a finite number"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=-1"], "σ must be positive"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=1", "--sample-rate", "1.5"], "--sample-rate must be a number <= 1"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=1", "--sample-rate", "0"], "--sample-rate must be a number > 0"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=1,delta=1"], "delta must be in (0, 1)"),
    (lambda t: ["--defense", "dp-sgd:clip=1,noise=1", "--delta", "2"], "--delta must be a number < 1"),
    (lambda t: ["--sweep", "momentum=0.9,0.99"], "unknown sweep knob 'momentum'"),
    (lambda t: ["--sweep", "epochs="], "has an empty value"),
    (lambda t: ["--sweep", "lr=, ,"], "has an empty value"),
    (lambda t: ["--defense", "secagg:0"], "secagg K"),
    (lambda t: ["--attacks", "no-such-attack"], "unknown attack"),
]


@pytest.mark.parametrize("make_args, message", BAD, ids=[m for _, m in BAD])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, make_args, message):
    spec = fedleak.data.spec_for("digits")
    save_file(fedleak.models.build("femnist-cnn", spec).state_dict(), str(tmp_path / "femnist.safetensors"))
    before = set(tmp_path.iterdir())
    out = tmp_path / "rep"
    budget = ["--iterations", "1", "--algorithm", "fedsgd"]  # bounded even if an input slipped through
    assert run_cli("audit", *budget, *make_args(tmp_path), "--quiet", "--out", out) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
    assert {p for p in tmp_path.iterdir() if p.name.startswith(".rep")} == set()
    assert set(tmp_path.iterdir()) - before <= {tmp_path / "broken.py", tmp_path / "w.txt", tmp_path / "evil.pt"}


def test_python_api_reports_progress_through_the_callback(tmp_path):
    events = []
    result = fedleak.audit({"algorithm": "fedavg", "epochs": 1, "batch_size": 2, "samples": 2},
                           attacks="dimitrov", iterations=20, clients=2, malicious=True, out=tmp_path / "rep",
                           progress=events.append, log=None)
    stages = [e["stage"] for e in events if "step" not in e]
    assert any("Dimitrov" in s for s in stages) and stages[-1] == "writing the report"
    steps = [e for e in events if "step" in e]
    assert steps and steps[-1]["step"] == steps[-1]["total"] == 20
    dimitrov = result["scenarios"]["fedavg"]["attacks"]["dimitrov"]
    assert dimitrov["targets"] == 2 and len(dimitrov["per_client"]) == 2 and len(dimitrov["psnr_per_input"]) == 4
    assert result["config"]["clients"] == 2 and result["config"]["attacks"] == ["dimitrov"]
    # the resolved configuration in metrics.json is itself a valid config (rerun the same audit from it)
    assert fedleak.audit.AuditConfig.from_mapping(result["config"]).to_json() == result["config"]
    mal = result["scenarios"]["malicious"]
    assert mal["attack"] == "imprint-sparse" and mal["num_inputs"] == 4  # FedAvg: the sparse block (§4.3)
    assert set(result["verdicts"]) == {"honest-but-curious", "malicious"}
    assert json.loads((tmp_path / "rep" / "metrics.json").read_text())["points"][0]["verdicts"] == result["verdicts"]


def test_log_lines_when_stderr_is_not_a_terminal(tmp_path, capsys):
    args = ["--algorithm", "fedsgd", "--samples", "1", "--iterations", "40", "--no-malicious"]
    assert run_cli("audit", *args, "--out", tmp_path / "rep") == 0
    lines = capsys.readouterr().err.strip().splitlines()
    ig = [line for line in lines if "Inverting Gradients" in line]
    # issue 46: one line when the attack starts, one when it ends (with its last step), no percent lines
    assert ig[0].endswith("fedsgd: Inverting Gradients") and len(ig) == 2, lines
    assert ": done in " in ig[1] and "(iteration 40/40" in ig[1] and "%" not in ig[1], ig
    assert lines[-1].endswith("writing the report")
