"""The client-side inspector (``fedleak inspect``): detection rate and false-positive rate.

    .venv/bin/python benchmarks/bench_inspect.py [--quick]

Writes ``benchmarks/results/inspect-<host>-<time>.json`` (``--out benchmarks/results/inspect.json`` updates the tracked file):

* ``detection``: fedleak's own malicious models — imprint structures ``cumulative`` (§3.3),
  ``sparse`` (§4.3), ``one-shot`` (§4.2, both fusions), ``cah`` (trap weights, App. A.8), with
  the block in front of LeNet / the FEMNIST CNN / the MLP (digits) and the CIFAR-100 CNN /
  ResNet-20 (photos), and the deep placements in ResNet-20 (after ``layer1``, ``layer2``, in front of
  ``layer3``) and ResNet-18 (``layer2``) — over bins, measurement functions and seeds: the share
  flagged suspicious, per family;
* ``false_positives``: every honest zoo model at init (several seeds) and after FedAvg rounds of
  :func:`fedleak.fl.training.train_fedavg` on the embedded data: the share flagged.

CPU, one thread, embedded data only (no files).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import defaultdict
from pathlib import Path

import torch

import fedleak
from fedleak import Protocol
from fedleak.fl.inspect import inspect_model
from fedleak.fl.training import train_fedavg
from fedleak.models.imprint import imprint
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default

RESULTS = Path(__file__).parent / "results" / "inspect.json"


def malicious_variants(quick: bool):
    digits, _ = fedleak.data.load("digits", num_clients=1, samples_per_client=2, seed=0)
    photos, _ = fedleak.data.load("photos", num_clients=1, samples_per_client=2, seed=0)
    seeds = range(1) if quick else range(3)
    front = [("digits", digits, "lenet"), ("digits", digits, "femnist-cnn"), ("digits", digits, "mlp"),
             ("photos", photos, "cifar100-cnn"), ("photos", photos, "resnet20")]
    structures = [("cumulative", {}), ("sparse", {}), ("one-shot", {"one_shot": "sparse"}),
                  ("one-shot", {"one_shot": "cumulative"}), ("cah", {})]
    for data, spec, base in front:
        for structure, extra in structures:
            for bins in ((16, 128) if quick else (16, 64, 128)):
                for linfunc in ("mean", "randn", "dct"):
                    for seed in seeds:
                        family = structure if structure != "one-shot" else f"one-shot-{extra['one_shot']}"
                        yield (family, f"{base}/{data}", lambda spec=spec, base=base, structure=structure,
                               extra=extra, bins=bins, linfunc=linfunc, seed=seed:
                               imprint(fedleak.models.build(base, spec, seed=seed), spec, bins=bins,
                                       structure=structure, linfunc=linfunc, seed=seed, **extra))
    for base, position in (("resnet20", "layer1"), ("resnet20", "layer2"), ("resnet20", "layer3"),
                           ("resnet18", "layer2")):
        for structure in ("cumulative", "sparse"):
            for seed in seeds:
                yield (f"deep-{structure}", f"{base}@{position}/photos",
                       lambda base=base, position=position, structure=structure, seed=seed:
                       imprint(fedleak.models.build(base, photos, seed=seed), photos, bins=64, structure=structure,
                               position=position, linfunc="randn", seed=seed))


def honest_models(quick: bool):
    digits = fedleak.data.load("digits", num_clients=6, samples_per_client=8, seed=0)
    photos = fedleak.data.load("photos", num_clients=6, samples_per_client=8, seed=0)
    zoo = [("femnist-cnn", digits), ("lenet", digits), ("mlp", digits), ("convnet", digits),
           ("cifar100-cnn", photos), ("resnet20", photos), ("resnet20-4", photos), ("resnet18", photos),
           ("convnet", photos)]
    for name, (spec, clients) in zoo:
        for seed in (range(2) if quick else range(5)):
            yield ("init", f"{name}/{spec.name}", lambda name=name, spec=spec, seed=seed:
                   fedleak.models.build(name, spec, seed=seed))
        heavy = name in ("resnet18", "resnet20-4")
        for seed in (range(1) if quick or heavy else range(2)):
            rounds = 2 if heavy else 3
            yield (f"fedavg-{rounds}-rounds", f"{name}/{spec.name}",
                   lambda name=name, spec=spec, clients=clients, seed=seed, rounds=rounds:
                   train_fedavg(fedleak.models.build(name, spec, seed=seed), clients, rounds=rounds,
                                clients_per_round=3, protocol=Protocol("fedavg", 2, 4, 0.02), seed=seed))


def tally(cases) -> dict:
    per_family, per_model, misses, seconds = defaultdict(lambda: [0, 0]), defaultdict(lambda: [0, 0]), [], []
    for family, model_name, make in cases:
        model = make()
        start = time.perf_counter()
        inspection = inspect_model(model)
        seconds.append(time.perf_counter() - start)
        for table, key in ((per_family, family), (per_model, f"{family} {model_name}")):
            table[key][0] += int(inspection.suspicious)
            table[key][1] += 1
        if inspection.findings:
            misses.append({"family": family, "model": model_name, "summary": inspection.summary()[:300]})
    flagged = sum(v[0] for v in per_family.values())
    total = sum(v[1] for v in per_family.values())
    return {"flagged": flagged, "total": total, "rate": flagged / total,
            "per_family": {k: {"flagged": v[0], "total": v[1], "rate": v[0] / v[1]} for k, v in per_family.items()},
            "per_model": {k: {"flagged": v[0], "total": v[1]} for k, v in per_model.items()},
            "seconds_median": sorted(seconds)[len(seconds) // 2], "findings": misses}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=fresh("inspect.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    detection = tally(malicious_variants(args.quick))
    detection["findings"] = [m for m in detection["findings"] if "suspicious" not in m["summary"]]  # the misses
    honest = tally(honest_models(args.quick))
    result = {"detection": detection, "false_positives": honest, "quick": args.quick,
              "seconds": round(time.time() - start, 1), "torch": torch.__version__, "python": platform.python_version()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"detection {detection['flagged']}/{detection['total']} ({detection['rate']:.1%}); false positives "
          f"{honest['flagged']}/{honest['total']} ({honest['rate']:.1%}); {result['seconds']} s")
    for family, v in detection["per_family"].items():
        print(f"  detect {family:<22} {v['flagged']}/{v['total']}")
    for family, v in honest["per_family"].items():
        print(f"  honest {family:<22} {v['flagged']}/{v['total']} flagged")


if __name__ == "__main__":
    main()
