"""One boundary (issue #30): one test per class of hostile input the typed layer and the loader adapter fix.

Every case goes through ``fedleak.cli.main`` in-process (or the Python API) and must end in one line,
exit 2, and nothing written. Each test runs in well under a few seconds (no attack runs).
"""

from __future__ import annotations

import json
import shutil
import struct

import pytest
import torch

from fedleak import FedleakError
from fedleak.cli import main


def run_cli(argv, capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.err.strip()


def refused(argv, capsys, *needles):
    code, err = run_cli(argv, capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def nothing_in(folder):
    return not folder.exists() or not any(p.is_file() for p in folder.rglob("*"))


# -- lists, specs, options: one reader ---------------------------------------------------------
@pytest.mark.parametrize("argv, needle", [
    (["audit", "--attacks", ""], "--attacks is empty"),
    (["audit", "--attacks", ",,"], "--attacks is empty"),
    (["audit", "--attacks", "agic,,dimitrov"], "empty item"),
    (["audit", "--attacks", "agic,agic"], "twice"),
    (["run", "--preset", "dimitrov-table1-femnist", "--variants", ","], "--variants is empty"),
    (["run", "--preset", "dimitrov-table1-femnist", "--settings", ""], "--settings is empty"),
])
def test_empty_or_repeated_name_lists_are_refused(argv, needle, tmp_path, capsys):
    refused(argv + ["--out", tmp_path / "out"], capsys, needle)
    assert nothing_in(tmp_path / "out")


@pytest.mark.parametrize("spec, needle", [
    ("gaussian", "has no strength"),
    ("laplacian:", "no value"),
    ("dp-sgd:clip=1", "needs noise="),
    ("dp-sgd:clip=1,clip=2,noise=1", "'clip' twice"),
    ("dp-sgd:clip=1,noise=1,rounds=2,rounds=3", "'rounds' twice"),
    ("percentile:percentile=10,percentile=20", "'percentile' twice"),
    ("flower-central-dp:noise=1,clip=1,clients=2.5", "clients must be a whole number"),
    ("gaussian:0.1,,clip=1", "empty part"),
    ("pruning:0.5,0.2", "is not KEY=VALUE"),
    ("secagg:2.5", "whole number"),
    ("secagg", "needs K"),
    ("", "empty spec"),
])
def test_defense_specs_are_read_by_one_parser(spec, needle, tmp_path, capsys):
    refused(["audit", "--defense", spec, "--out", tmp_path / "out"], capsys, needle)
    assert nothing_in(tmp_path / "out")


def test_parsed_defenses_are_the_specs_given():
    from fedleak.fl.defenses import Defense

    assert Defense.parse("dp_gaussian_0.01") == Defense("gaussian", 0.01)
    assert Defense.parse("gaussian:sigma=0.5,clip=2") == Defense("gaussian", 0.5, 2.0)
    assert Defense.parse("dp-sgd:clip=1,noise=0") == Defense("dp-sgd", 0.0, 1.0)  # σ = 0: clipping only, explicit
    assert Defense.parse("flower-central-dp:noise=1,clip=1,clients=4").params["clients"] == 4


@pytest.mark.parametrize("options, needle", [
    (["-o", "iterations=5", "-o", "iterations=6"], "'iterations' twice"),
    (["-o", "iterations=2.5"], "'iterations' of attack 'gradient-inversion' must be an integer"),
    (["-o", "seed=1099511627776"], "'seed' of attack 'gradient-inversion' must be <= 4294967295"),
    (["-o", "iterations=100000000000000000000"], "'iterations' of attack 'gradient-inversion' must be <= 2147483647"),
    (["-o", "lr=.nan"], "'lr' of attack 'gradient-inversion' must be a finite number"),
    (["-o", "iterations="], "no value"),
])
def test_attack_options_one_set_of_rules_and_bounds(options, needle, tmp_path, capsys):
    update = _simulated(tmp_path, capsys)
    refused(["attack", update, "--attack", "inverting-gradients", *options, "--out", tmp_path / "rec"], capsys, needle)
    assert nothing_in(tmp_path / "rec")


@pytest.mark.parametrize("argv, needle", [
    (["--sweep", "lora=4,8"], "--sweep lora=... applies to text audits only"),
    (["--lora", "4"], "--lora applies to text audits only"),
    (["--seq-len", "8"], "--seq-len applies to text audits only"),
    (["--sweep", "lr=0.1,,0.2"], "empty value"),
    (["--data", "text", "--attacks", "inverting-gradients"], "is an image attack"),
    (["--attacks", "dager"], "is an text attack"),
])
def test_option_combinations_checked_before_any_work(argv, needle, tmp_path, capsys):
    refused(["audit", *argv, "--out", tmp_path / "out"], capsys, needle)
    assert nothing_in(tmp_path / "out")


# -- the Python API's doors --------------------------------------------------------------------
def test_python_api_arguments_are_typed(tmp_path):
    from fedleak import data, models
    from fedleak.fl import client_update
    from fedleak.types import Protocol, Update

    spec, clients = data.load("digits", num_clients=1, samples_per_client=2, seed=0)
    model, protocol = models.build("femnist-cnn", spec), Protocol("fedsgd", 1, 2, 0.1)
    ghost = models.build("femnist-cnn", spec).to("meta")
    for call, needle in [(lambda: client_update("femnist-cnn", clients[0], protocol), "model must be a torch.nn.Module"),
                         (lambda: client_update(model, clients[0], {"algorithm": "fedsgd"}), "protocol must be"),
                         (lambda: client_update(model, clients[0], protocol, seed="1"), "seed must be an integer"),
                         (lambda: client_update(ghost, clients[0], protocol), "meta device"),
                         (lambda: Update.load(5), "Update.load(): directory must be a path")]:
        with pytest.raises(FedleakError, match=None) as info:
            call()
        assert needle in str(info.value) and "\n" not in str(info.value)


# -- files read back ---------------------------------------------------------------------------
def _simulated(tmp_path, capsys):
    folder = tmp_path / "update"
    if not folder.exists():
        code, err = run_cli(["simulate", "--algorithm", "fedsgd", "--samples", "2", "--model", "lenet",
                             "--out", folder], capsys)
        assert code == 0, err
    return folder


def test_update_json_metadata_is_typed(tmp_path, capsys):
    folder = _simulated(tmp_path, capsys)
    meta = json.loads((folder / "update.json").read_text())
    meta["metadata"]["labels"] = "abc"
    (folder / "update.json").write_text(json.dumps(meta))
    refused(["attack", folder, "--out", tmp_path / "rec"], capsys, "metadata: labels must be a list")
    assert nothing_in(tmp_path / "rec")


def test_attack_checks_truth_before_writing(tmp_path, capsys):
    from safetensors.torch import save_file

    folder = _simulated(tmp_path, capsys)
    save_file({"inputs": torch.zeros(3, 1, 28, 28), "labels": torch.zeros(3, dtype=torch.long)},
              str(folder / "truth.safetensors"))  # 3 inputs for an update of N = 2
    refused(["attack", folder, "--out", tmp_path / "rec"], capsys, "truth.safetensors", "inputs must be 2")
    assert nothing_in(tmp_path / "rec")
    (folder / "truth.safetensors").write_bytes(struct.pack("<Q", 2 ** 62) + b"{}")
    refused(["attack", folder, "--out", tmp_path / "rec"], capsys, "safetensors header claims")
    assert nothing_in(tmp_path / "rec")


def test_job_records_are_revalidated(tmp_path):
    from fedleak.runs.job_files import read_record, reusable, sealed, write_json

    record = sealed({"setting": "s", "variant": "v", "attack": "agic", "client": "c0", "client_index": 0,
                     "num_samples": 2, "seconds": 1.5, "job_hash": "abc", "psnr": 12.5, "psnr_per_input": [12.5]})
    path = tmp_path / "job.json"
    write_json(path, record)
    assert reusable(path, "abc")[0] is not None
    for edit, why in [({"psnr": "high"}, "psnr"), ({"setting": ["a", "b"]}, "setting"),
                      ({"psnr": 99.0}, "edited after it was written"), ({"client_index": 1.5}, "client_index")]:
        write_json(path, {**record, **edit})
        got, reason = read_record(path)
        assert got is None and why in reason, reason


# -- third-party loaders: the adapter ----------------------------------------------------------
@pytest.fixture(scope="module")
def lm_folder(tmp_path_factory):
    """A tiny GPT-2 model folder (width 8, one layer) with MiniLM's tokenizer."""
    from fedleak.data.tokenizers import minilm_path
    from fedleak.models.hf.builders import transformers_module

    tf = transformers_module()
    folder = tmp_path_factory.mktemp("lm") / "ok"
    torch.manual_seed(0)
    tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=30522, n_embd=8, n_layer=1, n_head=2, n_positions=32)
                       ).save_pretrained(folder)
    shutil.copy(minilm_path() / "tokenizer.json", folder / "tokenizer.json")
    return folder


def _variant(lm_folder, tmp_path, change):
    folder = tmp_path / "model"
    shutil.copytree(lm_folder, folder)
    change(folder)
    return folder


def _config(edit):
    def change(folder):
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config))
    return change


def _weights(edit):
    def change(folder):
        from safetensors.torch import load_file, save_file

        state = load_file(str(folder / "model.safetensors"))
        save_file(edit(state), str(folder / "model.safetensors"))
    return change


@pytest.mark.parametrize("change, needle", [
    (lambda f: (f / "config.json").write_text((f / "config.json").read_text().replace(
        '"layer_norm_epsilon": 1e-05', '"layer_norm_epsilon": NaN')), "NaN is not a JSON number"),
    (lambda f: (f / "config.json").write_text("[" * 100_000 + "]" * 100_000), "nests 100000 levels deep"),
    (lambda f: (f / "model.safetensors").write_bytes(b""), "not a safetensors file (0 bytes"),
    (lambda f: (f / "model.safetensors").write_bytes(struct.pack("<Q", 2 ** 62) + b"{}"), "header claims"),
    (_weights(lambda s: {k: v.to(torch.int8) for k, v in s.items()}), "weights must be floating point"),
    (_weights(lambda s: {k: v for k, v in s.items() if k != "transformer.h.0.attn.c_proj.weight"}),
     "has no weights for 1 parameter(s)"),
    (_config(lambda c: c.update(n_head=3)), "must be divisible by num_heads"),
    (_config(lambda c: c.update(n_embd=16)), "config.json's architecture needs"),
    (_config(lambda c: c.update(n_layer=2)), "never audits randomly initialized weights"),
])
def test_model_folders_checked_before_transformers(lm_folder, tmp_path, change, needle):
    from fedleak import models
    from fedleak.types import DataSpec

    folder = _variant(lm_folder, tmp_path, change)
    spec = DataSpec("t", (1, 1, 8), 30522, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    with pytest.raises(FedleakError) as info:
        models.build(str(folder), spec)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_lora_rank_beyond_the_width_names_lora(lm_folder):
    from fedleak import models
    from fedleak.types import DataSpec

    spec = DataSpec("t", (1, 1, 8), 30522, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    with pytest.raises(FedleakError, match=r"--lora 1000 exceeds the width .* use a rank from 1 to 8"):
        models.build(str(lm_folder), spec, lora=1000)


def test_deep_jsonl_is_one_line(tmp_path):
    from fedleak.data.text_files import read_jsonl

    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(FedleakError, match="nests 100000 levels deep"):
        read_jsonl(path, "text", None)


@pytest.mark.parametrize("section, value, needle", [
    ("data", {"num_clients": 2.5}, "data.num_clients must be an integer"),
    ("data", {"num_clients": 1.0e3}, "data.num_clients must be an integer"),
    ("data", {"seed": "3"}, "data.seed must be an integer"),
    ("metrics", {"clip": "false"}, "metrics.clip must be true or false"),
    ("metrics", {"threshold": float("nan")}, "metrics.threshold must be a finite number"),
    ("rounds", {"epochs": 2.5}, "rounds.epochs must be an integer"),
    ("model", {"train_rounds": 10 ** 12}, "model.train_rounds must be <="),
])
def test_experiment_sections_through_the_strict_models(section, value, needle):
    from fedleak.config import parse_config

    raw = {"data": {"dataset": "digits"}, "model": {"name": "lenet"}, "variants": {"ig": "inverting-gradients"}}
    raw[section] = {**raw.get(section, {}), **value}
    with pytest.raises(FedleakError) as info:
        parse_config(raw, "exp.yaml")
    assert needle in str(info.value), str(info.value)


@pytest.mark.parametrize("argv, needle", [
    (["run", "--preset", "dimitrov-table1-femnist", "--gpus-per-job", "nan"], "--gpus-per-job"),
    (["inspect", "model.safetensors", "--threshold", "nan"], "--threshold"),
    (["inspect", "model.safetensors", "--dsnr-batch", "-3"], "--dsnr-batch"),
])
def test_float_and_int_flags_are_bounded(argv, needle, tmp_path, capsys):
    refused(argv + (["--out", tmp_path / "out"] if argv[0] == "run" else []), capsys, needle)
