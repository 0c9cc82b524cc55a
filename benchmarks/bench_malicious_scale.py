"""Malicious servers under secure aggregation: verbatim share against K clients × N images.

    .venv/bin/python benchmarks/bench_malicious_scale.py [--clients 1,8,32,100] [--samples 8,32] [--out PATH]

FedSGD, CIFAR-10 (train split of the exact subset), the CIFAR-100 CNN of Dimitrov et al. as the base
model, h a Gaussian random direction whose (Gaussian) distribution the server fits on 256 of its own
images (the test split; Fowl et al. App. A.2). At each (K, N) the server sees
only the N-weighted mean of K clients' gradients (:mod:`fedleak.fl.secagg`) and reads back:

* ``imprint-128``: one shared 128-bin cumulative imprint block (Fowl et al. 2022 §4.2);
* ``imprint-matched``: one shared block with 64·K bins — the same FC size as LOKI's;
* ``loki``: LOKI (Zhao et al. 2024), 64 bins per client, each client its own model;
* ``cah``: one shared 128-row trap-weight layer (Boenisch et al. 2023; as in Fowl et al. App. A.8).

Verbatim: PSNR > 60 dB against the K·N originals. Proposition 1's expectation beside each.
CPU, one thread. Writes ``benchmarks/results/malicious-scale.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time
from pathlib import Path

import torch

import fedleak
from fedleak.attacks.imprint import expected_recovered
from fedleak.fl.secagg import concatenate, secure_aggregate_per_client
from fedleak.models.imprint import imprint
from fedleak.models.loki import loki
from fedleak.types import Protocol
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)

RESULTS = Path(__file__).parent / "results" / "malicious-scale.json"
ROOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"
LOKI_BINS = 64


def verbatim(rec, truth, spec) -> int:
    """Originals read back at PSNR > 60 dB: each candidate matched to the original with the same 8-bit
    pixels (a hash lookup instead of a K·N × K·N PSNR matrix), then its PSNR checked."""
    lo, hi = spec.pixel_range
    originals = spec.denormalize(truth.inputs.double())
    table = {}
    for i, image in enumerate(originals):
        table.setdefault(((image - lo) / (hi - lo) * 255).round().to(torch.int16).numpy().tobytes(), i)
    found = set()
    for image in spec.denormalize(rec.inputs.double()):
        i = table.get(((image - lo) / (hi - lo) * 255).round().clamp(-1, 256).to(torch.int16).numpy().tobytes())
        if i is not None and i not in found:
            mse = float((image - originals[i]).pow(2).mean())
            if mse == 0 or 10 * torch.log10(torch.tensor((hi - lo) ** 2 / mse)) > 60:
                found.add(i)
    return len(found)


def point(spec, clients, k, n, seed, surrogate):
    base = fedleak.models.build("cifar100-cnn", spec, seed=seed)
    truth = concatenate(clients)
    proto = Protocol("fedsgd")
    out = {}
    for name, bins, structure in (("imprint-128", 128, "cumulative"), ("imprint-matched", LOKI_BINS * k, "cumulative"),
                                  ("cah", 128, "cah")):
        if name == "imprint-matched" and k == 1 and LOKI_BINS * k == 128:
            continue
        tick = time.perf_counter()
        model = imprint(base, spec, bins=bins, structure=structure, linfunc="randn", seed=seed,
                        surrogate=None if structure == "cah" else surrogate)
        update = secure_aggregate_per_client(lambda _k, model=model: model, clients, proto, seed=seed)
        rec = fedleak.attacks.build("imprint").reconstruct(update, model, spec)
        count = verbatim(rec, truth, spec)
        out[name] = {"bins": bins, "verbatim": count, "share": count / (k * n),
                     "expected": None if structure == "cah" else expected_recovered(k * n, bins) / (k * n),
                     "seconds": time.perf_counter() - tick}
    tick = time.perf_counter()
    model = loki(base, spec, clients=k, bins=LOKI_BINS, seed=seed, surrogate=surrogate)
    update = secure_aggregate_per_client(model.route, clients, proto, seed=seed)
    rec = fedleak.attacks.build("loki").reconstruct(update, model, spec)
    count = verbatim(rec, truth, spec)
    out["loki"] = {"bins": LOKI_BINS, "bins_total": LOKI_BINS * k, "verbatim": count, "share": count / (k * n),
                   "expected": expected_recovered(n, LOKI_BINS) / n, "seconds": time.perf_counter() - tick}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,8,32,100")
    parser.add_argument("--samples", default="8,32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--root", default=os.environ.get("FEDLEAK_CIFAR10", str(ROOT)))
    parser.add_argument("--out", default=fresh("malicious-scale.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    ks = [int(v) for v in args.clients.split(",")]
    ns = [int(v) for v in args.samples.split(",")]
    spec, pool = fedleak.data.load("cifar10", root=args.root, num_clients=max(ks), samples_per_client=max(ns),
                                   seed=args.seed, split="train")
    _, test = fedleak.data.load("cifar10", root=args.root, num_clients=1, samples_per_client=256, seed=args.seed,
                                split="test")
    surrogate = test[0].inputs  # the server's own images: h's distribution fitted on them (Fowl et al. App. A.2)
    rows = []
    for n in ns:
        for k in ks:
            clients = [c.subset(n) for c in pool[:k]]
            result = point(spec, clients, k, n, args.seed, surrogate)
            rows.append({"clients": k, "samples": n, **result})
            print(k, n, {name: (r["verbatim"], round(r["share"], 3)) for name, r in result.items()}, flush=True)
            write(args.out, rows, start, done=False)
    write(args.out, rows, start, done=True)


def write(path, rows, start, done):
    out = {"rows": rows, "complete": done, "protocol": "fedsgd", "model": "cifar100-cnn base (untrained)",
           "data": "CIFAR-10 train (exact subset)", "verbatim_db": 60, "seconds": round(time.time() - start, 1),
           "threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
           "date": datetime.datetime.utcnow().isoformat() + "Z", "torch": torch.__version__,
           "python": platform.python_version()}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
