"""Tabular leakage (issue 44): TabLeak on Adult and German Credit, and an exact attack proving a FedSGD batch.

Setting of TabLeak's reference (research notes §2): the untrained d-100-100-2 MLP (``tabular-mlp``, PyTorch's
default init, ``--model-seed``), batches of B records drawn from the training split (client ``k`` of an IID
split, seed ``--seed``; ``--batches`` clients per job, mean ± sd in the docs), known labels, FedSGD at B = 8, 32,
128 on Adult and German; FedAvg as the reference runs it (``run_fed_avg_attacks.py``): 32 records, lr 0.01, no
shuffle, E local epochs of local batch m — cells (E 1, m 32), (E 1, m 8) and (E 5, m 32) on both datasets (the
reference's Table 2: 1 and 4 local batches, 1 and 5 epochs), λ = 0.01 fixed (the reference picks λ per cell by an
oracle). Attacks: ``tableak`` (30 restarts FedSGD / 15 FedAvg, 1500 iterations: the reference's budget, restarts
batched into one tensor), ``tableak-no-pooling`` (one restart) and ``inverting-gradients-tabular`` (one restart, no
prior) at B = 32; every row has the random and prior (marginal) baselines beside it (:mod:`fedleak.metrics.tabular`),
the whole-record exact-match rate, and the entropy-selected quartiles. ``spear`` and ``analytic-fc`` on a FedSGD
batch of 4 and 8: proved or not. The malicious server's ``imprint`` (128 bins, distribution fitted on 256 records of
the test split) at B = 32, and its certified slabs (``vgia``, 64 / 128 hyperplanes, offsets from the same 256
records) at B = 8 and 32: records certified, bit-exact, false certificates. The Flower tabular demo timed
(``flower-tabular-demo``). Those rows (and the tabular Flower app's runs of ``bench_flower_app.py``) go to
``docs/tabular-flower.md``, the rest to ``docs/tabular.md``.

Every job is one line of ``benchmarks/results/tabular.json`` (rewritten after each job; jobs already there are
skipped, so a stopped run resumes), with CPU seconds, wall seconds, threads, load average and device.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_tabular.py [--jobs NAME,...] [--batches 3]
    python benchmarks/bench_tabular.py --doc     # the table of docs/tabular.md from the results file
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from fedleak.attacks import build as build_attack
from fedleak.data.tabular import load
from fedleak.fl.client import client_update
from fedleak.metrics.tabular import evaluate
from fedleak.models import build
from fedleak.types import Protocol

OUT = Path(__file__).resolve().parent / "results" / "tabular.json"  # the run the docs quote
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402

#: name -> (dataset, algorithm, records B, attack, options)
JOBS = {
    "exact-spear-adult-b4": ("adult", "fedsgd", 4, "spear", {}),
    "exact-analytic-adult-b4": ("adult", "fedsgd", 4, "analytic-fc", {}),
    "exact-spear-adult-b8": ("adult", "fedsgd", 8, "spear", {}),
    "tableak-adult-b8": ("adult", "fedsgd", 8, "tableak", {}),
    "tableak-german-b8": ("german", "fedsgd", 8, "tableak", {}),
    "tableak-adult-b32": ("adult", "fedsgd", 32, "tableak", {}),
    "no-pooling-adult-b32": ("adult", "fedsgd", 32, "tableak-no-pooling", {}),
    "ig-adult-b32": ("adult", "fedsgd", 32, "inverting-gradients-tabular", {}),
    "tableak-german-b32": ("german", "fedsgd", 32, "tableak", {}),
    "no-pooling-german-b32": ("german", "fedsgd", 32, "tableak-no-pooling", {}),
    "ig-german-b32": ("german", "fedsgd", 32, "inverting-gradients-tabular", {}),
    "tableak-adult-b128": ("adult", "fedsgd", 128, "tableak", {}),
    "tableak-german-b128": ("german", "fedsgd", 128, "tableak", {}),
    # FedAvg as the reference runs it (research notes §2): 32 records, lr 0.01, E epochs, local batch m, no shuffle
    "tableak-fedavg-adult-b32": ("adult", "fedavg", 32, "tableak", {}),
    "ig-fedavg-adult-b32": ("adult", "fedavg", 32, "inverting-gradients-tabular", {}),
    "tableak-fedavg-german-b32": ("german", "fedavg", 32, "tableak", {}),
    "tableak-fedavg-adult-b32-e1-m8": ("adult", "fedavg", 32, "tableak", {"local_batch": 8}),
    "tableak-fedavg-adult-b32-e5-m32": ("adult", "fedavg", 32, "tableak", {"epochs": 5}),
    "tableak-fedavg-german-b32-e1-m8": ("german", "fedavg", 32, "tableak", {"local_batch": 8}),
    "tableak-fedavg-german-b32-e5-m32": ("german", "fedavg", 32, "tableak", {"epochs": 5}),
    "imprint-adult-b32": ("adult", "fedsgd", 32, "imprint", {}),
    "audit-adult": ("adult", "audit", None, "fedleak audit --data adult", {}),
    # the malicious server's certified slabs (VGIA-style; hyperplane offsets from 256 records of the test split)
    "vgia-adult-b8": ("adult", "fedsgd", 8, "vgia", {"slabs": 64}),
    "vgia-adult-b32": ("adult", "fedsgd", 32, "vgia", {"slabs": 128}),
    "vgia-german-b32": ("german", "fedsgd", 32, "vgia", {"slabs": 128}),
    # the Flower tabular demo (python -m fedleak.integrations.flower.demo --task tabular): 2 nodes x 4 records, 2 rounds
    "flower-tabular-demo": ("adult", "flower", 4, "auto", {"clients": 4, "rounds": 3}),
}
#: jobs the docs show apart (docs/tabular-flower.md), not in docs/tabular.md's table
APART = ("vgia-", "flower-")


def run_audit(name: str) -> dict:
    """``fedleak audit --data adult`` as the README's first screen runs it: CPU and wall time, the verdicts."""
    import tempfile

    import fedleak

    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = fedleak.audit(data="adult", out=out, progress=None, log=None)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"job": name, "batch": 0, "dataset": "adult", "command": "fedleak audit --data adult",
            "verdicts": result["verdicts"], "overall": result["overall"]["line"],
            "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "threads": torch.get_num_threads(),
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average": [round(v, 2) for v in os.getloadavg()], "device": "cpu", "torch": torch.__version__}


def run_flower(name: str, batch: int, seed: int) -> dict:
    """The Flower tabular demo, timed: every reply's attack, whether it was proved, its records whole."""
    import tempfile

    from fedleak.integrations.flower.demo import run_demo
    from fedleak.integrations.flower.tabular_demo import DTYPE

    dataset, _, records, _, options = JOBS[name]
    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        audit = run_demo(out, task="tabular", model_name=dataset, samples=records, seed=seed + batch, blocking=True,
                         **options)
        replies = [{k: r.get(k) for k in ("round", "client", "attack", "certain", "exact_match_rate", "accuracy",
                                          "prior_accuracy")} | {"leakage": r["leakage"]["level"]}
                   for r in audit.records]
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"job": name, "batch": batch, "dataset": dataset, "records": records, "seed": seed + batch, **options,
            "command": f"python -m fedleak.integrations.flower.demo --task tabular --clients {options['clients']} "
                       f"--rounds {options['rounds']} --samples {records} --out DIR",
            "replies": replies, "proved": sum(bool(r["certain"]) for r in replies), "dtype": str(DTYPE).split(".")[-1],
            "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "threads": torch.get_num_threads(),
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average": [round(v, 2) for v in os.getloadavg()], "device": "cpu", "torch": torch.__version__}


#: relative difference of a continuous cell a certificate may carry: the float32 update's precision (Adult's
#: fnlwgt, ~3e5, comes back ±2 from ΔW/Δb)
PRECISION = 1e-4


def certificates(schema, rec, truth, certified: list) -> dict:
    """How the certified records compare with the client's: ``false_certificates`` (a categorical cell wrong, or a
    continuous one off by more than :data:`PRECISION` relative: not the client's record) and ``bit_exact`` (the
    same encoding, every bit)."""
    false, exact = 0, 0
    for i in (i for i, ok in enumerate(certified) if ok):
        guess = rec.inputs[i].reshape(1, -1)
        j = int((truth - guess).abs().max(dim=1).values.argmin())
        exact += bool((truth[j] == guess[0]).all())
        a, b = schema.decode(guess), schema.decode(truth[j:j + 1])
        false += any(a[c.name][0] != b[c.name][0] if c.kind == "categorical" else
                     abs(a[c.name][0] - b[c.name][0]) > PRECISION * max(1.0, abs(b[c.name][0]))
                     for c in schema.columns)
    return {"false_certificates": false, "bit_exact": exact}


def run_job(name: str, batch: int, seed: int, model_seed: int) -> dict:
    if name == "audit-adult":
        return run_audit(name)
    if name.startswith("flower-"):
        return run_flower(name, batch, seed)
    dataset, algorithm, records, attack_name, options = JOBS[name]
    options = dict(options)
    epochs, local_batch = options.pop("epochs", 1), options.pop("local_batch", 32)
    spec, clients = load(dataset, num_clients=batch + 1, samples_per_client=records, seed=seed)
    data = clients[batch]
    model = build("tabular-mlp", spec, seed=model_seed)
    if attack_name == "vgia":  # the malicious server's hyperplanes, offsets from 256 records of the test split
        from fedleak.attacks.tabular.vgia import ship
        from fedleak.types import ClientData

        _, extra = load(dataset, num_clients=1, samples_per_client=256, seed=seed, split="test")
        model = ship(model, spec, extra[-1].inputs, slabs=options.pop("slabs"), seed=model_seed)
        data = ClientData(data.inputs.reshape(records, *spec.shape), data.labels, data.client_id)
    if attack_name == "imprint":  # the malicious server: 128 bins fitted on 256 records of the test split
        from fedleak.modality.tabular.execute import surrogate_stats
        from fedleak.types import ClientData

        _, extra = load(dataset, num_clients=1, samples_per_client=256, seed=seed, split="test")
        model = build("imprint", spec, seed=model_seed, base="tabular-mlp", bins=128,
                      **surrogate_stats(extra[-1].inputs))
        data = ClientData(data.inputs.reshape(records, *spec.shape), data.labels, data.client_id)
    protocol = Protocol("fedsgd", 1, records, 0.01) if algorithm == "fedsgd" else \
        Protocol("fedavg", epochs, local_batch, 0.01, reshuffle=False)
    update = client_update(model, data, protocol, seed=seed, metadata={"labels": data.labels.tolist()})
    attack = build_attack(attack_name, seed=seed, **options)
    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    rec = attack.reconstruct(update, model, spec)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    entropy = torch.tensor(rec.extras["entropy"]) if "entropy" in rec.extras else None
    scores = evaluate(spec.schema, rec.inputs.reshape(rec.inputs.shape[0], -1), data.inputs.reshape(records, -1),
                      entropy=entropy,
                      seed=seed)
    for key in ("cells", "matched"):
        scores.pop(key)
    extras = rec.extras
    row = {"job": name, "batch": batch, "dataset": dataset, "algorithm": algorithm, "records": records,
           "attack": attack_name, "labels": "known", "seed": seed, "model_seed": model_seed, **scores,
           **({"epochs": epochs, "local_batch": local_batch} if algorithm == "fedavg" else {}),
           "restarts": extras.get("restarts"), "iterations": getattr(attack.options, "iterations", None),
           "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "threads": torch.get_num_threads(),
           "load_average": [round(v, 2) for v in (load_before, os.getloadavg())[1]],
           "load_average_before": [round(v, 2) for v in load_before], "device": "cpu",
           "machine": platform.machine(), "torch": torch.__version__}
    if "certified" in extras:  # vgia: each certified record against the client's, cell for cell
        row.update({"slabs": extras["exactness"]["slabs"], "occupied_slabs": extras["exactness"]["occupied_slabs"],
                    "certified": extras["certified_count"],
                    **certificates(spec.schema, rec, data.inputs.reshape(records, -1), extras["certified"])})
    if "certain" in extras:
        verification = (extras.get("exactness") or {}).get("verification") or {}
        row["proved"] = bool(extras.get("certain")) and bool(verification.get("matches"))
        row["relative_error"] = verification.get("relative_error")
        row["reason"] = (extras.get("exactness") or {}).get("reason")
    return row


DOC = Path(__file__).resolve().parents[1] / "docs" / "tabular.md"
MARK = ("<!-- regen:bench-tabular -->", "<!-- /regen:bench-tabular -->")


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _range(values: list) -> str:
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return low if low == high else f"{low}–{high}"


def table(rows: list[dict]) -> str:
    """The results as a markdown table (means over the batches of each job)."""
    lines = ["| data | protocol | B | attack | restarts × iterations | batches | cells right (%, mean ± sd) | "
             "categorical | continuous | records whole (EMR, %) | random (%) | prior (%) | "
             "low-entropy 25 % cat / cont | proved | CPU s (mean) | load avg |",
             "|---|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|"]
    for name in JOBS:
        group = [r for r in rows if r["job"] == name]
        if not group or "accuracy" not in group[0] or name.startswith(APART):
            continue

        def values(key, sub=None):
            found = [(r[key][sub] if sub else r[key]) for r in group]
            return [v for v in found if v is not None]

        def mean(key, sub=None):
            found = values(key, sub)
            return sum(found) / len(found) if found else None

        def spread(key, sub=None):  # mean ± sd over the batches (sd only from 2 batches on)
            found = values(key, sub)
            if len(found) < 2:
                return _pct(mean(key, sub))
            return f"{100 * statistics.mean(found):.1f} ± {100 * statistics.stdev(found):.1f}"

        r0 = group[0]
        low = (f"{_pct(mean('categorical_low_entropy_accuracy'))} / {_pct(mean('continuous_low_entropy_accuracy'))}"
               if "categorical_low_entropy_accuracy" in r0 else "-")
        proved = ("yes" if all(r.get("proved") for r in group) else "no") if "proved" in r0 else "-"
        protocol = (f"fedavg E {r0.get('epochs', 1)}, m {r0.get('local_batch', 32)}" if r0["algorithm"] == "fedavg"
                    else r0["algorithm"])
        budget = f"{r0['restarts']} × {r0['iterations']}" if r0.get("iterations") else "-"
        loads = [r["load_average"][0] for r in group]
        lines.append(f"| {r0['dataset']} | {protocol} | {r0['records']} | {r0['attack']} | {budget} | {len(group)} | "
                     f"{spread('accuracy')} | {spread('categorical_accuracy')} | "
                     f"{spread('continuous_accuracy')} | {spread('exact_match_rate')} | "
                     f"{_pct(mean('random', 'accuracy'))} | {_pct(mean('prior', 'accuracy'))} | {low} | {proved} | "
                     f"{mean('cpu_seconds'):.1f} | {_range(loads)} |")
    audits = [r for r in rows if r["job"] == "audit-adult"]
    read = reading(rows)
    if read:
        lines += ["", read]
    for r in audits:
        lines.append("")
        lines.append(f"`{r['command']}` (FedSGD 4 records, FedAvg 10 records, malicious: imprint and VGIA "
                     f"hyperplanes; the full budgets): "
                     f"{r['cpu_seconds']:.0f} CPU-s on one thread ({r['wall_seconds']:.0f} s wall at load average "
                     f"{r['load_average'][0]:.1f}); verdicts {', '.join(f'{k} {v}' for k, v in r['verdicts'].items())}.")
    return "\n".join(lines)


def _mean(rows: list[dict], job: str, key: str):
    found = [r[key] for r in rows if r["job"] == job and r.get(key) is not None]
    return statistics.mean(found) if found else None


def reading(rows: list[dict]) -> str:
    """The table read against the TabLeak abstracts (the paper's tables could not be read here) and across the
    FedAvg cells: every number from the rows above (means over their batches)."""
    m = lambda job, key="accuracy": _mean(rows, job, key)  # noqa: E731
    parts = []
    tab, ig = m("tableak-adult-b32"), m("ig-adult-b32")
    if tab is not None and ig is not None:
        gap = 100 * (tab - ig)
        parts.append(f"On Adult at B = 32 TabLeak is {gap:.1f} points above Inverting Gradients ({_pct(tab)} vs "
                     f"{_pct(ig)} %; the arXiv v1 abstract: about +10) — "
                     f"{'in agreement' if 5 <= gap <= 15 else 'a disagreement'}.")
    low = {d: (m(f"tableak-{d}-b128", "categorical_low_entropy_accuracy"),
               m(f"tableak-{d}-b128", "continuous_low_entropy_accuracy")) for d in ("adult", "german")}
    if all(v is not None for pair in low.values() for v in pair):
        below = [f"{d.capitalize()}'s {kind} cells" for d, pair in low.items() for kind, v in zip(("categorical", "continuous"), pair)
                 if v <= 0.9]
        parts.append(f"At B = 128 the lowest-entropy quarter of the cells is {_pct(low['adult'][0])} % (categorical) "
                     f"/ {_pct(low['adult'][1])} % (continuous) right on Adult and {_pct(low['german'][0])} / "
                     f"{_pct(low['german'][1])} % on German — the ICML abstract's \"> 90 % on large subsets at "
                     f"B = 128\" " + (f"holds except for {' and '.join(below)}." if below else "holds."))
    cells = [("b32", "E 1, m 32"), ("b32-e1-m8", "E 1, m 8"), ("b32-e5-m32", "E 5, m 32")]
    for d, prior in (("adult", "tableak-adult-b32"), ("german", "tableak-german-b32")):
        accs = [m(f"tableak-fedavg-{d}-{c}") for c, _ in cells]
        if any(a is None for a in accs):
            continue
        emr = [m(f"tableak-fedavg-{d}-{c}", "exact_match_rate") for c, _ in cells]
        cpu = [m(f"tableak-fedavg-{d}-{c}", "cpu_seconds") for c, _ in cells]
        base = _mean([{**r, "p": r["prior"]["accuracy"]} for r in rows if r["job"] == prior], prior, "p")
        parts.append(f"FedAvg on {d.capitalize()} ({'; '.join(label for _, label in cells)}): "
                     f"{' → '.join(_pct(a) for a in accs)} % cells right (prior baseline {_pct(base)} %), whole "
                     f"records {' → '.join(_pct(e) for e in emr)} %, {' → '.join(f'{c:.1f}' for c in cpu)} CPU-s a "
                     f"batch.")
    return " ".join(parts)


DOC_APART = DOC.with_name("tabular-flower.md")


def apart(rows: list[dict]) -> str:
    """The VGIA rows (certified records, false certificates) and the Flower demo's timing, for docs/tabular-flower.md."""
    lines = ["| data | B | slabs | batches | occupied slabs | certified records | bit-exact | false certificates | "
             "batch proved | records whole (EMR, %) | CPU s (mean) | load avg |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for name in (n for n in JOBS if n.startswith("vgia-")):
        group = [r for r in rows if r["job"] == name]
        if not group:
            continue
        r0, n = group[0], len(group)
        lines.append(f"| {r0['dataset']} | {r0['records']} | {r0['slabs']} | {n} | "
                     f"{sum(r['occupied_slabs'] for r in group) / n:.1f} | "
                     f"{sum(r['certified'] for r in group)} of {sum(r['records'] for r in group)} | "
                     f"{sum(r['bit_exact'] for r in group)} | {sum(r['false_certificates'] for r in group)} | {sum(bool(r['proved']) for r in group)} of {n} | "
                     f"{100 * sum(r['exact_match_rate'] for r in group) / n:.1f} | "
                     f"{sum(r['cpu_seconds'] for r in group) / n:.2f} | "
                     f"{_range([r['load_average'][0] for r in group])} |")
    for r in (r for r in rows if r["job"].startswith("flower-")):
        lines += ["", f"`{r['command']}`: {len(r['replies'])} replies attacked, {r['proved']} proved "
                      f"({', '.join(sorted({x['attack'] for x in r['replies']}))}; records whole "
                      f"{_range([100 * x['exact_match_rate'] for x in r['replies']])} %), {r['cpu_seconds']:.0f} CPU-s "
                      f"({r['wall_seconds']:.0f} s wall at load average {r['load_average'][0]:.1f}, seed {r['seed']}, "
                      f"{r.get('dtype', 'float64')})."]
    return "\n".join(lines)


def app_lines(rows: list[dict]) -> str:
    """``fedleak audit --flower-app examples/flower-tabular-app`` as measured (benchmarks/bench_flower_app.py)."""
    return "\n\n".join(app_line(json.loads(path.read_text())) for path in APP_RESULTS if path.is_file())


#: the tabular Flower app audited by its README's command (``bench_flower_app.py --app examples/flower-tabular-app``)
APP_RESULTS = [OUT.with_name("flower_app_tabular.json"), OUT.with_name("flower_app_tabular_fedavg.json")]


def app_line(r: dict) -> str:
    """One sentence of docs/tabular-flower.md from a ``bench_flower_app.py`` result of the tabular app."""
    tm = r["threat_models"]["honest-but-curious"]
    a = tm["attacks"][tm["strongest"]]
    cells = (f", cells right {_pct(a['accuracy'])} % (prior baseline {_pct(a['prior_accuracy'])} %, random "
             f"{_pct(a['random_accuracy'])} %)" if a.get("accuracy") is not None else "")
    loads = f"{r['load_average_before'][0]:.1f}–{r['load_average_after'][0]:.1f}"
    command, _, overrides = r["command"].replace("--out TMP/report", "--out DIR").partition(" --run-config ")
    command += f' --run-config "{overrides}"' if overrides else ""  # the overrides are one argument
    return (f"`fedleak {command}`: exit {r['exit_code']}, honest server "
            f"{tm['verdict']} ({tm['evidence']}): {tm['strongest']} on {a['replies']} replies, {a['proved']} proved, "
            f"records whole {a['recognizable_percent']:.0f} %{cells}; {r['cpu_seconds_child']:.0f} CPU-s, "
            f"{r['wall_seconds']:.0f} s wall at load average {loads} (commit {r['commit']}).")


#: docs/tabular-flower.md's block of the tabular Flower app's measured runs
APP_MARK = ("<!-- regen:bench-tabular-app -->", "<!-- /regen:bench-tabular-app -->")


def write_doc(rows: list[dict]) -> None:
    for doc, make, mark in ((DOC, table, MARK), (DOC_APART, apart, MARK), (DOC_APART, app_lines, APP_MARK)):
        text = doc.read_text()
        start, end = text.index(mark[0]) + len(mark[0]), text.index(mark[1])
        doc.write_text(text[:start] + "\n" + make(rows) + "\n" + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma-separated job names (default: all, in order)")
    parser.add_argument("--batches", type=int, default=1, help="batches (clients) per job")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--out", default=fresh("tabular.json"),
                        help="results file (default: a new one; pass an existing file to resume it)")
    parser.add_argument("--redo", action="store_true",
                        help="rerun the named jobs even where --out has their rows, replacing those rows")
    parser.add_argument("--doc", action="store_true", help="only regenerate docs/tabular.md's table from --results")
    parser.add_argument("--results", default=str(OUT), help="with --doc: the results file the docs quote")
    args = parser.parse_args()
    if args.doc:
        write_doc(json.loads(Path(args.results).read_text())["rows"])
        return
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(args.out)
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    done = set() if args.redo else {(r["job"], r["batch"]) for r in rows}
    made: dict = {}  # this run's rows by (job, batch); every write merges them into the file as it is on disk then
    for name in args.jobs.split(","):
        for batch in range(args.batches):
            if (name, batch) in done or (name in ("audit-adult", "flower-tabular-demo") and batch > 0):  # timed once
                continue
            row = run_job(name, batch, args.seed, args.model_seed)
            made[(name, batch)] = row
            print(f"{name} batch {batch}: " + (
                f"accuracy {row['accuracy']:.3f} EMR {row['exact_match_rate']:.3f} random {row['random']['accuracy']:.3f}"
                f" prior {row['prior']['accuracy']:.3f}" if "accuracy" in row else
                f"verdicts {row['verdicts']}" if "verdicts" in row else f"proved {row['proved']}") +
                f" cpu {row['cpu_seconds']} s", flush=True)
            write_merged(out, made)


def write_merged(out: Path, made: dict) -> None:
    """Write this run's rows into ``out`` as it is on disk now, replacing rows of the same (job, batch) and keeping
    every other row (another run writing the same file concurrently keeps its rows; the file's order is kept)."""
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    kept = [made.get((r["job"], r["batch"]), r) for r in rows]
    present = {(r["job"], r["batch"]) for r in rows}
    kept += [row for key, row in made.items() if key not in present]
    out.write_text(json.dumps({"format": "fedleak.bench-tabular/1", "script": "benchmarks/bench_tabular.py",
                               "rows": kept}, indent=1))


if __name__ == "__main__":
    main()
