"""Start-up (issue 46 item 1): the help and the listings import no torch, and their static text is the registries'.

Timings are in ``benchmarks/bench_startup.py`` (``benchmarks/results/startup.json``), not here: a timed test fails
on a loaded machine. These check what is imported, in a fresh interpreter each.
"""

import subprocess
import sys

import pytest

PROBE = """
import sys
from fedleak.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:  # --help exits 0 through argparse
    code = exc.code
heavy = sorted(m for m in ("torch", "pydantic", "numpy", "fedleak.audit", "fedleak.attacks") if m in sys.modules)
print("IMPORTED", code, ",".join(heavy))
"""


def _imported(argv: list) -> tuple[int, list]:
    done = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True, timeout=60)
    line = next(x for x in done.stdout.splitlines() if x.startswith("IMPORTED"))
    _, code, heavy = (line.split(" ") + [""])[:3]
    return int(code), [m for m in heavy.split(",") if m]


@pytest.mark.parametrize("argv", [["--help"], ["attacks"], ["datasets"], ["models"], ["presets"],
                                  ["--threads", "2", "attacks"]])
def test_help_and_listings_import_no_torch(argv):
    code, heavy = _imported(argv)
    assert code == 0 and heavy == [], f"fedleak {' '.join(argv)} imported {heavy}"


def test_import_fedleak_is_lazy_and_its_names_still_resolve():
    probe = ("import sys, fedleak; before = 'torch' in sys.modules; from fedleak import Update, FedleakError; "
             "print(before, 'torch' in sys.modules, callable(fedleak.audit), callable(fedleak.attacks.build), "
             "fedleak.__version__ == fedleak.version.__version__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True", "True", "True", "True"], done.stderr


def test_a_command_builds_only_its_own_flags_but_the_full_parser_has_all():
    from fedleak.cli import build_parser
    from fedleak.commands import COMMANDS

    def flags(parser, name):
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        return set(sub.choices[name]._option_string_actions)

    full = build_parser()
    assert "--out" in flags(full, "simulate") and "--quick" in flags(full, "audit")
    only = build_parser(["--threads", "1", "run", "x.yaml"])
    assert "--first-client" in flags(only, "run") and flags(only, "simulate") == {"-h", "--help", "--debug"}
    assert set(COMMANDS) == set(next(a for a in full._actions
                                     if a.__class__.__name__ == "_SubParsersAction").choices)


def test_the_listings_static_text_is_the_registries():
    from fedleak import listings

    assert listings.stale() == [], "a registry changed: run `python -m fedleak.listings` to rewrite listing_data.py"
