"""A catalogue of hostile inputs and faults, one small case each, by class (issue 21):

1. numbers that are not numbers (NaN, ±Inf, 1e308, negative / overflowing integers) in flags, config
   files, API arguments, defense and sweep specs;
2. types (strings for booleans, ints for paths or lists, duplicate YAML keys);
3. hostile files (deep JSON, NaN in JSON, integer weights, string / fractional labels, wrapping IDX
   headers, evil pickles, 16-bit PNGs, archives as data roots, broken user models);
4. writes (lock per --out, stale locks, no empty --out after bad input, staging, caches);
5. the Flower reply converter.

Every bad input must end in one :class:`FedleakError` line (CLI: exit 2, one stderr line, no
traceback) naming the option, file or field; nothing is written outside ``--out``.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import fedleak
from fedleak import FedleakError, Protocol, Update
from fedleak.audit import AuditConfig
from fedleak.cli import main
from fedleak.fl import Defense

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_work(monkeypatch):
    """Validation must refuse before any work: reaching the data loader counts as "accepted"."""
    import fedleak.data
    import fedleak.data.tabular

    class Reached(FedleakError):
        pass

    def reached(*args, **kwargs):
        raise Reached("REACHED-WORK")

    # every modality loads through these (images and text: fedleak.data.load; records: fedleak.data.tabular.load)
    monkeypatch.setattr(fedleak.data, "load", reached)
    monkeypatch.setattr(fedleak.data.tabular, "load", reached)


def _cli(argv, capsys):
    code = main(argv)
    err = capsys.readouterr().err
    return code, err


# -- 1 and 2: the CLI ---------------------------------------------------------------------------

CLI_CASES = [
    (["--lr", "nan"], "--lr"), (["--lr", "inf"], "--lr"), (["--lr", "-inf"], "--lr"), (["--lr", "1e308"], "--lr"),
    (["--lr", "0"], "--lr"), (["--samples", "-1"], "--samples"), (["--samples", "0"], "--samples"),
    (["--clients", "0"], "--clients"), (["--clients", str(2 ** 70)], "--clients"), (["--seed", "-1"], "--seed"),
    (["--seed", str(2 ** 40)], "--seed"), (["--bins", "0"], "--bins"), (["--epochs", "-3"], "--epochs"),
    (["--batch-size", "0"], "--batch-size"), (["--iterations", "0"], "--iterations"),
    (["--rounds", "0"], "--rounds"), (["--delta", "nan"], "--delta"), (["--delta", "1"], "--delta"),
    (["--sample-rate", "2"], "--sample-rate"), (["--sample-rate", "inf"], "--sample-rate"),
    (["--model-seed", "-5"], "--model-seed"),
    (["--defense", "gaussian:nan"], "gaussian:nan"), (["--defense", "gaussian:inf"], "gaussian:inf"),
    (["--defense", "laplacian:1e308"], "laplacian:1e308"), (["--defense", "pruning:nan"], "pruning:nan"),
    (["--defense", "dp-sgd:clip=1,noise=nan"], "noise=nan"), (["--defense", "dp-sgd:clip=nan,noise=1"], "clip=nan"),
    (["--defense", "dp-sgd:clip=1,noise=1,rounds=nan"], "rounds"), (["--defense", "secagg:inf"], "secagg"),
    (["--defense", "secagg:-2"], "secagg"), (["--defense", "secagg:1e308"], "secagg"),
    (["--defense", "dp_gaussian_nan"], "dp_gaussian_nan"), (["--defense", "dp_gaussian_1.2.3"], "1.2.3"),
    (["--sweep", "epochs=1,nan"], "epochs"), (["--sweep", "lr=1e308"], "lr"), (["--sweep", "defense=inf"], "defense"),
    (["--sweep", "samples=-1"], "samples"), (["--sweep", "secagg=1e20"], "secagg"),
    (["--sweep", "batch_size=2.5"], "batch_size"),
]


@pytest.mark.parametrize("extra, named", CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_cli_refuses_numbers_that_are_not_numbers(tmp_path, capsys, extra, named):
    out = tmp_path / "out"
    code, err = _cli(["audit", "--out", str(out), *extra], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("fedleak: error:") and named in err, err
    assert "Traceback" not in err and "REACHED-WORK" not in err
    assert not out.exists()


YAML_CASES = [
    ("malicious: 'false'\n", "malicious"), ("malicious: 0\n", "malicious"), ("quick: 'yes'\n", "quick"),
    ("samples: [1]\n", "samples"), ("samples: 1.5\n", "samples"), ("samples: '4'\n", "samples"),
    ("weights: 3\n", "weights"), ("data_root: [a]\n", "data_root"), ("lr: .nan\n", "lr"), ("lr: .inf\n", "lr"),
    ("lr: 1.0e308\n", "lr"), ("defense: 5\n", "defense"), ("attacks: 7\n", "attacks"),
    ("seed: 1\nseed: 2\n", "duplicate key"), ("bogus: 1\n", "bogus"), ("- a\n- b\n", "mapping"),
    ("clients: 99999999999999999999\n", "clients"), ("sweep: {knob: lr, values: [.nan]}\n", "lr"),
    ("delta: -1.0e-5\n", "delta"), ("no_malicious: 'true'\n", "no_malicious"), ("model: ''\n", "model"),
    ("device: null\n", "device"), ("static_batches: 1\n", "static_batches"),
]


@pytest.mark.parametrize("text, named", YAML_CASES, ids=[c[0].strip() for c in YAML_CASES])
def test_audit_config_files_are_typed_strictly(tmp_path, capsys, text, named):
    config = tmp_path / "audit.yaml"
    config.write_text(text)
    code, err = _cli(["audit", "--config", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1 and named in err and str(config) in err, err
    with pytest.raises(FedleakError, match=named):
        AuditConfig.from_yaml(config)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("content", [b"\xff\xfe\x00binary", b"a: [1, 2\n", b"[" * 5000, b"a: &x [*x]\n"])
def test_unreadable_audit_configs_are_one_line(tmp_path, capsys, content):
    config = tmp_path / "audit.yaml"
    config.write_bytes(content)
    code, err = _cli(["audit", "--config", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and "internal" not in err, err


# -- 2: the Python API ----------------------------------------------------------------------------

API_CASES = [
    (dict(malicious="false"), "malicious"), (dict(samples=True), "samples"), (dict(lr="0.1"), "lr"),
    (dict(lr=float("nan")), "lr"), (dict(clients=-1), "clients"), (dict(weights=3), "weights"),
    (dict(defense=[1]), "defense"), (dict(defense="gaussian:nan"), "gaussian:nan"), (dict(sweep=5), "sweep"),
    (dict(out=5), "out"), (dict(progress="bogus"), "progress"), (dict(log=3), "log"), (dict(bogus=1), "bogus"),
    (dict(attacks=3), "attacks"), (dict(seed=2.0), "seed"), (dict(device=["cpu"]), "device"),
    (dict(data_root=7), "data_root"), (dict(no_malicious="x"), "no_malicious"),
    (dict(config=42), "config"), (dict(config="/nonexistent/audit.yaml"), "audit.yaml"),
]


@pytest.mark.parametrize("kwargs, named", API_CASES, ids=[str(c[0]) for c in API_CASES])
def test_the_api_raises_fedleak_error_naming_the_argument(tmp_path, kwargs, named):
    kwargs = dict(kwargs)
    kwargs.setdefault("out", tmp_path / "out")
    config = kwargs.pop("config", None)
    with pytest.raises(FedleakError, match=named) as info:
        fedleak.audit(config, log=kwargs.pop("log", None), **kwargs)
    assert "REACHED-WORK" not in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()


def test_the_api_refuses_an_out_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(FedleakError, match="not a folder"):
        fedleak.audit(out=target, log=None)


def test_valid_input_reaches_the_work_and_paths_are_accepted(tmp_path):
    with pytest.raises(FedleakError, match="REACHED-WORK"):
        fedleak.audit(out=tmp_path / "o", data_root=tmp_path, log=None, defense="dp-sgd:clip=1,noise=0")


# -- 1: defense specs -----------------------------------------------------------------------------

@pytest.mark.parametrize("spec", ["gaussian:nan", "gaussian:-inf", "laplacian:inf", "gaussian:1e308",
                                  "dp-sgd:clip=1,noise=nan", "dp-sgd:clip=inf,noise=1", "pruning:1",
                                  {"kind": "gaussian", "scale": float("nan")}, {"kind": "gaussian", "bogus": 1}, 5,
                                  ["gaussian:1"], "gaussian:1,clip=0"])
def test_defense_specs_refuse_non_numbers(spec):
    with pytest.raises(FedleakError):
        Defense.parse(spec)


def test_dp_sgd_clipping_only_is_accepted_and_not_accounted():
    defense = Defense.parse("dp-sgd:clip=1,noise=0")
    assert defense.kind == "dp-sgd" and defense.scale == 0 and defense.clip == 1 and defense.active
    plan = AuditConfig(defense=("dp-sgd:clip=1,noise=0",)).resolve()
    assert plan.dp and plan.defense.to_text() == "dp-sgd:clip=1,noise=0"
    grads = {"w": torch.ones(4, 3) * 5}
    clipped = defense.apply(grads)["w"]
    assert torch.allclose(clipped.norm(dim=1), torch.ones(4))


# -- 3: hostile files -----------------------------------------------------------------------------

def _update_dir(tmp_path) -> Path:
    update = Update({"w": torch.zeros(2, 2)}, Protocol("fedsgd"), 1, gradient={"w": torch.ones(2, 2)})
    return update.save(tmp_path / "update")


@pytest.mark.parametrize("mutate, named", [
    (lambda m: "[" * 100_000 + "]" * 100_000, "nests"),
    (lambda m: json.dumps({**m, "num_samples": float("nan")}), "NaN"),
    (lambda m: json.dumps({**m, "metadata": {"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}), "nests"),
    (lambda m: json.dumps({**m, "num_samples": "abc"}), "num_samples"),
    (lambda m: json.dumps({**m, "num_samples": 1.5}), "num_samples"),
    (lambda m: json.dumps(m)[:-5], "corrupt JSON"),
    (lambda m: json.dumps([m]), "JSON object"),
])
def test_update_json_is_read_defensively(tmp_path, mutate, named):
    directory = _update_dir(tmp_path)
    meta = json.loads((directory / "update.json").read_text())
    (directory / "update.json").write_text(mutate(meta))
    with pytest.raises(FedleakError, match=named) as info:
        Update.load(directory)
    assert "update.json" in str(info.value)


def test_integer_or_nan_update_tensors_are_refused(tmp_path):
    from safetensors.torch import save_file

    directory = _update_dir(tmp_path)
    for tensor, named in ((torch.zeros(2, 2, dtype=torch.int32), "dtype"), (torch.full((2, 2), float("nan")), "NaN")):
        save_file({"server/w": torch.zeros(2, 2), "gradient/w": tensor}, str(directory / "update.safetensors"))
        with pytest.raises(FedleakError, match=named):
            Update.load(directory)
    (directory / "update.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with pytest.raises(FedleakError, match="update.safetensors"):
        Update.load(directory)


def test_job_and_result_files_are_read_defensively(tmp_path):
    from fedleak.runs.job_files import read_record

    path = tmp_path / "job.json"
    for text in ("[" * 200_000, '{"a": NaN}', "\xff", "{" * 10 + "}" * 10, ""):
        path.write_text(text, errors="surrogateescape") if text != "\xff" else path.write_bytes(b"\xff\xfe")
        record, why = read_record(path)
        assert record is None and why


def test_reconstruction_labels_must_be_integers(tmp_path):
    from safetensors.torch import save_file

    from fedleak import Reconstruction

    directory = Reconstruction(torch.zeros(2, 1, 4, 4), torch.tensor([0, 1])).save(tmp_path / "rec")
    save_file({"rec/inputs": torch.zeros(2, 1, 4, 4), "rec/labels": torch.tensor([0.5, 1.0])},
              str(directory / "reconstruction.safetensors"))
    with pytest.raises(FedleakError, match="labels must be an integer"):
        Reconstruction.load(directory)


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_integer_weights_are_refused(tmp_path):
    from safetensors.torch import save_file

    from fedleak.audit.plan.model_loading import load_weights

    path = tmp_path / "w.safetensors"
    save_file({"fc.weight": torch.zeros(2, 4, dtype=torch.int64), "fc.bias": torch.zeros(2)}, str(path))
    with pytest.raises(FedleakError, match="fc.weight"):
        load_weights(_Tiny(), path)


class _NoParams(nn.Module):
    def forward(self, x):
        return x.flatten(1)[:, :2]


class _BatchBreaks(_Tiny):
    def forward(self, x):
        if len(x) > 1:
            raise RuntimeError("only one at a time")
        return super().forward(x)


@pytest.mark.parametrize("model, named", [(_NoParams(), "no parameters"), (_Tiny().to("meta"), "meta"),
                                          (_BatchBreaks(), "batch")])
def test_unusable_user_models_are_one_line(model, named):
    from fedleak.audit.plan.model_loading import check_fits
    from fedleak.types import DataSpec

    spec = DataSpec("t", (1, 2, 2), 2, (0.5,), (0.5,))
    with pytest.raises(FedleakError, match=named):
        check_fits(model, torch.zeros(3, 1, 2, 2), spec, "user:model")


def test_idx_headers_whose_size_wraps_are_refused():
    from fedleak.data.mnist import parse_idx

    header = struct.pack(">HBB", 0, 0x08, 4) + struct.pack(">4I", 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1)
    with pytest.raises(FedleakError, match="IDX header"):
        parse_idx(header + b"\x00" * 16, "evil.idx")
    header = struct.pack(">HBB", 0, 0x08, 2) + struct.pack(">2I", 2 ** 32 - 1, 2 ** 32 - 1)
    with pytest.raises(FedleakError, match="evil.idx"):
        parse_idx(header, "evil.idx")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_refused_pickle_names_the_file(tmp_path):
    from fedleak.data.safe_pickle import load_pickle

    for name, payload in (("evil_batch", pickle.dumps({b"data": _Evil()})), ("deep_batch", b"(" * 100_000 + b"."),
                          ("cut_batch", pickle.dumps({b"data": np.zeros(3)})[:-7])):
        path = tmp_path / name
        path.write_bytes(payload)
        with pytest.raises(FedleakError, match=name):
            load_pickle(path)


@pytest.mark.parametrize("labels, named", [(["3", 4], "'3'"), ([1.5, 2], "1.5"), ([True, 1], "True")])
def test_leaf_labels_must_be_integers(tmp_path, labels, named):
    from fedleak.data import leaf

    with pytest.raises(FedleakError, match=named):
        leaf._to_arrays([[0.0] * 784, [0.0] * 784], labels, tmp_path / "f.json", "u")


def test_deep_leaf_json_is_one_line(tmp_path):
    from fedleak.data import leaf

    path = tmp_path / "all_data.json.gz"
    path.write_bytes(gzip.compress(b"[" * 200_000))
    with pytest.raises(FedleakError, match="nests"):
        leaf.read_file(path)


def test_cifar_labels_that_are_not_integers_are_refused(tmp_path):
    from fedleak.data.cifar import read_batch

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0.5, 1.0]}))
    with pytest.raises(FedleakError, match="labels must be integers"):
        read_batch(path, "labels")


def test_sixteen_bit_pngs_keep_their_depth(tmp_path):
    from PIL import Image

    from fedleak.data.imagefolder import read_image, read_pool

    values = np.array([[1000, 30000], [50000, 65535]], dtype=np.uint16)
    for name in ("a", "b"):
        (tmp_path / "train" / name).mkdir(parents=True)
    Image.fromarray(values).save(tmp_path / "train" / "a" / "deep.png")
    Image.fromarray((values // 257).astype(np.uint8)).save(tmp_path / "train" / "b" / "flat.png")
    deep = read_image(tmp_path / "train" / "a" / "deep.png", 2, 1)
    assert deep.dtype == np.float32 and deep.max() <= 1.0
    np.testing.assert_allclose(deep[0], values / 65535.0, atol=1e-6)  # not saturated at 255
    _, pixels, _ = read_pool(tmp_path, "train", 2, 3)
    assert pixels.dtype == np.float32 and pixels.shape == (2, 3, 2, 2)
    np.testing.assert_allclose(pixels[0, 0], values / 65535.0, atol=1e-6)
    np.testing.assert_allclose(pixels[1, 0], (values // 257) / 255.0, atol=1e-6)


@pytest.mark.parametrize("dataset", ["mnist", "cifar10", "femnist", "imagefolder"])
def test_an_archive_as_data_root_names_the_accepted_formats(tmp_path, dataset):
    from fedleak.data.common import require_root

    archive = tmp_path / "data.zip"
    archive.write_bytes(b"PK\x03\x04")
    with pytest.raises(FedleakError, match=r"\.zip archive.*Accepted"):
        require_root(archive, dataset, "folders of IDX / pickle / JSON files")


# -- 4: writes ------------------------------------------------------------------------------------

def test_a_live_lock_refuses_naming_the_pid(tmp_path):
    from fedleak.runs.lock import LOCK_NAME, OutLock

    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": __import__("socket").gethostname()}))
    with pytest.raises(FedleakError, match=f"PID {os.getppid()}"):
        OutLock(out).acquire()


def test_a_stale_lock_is_taken_over_and_staging_cleared(tmp_path):
    from fedleak.runs.lock import LOCK_NAME, OutLock

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out"
    (out / ".staging-old").mkdir(parents=True)
    (out / LOCK_NAME).write_text(json.dumps({"pid": dead.pid, "host": __import__("socket").gethostname()}))
    with OutLock(out) as lock:
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
        assert not (out / ".staging-old").exists()
        with pytest.raises(FedleakError, match=str(os.getpid())):
            OutLock(out).acquire()  # a second run while this one holds it
    assert not (out / LOCK_NAME).exists() and out.exists()


def test_a_run_that_wrote_nothing_leaves_no_folder(tmp_path):
    from fedleak.runs.lock import OutLock

    out = tmp_path / "new" / "out"
    with pytest.raises(FedleakError):
        with OutLock(out):
            raise FedleakError("bad input found late")
    assert not out.exists()


def test_caches_point_inside_out(tmp_path, monkeypatch):
    from fedleak.runs.outdir import CACHE_VARIABLES, contain_caches

    for variable in CACHE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    contain_caches(tmp_path / "out")
    for variable in CACHE_VARIABLES:
        assert os.environ[variable].startswith(str((tmp_path / "out").absolute()))
    assert not (tmp_path / "out").exists()  # nothing is created until a library writes


def test_results_of_another_configuration_are_kept_apart(tmp_path):
    from fedleak.runs.job_files import sealed, write_json
    from fedleak.runs.run_report import write_outputs

    base = {"setting": "s", "variant": "v", "attack": "a", "client_index": 0, "num_samples": 1, "seconds": 1.0,
            "job_hash": "h", "psnr": 20.0, "ssim": 0.5, "rec_percent": 50.0}
    # sealed as fedleak writes them (a job file without its record_digest is not fedleak's: issue 47 class 8)
    write_json(tmp_path / "jobs" / "s" / "v" / "c0.json", sealed({**base, "client": "c0", "config_hash": "old"}))
    write_json(tmp_path / "jobs" / "s" / "v" / "c1.json", sealed({**base, "client": "c1", "config_hash": "new"}))
    summary = write_outputs(tmp_path, "x", config_hash="new")
    assert summary["jobs"] == 1 and summary["jobs_of_other_configurations"] == 1 and summary["config_hash"] == "new"
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["client"] for r in rows] == ["c1"]


# -- 5: the Flower reply converter ----------------------------------------------------------------

def test_flower_train_config_values_are_checked():
    from fedleak.integrations.flower.convert import client_metadata, protocol_from_config

    base = Protocol("fedavg")
    for config in ({"lr": float("nan")}, {"lr": "fast"}, {"local-epochs": 1e308}, {"batch-size": -2},
                   {"local-epochs": 2.5}, {"lr": True}):
        with pytest.raises(FedleakError, match="train config"):
            protocol_from_config(base, config)
    assert protocol_from_config(base, {"lr": np.float32(0.5), "local-epochs": np.int64(3)}).epochs == 3
    assert client_metadata({"a": float("nan"), "b": 1, 3: 4, "c": "x" * 10_000, "d": [1]}) == {"b": 1}
    with pytest.raises(FedleakError, match="entries"):
        client_metadata({f"k{i}": i for i in range(5000)})


@pytest.mark.parametrize("arrays, named", [
    ([np.zeros((2, 4), np.int64), np.zeros(2, np.float32)], "dtype"),
    ([np.zeros((2, 4), np.float32), np.zeros(3, np.float32)], "shape"),
    ([np.full((2, 4), np.nan, np.float32), np.zeros(2, np.float32)], "NaN"),
    ([np.zeros((2, 4), np.float32)], "arrays"),
    ([np.array(["a"] * 8).reshape(2, 4), np.zeros(2, np.float32)], "dtype"),
    ([np.zeros((2, 4), np.complex64), np.zeros(2, np.float32)], "dtype"),
])
def test_flower_arrays_are_checked_against_the_model(arrays, named):
    from fedleak.integrations.flower.convert import split_arrays

    with pytest.raises(FedleakError, match=named):
        split_arrays(_Tiny(), arrays)


def test_an_audit_rerun_removes_old_plots_and_leaves_no_staging(tmp_path, monkeypatch):
    from fedleak.audit import report
    from fedleak.audit import run as run_module

    def save_plots(folder, plots):
        (folder / "new.png").write_bytes(b"png")
        return ["new.png"]

    monkeypatch.setattr(report, "make_plots", lambda result, examples: {})
    monkeypatch.setattr(report, "save_plots", save_plots)
    monkeypatch.setattr(report, "write_report", lambda folder, *a: (folder / "report.html").write_text("<html>"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "metrics.json").write_text(json.dumps({"plots": ["old.png", "new.png", "../evil.png"], "config_hash": "a"}))
    (out / "old.png").write_bytes(b"old")
    (tmp_path / "evil.png").write_bytes(b"keep")
    notes = []
    run_module._write(out, {"config_hash": "b"}, [], notes.append)
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json", "new.png", "report.html"]
    assert (tmp_path / "evil.png").exists()  # only plain names inside out are ever removed
    assert notes and "another configuration" in notes[0]
    assert json.loads((out / "metrics.json").read_text())["config_hash"] == "b"


def test_a_png_with_a_broken_chunk_is_one_line(tmp_path):
    """Found by benchmarks/fuzz_long.py (seed 21): PIL raises SyntaxError on a broken chunk."""
    from fedleak.data.imagefolder import read_image

    path = tmp_path / "broken.png"
    path.write_bytes(b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x04\x00\x00\x00\x04\x08\x02\x00\x00\x00&\x93'
                     b'\t)\x00\x00\x00\x00IDATx\x9ccd`db\x86\x01\x16\x1e\x1e\x1e"8\x00\x16\xaa\x00\xe9(\xd7\xa4\x19'
                     b'\x00\x00\x00\x00IEND\xaeB`\x82')
    with pytest.raises(FedleakError, match="broken.png"):
        read_image(path, 4, 3)


@pytest.mark.parametrize("command", [["run", "--preset", "robbing-fedavg", "--quick"], ["audit", "--quiet"]])
def test_a_second_run_on_the_same_out_refuses_naming_the_pid(tmp_path, capsys, command):
    """Issue 23 item 5: two `fedleak run` (or audit) processes on one --out; the second one refuses."""
    import socket

    from fedleak.runs.lock import LOCK_NAME

    out = tmp_path / "out"
    out.mkdir()
    other = os.getppid()
    (out / LOCK_NAME).write_text(json.dumps({"pid": other, "host": socket.gethostname(), "command": "fedleak run"}))
    code, err = _cli([*command, "--out", str(out)], capsys)
    assert code == 2 and f"PID {other}" in err and err.count("\n") == 1, err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
