"""Property-based fuzz targets shared by ``tests/test_fuzz_*.py`` (small fixed budgets, derandomized)
and ``benchmarks/fuzz_long.py`` (larger budgets).

Each target is ``(strategy, check)``: ``check(value)`` feeds one generated input to one entry point
and asserts the contract of the README's "Errors and exit codes": the input is accepted, or refused
with one :class:`~fedleak.FedleakError` line (CLI: exit 2 and one ``fedleak: error:`` line on stderr;
``inspect`` may exit 1); never a traceback, an ``internal error``, another exception type, or a file
written outside ``--out``. Work that valid input would start (loading data) is replaced by a
sentinel :class:`Reached` error, so a generated valid command costs milliseconds.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import pickle
import struct
import tempfile
from pathlib import Path

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from fedleak import FedleakError


class Reached(FedleakError):
    """Validation passed: the command reached its work (stopped here, it counts as accepted)."""


@contextlib.contextmanager
def no_work():
    import fedleak.data as data

    def reached(*args, **kwargs):
        raise Reached("REACHED-WORK")

    saved = data.load
    data.load = reached
    try:
        yield
    finally:
        data.load = saved


# -- hostile values -----------------------------------------------------------------------------

TEXT_VALUES = ["nan", "NaN", "inf", "-inf", "1e308", "-1e308", "-1", "0", "1", "2", "2.5", "1e3", "abc", "", " ",
               "\x00", "-", "--", "true", "false", "[1]", "{a: 1}", "99999999999999999999", "0x10", "1_000",
               "gaussian:nan", "gaussian:0.1", "laplacian:inf", "pruning:0.5", "dp-sgd:clip=1,noise=0",
               "dp-sgd:clip=1,noise=nan", "dp-sgd:clip=nan,noise=1", "secagg:inf", "secagg:2", "dp_gaussian_1e308",
               "epochs=1,nan", "lr=1e308", "defense=0,inf", "samples=-1", "secagg=1,2", "epochs=1,2",
               "fedsgd", "fedavg", "digits", "photos", "femnist", "mnist", "femnist-cnn", "mlp", "cpu", "cuda:7",
               "x.zip", "/nonexistent", "é", "a" * 300]
FLAGS = {
    "audit": ["--lr", "--samples", "--clients", "--seed", "--bins", "--epochs", "--batch-size", "--iterations",
              "--rounds", "--delta", "--sample-rate", "--model-seed", "--defense", "--sweep", "--model", "--data",
              "--data-root", "--algorithm", "--attacks", "--device", "--weights", "--config"],
    "simulate": ["--data", "--samples", "--client", "--epochs", "--lr", "--defense", "--seed", "--algorithm",
                 "--batch-size", "--split", "--share-labels", "--device", "--model"],
    "run": ["--preset", "--clients", "--first-client", "--variants", "--settings", "--option", "--dtype",
            "--data-root", "--executor", "--max-retries"],
    "attack": ["--attack", "--option", "--model", "--data"],
    "inspect": ["--threshold", "--model", "--data"],
    "report": [],
}
SWITCHES = {"audit": ["--quick", "--no-malicious", "--static-batches", "--quiet"], "simulate": ["--no-truth"],
            "run": ["--quick", "--no-progress"], "attack": ["--no-eval"], "inspect": ["--json"], "report": []}
POSITIONAL = {"attack": True, "inspect": True, "report": True, "run": False}


@st.composite
def argv(draw):
    command = draw(st.sampled_from(sorted(FLAGS)))
    args = [command]
    if POSITIONAL.get(command):
        args.append(draw(st.sampled_from(["missing-dir", "", "-x", "out"])))
    if command == "run":
        args += ["--preset", draw(st.sampled_from(["dimitrov-table1-femnist", "robbing-fedavg", "nope"]))]
    for _ in range(draw(st.integers(0, 4))):
        if FLAGS[command] and draw(st.booleans()):
            args += [draw(st.sampled_from(FLAGS[command])), draw(st.sampled_from(TEXT_VALUES) | st.text(max_size=8))]
        elif SWITCHES[command]:
            args.append(draw(st.sampled_from(SWITCHES[command])))
    if command in ("audit", "simulate", "run", "attack") and draw(st.integers(0, 9)):
        args += ["--out", "out"]
    return args


def check_cli(args: list) -> None:
    from fedleak.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        before = os.getcwd()
        err, out = io.StringIO(), io.StringIO()
        os.chdir(tmp)
        try:
            with no_work(), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                code = main(args)
        finally:
            os.chdir(before)
        left = sorted(p.name for p in Path(tmp).iterdir())
    text = err.getvalue()
    assert code in ((0, 1, 2) if args[0] == "inspect" else (0, 2)), (args, code, text)
    assert "Traceback" not in text and "internal error" not in text, (args, text)
    if code == 2:
        assert text.count("\n") == 1 and text.startswith("fedleak: error:"), (args, text)
    assert set(left) <= {"out"}, (args, left)  # nothing outside --out
    if "out" in left:
        assert code == 0 or not any(Path(tmp, "out").iterdir()), (args, code)


# -- the config loaders -------------------------------------------------------------------------

def _config_keys():
    from fedleak.audit import AuditConfig
    from fedleak.config import TOP_KEYS

    return sorted(set(AuditConfig.keys()) | set(TOP_KEYS) | {"no_malicious", "no-malicious", "batch-size"})


_SCALARS = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from(TEXT_VALUES) | st.text(max_size=10))
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
documents = st.dictionaries(st.sampled_from(_config_keys()) | st.text(max_size=6), _VALUES, max_size=6)


def check_audit_yaml(document: dict) -> None:
    import yaml

    from fedleak.audit import AuditConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True))
        try:
            config = AuditConfig.from_yaml(path)
        except FedleakError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc), str(exc)
            return
        config.resolve()  # what loads also resolves (or refuses) without any other exception


def check_experiment_mapping(document: dict) -> None:
    from fedleak.config import parse_config

    base = {"data": {"dataset": "digits"}, "model": {"name": "femnist-cnn"},
            "variants": {"ig": {"attack": "inverting-gradients"}}}
    try:
        parse_config({**base, **document}, "fuzz.yaml")
    except FedleakError as exc:
        assert "\n" not in str(exc)


@st.composite
def mutated(draw, seed: bytes):
    """``seed`` with a few bytes flipped, cut or appended (the mutations of a coverage-free fuzzer)."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(0, 6))):
        if not data:
            break
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    if draw(st.integers(0, 3)) == 0:
        data += draw(st.binary(max_size=16))
    if draw(st.integers(0, 5)) == 0:
        data = bytearray(draw(st.sampled_from([b"[" * 5000, b"{" * 5000, b"\xff" * 4, b""])))
    return bytes(data)


_YAML_SEED = b"model: femnist-cnn\nsamples: 4\ndefense: [gaussian:0.1, secagg:2]\nsweep: epochs=1,2\nmalicious: false\n"


def check_yaml_bytes(data: bytes) -> None:
    from fedleak.audit import AuditConfig

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "audit.yaml"
        path.write_bytes(data)
        try:
            AuditConfig.from_yaml(path).resolve()
        except FedleakError as exc:
            assert "\n" not in str(exc)


# -- the Python API -----------------------------------------------------------------------------

api_kwargs = st.dictionaries(
    st.sampled_from(_config_keys() + ["out", "progress", "log"]),
    _SCALARS | st.lists(_SCALARS, max_size=3) | st.just(Path("p")), max_size=4)


def check_api(kwargs: dict) -> None:
    import fedleak

    kwargs = {k.replace("-", "_"): v for k, v in kwargs.items()}
    with tempfile.TemporaryDirectory() as tmp:
        kwargs.setdefault("out", str(Path(tmp) / "out"))
        if isinstance(kwargs["out"], str) and not kwargs["out"].startswith(tmp):
            kwargs["out"] = str(Path(tmp) / "out")
        kwargs.setdefault("log", None)
        try:
            with no_work():
                fedleak.audit(**kwargs)
        except FedleakError as exc:
            assert "\n" not in str(exc)
        left = sorted(p.name for p in Path(tmp).iterdir())
        assert left == [], left


# -- the Flower reply converter -----------------------------------------------------------------

class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x.flatten(1))


_DTYPES = [np.float32, np.float64, np.float16, np.int64, np.int8, np.uint8, np.bool_, np.complex64]
def _filled(shape, dtype, fill):
    with np.errstate(all="ignore"):  # NaN/inf cast to an integer dtype: whatever numpy makes of it
        return np.full(shape, fill).astype(dtype)


_array = st.builds(_filled,
                   st.lists(st.integers(0, 4), max_size=3).map(tuple), st.sampled_from(_DTYPES),
                   st.floats(allow_nan=True, allow_infinity=True) | st.integers(-3, 3))
replies = st.tuples(st.lists(_array, max_size=3), _SCALARS | st.integers(), st.dictionaries(
    st.text(max_size=5) | st.integers(), _SCALARS, max_size=5), st.dictionaries(
    st.sampled_from(["lr", "local-epochs", "batch-size", "epochs", "learning_rate", "x"]), _SCALARS, max_size=3))


def check_flower_reply(reply) -> None:
    from fedleak import Protocol
    from fedleak.integrations.flower.convert import (check_num_examples, client_metadata, protocol_from_config,
                                                     split_arrays, update_from_params)

    arrays, num_examples, metrics, config = reply
    model = Tiny()
    try:
        client, _ = split_arrays(model, arrays, "state", "arrays the client returned")
        protocol = protocol_from_config(Protocol("fedavg"), config)
        n = check_num_examples(num_examples)
        assert 1 <= n <= 10 ** 9
        meta = client_metadata(metrics)
        json.dumps(meta, allow_nan=False)
        server = {k: v.detach().clone() for k, v in model.named_parameters()}
        update_from_params(server, {}, client, n, protocol, {"client_metrics": meta})
    except FedleakError as exc:
        assert "\n" not in str(exc)


# -- file loaders -------------------------------------------------------------------------------

def _seed_files() -> dict:
    """A valid file for every loader (made once, in memory)."""
    from PIL import Image
    from safetensors.torch import save

    from fedleak import Protocol, Update

    with tempfile.TemporaryDirectory() as tmp:
        update = Update({"w": torch.zeros(2, 2)}, Protocol("fedsgd"), 1, gradient={"w": torch.ones(2, 2)},
                        metadata={"spec": {"name": "t", "shape": [1, 2, 2], "num_classes": 2}})
        directory = update.save(Path(tmp) / "u")
        update_json = (directory / "update.json").read_bytes()
        update_st = (directory / "update.safetensors").read_bytes()
    png = io.BytesIO()
    Image.fromarray(np.arange(16, dtype=np.uint16).reshape(4, 4) * 4000).save(png, format="PNG")
    png8 = io.BytesIO()
    Image.fromarray(np.arange(48, dtype=np.uint8).reshape(4, 4, 3)).save(png8, format="PNG")
    idx = struct.pack(">HBB", 0, 0x08, 3) + struct.pack(">3I", 2, 28, 28) + bytes(2 * 28 * 28)
    leaf = json.dumps({"users": ["u"], "num_samples": [2], "user_data": {"u": {"x": [[0.5] * 784] * 2,
                                                                               "y": [1, 2]}}}).encode()
    job = json.dumps({"setting": "s", "variant": "v", "attack": "a", "client": "c", "client_index": 0,
                      "num_samples": 1, "seconds": 1.0, "job_hash": "h", "psnr": 10.0}).encode()
    return {
        "update.json": update_json, "update.safetensors": update_st,
        "weights.safetensors": save({"fc.weight": torch.zeros(2, 4), "fc.bias": torch.zeros(2)}),
        "idx": idx, "png16": png.getvalue(), "png8": png8.getvalue(),
        "cifar": pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2),
        "leaf.json": leaf, "leaf.json.gz": gzip.compress(leaf), "job.json": job,
    }


SEEDS = _seed_files()


def check_file(kind: str, data: bytes) -> None:
    """Feed ``data`` as a file of ``kind`` to its loader: a value or one FedleakError line."""
    from fedleak.audit.plan.model_loading import load_weights
    from fedleak.data import leaf
    from fedleak.data.cifar import read_batch
    from fedleak.data.imagefolder import read_image
    from fedleak.data.mnist import parse_idx
    from fedleak.runs.job_files import read_record
    from fedleak.types import Update

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            if kind in ("update.json", "update.safetensors"):
                (tmp / "u").mkdir()
                (tmp / "u" / "update.json").write_bytes(SEEDS["update.json"])
                (tmp / "u" / "update.safetensors").write_bytes(SEEDS["update.safetensors"])
                (tmp / "u" / kind).write_bytes(data)
                Update.load(tmp / "u")
            elif kind == "weights.safetensors":
                (tmp / kind).write_bytes(data)
                load_weights(Tiny(), tmp / kind)
            elif kind == "idx":
                parse_idx(data, "fuzz.idx")
            elif kind.startswith("png"):
                (tmp / "x.png").write_bytes(data)
                read_image(tmp / "x.png", 4, 3)
            elif kind == "cifar":
                (tmp / "data_batch_1").write_bytes(data)
                read_batch(tmp / "data_batch_1", "labels")
            elif kind.startswith("leaf"):
                (tmp / kind).write_bytes(data)
                for user, (x, y) in leaf.read_file(tmp / kind).items():
                    leaf._to_arrays(x, y, tmp / kind, user)
            elif kind == "job.json":
                (tmp / kind).write_bytes(data)
                record, why = read_record(tmp / kind)
                assert (record is None) == bool(why)
        except FedleakError as exc:
            assert "\n" not in str(exc), str(exc)


def file_target(kind: str):
    return mutated(SEEDS[kind]), lambda data: check_file(kind, data)


TARGETS = {
    "cli": (argv(), check_cli),
    "audit-yaml": (documents, check_audit_yaml),
    "experiment-mapping": (documents, check_experiment_mapping),
    "yaml-bytes": (mutated(_YAML_SEED), check_yaml_bytes),
    "api": (api_kwargs, check_api),
    "flower-reply": (replies, check_flower_reply),
    **{f"file:{kind}": file_target(kind) for kind in SEEDS},
}


def run_target(name: str, max_examples: int, derandomize: bool = True, seed: int = 0, targets=None) -> int:
    """Run target ``name`` (of ``targets``, default :data:`TARGETS`) for ``max_examples`` generated inputs;
    returns how many ran (raises on a failure)."""
    strategy, check = (targets or TARGETS)[name]
    count = [0]

    def counted(value):
        count[0] += 1
        check(value)

    test = settings(max_examples=max_examples, derandomize=derandomize, deadline=None, database=None,
                    print_blob=False, suppress_health_check=list(HealthCheck))(given(strategy)(counted))
    if not derandomize:
        from hypothesis import seed as hypothesis_seed

        test = hypothesis_seed(seed)(test)
    test()
    return count[0]
