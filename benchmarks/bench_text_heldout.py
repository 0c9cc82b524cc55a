"""The text attacks' documented rows re-measured on a second, held-out corpus, over several batches (issue #27, item 8).

The rows of ``docs/text-attacks.md`` marked ⚠ were measured on one batch of the embedded corpus (scikit-learn's
dataset descriptions and standard-library docstrings). This script measures the same cases on text none of them
was tuned on — the Python language reference's topic texts that ship with CPython (``pydoc_data.topics``: grammar,
code fragments and prose, a harder mix), written to a temporary folder as two ``.txt`` files (labels 0/1 for the
classification task) and read through the user's path (``fedleak.data.load("text", root=...)``, iid batches) —
over ``--batches`` batches (one client each), and reports the share over batches:

* ``minilm-4x16-dager`` / ``minilm-4x16-tiger`` — the pretrained MiniLM encoder, sequence classification, FedSGD;
* ``gpt2tiny-fedavg10-dager`` — gpt2-tiny, next-token loss, FedAvg 10 full-batch local steps at lr 1e-2 (as `text_fedavg.json`);
* ``minilm-4x32-dropout-dager`` — MiniLM with the dropout it ships (0.1) acting in the client's step, 4 × 32 tokens.

    OMP_NUM_THREADS=1 python benchmarks/bench_text_heldout.py [--batches 4] --out benchmarks/results/text_heldout.json

Each batch records exact share, ROUGE-1, token accuracy, ``certain`` (the recomputed update matches) and CPU
seconds; the file is rewritten after every batch and a finished case is not re-run (resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from _results import fresh  # benchmarks/_results.py: a new timestamped file by default
from fedleak import data, metrics, models
from fedleak.attacks import build
from fedleak.fl.client import client_update
from fedleak.types import Protocol

CASES = {
    "minilm-4x16-dager": dict(model="minilm", task="classification", attack="dager",
                              protocol=dict(algorithm="fedsgd", lr=0.01)),
    "minilm-4x16-tiger": dict(model="minilm", task="classification", attack="tiger",
                              protocol=dict(algorithm="fedsgd", lr=0.01)),
    "gpt2tiny-fedavg10-dager": dict(model="gpt2-tiny", task="causal-lm", attack="dager",
                                    protocol=dict(algorithm="fedavg", epochs=10, batch_size=None, lr=0.01)),
    # issue 28's encoder target on held-out text: MiniLM as shipped (dropout 0.1 acting), 4 x 32, FedSGD lr 1e-4
    "minilm-4x32-dropout-dager": dict(model="minilm", task="classification", attack="dager", dropout="shipped",
                                      batch=4, seq_len=32, protocol=dict(algorithm="fedsgd", lr=1e-4)),
}


def write_corpus(folder: Path) -> dict:
    """The language reference's topics as two text files (first and second half of the sorted topic names)."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    half = len(names) // 2
    for part, chunk in (("reference-a.txt", names[:half]), ("reference-b.txt", names[half:])):
        (folder / part).write_text("\n\n".join(topics[n] for n in chunk), encoding="utf-8")
    return {"source": "pydoc_data.topics (CPython's language reference topics)", "topics": len(names),
            "characters": sum(len(topics[n]) for n in names)}


def run_case(spec_case: dict, root: Path, batches: int) -> dict:
    batch, seq_len = spec_case.get("batch", 4), spec_case.get("seq_len", 16)
    spec, clients = data.load("text", root=str(root), num_clients=batches, samples_per_client=batch, seq_len=seq_len,
                              task=spec_case["task"], partition="iid", seed=0)
    model = models.build(spec_case["model"], spec, seed=0, dropout=spec_case.get("dropout", "off"))
    p = spec_case["protocol"]
    protocol = Protocol(p["algorithm"], p.get("epochs", 1), p.get("batch_size"), p["lr"])
    rows = []
    for client in clients:
        update = client_update(model, client, protocol, seed=0)
        cpu, wall = time.process_time(), time.perf_counter()
        rec = build(spec_case["attack"]).reconstruct(update, model, spec)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        m = metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)
        rows.append({"batch": client.client_id, "exact_share": m.get("exact_sequences"), "rouge1": m.get("rouge1"),
                     "token_accuracy": m.get("token_accuracy"), "certain": bool(rec.extras.get("certain")),
                     "returned": int(rec.inputs.shape[0]), "cpu_seconds": round(cpu, 2),
                     "wall_seconds": round(wall, 2)})
        print(json.dumps(rows[-1]), flush=True)
    n = len(rows)
    return {**spec_case, "batch": batch, "seq_len": seq_len, "batches": n, "per_batch": rows,
            "dropout": spec_case.get("dropout", "off"),
            "sequences_whole": round(sum(r["exact_share"] * batch for r in rows)), "sequences": batch * n,
            "certain_batches": sum(r["certain"] for r in rows),
            "rouge1_mean": sum(r["rouge1"] for r in rows) / n,
            "cpu_seconds_mean": sum(r["cpu_seconds"] for r in rows) / n,
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--out", default=fresh("text_heldout.json"),
                        help="results file (default: a new file; name benchmarks/results/text_heldout.json to resume or update the tracked one)")
    args = parser.parse_args()
    out = Path(args.out)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.update({"threads": torch.get_num_threads(), "device": "cpu", "machine": platform.machine(),
                "torch": torch.__version__, "cpus": os.cpu_count()})
    cases = doc.setdefault("cases", {})
    with tempfile.TemporaryDirectory() as tmp:
        doc["corpus"] = write_corpus(Path(tmp))
        for name in args.cases.split(","):
            if name in cases and cases[name].get("batches") == args.batches:
                continue  # measured: resume
            cases[name] = run_case(CASES[name], Path(tmp), args.batches)
            out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
