"""The boundary map of exact text recovery on a real decoder (issue 28, item 5): where DAGER stops.

One cell = one FedSGD client step of SmolLM2-135M (the converted folder of ``bench_llm.py``) with PEFT's
LoRA on its default targets (q_proj, v_proj; α = 2r, round 1: B = 0) over N sequences of L tokens of the
embedded corpus, attacked by ``dager`` (Petrov et al., NeurIPS 2024, §5.3 for LoRA). Recorded per cell:
the exact share (sequences recovered token for token), ROUGE-1, whether the update recomputed from them
matched (``certain``), DAGER's stated exactness condition (token inputs against the span dimension it
measured) and the CPU seconds. The grid is the issue's: batch × length × LoRA rank × dropout × local steps =
{1, 4, 16} × {16, 64, 512} × {8, 32, 128, full fine-tuning} × {off, shipped} × {1, 10} (shipped: LoRA dropout
0.075, FlowerTune's; SmolLM2's own config ships none; 10 steps: FedAvg on the full batch at the same lr, the
update θᶜ − θˢ as the client sends it). It runs cheapest first (tokens × steps); on 2 CPU cores the largest
cells (16 × 512 × 10 steps: FlowerTune's client, ~1,000 CPU-s per step set) take sessions, so the record lists
the cells not run yet (``not_run``) and the plot hatches them.

The theoretical limit (DAGER Thm. 3.2 / §5.3): the N·L token inputs of a step must span fewer
directions than the span holds — the LoRA rank r (the adapter's B-gradient lives in r dimensions), or
for full fine-tuning the width the first layers' inputs reach (569 of SmolLM2's 576, measured) — so
exact recovery needs N·L below it (repeated tokens lower the count). The plot draws N·L = r (width)
as a line over each panel.

Resumable: cells already in the results file are skipped; every cell is written when it finishes,
and the plot redrawn (``--plot-only`` redraws from the file).

    OMP_NUM_THREADS=1 nice -n 19 python benchmarks/bench_llm_boundary.py [--folder /tmp/fedleak-smollm2]
        [--model smollm2|llama-tiny] --out benchmarks/results/llm_boundary.json [--max-cells K]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from pathlib import Path

import torch

from _results import fresh

BATCHES, LENGTHS, RANKS, DROPOUTS = (1, 4, 16), (16, 64, 512), (8, 32, 128, "full"), ("off", "shipped")
#: local steps per round: 1 (FedSGD) and 10 (FedAvg, FlowerTune's local steps, full batch, same lr)
STEPS = (1, 10)
SHIPPED_LORA_DROPOUT = 0.075
PLOT = Path(__file__).resolve().parent.parent / "docs" / "llm-boundary.png"


def key(batch: int, length: int, rank, dropout: str, steps: int = 1) -> str:
    return f"{batch}x{length}-{'full' if rank == 'full' else f'r{rank}'}-{dropout}" + (f"-s{steps}" if steps > 1 else "")


def grid() -> list[tuple]:
    """Every cell (batch, length, rank, dropout, steps), cheapest first: client tokens × steps, LoRA before full."""
    rank_order = {r: i for i, r in enumerate(RANKS)}
    return sorted(itertools.product(BATCHES, LENGTHS, RANKS, DROPOUTS, STEPS),
                  key=lambda c: (c[0] * c[1] * c[4], c[2] == "full", rank_order[c[2]], c[3]))


def steps_of(cell_key: str) -> int:
    tail = cell_key.rsplit("-", 1)[-1]
    return int(tail[1:]) if tail[:1] == "s" and tail[1:].isdigit() else 1


def not_run(cells: dict) -> list[str]:
    """The grid's cells with no measurement yet (the run is resumable: they are next)."""
    return [key(*c) for c in grid() if key(*c) not in cells]


def environment() -> dict:
    import platform

    return {"threads": torch.get_num_threads(), "load_average": list(os.getloadavg()), "device": "cpu",
            "machine": platform.machine(), "torch": torch.__version__, "cpus": os.cpu_count(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_cell(args, batch: int, length: int, rank: int, dropout: str, steps: int = 1) -> dict:
    import fedleak
    import fedleak.attacks
    import fedleak.data.tokenizers
    import fedleak.metrics
    from fedleak.attacks.text.dager import dropout_in_training
    from fedleak.fl.client import client_update
    from fedleak.types import Protocol

    if args.model == "smollm2":
        source = args.folder
        tok = fedleak.data.tokenizers.load_tokenizer(Path(source))
    else:
        source, tok = args.model, None
    spec, clients = fedleak.data.load("text", num_clients=1, samples_per_client=batch, seq_len=length,
                                      task="causal-lm", tokenizer=tok, seed=args.seed)
    if rank == "full":  # full fine-tuning: the model's own dropout (SmolLM2 ships none)
        model = fedleak.models.build(str(source), spec, seed=0, dropout=dropout)
    else:
        model = fedleak.models.build(str(source), spec, seed=0, lora=rank, lora_targets="peft",
                                     lora_dropout=SHIPPED_LORA_DROPOUT if dropout == "shipped" else 0.0)
    # gradient accumulation in slices of at most 2048 tokens (the same mean gradient): 16 × 512 in one forward
    # needs over 20 GB (FlowerTune's preset does the same, audit/plan/flowertune.micro_batch)
    model.micro_batch = max(1, 2048 // length) if 2048 // length < batch else None
    cpu0, t0 = time.process_time(), time.perf_counter()
    protocol = Protocol("fedsgd", lr=5e-5) if steps == 1 else Protocol("fedavg", epochs=steps, lr=5e-5)
    update = client_update(model, clients[0], protocol, seed=args.seed)
    step_cpu = time.process_time() - cpu0
    rec = fedleak.attacks.build("dager").reconstruct(update, model, spec)
    scores = fedleak.metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)
    exact = rec.extras.get("exactness", {})
    return {"batch": batch, "seq_len": length, "tokens": batch * length, "lora_rank": rank, "dropout": dropout,
            "dropout_acting": dropout_in_training(model) or "none", "local_steps": steps,
            "exact_share": scores["exact_sequences"], "rouge1": scores["rouge1"],
            "certain": bool(rec.extras.get("certain")), "holds": exact.get("holds"),
            "span_limit": exact.get("limit"), "reason": exact.get("reason"),
            "client_step_cpu_seconds": step_cpu, "cpu_seconds": time.process_time() - cpu0,
            "wall_seconds": time.perf_counter() - t0, "load_average": list(os.getloadavg())}


def plot(record: dict, path: Path, steps: int = 1) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import Normalize

    cells = record["cells"]
    panels = [(r, d) for d in DROPOUTS for r in RANKS]
    fig, grid_axes = plt.subplots(len(DROPOUTS), len(RANKS), figsize=(3.0 * len(RANKS), 2.9 * len(DROPOUTS)),
                                  sharey=True)
    axes = list(grid_axes.reshape(-1))
    cmap, norm = plt.get_cmap("RdYlGn"), Normalize(0, 1)
    xs, ys = {b: i for i, b in enumerate(BATCHES)}, {L: j for j, L in enumerate(LENGTHS)}
    for ax, (rank, dropout) in zip(axes, panels):
        for b, L in itertools.product(BATCHES, LENGTHS):
            cell = cells.get(key(b, L, rank, dropout, steps))
            x, y = xs[b], ys[L]
            if cell is None:
                ax.add_patch(plt.Rectangle((x - .45, y - .45), .9, .9, facecolor="#dddddd", hatch="//",
                                           edgecolor="#999999"))
                ax.text(x, y, "not run", ha="center", va="center", fontsize=7, color="#555555")
                continue
            share = cell["exact_share"]
            ax.add_patch(plt.Rectangle((x - .45, y - .45), .9, .9, facecolor=cmap(norm(share)), edgecolor="k",
                                       linewidth=1.5 if cell["certain"] else 0.5))
            ax.text(x, y, f"{share:.0%}\nR1 {cell['rouge1']:.2f}" + ("\nproved" if cell["certain"] else ""),
                    ha="center", va="center", fontsize=7)
        # the limit N·L = r (full fine-tuning: the width the span test measured), on the log-spaced axes
        limits = [c["span_limit"] for k, c in cells.items() if c["lora_rank"] == rank and c.get("span_limit")
                  and c.get("local_steps", 1) == 1]
        limit = rank if rank != "full" else (max(limits) if limits else None)
        if limit is not None:
            grid = torch.linspace(0, len(BATCHES) - 1, 100)
            logb = torch.log2(torch.tensor([float(b) for b in BATCHES]))
            logl = torch.log2(torch.tensor([float(L) for L in LENGTHS]))
            bx = torch.from_numpy(__import__("numpy").interp(grid.numpy(), range(len(BATCHES)), logb.numpy()))
            ly = torch.log2(torch.tensor(float(limit))) - bx  # log2 L on the limit
            yy = torch.from_numpy(__import__("numpy").interp(ly.numpy(), logl.numpy(), range(len(LENGTHS)),
                                                             left=-1.0, right=len(LENGTHS)))
            ax.plot(grid, yy, "b--", linewidth=1.2, label=f"N·L = {'r = ' if rank != 'full' else 'width '}{limit}")
        ax.set_xlim(-.6, len(BATCHES) - .4)
        ax.set_ylim(-.6, len(LENGTHS) - .4)
        ax.set_xticks(range(len(BATCHES)), [str(b) for b in BATCHES])
        ax.set_yticks(range(len(LENGTHS)), [str(L) for L in LENGTHS])
        ax.set_xlabel("batch N")
        ax.set_title(("full fine-tuning" if rank == "full" else f"LoRA r {rank}") + f", dropout {dropout}", fontsize=9)
        if limit is not None:
            ax.legend(fontsize=7, loc="upper right")
    for row in grid_axes:
        row[0].set_ylabel("sequence length L")
    env = record.get("environment", {})
    what = "FedSGD round 1 (B = 0), 1 local step" if steps == 1 else f"FedAvg round 1 (B = 0 at the start), {steps} local steps"
    fig.suptitle(f"DAGER exact share on {record['model']}, {what}; "
                 f"{env.get('threads', '?')} thread(s), load {env.get('load_average', ['?'])[0]:.1f}"
                 if env else record["model"], fontsize=9)
    missing = [k for k in not_run(cells) if steps_of(k) == steps]
    if missing:
        fig.text(0.5, 0.005, f"{len(missing)} cells not run yet (2 CPU cores; the run resumes): hatched",
                 ha="center", fontsize=8, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(record: dict, path: Path) -> None:
    """One figure per number of local steps: ``llm-boundary.png`` (1) and ``llm-boundary-s10.png`` (10)."""
    for steps in STEPS:
        plot(record, path if steps == 1 else path.with_name(f"{path.stem}-s{steps}{path.suffix}"), steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", default="/tmp/fedleak-smollm2", help="the converted SmolLM2 folder")
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "llama-tiny"])
    parser.add_argument("--out", default=fresh("llm_boundary.json"),
                        help="results file (default: a new file; name benchmarks/results/llm_boundary.json to resume the tracked one)")
    parser.add_argument("--plot", default=str(PLOT))
    parser.add_argument("--max-cells", type=int, default=None, help="stop after this many new cells")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot-only", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    record = json.loads(out.read_text()) if out.is_file() else {
        "case": "boundary", "model": args.model if args.model != "smollm2" else "smollm2 (converted folder)",
        "training": "FedSGD (1 local step), PEFT LoRA on q_proj/v_proj, α = 2r, round 1 (B = 0), lr 5e-5",
        "grid": {"batch": list(BATCHES), "seq_len": list(LENGTHS), "lora_rank": list(RANKS),
                 "dropout": list(DROPOUTS), "shipped_lora_dropout": SHIPPED_LORA_DROPOUT},
        "environment": environment(), "cells": {}}
    record["grid"] = {"batch": list(BATCHES), "seq_len": list(LENGTHS), "lora_rank": list(RANKS),
                      "dropout": list(DROPOUTS), "local_steps": list(STEPS), "shipped_lora_dropout": SHIPPED_LORA_DROPOUT}
    record["training"] = ("FedSGD (1 local step) or FedAvg (10 local steps, full batch), PEFT LoRA on q_proj/v_proj, "
                          "α = 2r, round 1 (B = 0 at the start), lr 5e-5; or full fine-tuning")
    record["not_run"] = not_run(record["cells"])
    if not args.plot_only:
        if args.model == "smollm2" and not (Path(args.folder) / "model.safetensors").is_file():
            from fedleak.models.hf import gguf

            gguf.convert(gguf.smollm2_file(), Path(args.folder))
        # cheapest first: fewer tokens first, off before shipped
        done = 0
        for batch, length, rank, dropout, steps in grid():
            k = key(batch, length, rank, dropout, steps)
            if k in record["cells"]:
                continue
            if args.max_cells is not None and done >= args.max_cells:
                break
            cell = run_cell(args, batch, length, rank, dropout, steps)
            record["cells"][k] = cell
            record["not_run"] = not_run(record["cells"])
            done += 1
            print(json.dumps({k: {f: cell[f] for f in ("exact_share", "rouge1", "certain", "holds", "span_limit",
                                                      "cpu_seconds")}}), flush=True)
            out.write_text(json.dumps(record, indent=1, default=str))
            plot_all(record, Path(args.plot))
    record["load_average_after"] = list(os.getloadavg())
    out.write_text(json.dumps(record, indent=1, default=str))
    plot_all(record, Path(args.plot))
    print(f"wrote {out} and {args.plot}")


if __name__ == "__main__":
    main()
