"""The ``fedleak`` command.

``audit`` (audit a deployment — by default FedSGD and FedAvg clients on embedded data — under
both threat models, with a verdict and a report; ``fedleak.audit``), ``simulate`` (compute and save
one client's update), ``attack`` (attack a saved update), ``run`` (an experiment file or a paper
preset), ``report`` (HTML report of a run folder), ``inspect`` (check a received model for imprint /
trap-weight signatures), and the listings ``presets``, ``attacks``, ``models``, ``datasets``. Each
command's flags and what it runs are in :mod:`fedleak.commands`; this module parses (building only the named
command's flags, so that ``--help`` and the listings start without torch) and turns outcomes into exit codes.

Exit codes (``docs/errors.md``): 0 success; 2 bad input, one line ``fedleak: error: ...`` naming
the problem (usage errors included); 1 an internal error, one line with ``internal error`` (the
traceback only with ``--debug``); 130 interrupted by SIGINT (Ctrl-C) and 143 by SIGTERM, within 2 s
(:mod:`fedleak.runs.interrupt`), each with one line that says only what is true (``run``: what is
on disk); 141 when the reader of stdout went away (``fedleak presets | head -3``).
``fedleak inspect`` exits 1 when the model is suspicious.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from typing import Optional, Sequence

from .commands import COMMANDS, LISTINGS, add_arguments
from .config.cli_args import Parser, UsageError, int_type, set_threads
from .console import (Terminated, after_interrupt, install_sigterm, one_line, report_line,
                      silence_stdout)
from .errors import FedleakError
from .runs.outdir import contain_caches, prepare_out_dir


# -- parser --------------------------------------------------------------------------------------
def _command_in(argv: Sequence[str]) -> Optional[str]:
    """The command ``argv`` names (after the global flags), or None."""
    tokens = list(argv)
    while tokens and tokens[0].startswith("-"):
        tokens = tokens[2:] if tokens[0] == "--threads" else tokens[1:]
    return tokens[0] if tokens and tokens[0] in COMMANDS else None


def build_parser(argv: Optional[Sequence[str]] = None) -> argparse.ArgumentParser:
    """The ``fedleak`` parser; given ``argv``, only the named command's flags are built (its modules imported).

    ``fedleak --help`` and the listings thus import neither torch nor the audit (issue 46); without
    ``argv`` every command's flags are built.
    """
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
    chosen = _command_in(argv) if argv is not None else None
    for name, (text, _, func) in COMMANDS.items():
        p = sub.add_parser(name, help=text, parents=[common])
        if argv is None or name == chosen:
            add_arguments(name, p)
        p.set_defaults(func=func)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one ``fedleak`` command; returns the exit code (see the module docstring)."""
    parser = build_parser(sys.argv[1:] if argv is None else [str(a) for a in argv])
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        report_line(f"error: {one_line(exc)}")
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    listing = args.command in LISTINGS  # static text: no torch, no --out, no threads; the same error boundary
    torch = None if listing else importlib.import_module("torch")
    threads_before = torch.get_num_threads() if torch else None
    previous_sigterm = None if listing else install_sigterm()
    cache_variables: dict = {}
    try:
        if not listing and getattr(args, "out", None) is not None:
            prepare_out_dir(args.out)
            cache_variables = contain_caches(args.out)  # matplotlib's font cache, torch's compile cache: in --out
        if not listing:
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
        if torch is not None:
            torch.set_num_threads(threads_before)
        for variable in cache_variables:  # main() called in-process (tests, notebooks): leave the env as found
            os.environ.pop(variable, None)


if __name__ == "__main__":
    sys.exit(main())
