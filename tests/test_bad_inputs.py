"""A catalogue of bad inputs, as an adversarial user would try them (issue #12).

Every case must end in one line naming the offending value or key, exit code 2 on the command
line (``fedleak.errors.FedleakError`` from the API), no traceback, nothing written outside
``--out`` and no file that existed before (a finished job included) touched. A few cases run the
real ``python -m fedleak.cli`` in a subprocess for the true exit code; SIGTERM, a closed stdout
pipe and an internal error have their own tests. Almost every case fails before any attack runs,
so the whole file takes seconds.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import save_file

from fedleak import data as fdata
from fedleak.cli import main
from fedleak.config import apply_overrides, parse_config, parse_yaml
from fedleak.errors import FedleakError
from fedleak.types import DataSpec, Protocol, Update

SRC = str(Path(__file__).resolve().parents[1] / "src")


# -- helpers -----------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its size and modification time."""
    out = {}
    for path in root.rglob("*"):
        st = path.lstat()
        out[str(path.relative_to(root))] = (path.is_dir(), st.st_size if not path.is_dir() else 0, st.st_mtime_ns)
    return out


def assert_untouched(before: dict, after: dict, out_name: str = "out") -> None:
    """No file that existed before changed or vanished; nothing new appeared outside ``out``."""
    changed = [p for p, v in before.items() if after.get(p) != v and not before[p][0]]
    vanished = [p for p in before if p not in after]
    new_outside = [p for p in after if p not in before and not (p == out_name or p.startswith(out_name + os.sep))]
    assert not changed and not vanished and not new_outside, (changed, vanished, new_outside)


def run_cli(tmp_path: Path, capsys, argv: list, expect: str, code: int = 2) -> str:
    """Run the CLI in-process and check the one-line contract; returns stderr."""
    before = snapshot(tmp_path)
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    text = out + err
    assert rc == code, text
    assert "Traceback" not in text
    assert 1 <= len(text.strip().splitlines()) <= 2, text
    assert err.startswith("fedleak: "), err
    assert expect.lower() in err.lower(), err
    assert_untouched(before, snapshot(tmp_path))
    return err


SPEC = DataSpec("toy", (1, 4, 4), 3, (0.5,), (0.25,))


def save_update(directory: Path, *, json_edit=None, tensors=None) -> Path:
    """A small valid FedSGD update saved to ``directory``, then optionally spoiled."""
    server = {"w": torch.randn(3, 16, generator=torch.Generator().manual_seed(0)), "b": torch.zeros(3)}
    update = Update(server, Protocol("fedsgd"), 2, gradient={k: torch.ones_like(v) for k, v in server.items()},
                    metadata={"spec": SPEC.to_json(), "model": {"name": "lenet"}})
    update.save(directory)
    if json_edit is not None:
        path = directory / "update.json"
        meta = json.loads(path.read_text())
        result = json_edit(meta)
        if isinstance(result, bytes):
            path.write_bytes(result)
        else:
            path.write_text(json.dumps(meta if result is None else result))
    if tensors is not None:
        save_file(tensors, str(directory / "update.safetensors"))
    return directory


def _set(path: str, value):
    """A JSON edit setting ``a.b.c`` to ``value``."""
    def edit(meta):
        *parents, last = path.split(".")
        node = meta
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


def _drop(path: str):
    def edit(meta):
        *parents, last = path.split(".")
        node = meta
        for key in parents:
            node = node[key]
        del node[last]
    return edit


GOOD = {"server/w": torch.zeros(3, 16), "server/b": torch.zeros(3), "gradient/w": torch.ones(3, 16),
        "gradient/b": torch.ones(3)}

UPDATE_CASES = [
    ("no-protocol", dict(json_edit=_drop("protocol")), "protocol"),
    ("json-array", dict(json_edit=lambda m: [1, 2, 3]), "JSON object"),
    ("not-utf8", dict(json_edit=lambda m: b"\xff\xfe{\x00bad"), "UTF-8"),
    ("num-samples-abc", dict(json_edit=_set("num_samples", "abc")), "num_samples"),
    ("num-samples-zero", dict(json_edit=_set("num_samples", 0)), "num_samples"),
    ("num-samples-huge", dict(json_edit=_set("num_samples", 10 ** 15)), "num_samples"),
    ("num-samples-bool", dict(json_edit=_set("num_samples", True)), "num_samples"),
    ("no-num-samples", dict(json_edit=_drop("num_samples")), "num_samples"),
    ("epochs-abc", dict(json_edit=_set("protocol.epochs", "abc")), "epochs"),
    ("epochs-bool", dict(json_edit=_set("protocol.epochs", True)), "epochs"),
    ("lr-negative", dict(json_edit=_set("protocol.lr", -1)), "lr"),
    ("lr-string", dict(json_edit=_set("protocol.lr", "fast")), "lr"),
    ("algorithm", dict(json_edit=_set("protocol.algorithm", "fedprox")), "fedprox"),
    ("batch-size-zero", dict(json_edit=_set("protocol.batch_size", 0)), "batch_size"),
    ("protocol-extra", dict(json_edit=_set("protocol.momentum", 0.9)), "momentum"),
    ("protocol-list", dict(json_edit=_set("protocol", [1])), "protocol"),
    ("spec-no-shape", dict(json_edit=_drop("metadata.spec.shape")), "shape"),
    ("spec-std-zero", dict(json_edit=_set("metadata.spec.std", [0.0])), "std"),
    ("spec-classes-zero", dict(json_edit=_set("metadata.spec.num_classes", 0)), "num_classes"),
    ("spec-shape-huge", dict(json_edit=_set("metadata.spec.shape", [3, 100000, 100000])), "shape"),
    ("metadata-list", dict(json_edit=_set("metadata", [1])), "metadata"),
    ("format", dict(json_edit=_set("format", "pickle/1")), "not a fedleak update"),
    ("truncated-json", dict(json_edit=lambda m: json.dumps(m)[:25].encode()), "corrupt JSON"),
    ("int32-tensor", dict(tensors={**GOOD, "gradient/w": torch.ones(3, 16, dtype=torch.int32)}), "int32"),
    ("nan-tensor", dict(tensors={**GOOD, "gradient/w": torch.full((3, 16), float("nan"))}), "NaN"),
    ("inf-server", dict(tensors={**GOOD, "server/b": torch.full((3,), float("inf"))}), "Inf"),
    ("shape-mismatch", dict(tensors={**GOOD, "gradient/w": torch.ones(16, 3)}), "shape"),
    ("missing-param", dict(tensors={k: v for k, v in GOOD.items() if k != "gradient/b"}), "missing ['b']"),
    ("both-results", dict(tensors={**GOOD, "client/w": torch.ones(3, 16), "client/b": torch.ones(3)}),
     "exactly one"),
    ("no-server", dict(tensors={"gradient/w": torch.ones(3, 16)}), "no server"),
    ("unknown-group", dict(tensors={**GOOD, "evil/w": torch.ones(1)}), "evil"),
]


def _spoil_safetensors(directory: Path) -> None:
    (directory / "update.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")


@pytest.mark.parametrize("name, spoil, expect", UPDATE_CASES, ids=[c[0] for c in UPDATE_CASES])
def test_bad_update_api(tmp_path, name, spoil, expect):
    directory = save_update(tmp_path / "update", **spoil)
    with pytest.raises(FedleakError, match=None) as info:
        Update.load(directory)
    message = str(info.value)
    assert expect.lower() in message.lower() and "\n" not in message


@pytest.mark.parametrize("name, spoil, expect", UPDATE_CASES[::3], ids=[c[0] for c in UPDATE_CASES[::3]])
def test_bad_update_cli(tmp_path, capsys, name, spoil, expect):
    directory = save_update(tmp_path / "update", **spoil)
    run_cli(tmp_path, capsys, ["attack", directory, "--out", tmp_path / "out"], expect)


@pytest.mark.parametrize("spoil, expect", [
    (_spoil_safetensors, "corrupt safetensors"),
    (lambda d: (d / "update.safetensors").unlink(), "missing file"),
    (lambda d: (d / "update.json").unlink(), "missing file"),
], ids=["corrupt-safetensors", "no-safetensors", "no-json"])
def test_broken_update_files(tmp_path, capsys, spoil, expect):
    directory = save_update(tmp_path / "update")
    spoil(directory)
    run_cli(tmp_path, capsys, ["attack", directory, "--out", tmp_path / "out"], expect)


# -- value types made in Python --------------------------------------------------------------

TYPE_CASES = [
    ("epochs-true", lambda: Protocol("fedavg", epochs=True), "epochs"),
    ("epochs-float", lambda: Protocol("fedavg", epochs=2.5), "epochs"),
    ("epochs-string", lambda: Protocol("fedavg", epochs="3"), "epochs"),
    ("epochs-zero", lambda: Protocol("fedavg", epochs=0), "epochs"),
    ("epochs-huge", lambda: Protocol("fedavg", epochs=10 ** 9), "epochs"),
    ("batch-true", lambda: Protocol("fedavg", batch_size=True), "batch_size"),
    ("batch-negative", lambda: Protocol("fedavg", batch_size=-4), "batch_size"),
    ("lr-nan", lambda: Protocol(lr=float("nan")), "lr"),
    ("lr-inf", lambda: Protocol(lr=float("inf")), "lr"),
    ("lr-zero", lambda: Protocol(lr=0), "lr"),
    ("lr-bool", lambda: Protocol(lr=True), "lr"),
    ("algorithm", lambda: Protocol("FedAvg2"), "FedAvg2"),
    ("reshuffle-string", lambda: Protocol(reshuffle="yes"), "reshuffle"),
    ("train-mode-int", lambda: Protocol(train_mode=1), "train_mode"),
    ("std-nan", lambda: DataSpec("x", (1, 4, 4), 2, (0.5,), (float("nan"),)), "std"),
    ("std-zero", lambda: DataSpec("x", (1, 4, 4), 2, (0.5,), (0.0,)), "std"),
    ("mean-inf", lambda: DataSpec("x", (1, 4, 4), 2, (float("inf"),), (1.0,)), "mean"),
    ("classes-zero", lambda: DataSpec("x", (1, 4, 4), 0, (0.5,), (1.0,)), "num_classes"),
    ("classes-bool", lambda: DataSpec("x", (1, 4, 4), True, (0.5,), (1.0,)), "num_classes"),
    ("shape-2d", lambda: DataSpec("x", (28, 28), 2, (0.5,), (1.0,)), "shape"),
    ("shape-zero", lambda: DataSpec("x", (1, 0, 28), 2, (0.5,), (1.0,)), "shape"),
    ("shape-huge", lambda: DataSpec("x", (3, 16384, 16384), 2, (0.5,) * 3, (1.0,) * 3), "too large"),
    ("mean-channels", lambda: DataSpec("x", (3, 4, 4), 2, (0.5,), (1.0,)), "per channel"),
    ("pixel-range", lambda: DataSpec("x", (1, 4, 4), 2, (0.5,), (1.0,), pixel_range=(1.0, 0.0)), "pixel_range"),
    ("spec-json-missing", lambda: DataSpec.from_json({"name": "x", "num_classes": 2}), "shape"),
    ("spec-json-extra", lambda: DataSpec.from_json({**SPEC.to_json(), "bogus": 1}), "bogus"),
    ("update-int-tensor", lambda: Update({"w": torch.zeros(2, dtype=torch.int64)}, Protocol(), 1,
                                         gradient={"w": torch.zeros(2, dtype=torch.int64)}), "int64"),
    ("update-nan", lambda: Update({"w": torch.zeros(2)}, Protocol(), 1,
                                  gradient={"w": torch.tensor([0.0, float("nan")])}), "NaN"),
    ("update-num-samples-float", lambda: Update({"w": torch.zeros(2)}, Protocol(), 1.5,
                                                gradient={"w": torch.zeros(2)}), "num_samples"),
    ("update-protocol-dict", lambda: Update({"w": torch.zeros(2)}, {"algorithm": "fedsgd"}, 1,
                                            gradient={"w": torch.zeros(2)}), "Protocol"),
]


@pytest.mark.parametrize("name, make, expect", TYPE_CASES, ids=[c[0] for c in TYPE_CASES])
def test_bad_values_are_refused_when_made(name, make, expect):
    with pytest.raises(FedleakError) as info:
        make()
    assert expect.lower() in str(info.value).lower() and "\n" not in str(info.value)


# -- experiment configs ----------------------------------------------------------------------

def base_config() -> dict:
    return {"name": "tiny", "data": {"dataset": "digits", "num_clients": 1, "samples_per_client": 1},
            "model": {"name": "femnist-cnn"}, "protocol": {"algorithm": "fedsgd"},
            "metrics": {"threshold": 20}, "variants": {"ig": {"attack": "inverting-gradients",
                                                               "options": {"iterations": 2}}},
            "settings": [{"name": "s1"}], "quick": {"data": {"num_clients": 1}}}


def _edit(path: str, value):
    def apply(cfg):
        *parents, last = path.split(".")
        node = cfg
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return apply


CONFIG_CASES = [
    ("num-clients-abc", _edit("data.num_clients", "abc"), "data.num_clients"),
    ("num-clients-huge", _edit("data.num_clients", 10 ** 20), "data.num_clients"),
    ("num-clients-1e20", _edit("data.num_clients", 1e20), "data.num_clients"),
    ("num-clients-zero", _edit("data.num_clients", 0), "data.num_clients"),
    ("num-clients-bool", _edit("data.num_clients", True), "data.num_clients"),
    ("samples-huge", _edit("data.samples_per_client", 10 ** 7), "data.samples_per_client"),
    ("samples-list", _edit("data.samples_per_client", [1]), "data.samples_per_client"),
    ("data-seed-negative", _edit("data.seed", -3), "data.seed"),
    ("split", _edit("data.split", "validation"), "validation"),
    ("root-number", _edit("data.root", 5), "data.root"),
    ("dataset-list", _edit("data.dataset", ["digits"]), "data.dataset"),
    ("data-options-list", _edit("data.options", [1]), "data.options"),
    ("first-client-negative", _edit("data.first_client", -1), "data.first_client"),
    ("train-rounds-many", _edit("model.train_rounds", "many"), "model.train_rounds"),
    ("model-seed-float", _edit("model.seed", 0.5), "model.seed"),
    ("model-name-null", _edit("model.name", None), "model.name"),
    ("train-protocol-bad", _edit("model.train_protocol", {"epochs": "x"}), "epochs"),
    ("train-protocol-key", _edit("model.train_protocol", {"epoch": 1}), "epoch"),
    ("threshold-high", _edit("metrics.threshold", "high"), "metrics.threshold"),
    ("threshold-nan", _edit("metrics.threshold", float("nan")), "metrics.threshold"),
    ("clip-string", _edit("metrics.clip", "yes"), "metrics.clip"),
    ("save-images-int", _edit("metrics.save_images", 1), "metrics.save_images"),
    ("lpips-number", _edit("metrics.lpips", 3), "metrics.lpips"),
    ("metrics-key", _edit("metrics.treshold", 20), "treshold"),
    ("epochs-abc", _edit("protocol.epochs", "abc"), "epochs"),
    ("lr-zero", _edit("protocol.lr", 0), "lr"),
    ("algorithm", _edit("protocol.algorithm", "sgd"), "sgd"),
    ("defense-number", lambda c: c.update(defense=5), "defense"),
    ("defense-bad", lambda c: c.update(defense="gaussian:lots"), "gaussian:lots"),
    ("defense-mapping", lambda c: c.update(defense={"kind": "gaussian", "bogus": 1}), "defense"),
    ("threat", lambda c: c.update(threat={"labels": "all"}), "all"),
    ("rounds-epochs", lambda c: c.update(rounds={"epochs": 0}), "rounds.epochs"),
    ("attack-seed", lambda c: c.update(attack_seed="x"), "attack_seed"),
    ("top-key", lambda c: c.update(protocl={}), "protocl"),
    ("variants-missing", lambda c: c.pop("variants"), "variants"),
    ("variants-list", lambda c: c.update(variants=["ig"]), "variants"),
    ("variant-no-attack", lambda c: c.update(variants={"ig": {"options": {}}}), "attack"),
    ("variant-options-list", _edit("variants.ig.options", [1]), "options"),
    ("variant-protocol", _edit("variants.ig.protocol", {"epochs": -1}), "epochs"),
    ("variant-data", _edit("variants.ig.data", {"num_clients": 2}), "data"),
    ("settings-dup", lambda c: c.update(settings=[{"name": "a"}, {"name": "a"}]), "two settings are named 'a'"),
    ("settings-mapping", lambda c: c.update(settings={"name": "a"}), "settings"),
    ("setting-unknown-variant", lambda c: c.update(settings=[{"name": "a", "variants": ["nope"]}]), "nope"),
    ("setting-variants-string", lambda c: c.update(settings=[{"name": "a", "variants": "ig"}]), "variants"),
    ("setting-data", lambda c: c.update(settings=[{"name": "a", "data": {"num_clients": "many"}}]),
     "data.num_clients"),
    ("setting-name-list", lambda c: c.update(settings=[{"name": [1]}]), "name"),
    ("quick-data", _edit("quick.data", {"num_clients": "abc"}), "quick.data.num_clients"),
    ("quick-data-key", _edit("quick.data", {"clients": 2}), "clients"),
    ("quick-variants", lambda c: c["quick"].update(variants=["zzz"]), "zzz"),
    ("quick-settings", lambda c: c["quick"].update(settings=["nope"]), "nope"),
    ("quick-options", lambda c: c["quick"].update(variant_options=[1]), "variant_options"),
    ("quick-model", lambda c: c["quick"].update(model={"train_rounds": -1}), "train_rounds"),
    ("quick-key", lambda c: c["quick"].update(fast=True), "fast"),
    ("paper-list", lambda c: c.update(paper=[1]), "paper"),
]


@pytest.mark.parametrize("name, edit, expect", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_bad_config_api(name, edit, expect):
    cfg = base_config()
    edit(cfg)
    with pytest.raises(FedleakError) as info:
        parse_config(cfg, "exp.yaml")
    assert expect.lower() in str(info.value).lower() and "\n" not in str(info.value)


def _finished_run(out: Path) -> None:
    """What a finished earlier run left in ``out`` (must survive a failing rerun untouched)."""
    (out / "jobs").mkdir(parents=True)
    (out / "jobs" / "s1__ig__0.json").write_text('{"done": true}')
    (out / "summary.json").write_text('{"jobs": 1}')


@pytest.mark.parametrize("name, edit, expect", CONFIG_CASES[::4], ids=[c[0] for c in CONFIG_CASES[::4]])
def test_bad_config_cli(tmp_path, capsys, name, edit, expect):
    cfg = base_config()
    edit(cfg)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    _finished_run(tmp_path / "out")
    run_cli(tmp_path, capsys, ["run", path, "--out", tmp_path / "out"], expect)


YAML_CASES = [
    ("unclosed", b"name: x\ndata: {dataset: digits\nmodel: y\n", "line"),
    ("bad-indent", b"name: x\n  data: 1\n bad: [\n", "line"),
    ("tab", b"name: x\ndata:\n\tdataset: digits\n", "line 3"),
    ("binary", bytes(range(256)) * 4, "UTF-8"),
    ("latin1", "name: caf\u00e9\n".encode("latin-1"), "UTF-8"),
    ("nul", b"name: x\x00\n", "line 1"),
    ("duplicate-key", b"name: a\nname: b\n", "duplicate key 'name'"),
    ("duplicate-variant", b"variants:\n  ig: {attack: idlg}\n  ig: {attack: dlg}\n", "duplicate key 'ig'"),
    ("python-tag", b"name: !!python/object/apply:os.system [touch pwned]\n", "constructor"),
    ("list", b"- 1\n- 2\n", "mapping"),
    ("empty", b"", "mapping"),
    ("scalar", b"just text\n", "mapping"),
]


@pytest.mark.parametrize("name, text, expect", YAML_CASES, ids=[c[0] for c in YAML_CASES])
def test_bad_yaml_files(tmp_path, capsys, name, text, expect):
    path = tmp_path / "exp.yaml"
    path.write_bytes(text)
    run_cli(tmp_path, capsys, ["run", path, "--out", tmp_path / "out"], expect)
    with pytest.raises(FedleakError):
        parse_config(parse_yaml(text, "exp.yaml"), "exp.yaml")


def test_yaml_merge_keys_may_be_overridden():
    """Duplicate keys are refused, but a key overriding a `<<: *anchor` merge is not a duplicate."""
    assert parse_yaml(b"base: &b {x: 1, y: 2}\nv:\n  <<: *b\n  x: 3\n", "a.yaml")["v"] == {"x": 3, "y": 2}


def test_quick_is_checked_at_load_and_applies_cleanly():
    cfg = base_config()
    cfg["quick"] = {"data": {"num_clients": 1}, "variant_options": {"iterations": 1}, "variants": ["ig"],
                    "settings": ["s1"]}
    config = apply_overrides(parse_config(cfg, "exp.yaml"), quick=True)
    assert config.variants[0].options["iterations"] == 1 and config.data["num_clients"] == 1


# -- command-line arguments and --out ----------------------------------------------------------

ARG_CASES = [
    ("clients-abc", ["run", "--preset", "agic-table2", "--clients", "abc"], "'abc'"),
    ("clients-zero", ["run", "--preset", "agic-table2", "--clients", "0"], "--clients"),
    ("clients-huge", ["run", "--preset", "agic-table2", "--clients", "100000000000"], "--clients"),
    ("first-client-negative", ["run", "--preset", "agic-table2", "--first-client", "-1"], "--first-client"),
    ("dtype", ["run", "--preset", "agic-table2", "--dtype", "float16"], "float16"),
    ("unknown-preset", ["run", "--preset", "agic-table99"], "agic-table99"),
    ("no-config", ["run"], "either a CONFIG.yaml"),
    ("missing-config", ["run", "nowhere.yaml"], "nowhere.yaml"),
    ("select-unknown-variant", ["run", "--preset", "agic-table2", "--variants", "nope"], "nope"),
    ("option-no-equals", ["run", "--preset", "agic-table2", "-o", "iterations"], "KEY=VALUE"),
    ("samples-negative", ["simulate", "--samples", "-1"], "--samples"),
    ("samples-1e20", ["simulate", "--samples", "1e20"], "1e20"),
    ("epochs-zero", ["simulate", "--epochs", "0"], "--epochs"),
    ("batch-size-abc", ["simulate", "--batch-size", "abc"], "abc"),
    ("lr-nan", ["simulate", "--lr", "nan"], "nan"),
    ("lr-negative", ["simulate", "--lr", "-0.1"], "-0.1"),
    ("seed-negative", ["simulate", "--seed", "-5"], "--seed"),
    ("algorithm", ["simulate", "--algorithm", "fedprox"], "fedprox"),
    ("share-labels", ["simulate", "--share-labels", "everything"], "everything"),
    ("client-missing", ["simulate", "--client", "99999", "--samples", "1"], "--client"),
    ("dataset", ["simulate", "--data", "imagenet"], "imagenet"),
    ("split", ["simulate", "--split", "validation"], "validation"),
    ("defense", ["simulate", "--defense", "gaussian:lots"], "gaussian:lots"),
    ("device", ["simulate", "--device", "gpu9"], "gpu9"),
    ("update-missing", ["attack", "nowhere"], "nowhere"),
    ("threads-zero", ["--threads", "0", "presets"], "--threads"),
    ("unknown-command", ["frobnicate"], "frobnicate"),
    ("unknown-option", ["presets", "--colour"], "--colour"),
    ("out-empty", ["simulate", "--out", ""], "--out"),
]


@pytest.mark.parametrize("name, argv, expect", ARG_CASES, ids=[c[0] for c in ARG_CASES])
def test_bad_arguments(tmp_path, capsys, monkeypatch, name, argv, expect):
    monkeypatch.chdir(tmp_path)
    if "--out" not in argv and argv[0] in ("run", "simulate", "attack"):
        argv = argv + ["--out", "out"]
    run_cli(tmp_path, capsys, argv, expect)


def test_missing_out_is_a_usage_error_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_cli(tmp_path, capsys, ["simulate"], "required: --out")


@pytest.mark.parametrize("command", [["simulate"], ["run", "--preset", "agic-table2"], ["audit", "--quick"],
                                     ["attack", "upd"]])
@pytest.mark.parametrize("where", ["file", "under-file", "under-device"])
def test_out_that_cannot_be_a_folder(tmp_path, capsys, monkeypatch, command, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("keep me")
    out = {"file": "afile", "under-file": "afile/sub/dir", "under-device": "/dev/null/out"}[where]
    err = run_cli(tmp_path, capsys, command + ["--out", out], "--out")
    assert ("not a folder" in err) and (tmp_path / "afile").read_text() == "keep me"


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_out_in_a_read_only_folder(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        err = run_cli(tmp_path, capsys, ["simulate", "--out", locked / "out"], "not writable")
        assert str(locked) in err
    finally:
        locked.chmod(0o700)


# -- data loaders: missing and corrupt files ---------------------------------------------------

def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


DATA_CASES = [
    ("femnist-no-root", lambda t: dict(name="femnist", root=t / "nowhere"), "does not exist"),
    ("femnist-bad-json", lambda t: (_write(t / "f" / "train" / "a.json", b"{oops"),
                                    dict(name="femnist", root=t / "f"))[1], "a.json"),
    ("mnist-corrupt-gz", lambda t: (_write(t / "m" / "train-images-idx3-ubyte.gz", b"\x1f\x8bnot gzip"),
                                    _write(t / "m" / "train-labels-idx1-ubyte.gz", b"\x1f\x8bnope"),
                                    dict(name="mnist", root=t / "m"))[2], "m"),
    ("cifar-empty-root", lambda t: ((t / "c").mkdir(), dict(name="cifar10", root=t / "c"))[1], "cifar"),
    ("imagefolder-empty", lambda t: ((t / "i").mkdir(), dict(name="imagefolder", root=t / "i"))[1], "i"),
    ("num-clients-string", lambda t: dict(name="digits", num_clients="many"), "num_clients"),
    ("samples-zero", lambda t: dict(name="digits", samples_per_client=0), "samples_per_client"),
    ("num-clients-1e20", lambda t: dict(name="digits", num_clients=10 ** 20), "num_clients"),
    ("samples-1e12", lambda t: dict(name="digits", samples_per_client=10 ** 12), "samples_per_client"),
    ("unknown-option", lambda t: dict(name="digits", colour="red"), "colour"),
]


@pytest.mark.parametrize("name, make, expect", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_data(tmp_path, name, make, expect):
    kwargs = make(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(FedleakError) as info:
        fdata.load(kwargs.pop("name"), **kwargs)
    assert expect.lower() in str(info.value).lower() and "\n" not in str(info.value)
    assert_untouched(before, snapshot(tmp_path))


def test_cifar_pickle_with_code_is_refused(tmp_path):
    """A CIFAR batch that tries to run code on unpickling is refused by the restricted unpickler."""
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        (root / name).write_bytes(pickle.dumps(Evil()))
    with pytest.raises(FedleakError):
        fdata.load("cifar10", root=tmp_path, num_clients=1, samples_per_client=1)
    assert not (tmp_path / "pwned").exists()


def test_lpips_conversion_refuses_a_pickle_with_code(tmp_path):
    """Item 9: the one torch.load (LPIPS .pth conversion) is weights_only; code in a .pth never runs."""
    from fedleak.metrics import convert_lpips_weights

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    torch.save({"lin0.weight": Evil()}, tmp_path / "alex.pth")
    with pytest.raises(FedleakError, match="cannot read weights file"):
        convert_lpips_weights([tmp_path / "alex.pth"], tmp_path / "out.safetensors")
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "out.safetensors").exists()


def test_no_unrestricted_unpickling_in_the_sources():
    src = Path(SRC) / "fedleak"
    for path in src.rglob("*.py"):
        text = path.read_text()
        for line in text.splitlines():
            if "torch.load(" in line and not line.lstrip().startswith(("#", "``", "*")) and "``" not in line:
                assert "weights_only=True" in line, f"{path}: {line.strip()}"
            assert "pickle.load(" not in line and "pickle.loads(" not in line, f"{path}: {line.strip()}"


# -- the CLI boundary itself: internal errors, interrupts, pipes, the real exit code -------------

class _Raising(dict):
    """A listing whose reading raises ``error`` (the listings are static text: the fault is planted there)."""

    def __init__(self, error):
        super().__init__()
        self.error = error

    def __iter__(self):
        raise self.error


def test_internal_error_is_one_line_exit_1(tmp_path, capsys, monkeypatch):
    import fedleak.listing_data

    monkeypatch.setattr(fedleak.listing_data, "PRESETS", _Raising(RuntimeError("boom\nsecond line")))
    assert main(["presets"]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "internal error" in lines[0] and "RuntimeError: boom second line" in lines[0]
    assert "--debug" in lines[0] and "Traceback" not in out + err
    with pytest.raises(RuntimeError, match="boom"):
        main(["presets", "--debug"])


def test_disk_errors_and_ctrl_c_are_one_line(capsys, monkeypatch):
    import fedleak.listing_data

    monkeypatch.setattr(fedleak.listing_data, "PRESETS", _Raising(OSError(28, "No space left on device")))
    assert main(["presets"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left" in err[0]

    monkeypatch.setattr(fedleak.listing_data, "PRESETS", _Raising(KeyboardInterrupt()))
    assert main(["presets"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedleak: interrupted by SIGINT; run the same command again to start over"]


def _subprocess(*args, **kwargs):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "fedleak.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=300, **kwargs)


@pytest.mark.parametrize("args, expect", [
    (["run", "--clients", "abc", "--out", "o"], "'abc'"),  # a usage error (argparse)
    (["run", "exp.yaml", "--out", "o"], "line 2"),  # malformed YAML
])
def test_real_exit_code_and_no_traceback(tmp_path, args, expect):
    (tmp_path / "exp.yaml").write_bytes(b"name: x\ndata: {dataset: digits\n")
    before = snapshot(tmp_path)
    result = _subprocess(*args, cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and expect in result.stderr and "Traceback" not in result.stderr
    assert snapshot(tmp_path) == before


def test_closed_stdout_pipe_is_quiet():
    """`fedleak presets | head -3`: the reader goes away; no BrokenPipeError traceback."""
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "fedleak.cli", "presets"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before the child writes anything
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141
    assert err == ""


def test_sigterm_behaves_like_ctrl_c(tmp_path):
    """SIGTERM during a run: what is on disk in one line, exit 143, finished work kept."""
    cfg = base_config()
    cfg["variants"]["ig"]["options"]["iterations"] = 100000
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen([sys.executable, "-m", "fedleak.cli", "--threads", "1", "run", str(tmp_path / "exp.yaml"),
                             "--out", str(out), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.monotonic() + 240
    while not (out / "config.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # inside the attack's optimization loop
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stdout + stderr
    # no job finished: the run says so (and that rerunning starts it); the CLI adds no "resume" beside it
    assert stderr.strip().splitlines()[-1] == "fedleak: interrupted by SIGTERM"
    assert "interrupted before any job finished" in stdout and "resume" not in stdout + stderr
    assert (out / "config.json").exists()
