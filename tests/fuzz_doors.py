"""Fuzz targets of the doors ``fuzz_targets.py`` does not reach (issue #30): the dp-audit and convert-gguf
commands and the audit's text-only flags, every public Python function besides ``fedleak.audit``
(``simulate_update``, ``attack_update``, ``client_update``, ``Update.load``, ``LeakageAudit``,
``LeakageRecorder``, ``dp_audit``,
``Protocol``, ``Defense``), GGUF files, candidate-document files and a run's ``config.json`` read back by
``fedleak report``. The contract is the same: a value, or one :class:`~fedleak.FedleakError` line; nothing
written outside the temporary folder; work replaced by the :class:`fuzz_targets.Reached` sentinel.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import numpy as np
import torch
from hypothesis import strategies as st

from fedleak import FedleakError
from fuzz_targets import TEXT_VALUES, Reached, check_cli, mutated, no_work, run_target

# -- more of the command line ---------------------------------------------------------------------
MORE_FLAGS = {
    "dp-audit": ["--canaries", "--canary-scale", "--delta", "--rounds", "--clients", "--samples", "--epochs", "--lr",
                 "--batch-size", "--fault", "--threat", "--model", "--data", "--seed", "--model-seed", "--defense"],
    "audit": ["--dropout", "--lora-dropout", "--membership", "--candidates", "--text-field", "--label-field",
              "--seq-len", "--lora", "--lora-warmup", "--tune", "--tune-clients", "--sweep", "--data",
              "--canary-nodes"],
    "convert-gguf": ["--to"],
}
DOOR_VALUES = TEXT_VALUES + ["text", "off", "shipped", "flower-central-dp:noise=1,clip=1,clients=4",
                             "flower-central-dp:noise=nan,clip=1,clients=4", "noise=0.5", "clip=2", "x.gguf",
                             "final-model", "all-iterates", "lora=4,8", "candidates.txt"]


@st.composite
def more_argv(draw):
    command = draw(st.sampled_from(sorted(MORE_FLAGS)))
    args = [command]
    if command == "convert-gguf":
        args.append(draw(st.sampled_from(["x.gguf", "missing.gguf", "", "smollm2-missing"])))
    if command == "dp-audit" and draw(st.booleans()):
        args += ["--defense", "flower-central-dp:noise=1,clip=1,clients=4"]
    for _ in range(draw(st.integers(0, 4))):
        args += [draw(st.sampled_from(MORE_FLAGS[command])), draw(st.sampled_from(DOOR_VALUES) | st.text(max_size=8))]
    if command in ("audit", "dp-audit") and draw(st.integers(0, 9)):
        args += ["--out", "out"]
    return args


def check_more_cli(args: list) -> None:
    check_cli(args)


# -- the rest of the Python API --------------------------------------------------------------------
_HOSTILE = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=True, allow_infinity=True)
            | st.sampled_from(TEXT_VALUES) | st.text(max_size=6) | st.lists(st.integers(-3, 3), max_size=2)
            | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
FUNCTIONS = {
    "simulate_update": ["samples", "client", "model", "data", "split", "epochs", "lr", "batch_size", "defense",
                        "share_labels", "seed", "model_seed", "algorithm", "static_batches", "save_truth"],
    "attack_update": ["attack", "options", "model", "data", "evaluate"],
    "client_update": ["model", "client", "protocol", "seed", "defense", "metadata"],
    "Update.load": ["directory"],
    "LeakageAudit": ["strategy", "model", "attack", "attack_options", "workers", "protocol", "guard", "blocking"],
    "LeakageRecorder": ["strategy", "model", "protocol", "keys", "attack_options", "clients"],
    "dp_audit": ["defense", "canaries", "canary_scale", "rounds", "clients", "samples", "delta", "threat", "fault",
                 "seed", "model", "lr"],
    "Protocol": ["algorithm", "epochs", "batch_size", "lr", "reshuffle", "train_mode"],
    "Defense": ["kind", "scale", "clip"],
}
api_calls = st.sampled_from(sorted(FUNCTIONS)).flatmap(
    lambda name: st.tuples(st.just(name), st.dictionaries(st.sampled_from(FUNCTIONS[name]), _HOSTILE, max_size=3)))


@contextlib.contextmanager
def _no_training():
    """``client_update`` and the dp-audit's federation stop at the sentinel, as data loading does."""
    import fedleak.fl.client as client_module

    def reached(*args, **kwargs):
        raise Reached("REACHED-WORK")

    saved = client_module.local_training if hasattr(client_module, "local_training") else None
    if saved is not None:
        client_module.local_training = reached
    try:
        yield
    finally:
        if saved is not None:
            client_module.local_training = saved


def _call(name: str, kwargs: dict, tmp: Path):
    import fedleak
    from fedleak import Protocol, Update

    if name == "simulate_update":
        return fedleak.simulate_update(tmp / "out", say=lambda *_: None, **kwargs)
    if name == "attack_update":
        return fedleak.attack_update(tmp / "missing-update", tmp / "out", say=lambda *_: None, **kwargs)
    if name == "client_update":
        args = {"model": torch.nn.Linear(2, 2),
                "client": fedleak.ClientData(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long)),
                "protocol": Protocol(), **kwargs}
        return fedleak.client_update(args.pop("model"), args.pop("client"), args.pop("protocol"), **args)
    if name == "Update.load":
        return Update.load(kwargs.get("directory", tmp / "none"))
    if name == "LeakageAudit":
        from flwr.serverapp.strategy import FedAvg

        from fedleak.integrations.flower import LeakageAudit

        args = {"strategy": FedAvg(), "model": torch.nn.Linear(2, 2), "attack": None, **kwargs}
        return LeakageAudit(args.pop("strategy"), args.pop("model"), tmp / "out", **args)
    if name == "LeakageRecorder":
        from flwr.server.strategy import FedAvg as LegacyFedAvg

        from fedleak.integrations.flower import LeakageRecorder

        args = {"strategy": LegacyFedAvg(), "model": torch.nn.Linear(2, 2), "protocol": Protocol(), **kwargs}
        return LeakageRecorder(args.pop("strategy"), args.pop("model"), args.pop("protocol"), tmp / "out", **args)
    if name == "dp_audit":
        return fedleak.dp_audit(**{"defense": "flower-central-dp:noise=1,clip=1,clients=4", "out": tmp / "out",
                                   "log": lambda *_: None, "plot": False, "rounds": 1, "canaries": 2, **kwargs})
    if name == "Protocol":
        return Protocol(**kwargs)
    return fedleak.Defense(**kwargs)


def check_api_door(call) -> None:
    name, kwargs = call
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            with no_work(), _no_training():
                _call(name, kwargs, tmp)
        except FedleakError as exc:
            assert "\n" not in str(exc), (name, kwargs, str(exc))
        left = [p.name for p in tmp.iterdir()]
        assert set(left) <= {"out"}, (name, kwargs, left)


# -- GGUF files, candidate documents, a run's config.json ---------------------------------------------
def _tiny_gguf() -> bytes:
    from gguf import GGUFWriter

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.gguf"
        writer = GGUFWriter(str(path), "llama")
        writer.add_block_count(1)
        writer.add_tensor("token_embd.weight", np.zeros((4, 2), dtype=np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


FILE_SEEDS = {"gguf": _tiny_gguf(), "candidates": "first document\nsecond document\n".encode(),
              "run-config": b'{"name": "x", "description": "d", "paper": {}, "planned_jobs": 2, "config_hash": "h"}'}


def check_door_file(kind: str, data: bytes) -> None:
    from fedleak.audit.plan.candidates import read_candidates
    from fedleak.models.hf.gguf import check_gguf, convert
    from fedleak.runs.run_report import report_run

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        try:
            if kind == "gguf":
                (tmp / "m.gguf").write_bytes(data)
                check_gguf(tmp / "m.gguf")
                convert(tmp / "m.gguf", tmp / "to")
            elif kind == "candidates":
                (tmp / "c.txt").write_bytes(data)
                assert len(read_candidates(tmp / "c.txt")) >= 2
            else:
                (tmp / "run" / "jobs").mkdir(parents=True)
                (tmp / "run" / "config.json").write_bytes(data)
                report_run(tmp / "run")
        except FedleakError as exc:
            assert "\n" not in str(exc), str(exc)
            assert not (tmp / "to").exists()  # a failed conversion leaves no folder


TARGETS = {
    "cli-more": (more_argv(), check_more_cli),
    "api-doors": (api_calls, check_api_door),
    **{f"file:{kind}": (mutated(seed), (lambda k: lambda data: check_door_file(k, data))(kind))
       for kind, seed in FILE_SEEDS.items()},
}


def run_door(name: str, max_examples: int, **kwargs) -> int:
    """Run door target ``name`` for ``max_examples`` generated inputs (derandomized by default)."""
    return run_target(name, max_examples, targets=TARGETS, **kwargs)


__all__ = ["FILE_SEEDS", "TARGETS", "run_door"]
