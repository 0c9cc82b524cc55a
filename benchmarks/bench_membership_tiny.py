"""Membership scores compared on a FlowerTune-shaped client scaled to ``llama-tiny`` (issue 45): two seeds and a
held-back corpus, ≥ 200 members and ≥ 200 non-members per row, minutes on one CPU thread.

The client: ``llama-tiny`` (2 layers, width 128, random weights, round 1), PEFT LoRA r 8 with dropout 0.075 on
PEFT's default targets (q, v), AdamW at lr 5e-5 (a fresh state, FlowerTune's client), 10 local steps of
16 × 16 tokens: 160 sequences, each seen once. ``--clients`` clients per row train from θˢ on disjoint windows;
each client's candidates are its 160 sequences (members) and 160 windows held back from the same shuffled pool
of the same documents, trained on by no client (non-members); scores are pooled over the clients (2 clients:
320 + 320). Statistics, each from the update and the candidates only (no label):

* ``projres``: ProjRes (:mod:`fedleak.attacks.text.projres`);
* ``joint-fit``: the update fitted on all candidates' gradients (:mod:`fedleak.attacks.text.membership`);
* ``adam-fit``: the same fit with each coordinate scaled by AdamW's linearised step
  (:mod:`fedleak.attacks.text.adam_fit`), from the same gradients;
* ``loss-diff``: loss(θˢ, x) − loss(θᶜ, x), the mean next-token loss the client's update removed from the
  candidate (θˢ as the reference model, the calibration of likelihood-ratio attacks); ``loss-diff-top20``: the
  mean of its 20 % largest per-token decreases (the min-k % variant);
* ``cosine``: the centred cosine of the candidate's gradient with the update (one candidate at a time).

Corpora: ``embedded`` (scikit-learn dataset descriptions and standard-library docstrings, the corpus the
scores were explored on) and ``topics`` (Python's language-reference topics, ``pydoc_data.topics``, written
to a temporary ``.txt``: a corpus held back from that exploration). Rows: seeds 0 and 1 on ``embedded``,
seed 0 on ``topics``, and, for contrast, the LoRA client with plain SGD (lr 5e-3) and full fine-tuning with
AdamW (lr 1e-3, 4 steps of 8 × 8 tokens) on ``embedded`` (``--rows case:corpus:seed,…`` picks rows). The results file is rewritten after every client, with thread count, load average and CPU
seconds of the client's update and of each statistic.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_membership_tiny.py [--clients 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedleak import data, models
from fedleak.attacks.text.adam_fit import adam_fit_scores
from fedleak.attacks.text.projres import projres_scores
from fedleak.fl.client import client_update
from fedleak.models.hf.wrapper import next_token_targets
from fedleak.types import ClientData, Protocol
from _results import fresh
from bench_membership import distinct, environment, summary

SPLIT_RULE = ("the corpus' windows of L tokens shuffled with the seed, each distinct window once; client k trains on windows [n·k, n·k + n) (n = "
              "steps × batch, each seen once); its non-members are the n windows [n·(K + k), n·(K + k) + n) of the same "
              "shuffled pool (K clients: trained on by no client, the same documents)")
ROWS = "lora-adamw:embedded:0,lora-adamw:embedded:1,lora-adamw:topics:0,lora-sgd:embedded:0,full-adamw:embedded:0"
CASES = {"lora-adamw": {"lora": 8, "batch": 16, "steps": 10, "seq_len": 16, "lr": 5e-5, "optimizer": "adamw"},
         "full-adamw": {"lora": 0, "batch": 8, "steps": 4, "seq_len": 8, "lr": 1e-3, "optimizer": "adamw"},
         "lora-sgd": {"lora": 8, "batch": 16, "steps": 10, "seq_len": 16, "lr": 5e-3, "optimizer": "sgd"}}


def topics_file(folder: Path) -> Path:
    """Python's language-reference topics (``pydoc_data.topics``) as one ``.txt`` (the held-back corpus)."""
    from pydoc_data.topics import topics

    path = folder / "pydoc_topics.txt"
    path.write_text("\n\n".join(topics[k] for k in sorted(topics)), encoding="utf-8")
    return path


def loss_decrease(model, update, ids: torch.Tensor) -> torch.Tensor:
    """(M, L) per-token next-token loss at θˢ minus at θᶜ (eval mode, float64 cross-entropy); 0 where no target."""
    targets = next_token_targets(ids, torch.full((ids.shape[0],), -100), model.pad_id)
    keep = targets != -100
    losses = []
    previous = model.training
    model.eval()
    try:
        for params in (update.server_params, update.final_params()):
            parts = []
            for first in range(0, ids.shape[0], 16):
                with torch.no_grad():
                    logits, _ = functional_call(model, {**params, **(update.buffers or {})}, (ids[first:first + 16],),
                                                strict=False)
                part = targets[first:first + 16]
                parts.append(F.cross_entropy(logits.double().reshape(-1, logits.shape[-1]),
                                             part.reshape(-1).clamp_min(0), reduction="none").view(part.shape))
            losses.append(torch.cat(parts))
    finally:
        model.train(previous)
    return (losses[0] - losses[1]).masked_fill(~keep, 0.0), keep


def client_row(model, update, cands: torch.Tensor, members: list, seed: int) -> dict:
    row, scores = {}, {}

    def timed(name, fn):
        cpu, wall = time.process_time(), time.perf_counter()
        got = fn()
        return got, time.process_time() - cpu, time.perf_counter() - wall

    got, cpu, wall = timed("projres", lambda: projres_scores(model, update, cands, seed=seed))
    scores["projres"] = (got["scores"], cpu, wall)
    got, cpu, wall = timed("fits", lambda: adam_fit_scores(model, update, cands, seed=seed))
    scores["adam-fit"] = (got["scores"], cpu, wall)  # one gradient per candidate serves both fits and the cosine
    scores["joint-fit"] = (got["joint"], cpu, wall)
    row["gradient_coordinates"] = {"trainable": got["parameters"], "kept": got["kept"]}
    (diff, keep), cpu, wall = timed("loss", lambda: loss_decrease(model, update, cands))
    count = keep.sum(1).clamp_min(1)
    scores["loss-diff"] = ((diff.sum(1) / count).tolist(), cpu, wall)
    k = max(1, int(0.2 * cands.shape[1]))
    scores["loss-diff-top20"] = (diff.masked_fill(~keep, -1e30).topk(k, dim=1).values.mean(1).tolist(), cpu, wall)
    scores["cosine"] = (got["cosine"], scores["adam-fit"][1], scores["adam-fit"][2])  # the fits' gradients
    for name, (s, cpu, wall) in scores.items():
        row[name] = summary(s, members, wall) | {"cpu_seconds": cpu}
    return row, {k: v[0] for k, v in scores.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--rows", default=ROWS, help="case:corpus:seed,… (cases: " + ", ".join(CASES) + ")")
    parser.add_argument("--out")
    args = parser.parse_args()
    out = Path(args.out or fresh("membership_tiny.json"))
    folder = Path(tempfile.mkdtemp(prefix="fedleak-topics-"))
    corpora = {"embedded": None, "topics": str(topics_file(folder))}
    record = {"case": "membership-tiny", "environment": environment(), "split": SPLIT_RULE,
              "corpora": {"embedded": "scikit-learn dataset descriptions, Python stdlib docstrings (explored on)",
                          "topics": "Python's language-reference topics (pydoc_data.topics; held back from the "
                                    "exploration)"},
              "model": "llama-tiny (2 layers, width 128, random weights, round 1), default tokenizer",
              "rows": []}
    for case, corpus, seed in (r.split(":") for r in args.rows.split(",")):
        seed = int(seed)
        c = CASES[case]
        per = c["batch"] * c["steps"]
        spec, pool = data.load("text", root=corpora[corpus], num_clients=1, samples_per_client=None, seed=seed,
                               seq_len=c["seq_len"], task="causal-lm", partition="iid")
        ids, labels = distinct(pool[0].inputs.long(), pool[0].labels)
        options = {"lora": c["lora"], "lora_dropout": 0.075, "lora_targets": "peft"} if c["lora"] else {}
        model = models.build("llama-tiny", spec, seed=seed, **options)
        protocol = Protocol("fedavg", 1, c["batch"], c["lr"], optimizer=c["optimizer"])
        row = {"case": case, "corpus": corpus, "seed": seed, "windows": int(ids.shape[0]),
               "windows_repeated": int(pool[0].inputs.shape[0] - ids.shape[0]),
               "shape": f"{c['batch']} x {c['seq_len']} tokens, {c['steps']} local steps",
               "client": {"lora": getattr(model, "lora_config", None), "optimizer": c["optimizer"], "lr": c["lr"],
                          "schedule": "constant within the round (round 1)"}, "clients": []}
        record["rows"].append(row)
        pooled: dict = {}
        held = per * args.clients
        if ids.shape[0] < 2 * held:
            raise SystemExit(f"{corpus}: {ids.shape[0]} windows of {c['seq_len']} tokens, {2 * held} needed")
        for k in range(args.clients):
            victim = ClientData(ids[k * per:(k + 1) * per], labels[k * per:(k + 1) * per], f"client-{k}")
            cands = torch.cat([victim.inputs, ids[held + k * per: held + (k + 1) * per]])
            members = [True] * per + [False] * per
            cpu, wall = time.process_time(), time.perf_counter()
            update = client_update(model, victim, protocol, seed=seed * 100 + k)
            entry = {"client": k, "client_update_cpu_seconds": time.process_time() - cpu,
                     "client_update_seconds": time.perf_counter() - wall, "candidates": int(cands.shape[0])}
            stats, scores = client_row(model, update, cands, members, seed)
            entry.update(stats)
            row["clients"].append(entry)
            for name, s in scores.items():
                pooled.setdefault(name, ([], []))[0].extend(s)
                pooled[name][1].extend(members)
            row["pooled"] = {name: summary(s, m, sum(e[name]["seconds"] for e in row["clients"]))
                             | {"cpu_seconds": sum(e[name]["cpu_seconds"] for e in row["clients"])}
                             for name, (s, m) in pooled.items()}
            record["load_average_after"] = list(os.getloadavg())
            out.write_text(json.dumps(record, indent=1, default=str))
        print(json.dumps({"case": case, "corpus": corpus, "seed": seed,
                          **{n: round(v["auc"], 3) for n, v in row["pooled"].items()}}), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
