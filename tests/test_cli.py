"""The command line as users run it: audit, simulate → attack, run (with resume), listings, errors."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from fedleak.cli import main


def run_cli(*args):
    return main([str(a) for a in args])


def test_audit_quick_writes_report(tmp_path, capsys):
    assert run_cli("audit", "--quick", "--out", tmp_path / "rep", "--no-progress") == 0
    out = capsys.readouterr().out
    assert "inverting-gradients" in out and "dimitrov" in out and "imprint" in out
    report = (tmp_path / "rep" / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 4
    scores = json.loads((tmp_path / "rep" / "metrics.json").read_text())
    assert set(scores["scenarios"]) == {"fedsgd", "fedavg", "malicious"}
    fedsgd = scores["scenarios"]["fedsgd"]["attacks"]["inverting-gradients"]
    assert fedsgd["psnr"] > 15 and len(fedsgd["psnr_per_input"]) == 4
    assert scores["scenarios"]["malicious"]["verbatim_percent"] > 50
    assert list((tmp_path / "rep").glob("*.png"))


def test_simulate_then_attack(tmp_path, capsys):
    upd = tmp_path / "update"
    assert run_cli("simulate", "--data", "digits", "--samples", 1, "--model", "lenet", "--algorithm", "fedsgd",
                   "--out", upd) == 0
    assert (upd / "update.safetensors").exists() and (upd / "truth.safetensors").exists()
    assert run_cli("attack", upd, "--attack", "idlg", "-o", "iterations=40", "--out", tmp_path / "rec") == 0
    scores = json.loads((tmp_path / "rec" / "metrics.json").read_text())
    assert scores["psnr"] > 25
    assert (tmp_path / "rec" / "comparison.png").exists()


def test_simulate_then_attack_a_text_update(tmp_path, capsys):
    """Token ids are integers: the saved truth of a text update is read as such (it was refused as not floating
    point, exit 2 after the simulate) and DAGER's exact recovery is scored by the text metrics."""
    from safetensors.torch import load_file, save_file

    upd = tmp_path / "update"
    assert run_cli("simulate", "--data", "text", "--model", "gpt2-tiny", "--algorithm", "fedsgd", "--batch-size", 2,
                   "--samples", 2, "--out", upd) == 0
    assert run_cli("attack", upd, "--attack", "inverting-gradients", "--out", tmp_path / "rec") == 2
    err = capsys.readouterr().err  # an image attack on token ids: one line before any work (was an internal error)
    assert "does not attack sequences" in err and "dager" in err and not (tmp_path / "rec").exists()
    assert run_cli("attack", upd, "--out", tmp_path / "rec") == 0  # the data's own attack: DAGER
    assert "dager: " in capsys.readouterr().out
    scores = json.loads((tmp_path / "rec" / "metrics.json").read_text())
    assert scores["exact_sequences"] == 1.0 and scores["rouge1"] == 1.0
    truth = load_file(upd / "truth.safetensors")
    save_file({"inputs": truth["inputs"].float(), "labels": truth["labels"]}, upd / "truth.safetensors")
    assert run_cli("attack", upd, "--attack", "dager", "--out", tmp_path / "rec2") == 2
    err = capsys.readouterr().err
    assert "integer (token ids) 'inputs'" in err and len(err.strip().splitlines()) == 1


def write_config(path, **extra):
    config = {
        "name": "tiny", "data": {"dataset": "digits", "num_clients": 2, "samples_per_client": 2},
        "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"}, "threat": {"labels": "counts"},
        "variants": {"ig": {"attack": "inverting-gradients", "options": {"iterations": 20}},
                     "dlg": {"attack": "dlg-adam", "options": {"iterations": 10}}},
        "paper": {"default": {"ig": {"psnr": 30.0}}}, **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_run_writes_results_and_resumes(tmp_path, capsys):
    config = write_config(tmp_path / "exp.yaml")
    out = tmp_path / "run"
    assert run_cli("run", config, "--out", out, "--no-progress") == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 4 and {json.loads(l)["variant"] for l in lines} == {"ig", "dlg"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["variants"]["ig"]["clients"] == 2 and "psnr" in summary["variants"]["ig"]
    assert "30.0" in (out / "table.md").read_text()
    # resume: a finished job is reused, a deleted one is re-run
    job = sorted((out / "jobs").rglob("*.json"))[0]
    job.unlink()
    stamp = {p: p.stat().st_mtime_ns for p in (out / "jobs").rglob("*.json")}
    assert run_cli("run", config, "--out", out, "--no-progress") == 0
    assert job.exists()
    assert all(p.stat().st_mtime_ns == t for p, t in stamp.items())
    assert "resumed" in capsys.readouterr().out
    assert run_cli("report", out) == 0 and (out / "report.html").exists()


def test_a_run_split_with_first_client_equals_the_whole(tmp_path):
    """--first-client K attacks the clients from index K of the same fixed order, with the same
    seeds, so two halves written into one folder give the whole run's results."""
    config = write_config(tmp_path / "exp.yaml")
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert run_cli("run", config, "--out", whole, "--no-progress", "--variants", "ig") == 0
    assert run_cli("run", config, "--out", split, "--no-progress", "--variants", "ig", "--clients", "1") == 0
    assert run_cli("run", config, "--out", split, "--no-progress", "--variants", "ig", "--clients", "1",
                   "--first-client", "1") == 0

    def rows(out):
        return {(r["client"], r["client_index"]): r["psnr"]
                for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}

    assert len(rows(whole)) == 2 and rows(split) == rows(whole)
    assert run_cli("run", config, "--out", split, "--first-client", "-1") == 2


def test_listings(capsys):
    for command in ("presets", "attacks", "models", "datasets"):
        assert run_cli(command) == 0
    out = capsys.readouterr().out
    assert "dimitrov-table1-femnist" in out and "inverting-gradients" in out and "femnist-cnn" in out


@pytest.mark.parametrize("args, message", [
    (["attack", "nowhere", "--out", "x"], "missing update directory"),
    (["run", "--preset", "no-such-preset", "--out", "x"], "unknown preset"),
    (["run", "--out", "x"], "either a CONFIG.yaml or --preset"),
    (["audit", "--device", "cuda:7"], "not available"),
    (["simulate", "--data", "nodata", "--out", "x"], "unknown dataset"),
    (["simulate", "--model", "vgg99", "--out", "x"], "unknown model"),
    (["simulate", "--data", "femnist", "--out", "x"], "root"),
])
def test_errors_exit_2_with_one_line(tmp_path, capsys, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_cli(*args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_config_errors(tmp_path, capsys):
    bad = write_config(tmp_path / "bad.yaml", protocl={"epochs": 2})
    assert run_cli("run", bad, "--out", tmp_path / "o") == 2
    assert "protocl" in capsys.readouterr().err
    bad = write_config(tmp_path / "bad2.yaml")
    raw = yaml.safe_load(bad.read_text())
    raw["variants"]["ig"]["options"]["iteratons"] = 3
    bad.write_text(yaml.safe_dump(raw))
    assert run_cli("run", bad, "--out", tmp_path / "o2", "--no-progress") == 2
    assert "iteratons" in capsys.readouterr().err


def test_attack_rejects_a_corrupted_update(tmp_path, capsys):
    upd = tmp_path / "update"
    assert run_cli("simulate", "--samples", 2, "--out", upd) == 0
    from fedleak.types import Update

    update = Update.load(upd)
    name = next(iter(update.client_params))
    update.client_params[name][0] = float("nan")
    update.save(upd)
    assert run_cli("attack", upd, "--out", tmp_path / "rec") == 2
    assert "NaN" in capsys.readouterr().err


def test_entry_point_help():
    result = subprocess.run([sys.executable, "-m", "fedleak.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "audit" in result.stdout


@pytest.mark.parametrize("command", ["simulate", "attack"])
def test_simulate_and_attack_refuse_a_locked_out(tmp_path, capsys, command):
    from fedleak.cli import main
    from fedleak.runs.lock import LOCK_NAME

    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": __import__("socket").gethostname()}))
    upd = tmp_path / "upd"
    if command == "attack":
        assert main(["simulate", "--data", "digits", "--model", "femnist-cnn", "--samples", "1", "--out", str(upd)]) == 0, \
            capsys.readouterr().err
    args = (["simulate", "--data", "digits", "--model", "femnist-cnn", "--samples", "1"] if command == "simulate"
            else ["attack", str(upd), "--attack", "idlg", "-o", "iterations=1", "--no-progress"])
    assert main([*args, "--out", str(out)]) == 2
    assert f"PID {os.getppid()}" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written beside the other run's lock


def test_simulate_and_attack_pick_the_datas_own_model_and_attack(tmp_path, capsys):
    """A new user's first try on records: no --model, no --attack. The image CNN was the default model (a shape
    error naming DimitrovCNN on 105 columns) and inverting-gradients the default attack; now the data's own."""
    upd = tmp_path / "update"
    assert run_cli("simulate", "--data", "adult", "--algorithm", "fedsgd", "--samples", 4, "--out", upd) == 0
    assert json.loads((upd / "update.json").read_text())["metadata"]["model"]["name"] == "tabular-mlp"
    assert run_cli("attack", upd, "-o", "iterations=5", "-o", "restarts=2", "--out", tmp_path / "rec") == 0
    out = capsys.readouterr().out
    assert "tableak: cells right" in out and (tmp_path / "rec" / "comparison.html").exists()


def test_run_an_experiment_of_records_and_one_of_text(tmp_path, capsys):
    """`fedleak run` on records and on token ids: each job scored by its modality, no picture grid (it raised
    "psnr needs one value per pair" for both), the table's columns those the records carry."""
    configs = {"tab": ("{dataset: adult, num_clients: 2, samples_per_client: 4}", "tabular-mlp", "spear"),
               "txt": ("{dataset: text, num_clients: 1, samples_per_client: 2}", "gpt2-tiny", "dager")}
    for name, (data, model, attack) in configs.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(f"name: {name}\ndata: {data}\nmodel: {{name: {model}}}\nprotocol: {{algorithm: fedsgd}}\n"
                        f"threat: {{labels: labels}}\nvariants: {{v: {{attack: {attack}}}}}\n")
        assert run_cli("--threads", 1, "run", path, "--out", tmp_path / name) == 0
        assert run_cli("report", tmp_path / name) == 0
        assert not list((tmp_path / name).rglob("*.png"))
    table = (tmp_path / "tab" / "table.md").read_text()
    assert "| accuracy" in table and "| exact_match_rate" in table and "100.00 ± 0.00" in table
    assert "| 100.00 ± 0.00 |" in (tmp_path / "txt" / "table.md").read_text()
