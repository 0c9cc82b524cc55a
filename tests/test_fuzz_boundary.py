"""Fuzzing the doors of the one boundary (issue #30), bounded to a few seconds each (derandomized):

spec strings (defenses, filters, sweeps), name lists and ``KEY=VALUE`` options through the CLI, safetensors
headers, model-folder ``config.json`` files, update metadata and job records. The contract: a value, or
one :class:`~fedleak.FedleakError` line (CLI: exit 2, one ``fedleak: error:`` line, nothing outside
``--out``); never a traceback, an internal error or another exception type.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedleak import FedleakError
from fuzz_targets import check_cli, mutated

BUDGET = settings(max_examples=150, derandomize=True, deadline=None, database=None, print_blob=False,
                  suppress_health_check=list(HealthCheck))

KINDS = ["gaussian", "laplacian", "pruning", "dp-sgd", "secagg", "percentile", "svt", "flower-local-dp",
         "flower-central-dp", "none", "dp_gaussian_", "bogus", ""]
KEYS = ["clip", "noise", "sigma", "scale", "rounds", "sample_rate", "delta", "k", "percentile", "gamma", "fraction",
        "epsilon", "noise_var", "tau", "sensitivity", "clients", "adaptive", "p", "b", ""]
VALUES = ["0", "1", "2.5", "-1", "1e308", "nan", "inf", "", "x", "0.5", "100", "4294967296", "1e-5"]


@st.composite
def specs(draw):
    kind = draw(st.sampled_from(KINDS))
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        if draw(st.integers(0, 3)):
            parts.append(f"{draw(st.sampled_from(KEYS))}={draw(st.sampled_from(VALUES))}")
        else:
            parts.append(draw(st.sampled_from(VALUES)))
    sep = draw(st.sampled_from([":", ":", "", "::"]))
    return kind + (sep + ",".join(parts) if parts or sep else "") + draw(st.sampled_from(["", ",", " "]))


def one_line_or_value(call) -> None:
    try:
        call()
    except FedleakError as exc:
        assert "\n" not in str(exc) and str(exc), repr(str(exc))


@BUDGET
@given(specs())
def test_fuzz_defense_specs(spec):
    from fedleak.audit.plan.config import parse_defenses
    from fedleak.fl.defenses import Defense

    one_line_or_value(lambda: Defense.parse(spec))
    one_line_or_value(lambda: parse_defenses([spec]))


@BUDGET
@given(st.sampled_from(["epochs", "lr", "lora", "defense", "secagg", "samples", "bogus", ""]),
       st.lists(st.sampled_from(VALUES), max_size=5), st.sampled_from([",", ",,", ";"]))
def test_fuzz_sweeps(knob, values, sep):
    from fedleak.audit.plan.config import Sweep

    one_line_or_value(lambda: Sweep.parse(f"{knob}={sep.join(values)}"))
    one_line_or_value(lambda: Sweep.parse({"knob": knob, "values": values}))


NAMES = ["agic", "dimitrov", "dager", "inverting-gradients", "imprint", "", " ", ",", "zz", "\x00"]


@settings(max_examples=60, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["--attacks", "--defense", "--sweep", "--lora", "--seq-len"]),
       st.one_of(specs(), st.lists(st.sampled_from(NAMES), max_size=4).map(",".join)),
       st.sampled_from([[], ["--data", "text"], ["--attacks", "zz-unknown"]]))
def test_fuzz_audit_flags(flag, value, extra):
    check_cli(["audit", flag, value, *extra, "--out", "out"])


@settings(max_examples=30, derandomize=True, deadline=None, database=None, print_blob=False,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(alphabet="ab=-_ 1.,", max_size=8), max_size=3),
       st.sampled_from(["run", "attack"]))
def test_fuzz_key_value_options(pairs, command):
    args = [command] + (["--preset", "dimitrov-table1-femnist"] if command == "run" else ["missing-dir"])
    for pair in pairs:
        args += ["--option", pair]
    if command == "run":
        args += ["--variants", ",".join(p for p in pairs if p)]
    check_cli(args + ["--out", "out"])


def _weights_bytes() -> bytes:
    from safetensors.torch import save

    return save({"fc.weight": torch.zeros(2, 4), "fc.bias": torch.zeros(2), "n": torch.zeros(3, dtype=torch.int64)})


@BUDGET
@given(mutated(_weights_bytes()))
def test_fuzz_safetensors_headers(data):
    from fedleak.config.loaders import read_safetensors

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.safetensors"
        path.write_bytes(data)
        one_line_or_value(lambda: read_safetensors(path, floating=True))
        one_line_or_value(lambda: read_safetensors(path))


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    from fedleak.data.tokenizers import minilm_path
    from fedleak.models.hf.builders import transformers_module

    tf = transformers_module()
    folder = tmp_path_factory.mktemp("fuzz-lm") / "m"
    torch.manual_seed(0)
    tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=30522, n_embd=8, n_layer=1, n_head=2, n_positions=16)
                       ).save_pretrained(folder)
    shutil.copy(minilm_path() / "tokenizer.json", folder / "tokenizer.json")
    return folder


CONFIG_KEYS = ["n_embd", "n_head", "n_layer", "n_positions", "vocab_size", "layer_norm_epsilon", "model_type",
               "architectures", "n_inner"]
CONFIG_VALUES = [0, 1, 3, 16, -1, 2.5, "x", None, [], {}, 1e308, True, ["GPT2LMHeadModel"], "bert"]


def test_fuzz_model_folder_config(tiny_folder, tmp_path):
    """config.json edited key by key (types, sizes, head counts): the folder loads or one line."""
    from fedleak import models
    from fedleak.types import DataSpec

    spec = DataSpec("t", (1, 1, 8), 30522, (0.0,), (1.0,), modality="text", vocab_size=30522, pad_id=0)
    original = json.loads((tiny_folder / "config.json").read_text())

    @settings(max_examples=40, derandomize=True, deadline=None, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(st.dictionaries(st.sampled_from(CONFIG_KEYS), st.sampled_from(CONFIG_VALUES), max_size=2))
    def check(edits):
        folder = tmp_path / "m"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(tiny_folder, folder)
        (folder / "config.json").write_text(json.dumps({**original, **edits}))
        one_line_or_value(lambda: models.build(str(folder), spec))

    check()


SCALARS = st.one_of(st.integers(-3, 2 ** 40), st.floats(allow_nan=True), st.text(max_size=4), st.none(),
                    st.booleans())


@BUDGET
@given(st.dictionaries(st.sampled_from(["labels", "label_counts", "batch_labels", "model", "client_index", "spec",
                                        "other"]),
                       st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                                 st.dictionaries(st.sampled_from(["name", "seed"]), SCALARS, max_size=2)),
                       max_size=3))
def test_fuzz_update_metadata(metadata):
    from fedleak.types.metadata import check_metadata

    one_line_or_value(lambda: check_metadata(metadata))


@BUDGET
@given(st.dictionaries(st.sampled_from(["setting", "variant", "attack", "client", "client_index", "num_samples",
                                        "seconds", "job_hash", "psnr", "psnr_per_input", "record_digest"]),
                       st.one_of(SCALARS, st.lists(SCALARS, max_size=2)), max_size=11))
def test_fuzz_job_records(record):
    from fedleak.runs.job_files import read_record

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "job.json"
        try:
            path.write_text(json.dumps(record))
        except ValueError:
            return
        got, why = read_record(path)
        assert (got is None) == bool(why) and "\n" not in why
