"""Reproduce Dimitrov et al.'s Table 1 rows and Table 2 label errors on local data, resumably.

Table 1 (``table1``): one FedAvg setting (E epochs, batch m, N = 50, client lr 0.004), known label
counts, the first K clients of the dataset's fixed client order, one attack variant after another.
Every finished client is appended to ``<out>.jsonl`` at once, so an interrupted run resumes where
it stopped; the summary (client-mean and image-weighted Rec %/PSNR beside the paper's row) goes to
``<out>.json``. This is the configuration of ``fedleak run --preset dimitrov-table1-<dataset>
--settings <E>-<m>``, except that every client is attacked with attack seed 0.

Table 2 (``table2``): label-count error ½Σ|n − n̂| of RecLabels (``avg``) and Geng et al. at θˢ
(``start``) and θᶜ (``end``) for the five settings of the paper, from one client update each.

    python benchmarks/repro_dimitrov.py table1 --data ../shared/data/femnist_leaf/leaf-torch_niid_sf0.05 \
        --dataset femnist --setting E10-m5 --variants dimitrov,dimitrov-shared --clients 10 \
        --out benchmarks/results/dimitrov_table1_femnist_E10-m5
    python benchmarks/repro_dimitrov.py table2 --data ../shared/data/cifar100 --dataset cifar100 --clients 10 \
        --out benchmarks/results/dimitrov_table2_cifar100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import fedleak
from fedleak.attacks import build
from fedleak.attacks.labels import counts_to_labels, labels_to_counts, reclabels
from fedleak.config import load_preset
from fedleak.fl import client_update
from fedleak.metrics import evaluate, label_count_error
from fedleak.types import Protocol

SETTINGS = {"E1-m5": (1, 5), "E5-m5": (5, 5), "E10-m10": (10, 10), "E10-m5": (10, 5), "E10-m1": (10, 1)}
VARIANT_OF = {"dimitrov": "ours-prior", "dimitrov-no-prior": "ours-no-prior", "dimitrov-shared": "shared",
              "dimitrov-fedsgd-epoch": "fedsgd-epoch", "dimitrov-fedsgd": "fedsgd"}
DATA = {"femnist": dict(split="train", client_order="shuffled"), "cifar100": dict(split="test")}
MODEL = {"femnist": "femnist-cnn", "cifar100": "cifar100-cnn"}
THRESHOLD = {"femnist": 20.0, "cifar100": 19.0}


def clients_of(args):
    extra = DATA[args.dataset]
    return fedleak.data.load(args.dataset, args.data, num_clients=args.clients, samples_per_client=50, seed=0, **extra)


def paper_row(dataset: str, table: int, setting: str) -> dict:
    return load_preset(f"dimitrov-table{table}-{dataset}").paper.get(setting, {})


def table1(args) -> dict:
    spec, clients = clients_of(args)
    epochs, batch = SETTINGS[args.setting]
    protocol = Protocol("fedavg", epochs, batch, 0.004)
    log = Path(f"{args.out}.jsonl")
    done = set()
    if log.exists():
        done = {(r["variant"], r["client"]) for r in map(json.loads, log.read_text().splitlines())}
    for index, client in enumerate(clients):  # client-major: every variant of a client before the next client
        for variant in args.variants.split(","):
            if (variant, client.client_id) in done:
                continue
            model = fedleak.models.build(MODEL[args.dataset], spec, seed=0)
            counts = labels_to_counts(client.labels, spec.num_classes).tolist()
            update = client_update(model, client, protocol, seed=index, metadata={"label_counts": counts})
            start = time.time()
            rec = build(variant, iterations=args.iterations).reconstruct(update, model, spec)
            m = evaluate(rec, client, spec, threshold=THRESHOLD[args.dataset], clip=False)
            row = {"variant": variant, "client": client.client_id, "index": index, "n": len(client),
                   "psnr": m["psnr"], "rec_percent": m["rec_percent"], "seconds": time.time() - start,
                   "seconds_per_iteration": rec.extras.get("seconds_per_iteration"), "iterations": args.iterations,
                   "threads": torch.get_num_threads(), "load_average": os.getloadavg()[0]}
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(variant, index, client.client_id, len(client), f"{m['psnr']:.2f} dB", f"{m['rec_percent']:.0f} %",
                  f"{row['seconds']:.0f} s", flush=True)
    return summarize_table1(log, args.dataset, args.setting)


def summarize_table1(log: Path, dataset: str, setting: str) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    paper = paper_row(dataset, 1, setting)
    out = {"setting": setting, "dataset": dataset, "variants": {}}
    for variant in dict.fromkeys(r["variant"] for r in rows):
        rs = [r for r in rows if r["variant"] == variant]
        images = sum(r["n"] for r in rs)
        out["variants"][variant] = {
            "clients": len(rs), "images": images,
            "rec_percent": statistics.mean(r["rec_percent"] for r in rs),
            "rec_percent_std": statistics.pstdev(r["rec_percent"] for r in rs),
            "psnr": statistics.mean(r["psnr"] for r in rs), "psnr_std": statistics.pstdev(r["psnr"] for r in rs),
            "rec_percent_image_weighted": sum(r["rec_percent"] * r["n"] for r in rs) / images,
            "psnr_image_weighted": sum(r["psnr"] * r["n"] for r in rs) / images,
            "seconds_per_iteration": statistics.mean(r["seconds_per_iteration"] or 0.0 for r in rs),
            "paper": paper.get(VARIANT_OF.get(variant, variant), {}),
        }
    return out


def table2(args) -> dict:
    spec, clients = clients_of(args)
    paper = {name: paper_row(args.dataset, 2, name) for name in SETTINGS}
    out = {"dataset": args.dataset, "clients": len(clients), "settings": {}}
    for name, (epochs, batch) in SETTINGS.items():
        errors = {"avg": [], "start": [], "end": []}
        for index, client in enumerate(clients):
            model = fedleak.models.build(MODEL[args.dataset], spec, seed=0)
            update = client_update(model, client, Protocol("fedavg", epochs, batch, 0.004), seed=index)
            for mode in errors:
                counts = reclabels(update, model, num_dummy=3000, mode=mode, seed=0, input_shape=spec.shape)
                errors[mode].append(label_count_error(client.labels, counts_to_labels(counts), spec.num_classes))
        out["settings"][name] = {
            mode: {"mean": statistics.mean(v), "std": statistics.pstdev(v), "values": v,
                   "paper": paper[name].get({"avg": "reclabels", "start": "geng-server", "end": "geng-client"}[mode])}
            for mode, v in errors.items()}
        print(name, {mode: round(statistics.mean(v), 2) for mode, v in errors.items()}, flush=True)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", choices=("table1", "table2"))
    parser.add_argument("--data", required=True, help="dataset root (the LEAF folder, or the CIFAR-100 folder)")
    parser.add_argument("--dataset", choices=sorted(MODEL), default="femnist")
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="E10-m5")
    parser.add_argument("--variants", default="dimitrov,dimitrov-no-prior,dimitrov-shared,dimitrov-fedsgd-epoch,dimitrov-fedsgd")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True, help="path prefix: <out>.jsonl (table1 log) and <out>.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    result = table1(args) if args.table == "table1" else table2(args)
    Path(f"{args.out}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.table == "table1" else f"written {args.out}.json", file=sys.stdout)


if __name__ == "__main__":
    main()
