"""Every CLI command has one library call under ``fedleak.`` (issue 32): inspect, run, report and convert-gguf,
called the way a user would, on tiny inputs (simulate, attack: tests/test_workflows.py; audit, dp-audit: their
own tests)."""

import json

import pytest
import yaml
from safetensors.torch import save_file

import fedleak
from fedleak.cli import main

COMMANDS = {"audit": "audit", "dp-audit": "dp_audit", "simulate": "simulate_update", "attack": "attack_update",
            "inspect": "inspect_model_file", "run": "run_experiment", "report": "report_run",
            "convert-gguf": "convert_gguf"}


def test_every_command_has_a_documented_library_function():
    for command, name in COMMANDS.items():
        function = getattr(fedleak, name)
        assert callable(function) and function.__doc__, command
        assert name in fedleak.__all__, name


def test_inspect_model_file_passes_an_honest_model_and_names_a_bad_file(tmp_path):
    spec, _ = fedleak.data.load("digits", num_clients=1, samples_per_client=2, seed=0)
    honest = fedleak.models.build("lenet", spec, seed=0)
    path = tmp_path / "global.safetensors"
    save_file({k: v.contiguous() for k, v in honest.state_dict().items()}, str(path))
    inspection, dsnr = fedleak.inspect_model_file(path, model="lenet", dsnr_batch=0)
    assert not inspection.suspicious and dsnr is None
    assert main(["inspect", str(path), "--model", "lenet", "--dsnr-batch", "0"]) == 0  # the CLI: the same call
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file")
    with pytest.raises(fedleak.FedleakError, match="junk.safetensors"):
        fedleak.inspect_model_file(junk)


def test_run_experiment_then_report_run_in_python(tmp_path):
    raw = {"name": "tiny", "data": {"dataset": "digits", "num_clients": 1, "samples_per_client": 2},
           "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
           "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": 2}}}}
    config = tmp_path / "exp.yaml"
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    summary = fedleak.run_experiment(config, out)
    assert summary["jobs"] == 1 and (out / "table.md").exists() and (out / "summary.json").exists()
    assert json.loads((out / "summary.json").read_text())["jobs"] == 1
    page = fedleak.report_run(out)
    assert page == out / "report.html" and "<table" in page.read_text()
    with pytest.raises(fedleak.FedleakError, match="either a CONFIG.yaml or --preset"):
        fedleak.run_experiment(config, tmp_path / "other", preset="dimitrov-table1-femnist")
    with pytest.raises(fedleak.FedleakError, match="dtype"):
        fedleak.run_experiment(config, tmp_path / "other", dtype="float16")


def test_convert_gguf_refuses_a_file_that_is_not_gguf_before_writing(tmp_path):
    text = tmp_path / "model.gguf"
    text.write_text("plain text pretending to be a GGUF model file", encoding="utf-8")
    with pytest.raises(fedleak.FedleakError, match="model.gguf"):
        fedleak.convert_gguf(text, tmp_path / "folder")
    assert not (tmp_path / "folder").exists()
