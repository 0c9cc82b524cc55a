"""Text attacks (dager / tiger / tag) against batch × length, LoRA rank, FedAvg steps and DP noise.

Writes ``benchmarks/results/text_<group>.json`` (one key per case, written after every case, so an
interrupted run resumes: finished cases are skipped). Every case records ROUGE-1/2, exact
sequences, token accuracy, the exactness condition, certainty and seconds, with threads, load
average and device. Run niced on one thread, e.g.

    PYTHONPATH=src nice -n 15 python benchmarks/bench_text.py grid gpt2small lora fedavg dp
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from fedleak import data, metrics, models
from fedleak.attacks import build
from fedleak.fl.client import client_update
from fedleak.types import ClientData, Protocol

OUT = Path(__file__).parent / "results"
BATCHES, LENGTHS = (1, 4, 16, 64), (16, 32, 64)


def case(model_name, n, length, attack="dager", lora=None, protocol=None, noise=0.0, options=None,
         hidden_final=False):
    task = "classification" if model_name == "minilm" else "causal-lm"
    spec, clients = data.load("text", num_clients=1, samples_per_client=n, seq_len=length, task=task)
    if hidden_final:  # no target after the window (HF's labels=input_ids): the final token has no attention gradient
        clients = [ClientData(c.inputs, torch.full_like(c.labels, -100), c.client_id) for c in clients]
    # dropout off: the recorded grid measures the span attacks' limits (dropout as shipped: bench_llm.py, docs/llm.md)
    model = models.build(model_name, spec, seed=0, lora=lora, dropout="off")
    protocol = protocol or Protocol("fedsgd", lr=0.01)
    update = client_update(model, clients[0], protocol)
    if noise:  # Gaussian noise of std σ on every coordinate of the sent gradient (DP-style)
        g = torch.Generator().manual_seed(1)
        if update.gradient is not None:
            update.gradient = {k: v + noise * torch.randn(v.shape, generator=g) for k, v in update.gradient.items()}
        else:
            update.client_params = {k: v + protocol.lr * noise * torch.randn(v.shape, generator=g)
                                    for k, v in update.client_params.items()}
    start, cpu = time.perf_counter(), time.process_time()
    rec = build(attack, **(options or {})).reconstruct(update, model, spec)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    m = metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)
    return {"model": model_name, "batch": n, "length": length, "attack": attack, "lora": lora, "noise": noise,
            "protocol": protocol.to_json(), "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            **{k: m.get(k) for k in ("rouge1", "rouge2", "rougeL", "exact_sequences", "token_accuracy")},
            "exactness": rec.extras.get("exactness"), "certain": rec.extras.get("certain"),
            "returned": int(rec.inputs.shape[0]), "load_average": [round(x, 2) for x in os.getloadavg()]}


def groups():
    grid = [(f"{m}-{n}x{L}-{a}", dict(model_name=m, n=n, length=L, attack=a))
            for m, a in (("gpt2-tiny", "dager"), ("minilm", "dager"), ("minilm", "tiger"))
            for n in BATCHES for L in LENGTHS]
    grid.sort(key=lambda kv: kv[1]["n"] * kv[1]["length"])
    return {
        "grid": grid,
        "gpt2small": [("gpt2-small-16x32-dager", dict(model_name="gpt2-small", n=16, length=32))],
        "lora": [(f"gpt2-tiny-lora{r}-{n}x16", dict(model_name="gpt2-tiny", n=n, length=16, lora=r))
                 for r in (8, 32, 128) for n in (1, 2, 4, 8)]
                + [(f"minilm-lora{r}-2x16", dict(model_name="minilm", n=2, length=16, lora=r)) for r in (8, 32, 128)],
        "fedavg": [(f"gpt2-tiny-4x16-fedavg{s}-lr{lr}-{a}", dict(model_name="gpt2-tiny", n=4, length=16, attack=a,
                    protocol=Protocol("fedavg", epochs=s, lr=lr)))
                   for s in (1, 5, 10) for lr in (1e-4, 1e-2) for a in ("dager",)],
        "dp": [(f"{m}-{n}x{L}-noise{s}-{a}", dict(model_name=m, n=n, length=L, attack=a, noise=s))
               for m, n, L in (("gpt2-tiny", 2, 16), ("minilm", 2, 16)) for s in (0.01, 0.1) for a in ("dager", "tiger")],
        # the levels where the span signal meets the noise (gradient RMS: gpt2-tiny 4e-3, minilm 3e-5)
        "dp_low": [(f"{m}-{n}x{L}-noise{s}-{a}", dict(model_name=m, n=n, length=L, attack=a, noise=s))
                   for m, n, L, levels in (("gpt2-tiny", 2, 16, (1e-4, 1e-3)), ("minilm", 2, 16, (1e-6, 1e-5)))
                   for s in levels for a in ("dager", "tiger")],
        "final": [(f"gpt2-tiny-{n}x16-hidden-final", dict(model_name="gpt2-tiny", n=n, length=16, hidden_final=True))
                  for n in (1, 4)] + [("gpt2-small-16x32-hidden-final",
                                      dict(model_name="gpt2-small", n=16, length=32, hidden_final=True))],
        "tag": [(f"{m}-2x16-{a}", dict(model_name=m, n=2, length=16, attack=a))
                for m in ("gpt2-tiny", "minilm") for a in ("tag",)],
    }


CASE_TIMEOUT = int(os.environ.get("BENCH_CASE_TIMEOUT", "900"))


def run_one(group, key):
    """One case in a child process (a timeout ends it and is recorded, the sweep goes on)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                       os.environ.get("PYTHONPATH", "")]))
    try:
        proc = subprocess.run([sys.executable, __file__, "--case", group, key], capture_output=True, text=True,
                              timeout=CASE_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CASE_TIMEOUT} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1][len("RESULT "):])


def run(group, cases):
    path = OUT / f"text_{group}.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update({"threads": torch.get_num_threads(), "device": "cpu", "machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count()})
    results = doc.setdefault("cases", {})
    for key, kwargs in cases:
        if key in results:
            continue
        results[key] = run_one(group, key)
        results[key]["date"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        print(group, key, {k: results[key].get(k) for k in ("rouge1", "exact_sequences", "seconds", "certain")},
              flush=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "1")))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    all_groups = groups()
    if sys.argv[1:2] == ["--case"]:
        kwargs = dict(all_groups[sys.argv[2]])[sys.argv[3]]
        try:
            result = case(**kwargs)
        except Exception as exc:  # recorded, never hidden
            result = {"error": f"{type(exc).__name__}: {exc}"}
        print("RESULT " + json.dumps(result))
        sys.exit(0)
    for name in sys.argv[1:] or list(all_groups):
        run(name, all_groups[name])
