"""A fresh catalogue of hostile inputs, one per door (issue #30, written against the code as it stands).

Doors: the flags of every command (audit, simulate, attack, run, report, inspect, dp-audit, convert-gguf),
``KEY=VALUE`` options, ``--config`` files, defense/sweep/attack-option specs, the Python API
(``fedleak.audit``, ``simulate_update``, ``attack_update``, ``client_update``, ``Update.load``,
``LeakageAudit``, ``dp_audit``), files edited on disk before a resume, ``update.json``, model folders,
GGUF files and candidate documents. Each case must end as exit 2 with one stderr line naming the input
(or one :class:`FedleakError` line from the API), write nothing outside ``--out`` and leave nothing in it.
Work is replaced by tripwires (:func:`hostile_doors.tripwires`), so the whole file runs in seconds.
"""

from __future__ import annotations

import json
import struct

import pytest
import torch

import fedleak
from fedleak import Protocol, Update

from hostile_doors import check_api, check_cli, tripwires

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _guarded(monkeypatch):
    with tripwires(monkeypatch):
        yield


@pytest.fixture(scope="module")
def update_dir(tmp_path_factory):
    """A real saved update (digits, 2 samples, femnist-cnn) with its truth, made once."""
    folder = tmp_path_factory.mktemp("upd") / "u"
    fedleak.simulate_update(folder, data="digits", samples=2, algorithm="fedsgd", say=lambda *_: None)
    return folder


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


# -- CLI flags of every command ----------------------------------------------------------------------
FLAG_CASES = [
    # audit: numbers, names, lists, specs
    (["audit", "--samples", "0"], "--samples"), (["audit", "--samples", "2.5"], "--samples"),
    (["audit", "--samples", "1e9"], "--samples"), (["audit", "--clients", "0"], "--clients"),
    (["audit", "--lr", "nan"], "--lr"), (["audit", "--lr", "-1"], "--lr"), (["audit", "--lr", "1e308"], "--lr"),
    (["audit", "--epochs", "0"], "--epochs"), (["audit", "--batch-size", "0"], "--batch-size"),
    (["audit", "--seed", "-1"], "--seed"), (["audit", "--seed", str(2 ** 64)], "--seed"),
    (["audit", "--rounds", "0"], "--rounds"), (["audit", "--sample-rate", "2"], "--sample-rate"),
    (["audit", "--delta", "1"], "--delta"), (["audit", "--delta", "nan"], "--delta"),
    (["audit", "--seq-len", "0"], "--seq-len"), (["audit", "--lora", "-1"], "--lora"),
    (["audit", "--lora-dropout", "1.5"], "--lora-dropout"), (["audit", "--membership", "-1"], "--membership"),
    (["audit", "--bins", "0"], "--bins"), (["audit", "--iterations", "-5"], "--iterations"),
    (["audit", "--tune", "-1"], "--tune"), (["audit", "--tune-clients", "0"], "--tune-clients"),
    (["audit", "--device", "tpu"], "tpu"), (["audit", "--device", ""], "--device"),
    (["audit", "--model", ""], "model"), (["audit", "--model", "no-such-net"], "no-such-net"),
    (["audit", "--model", "os:no_such_factory"], "no_such_factory"), (["audit", "--data", "no-such-data"], "no-such-data"),
    (["audit", "--attacks", "no-such-attack"], "no-such-attack"), (["audit", "--attacks", " , "], "--attacks"),
    (["audit", "--defense", ""], "defense"), (["audit", "--defense", "gaussian:1,,"], "empty part"),
    (["audit", "--defense", "foo:1"], "foo"), (["audit", "--defense", "gaussian:inf"], "gaussian"),
    (["audit", "--defense", "pruning:1.5"], "pruning"),
    (["audit", "--sweep", ""], "--sweep"), (["audit", "--sweep", "lr=nan"], "lr"),
    (["audit", "--sweep", "lr=0.1,0.1"], "repeat"), (["audit", "--sweep", "nope=1"], "nope"),
    (["audit", "--sweep", "samples=0"], "samples"), (["audit", "--sweep", "lora=4,8"], "lora"),
    (["audit", "--sweep", "defense="], "defense"),
    (["audit", "--text-field", "body"], "--text-field"), (["audit", "--dropout", "off"], "--dropout"),
    (["audit", "--candidates", "missing.txt"], "--candidates"),
    (["audit", "--weights", "missing.safetensors"], "missing.safetensors"),
    (["audit", "--model", "no_such_module_xyz:build"], "no_such_module_xyz"),
    (["audit", "--model", "missing/models.py:build"], "missing/models.py"),
    (["--threads", "0", "audit"], "--threads"), (["--threads", "-3", "audit"], "--threads"),
    # simulate
    (["simulate", "--samples", "0"], "--samples"), (["simulate", "--client", "-1"], "--client"),
    (["simulate", "--client", str(10 ** 9)], "--client"), (["simulate", "--epochs", "0"], "--epochs"),
    (["simulate", "--lr", "inf"], "--lr"), (["simulate", "--defense", "gaussian"], "gaussian"),
    (["simulate", "--model-seed", "-1"], "--model-seed"), (["simulate", "--seed", str(2 ** 40)], "--seed"),
    (["simulate", "--batch-size", "-2"], "--batch-size"), (["simulate", "--device", "cuda:99x"], "cuda:99x"),
    (["simulate", "--model", "no-such-net"], "no-such-net"), (["simulate", "--data", "nope"], "nope"),
    (["simulate", "--split", "validation"], "split"),
    # run
    (["run", "--preset", "no-such-preset"], "no-such-preset"), (["run", "--preset", ""], "preset"),
    (["run", "--preset", "dimitrov-table1-femnist", "--clients", "0"], "--clients"),
    (["run", "--preset", "dimitrov-table1-femnist", "--clients", "-4"], "--clients"),
    (["run", "--preset", "dimitrov-table1-femnist", "--first-client", "-1"], "--first-client"),
    (["run", "--preset", "dimitrov-table1-femnist", "--variants", "nope"], "nope"),
    (["run", "--preset", "dimitrov-table1-femnist", "--settings", "a,a"], "twice"),
    (["run", "--preset", "dimitrov-table1-femnist", "--option", "iterations=-1"], "iterations"),
    (["run", "--preset", "dimitrov-table1-femnist", "--option", "nope=1"], "nope"),
    (["run", "--preset", "dimitrov-table1-femnist", "--option", "=1"], "--option"),
    (["run", "--preset", "dimitrov-table1-femnist", "--option", "x"], "--option"),
    (["run", "--preset", "dimitrov-table1-femnist", "--option", "iterations=1", "-o", "iterations=2"], "twice"),
    (["run", "--preset", "dimitrov-table1-femnist", "--cpus-per-job", "-1"], "--cpus-per-job"),
    (["run", "--preset", "dimitrov-table1-femnist", "--max-retries", "-1"], "--max-retries"),
    (["run", "--preset", "dimitrov-table1-femnist", "--first-client", str(10 ** 9)], "first"),
    # dp-audit
    (["dp-audit", "--canaries", "0"], "--canaries"), (["dp-audit", "--canaries", "-3"], "--canaries"),
    (["dp-audit", "--canary-scale", "nan"], "--canary-scale"), (["dp-audit", "--delta", "0"], "--delta"),
    (["dp-audit", "--rounds", "0"], "--rounds"), (["dp-audit", "--defense", "gaussian:1"], "defense"),
    (["dp-audit", "--defense", "flower-central-dp:noise=nan,clip=1,clients=4"], "noise"),
    (["dp-audit", "--fault", "bogus"], "--fault"), (["dp-audit", "--fault", "noise=nan"], "noise"),
    (["dp-audit", "--clients", "0"], "--clients"), (["dp-audit", "--samples", "0"], "--samples"),
    (["dp-audit", "--lr", "0"], "lr"), (["dp-audit", "--epochs", "2.5"], "--epochs"),
    # special files: devices and folders where a file is expected (never read to the end of /dev/zero)
    (["audit", "--config", "/dev/zero"], "/dev/zero"), (["audit", "--config", "."], "audit config"),
    (["attack", "/dev/null", "--out", "rec"], "/dev/null"), (["report", "/dev/null"], "/dev/null"),
    (["convert-gguf", "/dev/zero", "--to", "conv"], "/dev/zero"), (["inspect", "/dev/zero"], "/dev/zero"),
    (["audit", "--weights", "/dev/zero"], "/dev/zero"), (["audit", "--data", "text", "--model", "gpt2-tiny", "--candidates", "/dev/zero"], "/dev/zero"),
    (["run", "/dev/zero"], "/dev/zero"),
    (["--threads", "1000000000", "audit"], "--threads"), (["--threads", "abc", "audit"], "--threads"),
    # report / inspect / convert-gguf on what is not there
    (["report", "no-such-run"], "no-such-run"), (["inspect", "no-such.safetensors"], "no-such.safetensors"),
    (["inspect", "m.safetensors", "--model", "no-such-net"], "no-such-net"),
    (["convert-gguf", "no-such.gguf", "--to", "folder"], "no-such.gguf"),
]


@pytest.mark.parametrize("argv, needle", FLAG_CASES, ids=[" ".join(c[0])[:60] for c in FLAG_CASES])
def test_flags(argv, needle, tmp_path, capsys):
    out = tmp_path / "out"
    extra = ["--out", str(out)] if argv[0] in ("audit", "simulate", "run", "dp-audit") or argv[-1] == "audit" else []
    if argv[0] == "dp-audit" and "--defense" not in argv:
        extra += ["--defense", "flower-central-dp:noise=1,clip=1,clients=4"]
    problem = check_cli(argv + extra, needle, tmp_path, capsys, out=out)
    assert not problem, problem


# -- --config files (audit) and experiment files (run) -------------------------------------------------
AUDIT_YAML = [
    ("samples: 4\nsamples: 5\n", "samples"), ("- 1\n- 2\n", "mapping"), ("defense: {kind: gaussian}\n", "defense"),
    ("attacks: []\n", "attacks"), ("sweep: {lr: [nan]}\n", "sweep"), ("device: [cpu]\n", "device"),
    ("lora: true\n", "lora"), ("seed: 1.0e+40\n", "seed"), ("data_root: 5\n", "data_root"),
    ("model: {name: x}\n", "model"), ("\t- x\n", "line"), ("quick: 1\n", "quick"),
]


@pytest.mark.parametrize("text, needle", AUDIT_YAML, ids=[c[0].strip()[:30] for c in AUDIT_YAML])
def test_audit_config_files(text, needle, tmp_path, capsys):
    (tmp_path / "a.yaml").write_text(text)
    problem = check_cli(["audit", "--config", "a.yaml", "--out", "out"], needle, tmp_path, capsys,
                        out=tmp_path / "out")
    assert not problem, problem


EXPERIMENT_YAML = [
    ("protocol: {lr: -1}", "protocol.lr"), ("protocol: {epochs: 2.5}", "protocol.epochs"),
    ("protocol: {algorithm: sgd}", "protocol.algorithm"), ("protocol: [1]", "protocol"),
    ("threat: {labels: all}", "threat.labels"), ("threat: labels", "threat"), ("defense: 0.01", "defense"),
    ("defense: gaussian", "strength"), ("defense: {kind: gaussian, sigma: 1}", "sigma"),
    ("defense: 'flower-central-dp:noise=1,clip=1,clients=2.5'", "clients"), ("foo: 1", "foo"),
    ("attack_seed: '1'", "attack_seed"), ("attack_seed: -1", "attack_seed"), ("name: [1]", "name"),
    ("paper: [1]", "paper"), ("rounds: {epochs: 0}", "rounds.epochs"),
    ("settings: [{name: a, protocol: {batch_size: 0}}]", "settings[0].protocol.batch_size"),
    ("settings: []", "settings"), ("settings: {a: 1}", "settings"),
    ("settings: [{name: a}, {name: a}]", "two settings"), ("settings: [{name: a, variants: [nope]}]", "nope"),
    ("quick: {variant_options: {1: 2}}", "variant_options"), ("quick: {settings: [nope]}", "nope"),
    ("model: {name: lenet, train_protocol: {lr: 0}}", "train_protocol.lr"),
    ("data: {dataset: digits, num_clients: 1.0e+6}", "num_clients"),
    ("metrics: {lpips: 5}", "lpips"),
    ("data: {dataset: digits, options: {root: x}}", "data.options"),
    ("data: {dataset: digits, options: {num_clients: 3}}", "data.options"),
    ("model: {name: lenet, options: {seed: 1}}", "model.options"),
    ("model: {name: no-such-model}", "no-such-model"),
    ("settings: [{name: a, model: {name: missing.gguf}}]", "missing.gguf"),
]


@pytest.mark.parametrize("line, needle", EXPERIMENT_YAML, ids=[c[0][:40] for c in EXPERIMENT_YAML])
def test_experiment_files(line, needle, tmp_path, capsys):
    base = {"data": "data: {dataset: digits}", "model": "model: {name: lenet}",
            "variants": "variants: {ig: inverting-gradients}"}
    key = line.split(":")[0]
    text = "\n".join([line] + [v for k, v in base.items() if k != key]) + "\n"
    (tmp_path / "e.yaml").write_text(text)
    problem = check_cli(["run", "e.yaml", "--out", "out"], needle, tmp_path, capsys, out=tmp_path / "out")
    assert not problem, problem


_FDP = "flower-central-dp:noise=1,clip=1,clients=4"


# -- the Python API ---------------------------------------------------------------------------------------
def _fedavg():
    from flwr.serverapp.strategy import FedAvg

    return FedAvg()


def _api_cases(tmp):
    from fedleak.integrations.flower import LeakageAudit

    net = torch.nn.Linear(2, 2)
    client = fedleak.ClientData(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))
    return [
        ("audit model=5", lambda: fedleak.audit(model=5, out=tmp / "o1"), "model"),
        ("audit seed str", lambda: fedleak.audit(seed="1", out=tmp / "o2"), "seed"),
        ("audit out=5", lambda: fedleak.audit(out=5), "out"),
        ("audit defense=5", lambda: fedleak.audit(defense=5, out=tmp / "o3"), "defense"),
        ("audit unknown kw", lambda: fedleak.audit(sampels=4, out=tmp / "o4"), "sampels"),
        ("audit config list", lambda: fedleak.audit([1], out=tmp / "o5"), "config"),
        ("simulate samples str", lambda: fedleak.simulate_update(tmp / "s1", samples="4"), "samples"),
        ("simulate client -1", lambda: fedleak.simulate_update(tmp / "s2", client=-1), "client"),
        ("simulate lr nan", lambda: fedleak.simulate_update(tmp / "s3", lr=float("nan")), "lr"),
        ("simulate defense dict", lambda: fedleak.simulate_update(tmp / "s4", defense={"kind": 1}), "defense"),
        ("simulate out None", lambda: fedleak.simulate_update(None), "out"),
        ("attack missing dir", lambda: fedleak.attack_update(tmp / "nope", tmp / "r1"), "nope"),
        ("attack options str", lambda: fedleak.attack_update(tmp / "nope", tmp / "r2", options="x"), "options"),
        ("attack attack=5", lambda: fedleak.attack_update(tmp / "nope", tmp / "r3", attack=5), "attack"),
        ("client_update model str", lambda: fedleak.client_update("m", client, Protocol()), "model"),
        ("client_update protocol dict", lambda: fedleak.client_update(net, client, {}), "protocol"),
        ("client_update seed str", lambda: fedleak.client_update(net, client, Protocol(), seed="1"), "seed"),
        ("client_update client list", lambda: fedleak.client_update(net, [1], Protocol()), "client"),
        ("Update.load 5", lambda: Update.load(5), "5"),
        ("Update.load missing", lambda: Update.load(tmp / "none"), "none"),
        ("Protocol lr str", lambda: Protocol("fedavg", lr="0.1"), "lr"),
        ("LeakageAudit strategy None", lambda: LeakageAudit(None, net, tmp / "l1"), "strategy"),
        ("dp_audit canaries -1", lambda: fedleak.dp_audit(defense=_FDP, canaries=-1, out=tmp / "d1"), "canaries"),
        ("dp_audit rounds 2.5", lambda: fedleak.dp_audit(defense=_FDP, rounds=2.5, out=tmp / "d2"), "rounds"),
        ("dp_audit defense 5", lambda: fedleak.dp_audit(defense=5, out=tmp / "d3"), "defense"),
        ("dp_audit model 5", lambda: fedleak.dp_audit(defense=_FDP, model=5, out=tmp / "d4"), "model"),
        ("dp_audit fault 5", lambda: fedleak.dp_audit(defense=_FDP, fault=5, out=tmp / "d5"), "fault"),
        ("LeakageAudit workers 0", lambda: LeakageAudit(_fedavg(), net, tmp / "l2", attack=None, workers=0), "workers"),
        ("LeakageAudit protocol dict", lambda: LeakageAudit(_fedavg(), net, tmp / "l3", attack=None, protocol={}),
         "protocol"),
        ("LeakageAudit model str", lambda: LeakageAudit(_fedavg(), "net", tmp / "l4"), "model"),
        ("LeakageAudit attack_options str", lambda: LeakageAudit(_fedavg(), net, tmp / "l5", attack=None,
                                                                  attack_options="x"), "attack_options"),
        ("LeakageAudit guard str", lambda: LeakageAudit(_fedavg(), net, tmp / "l6", attack=None, guard="yes"), "guard"),
        ("Defense.parse 5", lambda: fedleak.Defense.parse(5), "defense"),
        ("Defense kind 5", lambda: fedleak.Defense(5), "defense"),
        ("Update.load a file", lambda: Update.load(__file__), "update"),
    ]


def test_python_api(tmp_path):
    failures = [f"{name}: {problem}" for name, call, needle in _api_cases(tmp_path)
                if (problem := check_api(call, needle))]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert not failures and not written, "\n".join(failures + [f"wrote {written}"])


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
    folder = _copy(update_dir, tmp_path / "u")
    edit(folder)
    problem = check_cli(["attack", "u", "--attack", "inverting-gradients", "--option", "iterations=1", "--out", "rec"], needle,
                        tmp_path, capsys, out=tmp_path / "rec")
    assert not problem, problem


def test_attack_option_values(update_dir, tmp_path, capsys):
    failures = []
    for option, needle in [("iterations=nan", "iterations"), ("iterations=1e400", "iterations"),
                           ("iterations=2.5", "iterations"), ("lr=-1", "lr"), ("nope=1", "nope"),
                           ("iterations=[1,2]", "iterations"), ("seed=-1", "seed")]:
        problem = check_cli(["attack", str(update_dir), "--attack", "inverting-gradients", "--option", option, "--out", "rec"],
                            needle, tmp_path, capsys, out=tmp_path / "rec")
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
        (folder / "config.json").write_text(config) if isinstance(config, str) else (folder / "config.json").write_bytes(config)
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
