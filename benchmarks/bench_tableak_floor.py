"""Where TabLeak's CPU goes per iteration, and how much of it the matrix products alone take (issue 44's B = 128).

``bench_tableak_reference.py`` measures fedleak's TabLeak against the reference code per batch. At B = 128 the
ratio stays below the issue's 10×; this benchmark says why, on the real code path: one FedSGD batch of B records
(Adult or German, the untrained d-100-100-2 MLP, known labels), 30 restarts batched into one tensor, and the attack's
own iteration — the structural prior, the cosine to the observed gradient with its hand-written backward
(:mod:`fedleak.attacks.tabular.mlp_gradient`), the sign trick and fused Adam — run ``--iterations`` times:

* ``iteration_ms``: CPU per iteration without the profiler (``time.process_time``, best of ``--rounds``);
* ``matrix_products_ms``: the CPU of every matrix product call (``torch.bmm``, ``mm``, ``addmm``, ``matmul``,
  ``baddbmm``, ``Tensor.addmm_``, ``@``) inside the attack's iterations, from ``cProfile``'s own time of those
  calls (its overhead per call is small beside a product of these sizes), and ``other_ms`` the rest of the same
  profiled iterations (element-wise passes, reductions, the optimizer, the autograd engine);
* ``products_alone_gflops``: the same products' shapes timed back to back outside the attack (hot caches), the
  machine's matrix-product speed for these shapes;
* per batch of 1,500 iterations: the attack's CPU, the products' share, and the reference's CPU per batch at the
  same B from ``--reference-results`` (``tableak_reference.json``), so the 10× target's budget per batch stands
  beside the products' floor.

    OMP_NUM_THREADS=1 python benchmarks/bench_tableak_floor.py --out benchmarks/results/tableak_floor.json
    python benchmarks/bench_tableak_floor.py --doc    # its table in docs/tabular.md from the results file
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _results import fresh  # noqa: E402

PRODUCT_CALLS = {"<built-in method torch.bmm>", "<built-in method torch.mm>", "<built-in method torch.addmm>",
                 "<built-in method torch.matmul>", "<built-in method torch.baddbmm>", "<method 'addmm_' of "
                 "'torch._C.TensorBase' objects>", "<method '__matmul__' of 'torch._C.TensorBase' objects>",
                 "<built-in method torch._C._VariableFunctions.matmul>"}
PRODUCTS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::addmm_", "aten::baddbmm", "aten::addmv_", "aten::addmv",
            "aten::mv")


def iteration(dataset: str, records: int, restarts: int, precision: str = "float32"):
    """The attack's iteration on one batch: returns ``step()`` (one optimizer step) — the same parts TabLeak runs.
    ``precision`` "bfloat16": the records enter the cosine in bfloat16, so its weights, every product and every
    element-wise pass of it run in bfloat16 (the machine's AMX tiles; the prior and Adam stay float32) — what
    lower precision could buy, timed on the same code path; fedleak's TabLeak itself runs in float32."""
    from fedleak.attacks.tabular.prior import StructuralPrior
    from fedleak.attacks.tabular.restarts import Restarts, distances, grouped_target
    from fedleak.data.tabular import load
    from fedleak.fl.client import client_update
    from fedleak.models import build
    from fedleak.types import Protocol

    spec, clients = load(dataset, num_clients=1, samples_per_client=records, seed=42)
    data = clients[0]
    model = build("tabular-mlp", spec, seed=0)
    update = client_update(model, data, Protocol("fedsgd", 1, records, 0.01), seed=42,
                           metadata={"labels": data.labels.tolist()})
    params, observed = update.server_params, update.pseudo_gradient()
    prior = StructuralPrior(spec.schema, next(iter(params.values())), True, True)
    ensemble = Restarts(model, params, restarts)
    schedule = [[torch.arange(records)]]
    target = grouped_target(ensemble, params, observed, prior.perm,
                            lambda x: distances(ensemble, params, x, data.labels, schedule, 0.01, observed))
    z = (torch.rand(restarts, records, spec.schema.width, generator=torch.Generator().manual_seed(0)) * 2 - 1)
    z = z.index_select(-1, prior.perm).requires_grad_()
    optimizer = torch.optim.Adam([z], lr=0.06, fused=True)

    def step():
        optimizer.zero_grad(set_to_none=True)
        x = prior.grouped(z)
        loss = target(x if precision == "float32" else x.to(torch.bfloat16), data.labels, schedule, 0.01, True)
        loss = loss.float().sum()
        loss.backward(inputs=[z])
        z.grad.sign_()
        optimizer.step()

    return step


def measure(dataset: str, records: int, restarts: int, iterations: int, rounds: int,
            precision: str = "float32") -> dict:
    step = iteration(dataset, records, restarts, precision)
    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(iterations):
            step()
        best = min(best, (time.process_time() - start) / iterations)
    import cProfile
    import pstats

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:  # the products' shapes only
        for _ in range(2):
            step()
    shapes = [(e.input_shapes, e.key) for e in prof.key_averages(group_by_input_shape=True) if e.key in PRODUCTS]
    shapes = [item for item, e in zip(shapes, [e for e in prof.key_averages(group_by_input_shape=True)
                                                if e.key in PRODUCTS]) for _ in range(max(1, e.count // 2))]
    profiler = cProfile.Profile()
    start = time.process_time()
    profiler.enable()
    for _ in range(iterations):
        step()
    profiler.disable()
    total = (time.process_time() - start) / iterations * 1e3
    stats = pstats.Stats(profiler).stats  # {(file, line, name): (calls, primitive, tottime, cumtime, callers)}
    product_ms = sum(v[2] for k, v in stats.items() if k[2] in PRODUCT_CALLS) / iterations * 1e3
    return {"dataset": dataset, "records": records, "restarts": restarts, "precision": precision,
            "iterations_timed": iterations,
            "iteration_ms": round(1e3 * best, 3), "profiled_iteration_ms": round(total, 3),
            "matrix_products_ms": round(product_ms, 3), "other_ms": round(total - product_ms, 3),
            "matrix_products_per_iteration": len(shapes), "products_alone": alone(shapes, precision)}


def alone(shapes: list, precision: str = "float32") -> dict:
    """The attack's matrix products (their shapes) timed back to back outside the attack: ms per iteration, GFLOP/s."""
    calls = []
    randn = (lambda *d: torch.randn(*d, dtype=torch.bfloat16)) if precision == "bfloat16" else torch.randn
    for inputs, key in shapes:
        dims = [tuple(s) for s in inputs if isinstance(s, (list, tuple)) and len(s) >= 2]
        if key in ("aten::mm",) and len(dims) == 2:
            a, b = randn(*dims[0]), randn(*dims[1])
            calls.append((lambda a=a, b=b: torch.mm(a, b), 2 * dims[0][0] * dims[0][1] * dims[1][1]))
        elif key == "aten::bmm" and len(dims) == 2:
            a, b = randn(*dims[0]), randn(*dims[1])
            calls.append((lambda a=a, b=b: torch.bmm(a, b), 2 * dims[0][0] * dims[0][1] * dims[0][2] * dims[1][2]))
        elif key in ("aten::addmm", "aten::addmm_") and len(dims) >= 2:
            a, b = randn(*dims[-2]), randn(*dims[-1])
            calls.append((lambda a=a, b=b: torch.mm(a, b), 2 * dims[-2][0] * dims[-2][1] * dims[-1][1]))
    if not calls:
        return {}
    for f, _ in calls:
        f()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(20):
            for f, _ in calls:
                f()
        best = min(best, (time.process_time() - start) / 20)
    flops = sum(n for _, n in calls)
    return {"ms_per_iteration": round(1e3 * best, 3), "gflops": round(flops / best / 1e9, 1), "products": len(calls)}


DOC = HERE.parent / "docs" / "tabular.md"
MARK = ("<!-- regen:bench-tableak-floor -->", "<!-- /regen:bench-tableak-floor -->")


def table(rows: list[dict]) -> str:
    """The docs' table: per setting, one iteration's CPU split, and per batch against the 10× budget."""
    lines = ["| data | B | conditions | precision | ms per iteration | "
             "profiled iteration (cProfile): matrix products (ms) | "
             "profiled: the rest (ms) | products alone, hot caches (ms) | products alone per batch (s) | "
             "reference per batch (s; timed how, batches) | 10× budget per batch (s) | products alone / budget |",
             "|---|--:|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        budget = r.get("target_seconds_per_batch")
        share = f"{100 * r['products_alone_per_batch_seconds'] / budget:.0f} %" if budget else "-"
        theirs = (f"{r['reference_cpu_seconds_per_batch']} ({r.get('reference_conditions')}, "
                  f"{r.get('reference_batches')})" if budget else "-")
        lines.append(f"| {r['dataset']} | {r['records']} | {r.get('conditions', 'shared machine')} | "
                     f"{r.get('precision', 'float32')} | "
                     f"{r['iteration_ms']:.1f} | {r['matrix_products_ms']:.1f} | {r['other_ms']:.1f} | "
                     f"{r['products_alone'].get('ms_per_iteration', 0):.1f} | "
                     f"{r['products_alone_per_batch_seconds']:.1f} | {theirs} | {budget or '-'} | {share} |")
    return "\n".join(lines)


def write_doc(rows: list[dict]) -> None:
    text = DOC.read_text()
    start, end = text.index(MARK[0]) + len(MARK[0]), text.index(MARK[1])
    DOC.write_text(text[:start] + "\n" + table(rows) + "\n" + text[end:])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="adult:128,german:128,adult:32", help="DATASET:B,...")
    parser.add_argument("--restarts", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=40, help="iterations per timing round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reference-results", default=str(HERE / "results" / "tableak_reference.json"))
    parser.add_argument("--conditions", default=None, help="how the machine was used while timing (stored per row)")
    parser.add_argument("--precisions", default="float32", help="float32 (the attack's), bfloat16 (what it would buy)")
    parser.add_argument("--out", default=fresh("tableak_floor.json"))
    parser.add_argument("--doc", action="store_true", help=f"only regenerate {DOC.name}'s table from --results")
    parser.add_argument("--results", default=str(HERE / "results" / "tableak_floor.json"))
    args = parser.parse_args(argv)
    if args.doc:
        write_doc(json.loads(Path(args.results).read_text())["rows"])
        return 0
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    reference = []
    if Path(args.reference_results).exists():
        reference = json.loads(Path(args.reference_results).read_text())["rows"]
    rows = []
    for item, precision in [(i, p) for i in args.settings.split(",") for p in args.precisions.split(",")]:
        if precision not in ("float32", "bfloat16"):
            print(f"error: --precisions: {precision!r} is neither float32 nor bfloat16", file=sys.stderr)
            return 2
        dataset, _, size = item.partition(":")
        load = os.getloadavg()
        row = measure(dataset, int(size), args.restarts, args.iterations, args.rounds, precision)
        same = [r for r in reference if r["dataset"] == dataset and r["records"] == int(size)
                and r["implementation"] == "reference" and r.get("algorithm", "fedsgd") == "fedsgd"]
        # the reference timed under the same conditions when the results hold such rows, else on the shared machine
        matched = [r for r in same if r.get("conditions") == args.conditions] or \
            [r for r in same if not r.get("conditions")]
        theirs = [r["cpu_seconds"] for r in matched]
        per_batch = 1500 / 1e3
        row.update({"per_batch_seconds": round(row["iteration_ms"] * per_batch, 1),
                    "products_per_batch_seconds": round(row["matrix_products_ms"] * per_batch, 1),
                    "products_alone_per_batch_seconds": round(row["products_alone"].get("ms_per_iteration", 0)
                                                              * per_batch, 1),
                    "reference_cpu_seconds_per_batch": round(statistics.mean(theirs), 1) if theirs else None,
                    "reference_conditions": (matched[0].get("conditions") or "shared machine") if matched else None,
                    "reference_batches": len(theirs),
                    "target_seconds_per_batch": round(statistics.mean(theirs) / 10, 1) if theirs else None,
                    "load_average_before": [round(v, 2) for v in load], "threads": torch.get_num_threads(),
                    **({"conditions": args.conditions} if args.conditions else {}),
                    "device": "cpu", "machine": platform.machine(), "torch": torch.__version__})
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"format": "fedleak.bench-tableak-floor/1",
                                          "script": "benchmarks/bench_tableak_floor.py", "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
