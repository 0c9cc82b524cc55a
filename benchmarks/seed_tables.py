"""The seed tables, finished across sessions: one resumable background run whose job files are committed.

Every remaining paper table (issue #34) is a ``fedleak run --preset`` whose output folder lives *in the
repository*, ``benchmarks/results/runs/<preset>/`` (job files ``jobs/<setting>/<variant>/<client>.json``,
small JSON; pictures are ignored by git). ``fedleak run`` reuses a job file only if it is complete and
carries the hash of the job as configured now, so a later session that starts this script again
resumes exactly where the last one stopped: commit the new job files before a session ends.

**The paper's clients.** A table is set beside the paper's figure only over clients the paper would have picked:
Dimitrov et al. attack writers holding at least N = E·m·batches images, truncated to exactly N (N is the
preset's ``samples_per_client``: 50 for the E10-m5 FEMNIST tables; CIFAR-100, AGIC's and AWA's partitions give
every client exactly N). The seeded rule: walk the preset's own client order (writers shuffled with the preset's
data seed) and keep, in that order, the clients whose N images are all there (a writer with fewer is truncated
to fewer and skipped). ``run`` attacks those by their absolute index (``--first-client i --clients 1``), so a
job's identity, and every finished job file, is the same as before the rule; jobs that earlier sessions ran on
other clients (e.g. ``f2235_81``, 4 images) are kept and shown apart in the docs, never averaged in.

The plan is walked breadth first: every table gets its first client before any table gets its second,
so each table fills evenly however long a session lasts. Each step is one ``fedleak run`` under
``nice -n 19`` on one torch thread (keep the other core for the test suite).

    python benchmarks/seed_tables.py run               # resume everything (hours; Ctrl-C is safe)
    python benchmarks/seed_tables.py status            # jobs done of planned, per table
    python benchmarks/seed_tables.py tables            # rebuild docs/seed-tables.md from the job files

``tables`` writes mean ± std over clients beside the paper's figure, the client count and what is
still to run; a table with no finished job says so instead of a number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "runs"
DOC = ROOT / "docs" / "seed-tables.md"
DATA = ROOT.parent / "shared" / "data"
ROOTS = {"femnist": DATA / "femnist_leaf" / "leaf-torch_niid_sf0.05", "cifar100": DATA / "cifar100",
         "cifar10": DATA / "cifar10"}


@dataclass(frozen=True)
class Entry:
    """One table still to fill: a preset, the subset of its settings and variants, the client target."""

    preset: str
    clients: int
    settings: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    note: str = ""
    #: one job runs longer than a working session (AGIC III's DLG-Adam baseline: ~16 h on one nice core), and a
    #: job restarts from its first iteration: run after every other table's clients, never in front of them
    deferred: bool = False


PLAN = (
    Entry("dimitrov-table8-femnist", 5, ("known-random", "known-static", "unknown-static"), ("ours-prior", "shared"),
          "known batch labels and static batches"),
    Entry("dimitrov-table6-femnist", 5, ("gaussian-0.01", "gaussian-0.03", "laplacian-0.01", "laplacian-0.02",
                                         "pruning-0.2", "pruning-0.5"), ("ours-prior", "shared"), "defenses"),
    Entry("dimitrov-table4-femnist", 5, (), ("l1_max", "l1_mean_conv", "l1_max_conv", "l2_mean_conv", "l2_max_conv"),
          "the epoch priors g × D_inv"),
    Entry("dimitrov-table1-cifar100", 10, ("E10-m5",), ("ours-prior", "shared", "fedsgd"), "CIFAR-100 on 10 clients"),
    Entry("agic-table3", 5, (), (), "AGIC Table III", deferred=True),
    Entry("awa-table4", 5, ("case1", "case2", "case3"), ("agic", "awa-bo8"),
          "AWA cases 1-3 at the Bayesian-optimization budget that fits a background session (8 trials of 250 "
          "iterations, then 1,000; the paper's 50 trials of 1,000, about 51,000 iterations, showed an ETA over 5 h at "
          "nice 19, and a job restarts from its first iteration: it never finished)"),
    Entry("dimitrov-table1-femnist", 10, ("E10-m1",), ("ours-prior", "ours-no-prior", "shared", "fedsgd-epoch", "fedsgd"),
          "the E10-m1 column (500 local steps; run on a lent GPU by `seed_tables.py gpu`)"),
)
GPU_PLAN = PLAN[-1:]  # what `gpu` runs when a session is lent an accelerator


def preset(name: str) -> dict:
    return yaml.safe_load((ROOT / "src" / "fedleak" / "presets" / f"{name}.yaml").read_text())


def planned(entry: Entry) -> tuple[list[str], list[str]]:
    spec = preset(entry.preset)
    settings = list(entry.settings) or [s["name"] for s in spec.get("settings") or []] or ["default"]
    variants = list(entry.variants) or list(spec.get("variants") or {})
    return settings, variants


def target_n(entry: Entry) -> int:
    """N, the number of images a paper's client holds (the preset's ``samples_per_client``)."""
    return int(preset(entry.preset)["data"]["samples_per_client"])


def paper_indices(entry: Entry) -> list[int]:
    """The absolute client indices of the paper's clients (module docstring), the first ``entry.clients`` of
    them, cached in ``runs/<preset>/paper-clients.json`` with the rule that chose them."""
    cache = RUNS / entry.preset / "paper-clients.json"
    spec, n = preset(entry.preset), target_n(entry)
    if cache.exists():
        known = json.loads(cache.read_text())
        if known.get("n") == n and len(known.get("indices", [])) >= entry.clients:
            return known["indices"][: entry.clients]
    import fedleak.data

    data = spec["data"]
    _, clients = fedleak.data.load(data["dataset"], root=ROOTS.get(data["dataset"]), num_clients=10_000,
                                   samples_per_client=n, seed=data.get("seed", 0), split=data.get("split", "train"),
                                   **(data.get("options") or {}))
    chosen = [(i, c.client_id) for i, c in enumerate(clients) if len(c.labels) == n][: entry.clients]
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"rule": f"the preset's seeded client order, clients holding all N = {n} images",
                                 "n": n, "indices": [i for i, _ in chosen], "clients": [c for _, c in chosen]},
                                indent=1))
    return [i for i, _ in chosen]


def finished(entry: Entry) -> list[dict]:
    rows = []
    for path in sorted((RUNS / entry.preset).glob("jobs/*/*/*.json")):
        try:
            row = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(row, dict) and "job_hash" in row and "psnr" in row:
            rows.append(row)
    return rows


def command(entry: Entry, clients: int) -> list[str]:
    spec = preset(entry.preset)
    cmd = [sys.executable, "-m", "fedleak.cli", "run", "--preset", entry.preset, "--clients", str(clients),
           "--out", str(RUNS / entry.preset), "--no-progress"]
    root = ROOTS.get(spec["data"]["dataset"])
    if root is not None:
        cmd += ["--data-root", str(root)]
    if entry.settings:
        cmd += ["--settings", ",".join(entry.settings)]
    if entry.variants:
        cmd += ["--variants", ",".join(entry.variants)]
    return cmd


def paper_rows(entry: Entry, rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """``rows`` split into the paper's clients (the seeded rule's first ``entry.clients`` clients holding all N
    images) and the others (kept, shown apart)."""
    n, chosen = target_n(entry), set(paper_indices(entry))
    mine = [r for r in rows if r.get("num_samples") == n and r.get("client_index") in chosen]
    return mine, [r for r in rows if r not in mine]


def _call(cmd: list, **kwargs) -> int:
    """``subprocess.call`` whose child stops with this runner: a SIGTERM to the runner is passed on to the child's
    ``fedleak run`` (which keeps its finished job files and exits), so that no orphan goes on computing and writing
    job files after the runner was stopped (it did: the child of a stopped runner finished its job 20 min later)."""
    child = subprocess.Popen(cmd, **kwargs)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))
    try:
        return child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    target = max(e.clients for e in PLAN)
    # breadth first: client k of every table before client k + 1; tables whose one job outlasts a session last
    schedule = [(k, e) for deferred in (False, True) for k in range(1, target + 1) for e in PLAN
                if e.deferred == deferred]
    for k, entry in schedule:
        if k > entry.clients or entry in GPU_PLAN or (args.only and entry.preset not in args.only):
            continue
        index = paper_indices(entry)
        if k > len(index):
            continue  # the dataset has fewer paper clients than the target
        cmd = [*command(entry, 1), "--first-client", str(index[k - 1])]
        print(f"[seed-tables] {entry.preset}: paper client {k} of {entry.clients} (index {index[k - 1]})", flush=True)
        code = _call(["nice", "-n", "19", *cmd], env=env, cwd=ROOT)
        if code == 130 or code < 0:
            return 130
        if code != 0:
            print(f"[seed-tables] {entry.preset} exited {code}; going on with the next table", flush=True)
    return 0


def gpu(args) -> int:
    """Run the GPU plan's jobs as parallel one-client ``fedleak run`` processes on ``--device``, each into its
    own folder (a run folder is locked by its process), then merge the finished job files into
    ``runs/<preset>/jobs/`` and record the device in ``runs/<preset>/devices.json``."""
    import shutil
    import time
    from concurrent.futures import ThreadPoolExecutor

    import torch

    device = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    scratch = Path(args.scratch)
    deadline = time.monotonic() + args.seconds
    todo = []
    for entry in GPU_PLAN:
        settings, variants = planned(entry)
        done = {(r.get("setting"), r.get("variant"), r.get("client_index")) for r in finished(entry)}
        for client in paper_indices(entry):
            for setting in settings:
                for variant in variants:
                    if (setting, variant, client) not in done:
                        todo.append((entry, setting, variant, client))

    def one(job) -> str:
        entry, setting, variant, client = job
        if time.monotonic() > deadline:
            return f"{variant}/{client}: skipped (deadline)"
        folder = scratch / entry.preset / f"{setting}-{variant}-{client}"
        cmd = [*command(entry, 1), "--first-client", str(client), "--settings", setting, "--variants", variant,
               "--device", args.device]
        cmd[cmd.index("--out") + 1] = str(folder)
        if args.data_root:
            cmd[cmd.index("--data-root") + 1] = args.data_root
        started = time.monotonic()
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / f"{folder.name}.log", "w") as log:  # beside the folder: why a job failed
            code = _call(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        merged = 0
        for path in folder.glob("jobs/*/*/*.json"):
            target = RUNS / entry.preset / path.relative_to(folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            merged += 1
        line = f"{entry.preset} {setting}/{variant}/client {client}: exit {code}, {merged} job(s), " \
               f"{time.monotonic() - started:.0f} s"
        print(f"[seed-tables gpu] {line}", flush=True)
        return line

    with ThreadPoolExecutor(args.workers) as pool:
        lines = list(pool.map(one, todo))
    for entry in GPU_PLAN:
        record = RUNS / entry.preset / "devices.json"
        known = json.loads(record.read_text()) if record.exists() else {}
        for path in sorted((RUNS / entry.preset).glob("jobs/*/*/*.json")):
            known.setdefault(str(path.relative_to(RUNS / entry.preset)), device)
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(known, indent=1, sort_keys=True))
    print("\n".join(lines))
    return 0


def status(args) -> int:
    for entry in PLAN:
        settings, variants = planned(entry)
        total = entry.clients * len(settings) * len(variants)
        paper, other = paper_rows(entry, finished(entry))
        print(f"{entry.preset}: {len(paper)} of {total} jobs on the paper's clients (+{len(other)} on other clients)")
    return 0


def _cell(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}"


def _paper(spec: dict, setting: str, variant: str) -> dict:
    paper = spec.get("paper") or {}
    return (paper.get(setting) or {}).get(variant) or paper.get(variant) or {}


def _table(spec: dict, rows: list[dict], settings: list[str], variants: list[str], target: int | None) -> list[str]:
    head = "paper clients done" if target else "clients (samples)"
    lines = [f"| setting | variant | {head} | Rec % | PSNR (dB) | paper Rec % | paper PSNR |",
             "|---|---|---|--:|--:|--:|--:|"]
    for setting in settings:
        for variant in variants:
            cell = [r for r in rows if r.get("setting") == setting and r.get("variant") == variant]
            if not target and not cell:
                continue
            rec = [r["rec_percent"] for r in cell if isinstance(r.get("rec_percent"), (int, float))]
            psnr = [r["psnr"] for r in cell if isinstance(r.get("psnr"), (int, float))]
            paper = _paper(spec, setting, variant)
            who = ", ".join(f"{r.get('client')} ({r.get('num_samples')})" for r in cell)
            count = f"{len(cell)} of {target}" if target else f"{len(cell)}: {who}"
            lines.append(f"| {setting} | {variant} | {count} | {_cell(rec)} | {_cell(psnr)} | "
                         f"{paper.get('rec_percent', '—')} | {paper.get('psnr', '—')} |")
    return lines + [""]


def tables(args) -> int:
    lines = ["# The seed tables (issue #34, #48)", "",
             "Rebuilt by `python benchmarks/seed_tables.py tables` from the job files under",
             "`benchmarks/results/runs/<preset>/jobs/` (one per client, setting and variant; mean ± sample std over",
             "clients). `python benchmarks/seed_tables.py run` resumes the rest in the background.", "",
             "**Clients as the paper selects them.** Each table averages only the paper's clients: those holding",
             "all N images of the paper's setting (N = E·m·batches = 50 for Dimitrov et al.'s E10-m5 tables: writers",
             "with at least 50 images, truncated to exactly 50; CIFAR-100, AGIC's and AWA's partitions give every client",
             "its N). They are the first such clients in the preset's seeded client order (`paper-clients.json` beside",
             "each run lists them). Jobs that earlier sessions ran on other clients are listed apart under each table",
             "and never averaged in.", ""]
    done_all = total_all = 0
    for entry in PLAN:
        spec = preset(entry.preset)
        paper, other = paper_rows(entry, finished(entry))
        settings, variants = planned(entry)
        total = entry.clients * len(settings) * len(variants)
        done_all, total_all = done_all + len(paper), total_all + total
        lines += [f"## {spec.get('description', entry.preset)}", "",
                  f"{entry.note}; target {entry.clients} clients of N = {target_n(entry)} images; {len(paper)} of "
                  f"{total} jobs done on the paper's clients.", ""]
        lines += _table(spec, paper, settings, variants, entry.clients)
        clients = {r.get("client") for r in paper}
        if 0 < len(clients) < 3:
            lines += [f"Only {len(clients)} of the paper's clients done: no spread yet, so no difference from the "
                      "paper's figure is read as real (or given a cause) before at least 3 clients per cell.", ""]
        if other:
            lines += [f"Jobs on other clients (fewer than N = {target_n(entry)} images; not the paper's setting, not "
                      "averaged above):", ""]
            lines += _table(spec, other, settings, variants, None)
    lines.insert(12, f"\n**{done_all} of {total_all} planned jobs are done on the paper's clients.**\n")
    DOC.write_text("\n".join(lines))
    print(f"{DOC.relative_to(ROOT)}: {done_all} of {total_all} jobs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("run")
    p.add_argument("--only", nargs="*", help="preset names to run (default: the whole plan)")
    p.set_defaults(func=run)
    g = sub.add_parser("gpu")
    g.add_argument("--device", default="cuda")
    g.add_argument("--workers", type=int, default=8, help="parallel one-client runs sharing the device")
    g.add_argument("--seconds", type=float, default=1500, help="start no new job after this many seconds")
    g.add_argument("--scratch", default="/tmp/seed-gpu", help="per-job run folders (merged into runs/)")
    g.add_argument("--data-root", default=None, help="dataset folder where ../shared/data is not beside the repo")
    g.set_defaults(func=gpu)
    sub.add_parser("status").set_defaults(func=status)
    sub.add_parser("tables").set_defaults(func=tables)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
