"""CLI flags, config files, data files and the Python API: the instances of issue 47 classes 3, 4, 6 and 7.

Each case: the input, exit code 2 (the CLI) or a :class:`FedleakError` (the API), and the words the one-line
message must name; nothing written outside ``--out``, nothing left inside it. Work is never reached (the
tripwires of ``tests/hostile_doors.py`` replace data loading and training), so a case that is accepted fails in
milliseconds instead of running an audit.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hostile_doors import _guarded, check_api, check_cli  # noqa: F401  (_guarded: the tripwires, autouse)

DP = ["dp-audit", "--defense", "flower-central-dp:noise=1.0,clip=1.0,clients=4", "--out", "out"]
SGD = ["dp-audit", "--defense", "dp-sgd:clip=1.0,noise=1.0", "--out", "out"]


def _metrics(**edits) -> str:
    """A leakage audit's metrics.json of the right format (the audited defense), then ``edits``."""
    base = {"format": "fedleak.audit/1", "config": {"defense": ["flower-central-dp:noise=1.0,clip=1.0,clients=4"]},
            "threat_models": {"honest-but-curious": {"verdict": "high"}}, "epsilon": {}, "environment": {}}
    base.update(edits)
    return json.dumps(base)


#: (case, files to write {name: text}, argv, the words the message must name)
CASES = [
    # class 7: a seed beyond 64 bits was blamed on a derived seed inside client_update()
    ("dp-audit --seed 2^70", {}, DP + ["--seed", str(2 ** 70)], "--seed"),
    # class 4: a knob the audit would not turn
    ("dp-audit --lora-reply at client level", {"a.safetensors": "", "b.safetensors": ""},
     DP + ["--lora-reply", "a.safetensors,b.safetensors"], "--lora-reply"),
    ("dp-audit --lora at example level", {}, SGD + ["--lora", "4"], "--lora"),
    ("audit --lora-dropout without --lora", {}, ["audit", "--data", "text", "--lora-dropout", "0.1", "--out", "out"],
     "--lora-dropout"),
    # class 3: --leakage-metrics of the right format and the wrong shape
    ("leakage metrics: config a list", {"m.json": _metrics(config=[1])}, DP + ["--leakage-metrics", "m.json"],
     "config"),
    ("leakage metrics: defense an int", {"m.json": _metrics(config={"defense": 5})},
     DP + ["--leakage-metrics", "m.json"], "defense"),
    ("leakage metrics: threat_models a list", {"m.json": _metrics(threat_models=[1])},
     DP + ["--leakage-metrics", "m.json"], "threat_models"),
    ("leakage metrics: environment a string", {"m.json": _metrics(environment="x")},
     DP + ["--leakage-metrics", "m.json"], "environment"),
    ("leakage metrics: a threat model a string", {"m.json": _metrics(threat_models={"hbc": "x"})},
     DP + ["--leakage-metrics", "m.json"], "threat_models"),
]


@pytest.mark.parametrize("case, files, argv, needle", CASES, ids=[c[0] for c in CASES])
def test_cli_case(case, files, argv, needle, tmp_path, capsys):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    assert check_cli(argv, needle, tmp_path, capsys, out=tmp_path / "out") == ""


def test_dp_audit_seed_through_the_api():
    import fedleak

    assert check_api(lambda: fedleak.dp_audit(defense="flower-central-dp:noise=1.0,clip=1.0,clients=4",
                                              seed=2 ** 70), "seed") == ""


def test_an_explicit_membership_0_survives_flowertune():
    """Issue 47 class 4: --flowertune replaced an explicit --membership 0 with 64."""
    from fedleak.audit.plan import flowertune
    from fedleak.audit.plan.config import AuditConfig

    off, _ = flowertune.apply(AuditConfig(data="text", flowertune=True, membership=0))
    unset, _ = flowertune.apply(AuditConfig(data="text", flowertune=True))
    assert off.membership == 0 and unset.membership > 0  # the preset's count only where none was given


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(["config", "threat_models", "epsilon", "environment", "quick", "modality"]),
       value=st.one_of(st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2), st.floats(),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_fuzzed_leakage_metrics_are_refused_in_one_line_or_read(tmp_path_factory, key, value):
    """Whatever shape a metrics.json key has, reading it ends in one FedleakError line naming the option, or reads."""
    from fedleak.errors import FedleakError
    from fedleak.privacy.beside import read_leakage

    path = tmp_path_factory.mktemp("m") / "m.json"
    path.write_text(_metrics(**{key: value}).replace("NaN", "0"))
    try:
        read_leakage(path, "flower-central-dp:noise=1.0,clip=1.0,clients=4")
    except FedleakError as exc:
        assert "\n" not in str(exc) and "--leakage-metrics" in str(exc)


# -- model files and folders, data files, job inputs: the rest of classes 3 and 7 ----------------------------------
from hostile_doors import update_dir  # noqa: E402,F401  (a real saved update, made once per module)


def _folder(tmp_path, **config):
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
                                                    "n_embd": 8, "n_head": 2, "vocab_size": 10, **config}))
    save_file({"transformer.wte.weight": torch.zeros(10, 8)}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("key, value", [("n_layer", -1), ("n_head", 0), ("n_embd", 2.5), ("vocab_size", -3)])
def test_a_folder_config_size_is_named(key, value, tmp_path, capsys):
    """Issue 47 class 3: n_layer -1 was torch's "__len__() should return >= 0", naming neither file nor field."""
    _folder(tmp_path, **{key: value})
    assert check_cli(["audit", "--model", "folder", "--data", "text", "--out", "out"], key, tmp_path, capsys,
                     out=tmp_path / "out") == ""


def test_a_meta_device_model_is_named(tmp_path):
    """Issue 47 class 3: a factory returning a meta-device model was NotImplementedError from Module.to()."""
    from fedleak.audit.plan.model_loading import build_model

    (tmp_path / "metamodel.py").write_text("import torch\nfrom torch import nn\n\ndef build():\n"
                                           "    with torch.device('meta'):\n        return nn.Linear(784, 62)\n")
    spec = __import__("fedleak").DataSpec("d", (1, 28, 28), 62, (0.0,), (1.0,))
    assert check_api(lambda: build_model(f"{tmp_path / 'metamodel.py'}:build", spec), "meta device") == ""


def test_a_float64_checkpoint_that_overflows_float32_names_the_tensor(tmp_path):
    """Issue 47 class 7: it was "outputs NaN or inf" downstream, naming no tensor."""
    import torch
    from safetensors.torch import save_file

    from fedleak.audit.plan.model_loading import load_weights

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten(), torch.nn.Linear(1352, 62))
    state = {k: v.double() for k, v in model.state_dict().items()}
    state["0.weight"][0, 0, 0, 0] = 1e300
    save_file(state, str(tmp_path / "w.safetensors"))
    assert check_api(lambda: load_weights(model, tmp_path / "w.safetensors"), "0.weight") == ""


def test_labels_out_of_range_in_fedleak_attack(update_dir, tmp_path, capsys):
    """Issue 47 class 3: an IndexError after the attack ran (two lines, out/.cache left behind)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(update_dir, tmp_path / "u")
    truth = load_file(str(tmp_path / "u" / "truth.safetensors"))
    truth["labels"][-1] = 99
    save_file(truth, str(tmp_path / "u" / "truth.safetensors"))
    argv = ["attack", "u", "--attack", "dlg-adam", "-o", "iterations=2", "--no-progress", "--out", "out"]
    assert check_cli(argv, "labels", tmp_path, capsys, out=tmp_path / "out") == ""
    assert not (tmp_path / "out").exists()


def test_an_empty_npz_and_a_refused_pickle_name_their_file(tmp_path):
    """Issue 47 class 7: "cannot partition an empty dataset" and "refusing pickle: _codecs.encode …" named no file."""
    import numpy as np

    from fedleak.data.cifar import read_pool
    from fedleak.data.safe_pickle import load_pickle

    np.savez(tmp_path / "cifar10.npz", train_x=np.zeros((0, 3072), np.uint8), train_y=np.zeros(0, np.int64))
    assert check_api(lambda: read_pool("cifar10", tmp_path, "train"), "cifar10.npz") == ""
    (tmp_path / "data_batch_1").write_bytes(b"\x80\x02c_codecs\nencode\nq\x00X\x01\x00\x00\x00aq\x01X\x05\x00\x00\x00"
                                            b"utf-8q\x02\x86q\x03Rq\x04.")
    assert check_api(lambda: load_pickle(tmp_path / "data_batch_1"), "data_batch_1") == ""


def test_a_huge_candidates_file_is_refused_before_work(tmp_path, capsys):
    """Issue 47 class 3: 200,000 candidate lines ran torch out of memory."""
    (tmp_path / "c.txt").write_text("".join(f"document {i}\n" for i in range(200_000)))
    argv = ["audit", "--data", "text", "--membership", "4", "--candidates", "c.txt", "--out", "out"]
    assert check_cli(argv, "--candidates", tmp_path, capsys, out=tmp_path / "out") == ""


def test_the_config_file_door_refuses_what_the_flags_do(tmp_path, capsys):
    """The same checks behind --config: lora_dropout without lora in an audit.yaml."""
    (tmp_path / "audit.yaml").write_text("data: text\nlora_dropout: 0.1\n")
    assert check_cli(["audit", "--config", "audit.yaml", "--out", "out"], "lora-dropout", tmp_path, capsys,
                     out=tmp_path / "out") == ""
