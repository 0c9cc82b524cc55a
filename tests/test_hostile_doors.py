"""A fresh catalogue of hostile inputs, one per door (issue #30, written against the code as it stands).

Doors: the flags of every command (audit, simulate, attack, run, report, inspect, dp-audit, convert-gguf),
``KEY=VALUE`` options, ``--config`` files, defense/sweep/attack-option specs, the Python API
(``fedleak.audit``, ``simulate_update``, ``attack_update``, ``client_update``, ``Update.load``,
``LeakageAudit``, ``dp_audit``), files edited on disk before a resume, ``update.json``, model folders,
GGUF files and candidate documents. Each case must end as exit 2 with one stderr line naming the input
(or one :class:`FedleakError` line from the API), write nothing outside ``--out`` and leave nothing in it.
Work is replaced by tripwires (:func:`hostile_doors.tripwires`), so the whole file runs in seconds. The files
on disk (update, job, run, model-folder, GGUF, candidate and inspected files) are in
``test_hostile_doors_files.py``.
"""

from __future__ import annotations

import pytest
import torch

import fedleak
from fedleak import Protocol, Update

from hostile_doors import _guarded, check_api, check_cli  # noqa: F401  (_guarded: an autouse fixture)

torch.set_num_threads(1)


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
    (["audit", "--model", "os:no_such_factory"], "no_such_factory"),
    (["audit", "--data", "no-such-data"], "no-such-data"),
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
    (["audit", "--weights", "/dev/zero"], "/dev/zero"),
    (["audit", "--data", "text", "--model", "gpt2-tiny", "--candidates", "/dev/zero"], "/dev/zero"),
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
    ("model: {name: lenet, options: {foo: 1}}", "foo"),
    ("quick: {variant_options: {iterations: -1}}", "iterations"),
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


def _legacy_fedavg():
    from flwr.server.strategy import FedAvg

    return FedAvg()


def _recorder(*args, **kwargs):
    from fedleak.integrations.flower import LeakageRecorder

    return LeakageRecorder(*args, **kwargs)


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
        ("dp_audit clients []", lambda: fedleak.dp_audit(defense=_FDP, clients=[], out=tmp / "d6"), "clients"),
        ("dp_audit clients 'nan'", lambda: fedleak.dp_audit(defense=_FDP, clients="nan", out=tmp / "d7"), "clients"),
        ("dp_audit canary_scale None", lambda: fedleak.dp_audit(defense=_FDP, canary_scale=None, out=tmp / "d8"),
         "canary_scale"),
        ("dp_audit fault 5", lambda: fedleak.dp_audit(defense=_FDP, fault=5, out=tmp / "d5"), "fault"),
        ("LeakageAudit workers 0", lambda: LeakageAudit(_fedavg(), net, tmp / "l2", attack=None, workers=0), "workers"),
        ("LeakageAudit protocol dict", lambda: LeakageAudit(_fedavg(), net, tmp / "l3", attack=None, protocol={}),
         "protocol"),
        ("LeakageAudit model str", lambda: LeakageAudit(_fedavg(), "net", tmp / "l4"), "model"),
        ("LeakageAudit attack_options str", lambda: LeakageAudit(_fedavg(), net, tmp / "l5", attack=None,
                                                                  attack_options="x"), "attack_options"),
        ("LeakageAudit guard str", lambda: LeakageAudit(_fedavg(), net, tmp / "l6", attack=None, guard="yes"), "guard"),
        ("LeakageRecorder strategy None", lambda: _recorder(None, net, Protocol(), tmp / "r5"), "strategy"),
        ("LeakageRecorder protocol dict", lambda: _recorder(_legacy_fedavg(), net, {}, tmp / "r6"), "protocol"),
        ("LeakageRecorder keys 5", lambda: _recorder(_legacy_fedavg(), net, Protocol(), tmp / "r7", keys=5), "keys"),
        ("LeakageRecorder clients 5", lambda: _recorder(_legacy_fedavg(), net, Protocol(), tmp / "r8", clients=5),
         "clients"),
        ("Defense.parse 5", lambda: fedleak.Defense.parse(5), "defense"),
        ("Defense kind 5", lambda: fedleak.Defense(5), "defense"),
        ("Update.load a file", lambda: Update.load(__file__), "update"),
    ]


def test_python_api(tmp_path):
    failures = [f"{name}: {problem}" for name, call, needle in _api_cases(tmp_path)
                if (problem := check_api(call, needle))]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert not failures and not written, "\n".join(failures + [f"wrote {written}"])
