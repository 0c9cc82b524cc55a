"""The inspector against every malicious model fedleak builds, disguised ones, and honest models.

    .venv/bin/python benchmarks/bench_inspect_malicious.py [--quick] [--batch 16] [--out PATH]

For each model, four checks a client can run (``fedleak inspect``):

* ``structural``: the weight signatures of :mod:`fedleak.fl.inspect` (imprint rows, trap weights);
* ``dsnr``: SEER's D-SNR > 1 on the client's own batch (:mod:`fedleak.fl.dsnr`);
* ``rows`` / ``pairs``: our row and pair variants of D-SNR (dominated share > 0.5);
* ``any``: the union (what ``fedleak inspect --model`` reports when the structure matches);

and, separately, ``structure``: whether the file's tensor names/shapes differ from the honest
architecture (what ``--model`` catches first; every variant here that adds a layer).

Malicious: imprint structures (cumulative, sparse, one-shot ×2, cah) in front of LeNet, the FEMNIST
CNN (digits), the CIFAR-100 CNN and ResNet-20 (photos); deep placements in ResNet-20; LOKI (K = 4, 8;
FedSGD and FedAvg rows); disguised imprints (perturbed rows, hidden among honest rows,
channel-mixed, all three) and honest-looking trap weights (:mod:`fedleak.models.disguise`), with
their FedSGD leakage on 32 images; fishing when available. Honest: zoo models at init, after 3
FedAvg rounds, and a user checkpoint (10 FedAvg rounds, saved to and loaded from safetensors).
CPU, one thread, embedded data only. Writes ``benchmarks/results/inspect-malicious.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

import fedleak
from fedleak import Protocol
from fedleak.fl import client_update
from fedleak.fl.dsnr import DSNR_THRESHOLD, ROW_SHARE_THRESHOLD, measure
from fedleak.fl.inspect import inspect_model, structure_finding
from fedleak.fl.training import train_fedavg
from fedleak.models.disguise import disguised_imprint, honest_looking_trap, read_disguised
from fedleak.models.imprint import imprint
from fedleak.models.loki import loki
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)

RESULTS = Path(__file__).parent / "results" / "inspect-malicious.json"
CHECKS = ("structural", "dsnr", "rows", "pairs", "any")


def _data():
    return {"digits": fedleak.data.load("digits", num_clients=8, samples_per_client=64, seed=3),
            "photos": fedleak.data.load("photos", num_clients=8, samples_per_client=64, seed=3)}


def malicious(data, quick):
    seeds = range(1) if quick else range(2)
    front = [("digits", "lenet"), ("digits", "femnist-cnn"), ("photos", "cifar100-cnn"), ("photos", "resnet20")]
    if quick:
        front = [("digits", "lenet"), ("photos", "cifar100-cnn")]
    structures = [("cumulative", {}), ("sparse", {}), ("one-shot-sparse", {"structure": "one-shot", "one_shot": "sparse"}),
                  ("one-shot-cumulative", {"structure": "one-shot", "one_shot": "cumulative"}), ("cah", {})]
    for d, base in front:
        spec = data[d][0]
        for family, extra in structures:
            opts = {"structure": family, **extra}
            for bins in ((64,) if quick else (16, 64)):
                for linfunc in (("randn",) if quick else ("mean", "randn")):
                    for seed in seeds:
                        yield (f"imprint-{family}", f"{base}/{d}", d, lambda spec=spec, base=base, opts=opts, bins=bins,
                               linfunc=linfunc, seed=seed: imprint(fedleak.models.build(base, spec, seed=seed), spec,
                                                                   bins=bins, linfunc=linfunc, seed=seed, **opts))
    photos = data["photos"][0]
    for position in (("layer2",) if quick else ("layer1", "layer2")):
        for structure in ("cumulative", "sparse"):
            for seed in seeds:
                yield (f"deep-{structure}", f"resnet20@{position}/photos", "photos",
                       lambda position=position, structure=structure, seed=seed:
                       imprint(fedleak.models.build("resnet20", photos, seed=seed), photos, bins=64,
                               structure=structure, position=position, linfunc="randn", seed=seed))
    for d, base in (("digits", "lenet"), ("photos", "cifar100-cnn")):
        spec = data[d][0]
        for k in ((4,) if quick else (4, 8)):
            for structure, gain in (("cumulative", 1.0), ("sparse", 1e-3)):
                for seed in seeds:
                    yield (f"loki-{structure}", f"{base}/{d} K={k}", d,
                           lambda spec=spec, base=base, k=k, structure=structure, gain=gain, seed=seed:
                           loki(fedleak.models.build(base, spec, seed=seed), spec, clients=k, bins=64,
                                structure=structure, gain=gain, seed=seed).for_client(seed % k))
        for family, opts in (("disguised-perturbed", {"perturb": 0.05}),
                             ("disguised-hidden", {"perturb": 0.05, "honest_rows": 64}),
                             ("disguised-channel-mixed", {"mix": True}),
                             ("disguised-all", {"mix": True, "perturb": 0.05, "honest_rows": 64})):
            for seed in (range(1) if quick else range(3)):
                yield (family, f"{base}/{d}", d, lambda spec=spec, base=base, opts=opts, seed=seed:
                       disguised_imprint(fedleak.models.build(base, spec, seed=seed), spec, bins=64, seed=seed, **opts))
        for seed in (range(1) if quick else range(3)):
            yield ("trap-honest-looking", f"{base}/{d}", d, lambda spec=spec, base=base, seed=seed:
                   honest_looking_trap(fedleak.models.build(base, spec, seed=seed), spec, bins=64, seed=seed))
    try:
        from fedleak.models.fishing import fishing
    except ImportError:
        return
    for d, base in (("digits", "lenet"), ("photos", "cifar100-cnn")):
        spec = data[d][0]
        for seed in seeds:
            yield ("fishing-class", f"{base}/{d}", d, lambda spec=spec, base=base, seed=seed:
                   fishing(fedleak.models.build(base, spec, seed=seed), spec, target_class=seed % spec.num_classes))


def honest(data, quick):
    zoo = [("femnist-cnn", "digits"), ("lenet", "digits"), ("mlp", "digits"), ("convnet", "digits"),
           ("cifar100-cnn", "photos"), ("resnet20", "photos"), ("convnet", "photos")]
    if quick:
        zoo = zoo[:3] + zoo[4:6]
    for name, d in zoo:
        spec, clients = data[d]
        for seed in (range(2) if quick else range(3)):
            yield ("init", f"{name}/{d}", d, lambda name=name, spec=spec, seed=seed: fedleak.models.build(name, spec, seed=seed))
        for seed in (range(1) if quick else range(2)):
            yield ("fedavg-3-rounds", f"{name}/{d}", d, lambda name=name, spec=spec, clients=clients, seed=seed:
                   train_fedavg(fedleak.models.build(name, spec, seed=seed), clients[:6], rounds=3, clients_per_round=3,
                                protocol=Protocol("fedavg", 2, 8, 0.05), seed=seed))
        yield ("user-checkpoint-10-rounds", f"{name}/{d}", d, lambda name=name, spec=spec, clients=clients:
               _checkpoint(name, spec, clients))


def _checkpoint(name, spec, clients):
    """A user's checkpoint: 10 FedAvg rounds, saved to and loaded back from safetensors."""
    from safetensors.torch import load_file, save_file

    model = train_fedavg(fedleak.models.build(name, spec, seed=7), clients[:6], rounds=10, clients_per_round=3,
                         protocol=Protocol("fedavg", 2, 8, 0.05), seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "user.safetensors")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
        fresh = fedleak.models.build(name, spec, seed=0)
        fresh.load_state_dict(load_file(path))
    return fresh


def _leakage(family, model, spec, client):
    """Verbatim (PSNR > 60 dB) inputs of one 32-image FedSGD update, for the disguised variants."""
    from fedleak.types import ClientData, Reconstruction

    batch = ClientData(client.inputs[:32], client.labels[:32], client.client_id)
    update = client_update(model, batch, Protocol("fedsgd"))
    if family.startswith("disguised"):
        rec = Reconstruction(read_disguised(update, model), None)
    else:
        rec = fedleak.attacks.build("cah").reconstruct(update, model, spec)
    scores = fedleak.metrics.evaluate(rec, batch, spec)
    return sum(1 for p in scores["psnr_per_input"] if p is not None and p > 60)


def run(cases, data, batch, honest_set):
    table = defaultdict(lambda: {c: 0 for c in CHECKS} | {"total": 0, "structure": 0, "verbatim": []})
    values = defaultdict(lambda: defaultdict(list))
    examples, seconds = [], []
    for family, model_name, d, make in cases:
        spec, clients = data[d]
        model = make()
        client = clients[-1]
        start = time.perf_counter()
        inspection = inspect_model(model)
        m = measure(model, client.inputs[:batch], client.labels[:batch])
        seconds.append(time.perf_counter() - start)
        flags = {"structural": inspection.suspicious, "dsnr": m["dsnr"] > DSNR_THRESHOLD,
                 "rows": m["dominated_row_share"] > ROW_SHARE_THRESHOLD,
                 "pairs": m["dominated_pair_share"] > ROW_SHARE_THRESHOLD}
        flags["any"] = any(flags.values())
        base_name = model_name.split("/")[0].split("@")[0]
        reference = fedleak.models.build(base_name, spec, seed=0)
        row = table[family]
        row["total"] += 1
        row["structure"] += int(structure_finding(model.state_dict(), reference) is not None)
        for c in CHECKS:
            row[c] += int(flags[c])
        for key in ("dsnr", "dominated_row_share", "dominated_pair_share"):
            values[family][key].append(m[key])
        if not honest_set and (family.startswith("disguised") or family == "trap-honest-looking"):
            row["verbatim"].append(_leakage(family, model, spec, client))
        if (honest_set and flags["any"]) or (not honest_set and not flags["any"]):
            examples.append({"family": family, "model": model_name, "dsnr": m["dsnr"],
                             "row_share": m["dominated_row_share"], "pair_share": m["dominated_pair_share"],
                             "layers": [m["dsnr_layer"], m["row_layer"], m["pair_layer"]],
                             "structural": inspection.summary()[:160]})
    for family, row in table.items():
        for key, vals in values[family].items():
            row[f"max_{key}"] = max(vals)
            row[f"min_{key}"] = min(vals)
    return {"per_family": dict(table), "unexpected": examples,
            "seconds_median": sorted(seconds)[len(seconds) // 2]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--out", default=fresh("inspect-malicious.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    start = time.time()
    data = _data()
    detection = run(malicious(data, args.quick), data, args.batch, False)
    false_pos = run(honest(data, args.quick), data, args.batch, True)
    result = {"detection": detection, "false_positives": false_pos, "batch": args.batch, "quick": args.quick,
              "thresholds": {"dsnr": DSNR_THRESHOLD, "row_share": ROW_SHARE_THRESHOLD, "pair_share": ROW_SHARE_THRESHOLD},
              "seconds": round(time.time() - start, 1), "threads": torch.get_num_threads(),
              "load_average": os.getloadavg(), "device": "cpu", "date": datetime.datetime.utcnow().isoformat() + "Z",
              "torch": torch.__version__, "python": platform.python_version()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for name, part in (("malicious (flagged)", detection), ("honest (flagged = false positive)", false_pos)):
        print(name)
        for family, row in part["per_family"].items():
            print(f"  {family:<28} n={row['total']:<3} " + " ".join(f"{c}={row[c]}" for c in CHECKS)
                  + f" structure={row['structure']}" + (f" verbatim={row['verbatim']}" if row["verbatim"] else ""))
    print(f"{result['seconds']} s")


if __name__ == "__main__":
    main()
