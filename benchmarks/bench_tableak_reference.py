"""TabLeak side by side with its reference code (``eth-sri/tableak``, MIT, commit 6b8c1c8) on the same batches.

Issue 44's target: fedleak's TabLeak (:mod:`fedleak.attacks.tabular.tableak`) reaches at least the reference's
accuracy at equal restarts and iterations, at ≥ 10× less CPU. Setting (research notes §2): FedSGD, known labels,
the untrained d-100-100-2 MLP. For every batch:

* the records are fedleak's client ``k`` of an IID split (``--seed``, as ``bench_tabular.py`` draws them); the
  reference receives the SAME rows, decoded to their column values and encoded by the reference's own
  ``encode_batch`` (its column order and its standardization);
* the SAME weights: fedleak's ``tabular-mlp`` (``--model-seed``) copied into the reference's ``FullyConnected``
  (first-layer columns permuted to the reference's encoding); the reference's gradient is computed by its own code
  and its cosine to fedleak's (permuted back) is recorded (``gradient_cosine``, 1 up to float32 and the two
  standard deviations' n vs n−1);
* both attacks run with ``--restarts`` restarts and ``--iterations`` iterations: the reference's ``invert_grad``
  with its TabLeak configuration (``run_inversion_attacks.py``: uniform init, cosine loss, Adam 0.06 with the sign
  trick, no weight trick, softmax + sigmoid tricks, τ = 1, ``median+softmax`` pooling) and fedleak's ``tableak``;
* each output is scored by BOTH metrics: the reference's (``match_reconstruction_ground_truth`` with its
  0.319 σ tolerance map on its own decoding; ``reference_metric``) and fedleak's (:func:`fedleak.metrics.tabular.
  evaluate`; ``fedleak_metric``), with the whole-record exact-match rate (EMR) and per-feature accuracy;
* CPU seconds (``time.process_time``) and wall seconds of each attack, thread count, load average, device.

The one fix modern PyTorch needs (research notes §4): the reference's last step applies its in-place
``continuous_sigmoid_bound`` to the optimized leaf tensor, which PyTorch ≥ 2 refuses ("a leaf Variable that
requires grad is being used in an in-place operation"). The benchmark wraps that function at run time so that a
leaf requiring grad is bound on a detached copy (same values); nothing else of the reference is changed. The
reference is imported from the path the user passes (``--reference``; never copied into fedleak); without it the
benchmark says so and exits.

Rows are appended to the results file after every attack of every batch; an existing file is resumed (a finished
(setting, batch, implementation) is never re-run; an interrupted one is).

    git -C <mirror> archive HEAD | tar -x -C /tmp/tableak   # or any checkout of eth-sri/tableak
    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_tableak_reference.py --reference /tmp/tableak \\
        --settings adult:32,german:32 --batches 3 --out benchmarks/results/tableak_reference.json
    # or each implementation as its own job into its own file (--implementations reference | fedleak), then
    python benchmarks/bench_tableak_reference.py --merge ref.json fedleak.json \\
        --out benchmarks/results/tableak_reference.json
    python benchmarks/bench_tableak_reference.py --doc    # its table in docs/tabular.md from the results file
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _results import fresh  # noqa: E402
import tableak_reference_fedavg as fedavg  # noqa: E402  (the FedAvg setting: DATASET:N:fedavg-eE-mM)
import tableak_reference_findings as findings  # noqa: E402  (the sentences under the table)

OUT = HERE / "results" / "tableak_reference.json"  # the run the docs quote
DOC = HERE.parent / "docs" / "tabular.md"
FORMAT = "fedleak.bench-tableak-reference/1"
REFERENCE_COMMIT = "6b8c1c8"
FIX = ("attacks.gradient_inversion_attack.continuous_sigmoid_bound wrapped: a leaf tensor that requires grad is "
       "bound on a detached copy (PyTorch >= 2 refuses the reference's final in-place sigmoid on the leaf); "
       "no other change")
IMPLEMENTATIONS = ("fedleak", "reference", "fedleak-bfloat16")
PAIR = ("fedleak", "reference")  # every table line and finding sets one of fedleak's codes beside the reference
#: fedleak run another way (its own rows, paired with the same reference rows): TabLeak's opt-in precision
VARIANTS = {"fedleak-bfloat16": "bfloat16"}


class BadInput(Exception):
    """One line for the user; exit 2."""


# ----- the reference, imported from the user's path -----------------------------------------------------------
class Reference:
    """The reference code at ``path``: its datasets (loaded from its own files), attack and metric."""

    def __init__(self, path: Path) -> None:
        if not (path / "attacks" / "gradient_inversion_attack.py").is_file():
            raise BadInput(f"{path}: not a checkout of eth-sri/tableak (no attacks/gradient_inversion_attack.py)")
        self.path = path
        sys.path.insert(0, str(path))
        with _cwd(path):  # its loaders read datasets/... relative to the repository root
            import attacks
            import attacks.gradient_inversion_attack as gia
            import datasets
            import models
            import utils
        original = gia.continuous_sigmoid_bound

        def bound(x, dataset, T=1.0):  # the one fix: never in place on the optimized leaf
            if x.is_leaf and x.requires_grad:
                x = x.detach().clone()
            return original(x, dataset, T)

        gia.continuous_sigmoid_bound = bound
        self.attacks, self.datasets, self.models, self.utils = attacks, datasets, models, utils
        self._loaded: dict = {}

    def dataset(self, name: str):
        if name not in self._loaded:
            with _cwd(self.path):
                data = {"adult": self.datasets.ADULT, "german": self.datasets.German}[name]()
            data.standardize()
            self._loaded[name] = data
        return self._loaded[name]


@contextlib.contextmanager
def _cwd(path: Path):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# ----- the shared batch -----------------------------------------------------------------------------------------
def permutation(schema, ref) -> list[int]:
    """``P`` with reference column j = fedleak column P[j] (both encodings one-hot + raw continuous)."""
    where = {}
    for column, block in schema.blocks():
        if column.kind == "categorical":
            for i, category in enumerate(column.categories):
                where[(column.name, category)] = block.start + i
        else:
            where[(column.name, None)] = block.start
    out = []
    for name, values in ref.train_features.items():
        keys = [(name, None)] if values is None else [(name, str(v)) for v in values]
        for key in keys:
            if key not in where:
                raise BadInput(f"reference column {key} has no fedleak counterpart")
            out.append(where[key])
    if sorted(out) != list(range(schema.width)):
        raise BadInput("the reference's and fedleak's encodings do not cover the same columns")
    return out


def to_reference(schema, ref, perm, encoded: torch.Tensor) -> torch.Tensor:
    """fedleak-standardized records → the reference's standardized encoding (same raw values)."""
    raw = schema.destandardize(encoded.detach().double().reshape(encoded.shape[0], -1))[:, perm]
    return ((raw - ref.mean.double()) / ref.std.double()).float()


def to_fedleak(schema, ref, perm, encoded: torch.Tensor) -> torch.Tensor:
    """The reference's standardized records → fedleak's standardized encoding (same raw values)."""
    raw_ref = encoded.detach().double() * ref.std.double() + ref.mean.double()
    raw = torch.empty_like(raw_ref)
    raw[:, perm] = raw_ref
    return schema.standardize(raw).float()


def mixed_truth(schema, ref, data_inputs: torch.Tensor) -> np.ndarray:
    """The batch's true records as the reference's mixed array (its feature order, category strings, numbers)."""
    values = schema.decode(data_inputs.reshape(data_inputs.shape[0], -1))
    columns = [np.asarray(values[name], dtype=object) for name in ref.train_features]
    return np.stack(columns, axis=1)


# ----- scoring ----------------------------------------------------------------------------------------------------
def reference_metric(ref, utils, truth_mixed: np.ndarray, guess_ref: torch.Tensor) -> dict:
    """The reference's own accuracy (``utils/matching.py``): Hungarian on the share of wrong features."""
    tolerance = ref.create_tolerance_map()
    guess_mixed = ref.decode_batch(guess_ref.detach(), standardized=True)
    reordered, cost_all, cost_cat, cost_cont = utils.match_reconstruction_ground_truth(truth_mixed, guess_mixed,
                                                                                       tolerance)
    errors = utils.batch_feature_wise_accuracy_score(truth_mixed, reordered, tolerance, ref.train_features)
    return {"accuracy": float(1 - np.mean(cost_all)), "categorical_accuracy": float(1 - np.mean(cost_cat)),
            "continuous_accuracy": float(1 - np.mean(cost_cont)),
            "exact_match_rate": float(np.mean(np.asarray(cost_all) == 0)),
            "per_feature": {k: round(1 - float(v), 4) for k, v in errors.items()}}


def fedleak_metric(schema, guess: torch.Tensor, truth: torch.Tensor, seed: int) -> dict:
    from fedleak.metrics.tabular import evaluate

    scores = evaluate(schema, guess.reshape(guess.shape[0], -1), truth.reshape(truth.shape[0], -1), seed=seed)
    for key in ("cells", "matched"):
        scores.pop(key)
    return scores


# ----- one batch ----------------------------------------------------------------------------------------------
def prepare(reference: Reference, dataset: str, records: int, batch: int, seed: int, model_seed: int) -> dict:
    from fedleak.data.tabular import load
    from fedleak.fl.client import client_update
    from fedleak.models import build
    from fedleak.types import Protocol

    spec, clients = load(dataset, num_clients=batch + 1, samples_per_client=records, seed=seed)
    data = clients[batch]
    model = build("tabular-mlp", spec, seed=model_seed)
    update = client_update(model, data, Protocol("fedsgd", 1, records, 0.01), seed=seed,
                           metadata={"labels": data.labels.tolist()})
    schema, ref = spec.schema, reference.dataset(dataset)
    perm = permutation(schema, ref)
    truth_mixed = mixed_truth(schema, ref, data.inputs)
    x_ref = ref.encode_batch(truth_mixed, standardize=True).float()
    net = reference.models.FullyConnected(x_ref.shape[1], [100, 100, 2])
    ours, theirs = list(model.parameters()), list(net.parameters())
    if [tuple(p.shape) for p in ours] != [tuple(p.shape) for p in theirs]:
        raise BadInput(f"{dataset}: fedleak's tabular-mlp and the reference's FullyConnected differ in shape")
    with torch.no_grad():
        for k, (a, b) in enumerate(zip(ours, theirs)):
            b.copy_(a[:, perm] if k == 0 else a)
    criterion = torch.nn.CrossEntropyLoss()
    labels = data.labels.long()
    true_grad = [g.detach() for g in torch.autograd.grad(criterion(net(x_ref), labels), net.parameters())]
    observed = update.pseudo_gradient()
    flat_ours = torch.cat([v.reshape(-1) for v in (t[:, perm] if k == 0 else t
                                                    for k, t in enumerate(observed.values()))]).double()
    flat_theirs = torch.cat([g.reshape(-1) for g in true_grad]).double()
    cosine = float(torch.nn.functional.cosine_similarity(flat_ours, flat_theirs, dim=0))
    mapped_back = to_fedleak(schema, ref, perm, x_ref)
    return {"spec": spec, "data": data, "model": model, "update": update, "ref": ref, "perm": perm, "net": net,
            "criterion": criterion, "labels": labels, "x_ref": x_ref, "true_grad": true_grad,
            "truth_mixed": truth_mixed, "gradient_cosine": cosine,
            "encoding_max_abs_diff": float((mapped_back - data.inputs.reshape(records, -1)).abs().max())}


def attack(reference: Reference, job: dict, implementation: str, restarts: int, iterations: int, seed: int,
           batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(reconstruction in fedleak's encoding, in the reference's encoding)."""
    if job.get("fedavg"):
        return fedavg.attack(sys.modules[__name__], reference, job, implementation, restarts, iterations, seed, batch)
    schema, ref, perm = job["spec"].schema, job["ref"], job["perm"]
    if implementation.startswith("fedleak"):
        from fedleak.attacks import build as build_attack

        rec = build_attack("tableak", seed=seed, restarts=restarts, iterations=iterations, labels="known",
                           precision=VARIANTS.get(implementation, "float32"))\
            .reconstruct(job["update"], job["model"], job["spec"])
        guess = rec.inputs.reshape(rec.inputs.shape[0], -1)
        return guess, to_reference(schema, ref, perm, guess)
    torch.manual_seed(seed * 1000 + batch)
    np.random.seed(seed * 1000 + batch)
    with _cwd(reference.path):
        out = reference.attacks.invert_grad(
            net=job["net"], training_criterion=job["criterion"], true_grad=job["true_grad"], true_label=job["labels"],
            true_data=job["x_ref"], reconstruction_loss="cosine_sim", initialization_mode="uniform",
            learning_rates=0.06, dataset=ref, max_iterations=iterations, optimization_mode="naive",
            post_selection=restarts, sign_trick=True, weight_trick=False, softmax_trick=True, sigmoid_trick=True,
            temperature_mode="constant", pooling="median+softmax" if restarts > 1 else None, verbose=False)
    out = out.detach()
    return to_fedleak(schema, ref, perm, out), out


def run_one(reference: Reference, job: dict, setting: dict, implementation: str) -> dict:
    restarts, iterations, batch = setting["restarts"], setting["iterations"], setting["batch"]
    seed = setting["attack_seed"]
    load_before = os.getloadavg()
    cpu, wall = time.process_time(), time.perf_counter()
    guess, guess_ref = attack(reference, job, implementation, restarts, iterations, seed, batch)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    truth = job["data"].inputs.reshape(job["data"].inputs.shape[0], -1)
    return {**setting, "implementation": implementation,
            "reference_metric": reference_metric(job["ref"], reference.utils, job["truth_mixed"], guess_ref),
            "fedleak_metric": fedleak_metric(job["spec"].schema, guess, truth, seed),
            "gradient_cosine": job["gradient_cosine"], "encoding_max_abs_diff": job["encoding_max_abs_diff"],
            **({"update_relative_difference": job["update_relative_difference"]} if job.get("fedavg") else {}),
            "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "threads": torch.get_num_threads(),
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average": [round(v, 2) for v in os.getloadavg()], "device": "cpu",
            "machine": platform.machine(), "torch": torch.__version__, "fedleak_commit": _commit()}


def _commit(cache: dict = {}) -> str:  # noqa: B006 (read once: the commit whose code this process loaded)
    """The fedleak commit HEAD was at when this process first asked (the tree may hold others' uncommitted edits)."""
    if "head" not in cache:
        import subprocess

        done = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True)
        cache["head"] = done.stdout.strip() or "unknown"
    return cache["head"]


# ----- the docs' table --------------------------------------------------------------------------------------------
def _ms(values: list) -> str:
    values = [100 * v for v in values]
    if not values:
        return "-"
    return f"{statistics.mean(values):.1f} ± {statistics.stdev(values):.1f}" if len(values) > 1 else \
        f"{values[0]:.1f}"


def setting_label(r: dict) -> str:
    """The table's first column: the dataset (and FedAvg protocol), and the measuring conditions when a row
    states them (``--conditions``: e.g. an idle machine), so that rows timed under different conditions are
    never averaged together."""
    return fedavg.label(r) + (f" ({r['conditions']})" if r.get("conditions") else "")


def summary(rows: list[dict]) -> list[dict]:
    """Per (dataset, B, restarts, iterations): fedleak and the reference on the batches BOTH finished; then each
    variant of fedleak (:data:`VARIANTS`) with the same reference rows, as a setting of its own ("…, fedleak in
    bfloat16"), under the key "fedleak"."""
    groups: dict = {}
    for r in rows:
        if r.get("attack_seed", r.get("seed")) != r.get("seed"):
            continue  # another draw of restarts on the same batch: :func:`seed_table`
        groups.setdefault((setting_label(r), r["records"], r["restarts"], r["iterations"]), []).append(r)
    out = []
    for (dataset, records, restarts, iterations), group in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0])):
        for ours in ("fedleak", *VARIANTS):
            entry = _pair(group, ours, dataset if ours == "fedleak" else f"{dataset}, fedleak in {VARIANTS[ours]}",
                          records, restarts, iterations)
            if entry:
                out.append(entry)
    return out


def _pair(group: list[dict], ours: str, dataset: str, records: int, restarts: int, iterations: int) -> dict:
    """One summary entry: ``ours`` (stored under "fedleak") and the reference on the batches both finished."""
    by = {impl: {r["batch"]: r for r in group if r["implementation"] == impl} for impl in (ours, "reference")}
    by["fedleak"] = by.pop(ours)
    shared = sorted(set(by["fedleak"]) & set(by["reference"]))
    if not shared:
        return {}
    entry = {"dataset": dataset, "records": records, "restarts": restarts, "iterations": iterations,
             "batches": shared}
    for impl in PAIR:
        picked = [by[impl][b] for b in shared]
        entry[impl] = {
            metric: {key: [r[metric][key] for r in picked]
                     for key in ("accuracy", "categorical_accuracy", "continuous_accuracy", "exact_match_rate")}
            for metric in ("reference_metric", "fedleak_metric")}
        entry[impl]["cpu_seconds"] = [r["cpu_seconds"] for r in picked]
        entry[impl]["load_average"] = [r["load_average"][0] for r in picked]
    entry["random"] = [by["fedleak"][b]["fedleak_metric"]["random"]["accuracy"] for b in shared]
    entry["prior"] = [by["fedleak"][b]["fedleak_metric"]["prior"]["accuracy"] for b in shared]
    return entry


def table(rows: list[dict]) -> str:
    lines = ["| data | B | restarts × iterations | batches | implementation | accuracy, reference metric (%) | "
             "categorical | continuous | EMR (%) | accuracy, fedleak metric (%) | fedleak ≥ reference (batches) | "
             "CPU s per batch | CPU ratio | load avg |",
             "|---|--:|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for e in summary(rows):
        cpu = {impl: statistics.mean(e[impl]["cpu_seconds"]) for impl in PAIR}
        wins = sum(a >= b for a, b in zip(e["fedleak"]["reference_metric"]["accuracy"],
                                          e["reference"]["reference_metric"]["accuracy"]))
        for impl in PAIR:
            m, f = e[impl]["reference_metric"], e[impl]["fedleak_metric"]
            ratio = f"{cpu['reference'] / max(cpu['fedleak'], 1e-9):.1f}×" if impl == "fedleak" else "1×"
            won = f"{wins} of {len(e['batches'])}" if impl == "fedleak" else ""
            lines.append(f"| {e['dataset']} | {e['records']} | {e['restarts']} × {e['iterations']} | "
                         f"{len(e['batches'])} | {impl} | {_ms(m['accuracy'])} | {_ms(m['categorical_accuracy'])} | "
                         f"{_ms(m['continuous_accuracy'])} | {_ms(m['exact_match_rate'])} | {_ms(f['accuracy'])} | {won} | "
                         f"{cpu[impl]:.0f} | {ratio} | {statistics.mean(e[impl]['load_average']):.1f} |")
        lines.append(f"| {e['dataset']} | {e['records']} | | {len(e['batches'])} | random / prior baseline "
                     f"(fedleak metric) | | | | | {_ms(e['random'])} / {_ms(e['prior'])} | | | | |")
    return "\n".join(lines)


def seed_table(rows: list[dict]) -> str:
    """Per batch measured with more than one draw of restarts (``--attack-seed``): each implementation's accuracy
    (reference metric) per draw — how far one batch's figure moves with the restarts alone."""
    groups: dict = {}
    for r in rows:
        key = (setting_label(r), r["records"], r["restarts"], r["iterations"], r["batch"])
        groups.setdefault(key, {}).setdefault(r["implementation"], {})[r.get("attack_seed", r.get("seed"))] = \
            r["reference_metric"]["accuracy"]
    lines = []
    for (dataset, records, restarts, iterations, batch), by in sorted(groups.items()):
        if max(len(v) for v in by.values()) < 2:
            continue
        main = {r.get("seed") for r in rows if (setting_label(r), r["records"], r["batch"]) == (dataset, records, batch)}
        cells = [f"{impl}: " + ", ".join(f"{100 * a:.1f}" for _, a in sorted(by[impl].items(),
                                                                             key=lambda kv: (kv[0] not in main, kv[0])))
                 for impl in IMPLEMENTATIONS if impl in by]
        lines.append(f"| {dataset} | {records} | {restarts} × {iterations} | {batch} | {' · '.join(cells)} |")
    if not lines:
        return ""
    return ("\n\nThe same batches with other draws of restarts (`--attack-seed`; accuracy, reference metric, %, one "
            "figure per draw, the first the table's):\n\n| data | B | restarts × iterations | batch | accuracy per "
            "draw |\n|---|--:|---|--:|---|\n" + "\n".join(lines))


MARK = ("<!-- regen:bench-tableak-reference -->", "<!-- /regen:bench-tableak-reference -->")


def write_doc(rows: list[dict], fedavg_rows: list[dict] = ()) -> None:
    text = DOC.read_text()
    for mark, part in ((MARK, rows), (fedavg.MARK, fedavg_rows)):
        if part or mark is MARK:
            start, end = text.index(mark[0]) + len(mark[0]), text.index(mark[1])
            text = text[:start] + "\n" + table(part) + findings.findings(summary(part)) + seed_table(part) + "\n" + \
                text[end:]
    DOC.write_text(text)


# ----- driver -------------------------------------------------------------------------------------------------------
def parse_settings(text: str, lr: float = fedavg.LR, epoch_prior: float = fedavg.EPOCH_PRIOR) -> list[tuple]:
    out = []
    for item in text.split(","):
        name, sep, size = item.strip().partition(":")
        size, _, local = size.partition(":")
        if name not in ("adult", "german") or not sep or not size.isdigit() or not 1 <= int(size) <= 1024 or \
                (local and not fedavg.parse(local, int(size), lr, epoch_prior)):
            raise BadInput(f"--settings: {item.strip()!r} is not DATASET:B (FedSGD) or DATASET:N:fedavg-eE-mM with "
                           f"DATASET adult or german, 1 <= B, N <= 1024, 1 <= E <= 100, 1 <= M <= N")
        out.append((name, int(size), fedavg.parse(local, int(size), lr, epoch_prior) if local else None))
    return out


def read_rows(out: Path) -> list[dict]:
    if not out.exists():
        return []
    try:
        data = json.loads(out.read_text())
    except (OSError, ValueError) as error:
        raise BadInput(f"{out}: not a results file of this benchmark ({error.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), list):
        raise BadInput(f"{out}: not a results file of this benchmark (format {FORMAT!r} expected)")
    return data["rows"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=os.environ.get("TABLEAK_REFERENCE"),
                        help="a checkout of eth-sri/tableak (commit 6b8c1c8); without it the benchmark is skipped")
    parser.add_argument("--settings", default="adult:32,german:32",
                        help="DATASET:B,... (FedSGD) or DATASET:N:fedavg-eE-mM (E local epochs of batches of M; "
                             "benchmarks/tableak_reference_fedavg.py), run in this order")
    parser.add_argument("--lr", type=float, default=fedavg.LR, help="FedAvg settings: the clients' local lr")
    parser.add_argument("--epoch-prior", type=float, default=fedavg.EPOCH_PRIOR,
                        help="FedAvg settings: λ of the epoch-matching prior, for both codes")
    parser.add_argument("--batches", type=int, default=3, help="batches (clients) per setting")
    parser.add_argument("--restarts", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=1500)
    parser.add_argument("--implementations", default="fedleak,reference")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--model-seed", type=int, default=0)
    parser.add_argument("--conditions", default=None,
                        help="how the machine was used while timing (stored in each new row, its own table line)")
    parser.add_argument("--attack-seed", type=int, default=None,
                        help="the attacks' random restarts (default: --seed); the same batches with another draw "
                             "of restarts measure how much one batch's accuracy moves with the restarts alone")
    parser.add_argument("--out", default=fresh("tableak_reference.json"),
                        help="results file (default: a new one; pass an existing file to resume it)")
    parser.add_argument("--doc", action="store_true", help=f"only regenerate {DOC.name} from --results")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="only merge these results files into --out (a later file's row replaces an earlier "
                             "one of the same setting, batch and implementation): the two implementations run as "
                             "separate jobs, each writing its own file")
    parser.add_argument("--results", default=str(OUT), help="with --doc: the results file the docs quote")
    parser.add_argument("--fedavg-results", default=str(fedavg.OUT), help="with --doc: the FedAvg results file")
    args = parser.parse_args(argv)
    try:
        if args.doc:
            fedavg_rows = read_rows(Path(args.fedavg_results)) if Path(args.fedavg_results).exists() else []
            write_doc(read_rows(Path(args.results)), fedavg_rows)
            return 0
        if args.merge:
            merged: dict = {}
            for name in args.merge:
                for r in read_rows(Path(name)):
                    merged[_key(r)] = r
            _write(Path(args.out), list(merged.values()))
            print(f"{len(merged)} rows from {len(args.merge)} files -> {args.out}")
            return 0
        settings = parse_settings(args.settings, args.lr, args.epoch_prior)
        implementations = [i.strip() for i in args.implementations.split(",")]
        if not implementations or any(i not in IMPLEMENTATIONS for i in implementations):
            raise BadInput(f"--implementations: {args.implementations!r}; allowed: {', '.join(IMPLEMENTATIONS)}")
        if any(i in VARIANTS for i in implementations) and any(local is not None for _, _, local in settings):
            raise BadInput("--implementations fedleak-bfloat16 runs FedSGD settings only (TabLeak's bfloat16 cosine "
                           "is the FedSGD one); drop the FedAvg settings or the variant")
        for name in ("batches", "restarts", "iterations"):
            if getattr(args, name) < 1:
                raise BadInput(f"--{name} must be at least 1, got {getattr(args, name)}")
        out = Path(args.out)
        if out.parent and not out.parent.is_dir():
            raise BadInput(f"--out {out}: the folder {out.parent} does not exist")
        rows = read_rows(out)
        if not args.reference or not Path(args.reference).exists():
            print(f"skipped: the reference code is not at {args.reference or '(no --reference given)'}; pass "
                  f"--reference <checkout of eth-sri/tableak @ {REFERENCE_COMMIT}>", flush=True)
            return 0
        reference = Reference(Path(args.reference).resolve())
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    # torch.optim's first optimizer imports torch._dynamo (1-3 CPU-s, once per process): paid here, not inside
    # the CPU time of whichever attack of the first batch happens to run first
    importlib.import_module("torch._dynamo")
    _commit()  # the code this process runs: HEAD now, not when a later row is written
    done = {_key(r) for r in rows}
    for dataset, records, local in settings:
        for batch in range(args.batches):
            attack_seed = args.seed if args.attack_seed is None else args.attack_seed
            todo = [i for i in implementations
                    if (setting_label({"dataset": dataset, "fedavg": local, "conditions": args.conditions}), records,
                        batch, args.restarts,
                        args.iterations, i, attack_seed) not in done]
            if not todo:
                continue
            job = prepare(reference, dataset, records, batch, args.seed, args.model_seed) if local is None else \
                fedavg.prepare(sys.modules[__name__], reference, dataset, records, batch, args.seed, args.model_seed,
                               local)
            for implementation in todo:
                setting = {"dataset": dataset, "records": records, "batch": batch, "restarts": args.restarts,
                           "iterations": args.iterations, "seed": args.seed, "model_seed": args.model_seed,
                           "attack_seed": attack_seed, "labels": "known",
                           **({"conditions": args.conditions} if args.conditions else {}),
                           **({"algorithm": "fedsgd"} if local is None else {"algorithm": "fedavg", "fedavg": local})}
                row = run_one(reference, job, setting, implementation)
                rows.append(row)
                print(f"{dataset} B={records} batch {batch} {implementation}: accuracy "
                      f"{row['reference_metric']['accuracy']:.3f} (reference metric) "
                      f"{row['fedleak_metric']['accuracy']:.3f} (fedleak metric), EMR "
                      f"{row['reference_metric']['exact_match_rate']:.3f}, cpu {row['cpu_seconds']} s, "
                      f"gradient cosine {row['gradient_cosine']:.6f}", flush=True)
                _write(out, rows)
    return 0


def _key(r: dict) -> tuple:
    return (setting_label(r), r["records"], r["batch"], r["restarts"], r["iterations"], r["implementation"],
            r.get("attack_seed", r.get("seed")))


def _write(out: Path, rows: list[dict]) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps({"format": FORMAT, "script": "benchmarks/bench_tableak_reference.py",
                               "reference": {"repository": "eth-sri/tableak", "commit": REFERENCE_COMMIT,
                                             "path_given": "--reference", "fix": FIX},
                               "rows": rows}, indent=1))
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
