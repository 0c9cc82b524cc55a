"""The door catalogue's files on disk (issue #30; see ``test_hostile_doors.py`` for the contract): a saved
``update.json`` and truth edited before ``fedleak attack``, attack options against a real update, GGUF files,
candidate documents, files given to ``inspect``, job files edited before a resume, a run's ``config.json``
edited before ``fedleak report``, and model folders given to ``--model``.
"""

from __future__ import annotations

import json
import struct

import pytest
import torch

from hostile_doors import _guarded, check_cli, copy_folder, update_dir  # noqa: F401  (fixtures)

torch.set_num_threads(1)


# -- files on disk: update.json, truth, job files before a resume -------------------------------------------
UPDATE_EDITS = [
    ("update.json not JSON", lambda d: (d / "update.json").write_text("{"), "update.json"),
    ("update.json a list", lambda d: (d / "update.json").write_text("[]"), "update.json"),
    ("update.json deep", lambda d: (d / "update.json").write_text("[" * 50_000 + "]" * 50_000), "update.json"),
    ("metadata strings", lambda d: _edit_json(d / "update.json", lambda j: j.update(metadata="x")), "metadata"),
    ("num_samples str", lambda d: _edit_json(d / "update.json", lambda j: j.update(num_samples="2")), "num_samples"),
    ("spec a list", lambda d: _edit_json(d / "update.json", lambda j: j["metadata"].update(spec=[1])), "spec"),
    ("model name 5", lambda d: _edit_json(d / "update.json", lambda j: j["metadata"].update(model={"name": 5})),
     "model"),
    ("tensors gone", lambda d: next(d.glob("*.safetensors")).unlink() if False else
     [p.unlink() for p in d.glob("*.safetensors") if p.name != "truth.safetensors"], "safetensors"),
    ("truth garbage", lambda d: (d / "truth.safetensors").write_bytes(b"\x00" * 7), "truth.safetensors"),
    ("truth 2^62 header", lambda d: (d / "truth.safetensors").write_bytes(struct.pack("<Q", 2 ** 62) + b"{}"),
     "truth.safetensors"),
]


def _edit_json(path, edit):
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("name, edit, needle", UPDATE_EDITS, ids=[c[0] for c in UPDATE_EDITS])
def test_saved_update_files(name, edit, needle, update_dir, tmp_path, capsys):
    folder = copy_folder(update_dir, tmp_path / "u")
    edit(folder)
    argv = ["attack", "u", "--attack", "inverting-gradients", "--option", "iterations=1", "--out", "rec"]
    problem = check_cli(argv, needle, tmp_path, capsys, out=tmp_path / "rec")
    assert not problem, problem


def test_attack_option_values(update_dir, tmp_path, capsys):
    failures = []
    for option, needle in [("iterations=nan", "iterations"), ("iterations=1e400", "iterations"),
                           ("iterations=2.5", "iterations"), ("lr=-1", "lr"), ("nope=1", "nope"),
                           ("iterations=[1,2]", "iterations"), ("seed=-1", "seed")]:
        argv = ["attack", str(update_dir), "--attack", "inverting-gradients", "--option", option, "--out", "rec"]
        problem = check_cli(argv, needle, tmp_path, capsys, out=tmp_path / "rec")
        if problem:
            failures.append(f"{option}: {problem}")
    assert not failures, "\n".join(failures)


# -- model folders, GGUF, candidates, inspect ------------------------------------------------------------------
def _gguf_cases(tmp):
    (tmp / "empty.gguf").write_bytes(b"")
    (tmp / "text.gguf").write_text("hello, not a model\n")
    (tmp / "short.gguf").write_bytes(b"GGUF" + struct.pack("<I", 3))
    (tmp / "huge.gguf").write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2 ** 62, 2 ** 62))
    (tmp / "dir.gguf").mkdir()
    return ["empty.gguf", "text.gguf", "short.gguf", "huge.gguf", "dir.gguf"]


def test_gguf_files(tmp_path, capsys):
    failures = []
    for name in _gguf_cases(tmp_path):
        for argv in (["convert-gguf", name, "--to", "conv"], ["audit", "--model", name, "--out", "out"]):
            problem = check_cli(argv, name, tmp_path, capsys, out=tmp_path / "out")
            if problem or (tmp_path / "conv").exists():
                failures.append(f"{argv}: {problem or 'left --to behind'}")
    assert not failures, "\n".join(failures)


def test_candidate_files(tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00\x01abc\n\xc3\x28\n")
    (tmp_path / "dir.txt").mkdir()
    (tmp_path / "one.txt").write_text("only one\n")
    failures = []
    for name in ("empty.txt", "bin.txt", "dir.txt", "one.txt"):
        argv = ["audit", "--model", "gpt2-tiny", "--data", "text", "--membership", "8", "--candidates", name,
                "--out", "out"]
        problem = check_cli(argv, name, tmp_path, capsys, out=tmp_path / "out")
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, "\n".join(failures)


def test_inspect_files(tmp_path, capsys):
    from safetensors.torch import save_file

    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "huge.safetensors").write_bytes(struct.pack("<Q", 2 ** 62) + b"{}")
    (tmp_path / "text.safetensors").write_text("not weights")
    save_file({"w": torch.zeros(2, 2, dtype=torch.int8)}, str(tmp_path / "int8.safetensors"))
    save_file({"w": torch.full((2, 2), float("nan"))}, str(tmp_path / "nan.safetensors"))
    (tmp_path / "deep.pt").write_bytes(b"\x80\x02" + b"(" * 10_000)
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "config.json").write_text('{"model_type": "gpt2", "n_embd": NaN}')
    failures = []
    for name in ("empty.safetensors", "huge.safetensors", "text.safetensors", "int8.safetensors",
                 "nan.safetensors", "deep.pt", "folder"):
        problem = check_cli(["inspect", name], name, tmp_path, capsys)
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, "\n".join(failures)


# -- files fedleak wrote, edited before a resume or a report ---------------------------------------------------
def _record():
    from fedleak.runs.job_files import sealed

    return sealed({"setting": "s", "variant": "v", "attack": "agic", "client": "c0", "client_index": 0,
                   "num_samples": 2, "seconds": 1.5, "job_hash": "abc", "psnr": 12.5, "psnr_per_input": [12.5]})


JOB_EDITS = [
    ("a folder", lambda p: p.mkdir()), ("deep", lambda p: p.write_text("[" * 60_000 + "]" * 60_000)),
    ("NaN literal", lambda p: p.write_text(json.dumps(_record()).replace("12.5,", "NaN,", 1))),
    ("huge int", lambda p: p.write_text(json.dumps({**_record(), "num_samples": 10 ** 400}))),
    ("digest a number", lambda p: p.write_text(json.dumps({**_record(), "record_digest": 5}))),
    ("negative samples", lambda p: p.write_text(json.dumps({**_record(), "num_samples": -1}))),
    ("seconds a string", lambda p: p.write_text(json.dumps({**_record(), "seconds": "1.5"}))),
    ("per-input strings", lambda p: p.write_text(json.dumps({**_record(), "psnr_per_input": ["x"]}))),
    ("not UTF-8", lambda p: p.write_bytes(b"\xff\xfe{}")), ("a list", lambda p: p.write_text("[1]")),
]


@pytest.mark.parametrize("name, edit", JOB_EDITS, ids=[c[0] for c in JOB_EDITS])
def test_edited_job_files_are_not_reused(name, edit, tmp_path):
    from fedleak.runs.job_files import reusable

    path = tmp_path / "job.json"
    edit(path)
    try:
        record, why = reusable(path, "abc")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"raw {type(exc).__name__}: {exc}")
    assert record is None and why and "\n" not in why, (record, why)


REPORT_EDITS = [
    ("config a list", lambda d: (d / "config.json").write_text("[1]"), "config.json"),
    ("config deep", lambda d: (d / "config.json").write_text("[" * 60_000 + "]" * 60_000), "config.json"),
    ("config NaN", lambda d: (d / "config.json").write_text('{"name": "x", "planned_jobs": NaN}'), "config.json"),
    ("config name a dict", lambda d: (d / "config.json").write_text('{"name": {"a": 1}, "paper": [1]}'),
     "config.json"),
    ("config not UTF-8", lambda d: (d / "config.json").write_bytes(b"\xff\xfe"), "config.json"),
    ("config a folder", lambda d: (d / "config.json").mkdir(), "config.json"),
]


@pytest.mark.parametrize("name, edit, needle", REPORT_EDITS, ids=[c[0] for c in REPORT_EDITS])
def test_report_of_an_edited_run_folder(name, edit, needle, tmp_path, capsys):
    run = tmp_path / "run"
    (run / "jobs").mkdir(parents=True)
    edit(run)
    problem = check_cli(["report", "run"], needle, tmp_path, capsys)
    assert not problem, problem


# -- model folders given to --model (checked by models.check before any data is read) ------------------------
def _folder(tmp, name, config=None, weights=None):
    from safetensors.torch import save_file

    folder = tmp / name
    folder.mkdir()
    if config is not None:
        path = folder / "config.json"
        path.write_text(config) if isinstance(config, str) else path.write_bytes(config)
    if weights == "ok":
        save_file({"w": torch.zeros(2, 2)}, str(folder / "model.safetensors"))
    elif weights == "int8":
        save_file({"w": torch.zeros(2, 2, dtype=torch.int8)}, str(folder / "model.safetensors"))
    elif isinstance(weights, bytes):
        (folder / "model.safetensors").write_bytes(weights)
    elif weights == "bin":
        (folder / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    return name


GPT2 = '{"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2}'
FOLDER_CASES = [
    ("no config", dict(weights="ok"), "config.json"),
    ("config NaN", dict(config='{"model_type": "gpt2", "n_embd": NaN}', weights="ok"), "NaN"),
    ("config deep", dict(config="[" * 60_000 + "]" * 60_000, weights="ok"), "config.json"),
    ("config a list", dict(config="[1]", weights="ok"), "config.json"),
    ("config not UTF-8", dict(config=b"\xff\xfe{}", weights="ok"), "config.json"),
    ("remote code", dict(config='{"model_type": "gpt2", "auto_map": {"AutoModel": "x.Y"}}', weights="ok"),
     "remote code"),
    ("unknown architecture", dict(config='{"model_type": "no-such-arch"}', weights="ok"), "no-such-arch"),
    ("no weights", dict(config=GPT2), "safetensors"),
    ("pickled weights only", dict(config=GPT2, weights="bin"), "pickles"),
    ("empty weights", dict(config=GPT2, weights=b""), "model.safetensors"),
    ("2^62 header", dict(config=GPT2, weights=struct.pack("<Q", 2 ** 62) + b"{}"), "model.safetensors"),
    ("integer weights", dict(config=GPT2, weights="int8"), "floating point"),
]


def test_model_folders_at_the_cli(tmp_path, capsys):
    failures = []
    for index, (name, parts, needle) in enumerate(FOLDER_CASES):
        folder = _folder(tmp_path, f"m{index}", **parts)
        problem = check_cli(["audit", "--model", folder, "--data", "text", "--out", "out"], needle, tmp_path,
                            capsys, out=tmp_path / "out")
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, "\n".join(failures)
