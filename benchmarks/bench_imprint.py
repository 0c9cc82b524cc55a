"""Robbing the Fed on real CIFAR-10: the measurements behind the imprint attack's claims.

    .venv/bin/python benchmarks/bench_imprint.py [--data-root ../shared/data/cifar10] [--quick]

Writes ``benchmarks/results/imprint-<host>-<time>.json`` (``--out benchmarks/results/imprint.json`` updates the tracked file):

* ``fedsgd``: 64-image FedSGD clients, ResNet-18 with a 128-bin (and a 300-bin) imprint block in
  front; per client the share of inputs recovered with PSNR > 60 dB, against Proposition 1 for
  equal-mass bins and for the masses the bins really have on CIFAR-10 (estimated on the training
  images outside the client), plus float64 runs where the recovered inputs must be bit-exact;
* ``fedavg``: 8 local steps x 8 images, lr 1e-4, 128 sparse bins: PSNR and IIP;
* ``one_shot``: 20 seeded trials, each the secure aggregate of 64 users x 64 images (4,096):
  is at least one image recovered verbatim (PSNR > 100 dB)?
* ``recovery_seconds``: the readout of a 64-image ResNet-18 update (median of repeats);
* ``deep``, ``cah``, ``noise``, ``text``: the other figures at small scale.

Everything runs on CPU with one thread; the server's surrogate data are CIFAR-10 *test* images,
the clients use the training images.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from fedleak.attacks import build as build_attack
from fedleak.attacks.imprint import aggregate, expected_recovered, expected_recovered_paper, one_shot_probability
from fedleak.data import load
from fedleak.data import text as text_data
from fedleak.fl.client import client_update
from fedleak.metrics import evaluate, psnr
from fedleak.models import build as build_model
from fedleak.models.imprint import imprint
from fedleak.types import ClientData, Protocol
from _results import fresh  # benchmarks/_results.py: a new timestamped file by default

ROOT = Path(__file__).resolve().parents[1]


def bin_masses(model, pool: torch.Tensor) -> list[float]:
    """Evaluation only: the share of ``pool`` inputs that fall into each of the model's bins."""
    secrets = model.imprint_secrets()
    rows = model.imprint.linear.weight.detach().double()[torch.tensor(secrets["order"])]
    h = (pool.double().flatten(1) @ rows[0]) / secrets["bins"][0]["row_scale"]
    lows = np.array([b["low"] for b in secrets["bins"]])
    highs = np.array([b["high"] for b in secrets["bins"]])
    index = np.searchsorted(lows, h.numpy(), side="right") - 1
    inside = (index >= 0) & (h.numpy() <= highs[np.clip(index, 0, None)])
    counts = np.bincount(index[inside], minlength=len(lows))
    return (counts / len(pool)).tolist()


def fedsgd(spec, clients, surrogate, pool, args) -> dict:
    out = {"model": "resnet18", "clients": [], "float64": []}
    base = build_model("resnet18", spec, seed=0)
    for bins in (128, 300):
        model = imprint(base, spec, bins=bins, linfunc="mean", cdf="gaussian", surrogate=surrogate, seed=0)
        rows = []
        count = args.clients if bins == 128 else max(1, args.clients // 3)
        for c in clients[:count]:
            start = time.perf_counter()
            update = client_update(model, c, Protocol("fedsgd"), seed=0)
            rec = build_attack("imprint").reconstruct(update, model, spec)
            scores = evaluate(rec, c, spec, threshold=60, clip=False)
            others = pool[~_member(pool, c.inputs)]
            masses = bin_masses(model, others)
            rows.append({"client": c.client_id, "bins": bins, "recovered_percent": scores["rec_percent"],
                         "expected_percent_equal_bins": 100 * expected_recovered(len(c), bins) / len(c),
                         "expected_percent_actual_bins": 100 * expected_recovered(len(c), masses=masses) / len(c),
                         "single_bins_reported": len(rec.extras["single_bins"]), "psnr": scores["psnr"],
                         "iip": scores["iip"], "seconds": time.perf_counter() - start})
            print(f"fedsgd {bins} bins {c.client_id}: {scores['rec_percent']:.1f}% (Prop. 1: "
                  f"{rows[-1]['expected_percent_equal_bins']:.1f}% equal bins, "
                  f"{rows[-1]['expected_percent_actual_bins']:.1f}% actual bins)", flush=True)
        out["clients"].extend(rows)
        out[f"bins{bins}"] = {
            "clients": len(rows),
            "recovered_percent_mean": statistics.mean(r["recovered_percent"] for r in rows),
            "expected_percent_equal_bins": rows[0]["expected_percent_equal_bins"],
            "expected_percent_actual_bins_mean": statistics.mean(r["expected_percent_actual_bins"] for r in rows),
            "expected_percent_paper_formula": 100 * expected_recovered_paper(64, bins) / 64,
            "iip_mean": statistics.mean(r["iip"] for r in rows),
        }
    model = imprint(base, spec, bins=128, linfunc="mean", cdf="gaussian", surrogate=surrogate, seed=0).double()
    for c in clients[: args.float64_clients]:
        c64 = c.to(dtype=torch.float64)
        update = client_update(model, c64, Protocol("fedsgd"), seed=0)
        rec = build_attack("imprint").reconstruct(update, model, spec)
        scores = evaluate(rec, c64, spec, threshold=60, clip=False)
        recovered = [p for p in scores["psnr_per_input"] if p > 60]
        out["float64"].append({"client": c.client_id, "recovered_percent": scores["rec_percent"],
                               "min_psnr_of_recovered": min(recovered) if recovered else None,
                               "exact_inputs": sum(p >= 200 for p in recovered)})
        print(f"fedsgd float64 {c.client_id}: {scores['rec_percent']:.1f}% recovered, min PSNR "
              f"{out['float64'][-1]['min_psnr_of_recovered']}", flush=True)
    return out


def _member(pool: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    flat = pool.flatten(1)
    keys = {tuple(x.tolist()[:16]) for x in inputs.flatten(1)}
    return torch.tensor([tuple(x.tolist()[:16]) in keys for x in flat])


def recovery_time(spec, client, surrogate, repeats: int) -> dict:
    model = imprint(build_model("resnet18", spec, seed=0), spec, bins=128, surrogate=surrogate, seed=0)
    update = client_update(model, client, Protocol("fedsgd"), seed=0)
    attack = build_attack("imprint")
    total, readout = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        rec = attack.reconstruct(update, model, spec)
        total.append(time.perf_counter() - start)
        readout.append(rec.extras["seconds"])
    return {"batch": len(client), "bins": 128, "model": "resnet18", "repeats": repeats,
            "reconstruct_seconds_median": statistics.median(total), "readout_seconds_median": statistics.median(readout),
            "note": "reconstruct = update validation against the model (11M parameters) + readout"}


def fedavg(spec, clients, surrogate, pool_test, args) -> dict:
    base = build_model("resnet18", spec, seed=0)
    protocol = Protocol("fedavg", epochs=1, batch_size=8, lr=1e-4)
    out = {"protocol": protocol.to_json(), "bins": 128, "clients": []}
    for gain in (1e-3, 1.0):
        model = imprint(base, spec, bins=128, structure="sparse", gain=gain, linfunc="mean", surrogate=surrogate,
                        seed=0)
        rows = []
        for c in clients[: args.fedavg_clients if gain < 1 else 1]:
            update = client_update(model, c, protocol, seed=0)
            rec = build_attack("imprint-sparse").reconstruct(update, model, spec)
            if rec.inputs.shape[0] == 0:  # the update vanished in float32 rounding: nothing to read
                rows.append({"client": c.client_id, "gain": gain, "psnr": None, "iip": 0.0, "iip_with_test_pool": 0.0,
                             "rec_percent_30db": 0.0, "candidates": 0})
                print(f"fedavg gain {gain} {c.client_id}: no candidates", flush=True)
                continue
            scores = evaluate(rec, c, spec, threshold=30, iip_pool=pool_test)
            plain = evaluate(rec, c, spec, threshold=30)
            rows.append({"client": c.client_id, "gain": gain, "psnr": scores["psnr"], "iip": plain["iip"],
                         "iip_with_test_pool": scores["iip"], "rec_percent_30db": scores["rec_percent"],
                         "candidates": rec.inputs.shape[0]})
            print(f"fedavg gain {gain} {c.client_id}: PSNR {scores['psnr']:.1f}, IIP {plain['iip']:.3f} "
                  f"(with test pool {scores['iip']:.3f})", flush=True)
        out["clients"].extend(rows)
        out[f"gain{gain:g}"] = {"iip_mean": statistics.mean(r["iip"] for r in rows),
                                "iip_with_test_pool_mean": statistics.mean(r["iip_with_test_pool"] for r in rows),
                                "psnr_mean": (statistics.mean(r["psnr"] for r in rows)
                                              if all(r["psnr"] is not None for r in rows) else None),
                                "clients": len(rows)}
    return out


def one_shot(spec, train, surrogate, trials: int) -> dict:
    rows = []
    for trial in range(trials):
        g = torch.Generator().manual_seed(trial)
        index = torch.randperm(len(train), generator=g)[:4096]
        users = [ClientData(train.inputs[index[i * 64:(i + 1) * 64]], train.labels[index[i * 64:(i + 1) * 64]],
                            f"user-{i}") for i in range(64)]
        model = imprint(build_model("cifar100-cnn", spec, seed=trial), spec, bins=4096, structure="one-shot",
                        linfunc="randn", surrogate=surrogate, seed=trial)
        update = aggregate([client_update(model, u, Protocol("fedsgd"), seed=trial) for u in users])
        rec = build_attack("imprint-one-shot").reconstruct(update, model, spec)
        truth = train.inputs[index]
        best = [float(psnr(spec.denormalize(r)[None].expand_as(truth), spec.denormalize(truth)).max())
                for r in rec.inputs]
        verbatim = sum(b > 100 for b in best)
        rows.append({"trial": trial, "aggregate": update.num_samples, "candidates": len(best),
                     "best_psnr": best, "verbatim": verbatim, "reported_single": len(rec.extras["single_bins"])})
        print(f"one-shot trial {trial}: {verbatim} verbatim, PSNRs {[round(b, 1) for b in best]}", flush=True)
    successes = sum(r["verbatim"] > 0 for r in rows)
    return {"users": 64, "images_per_user": 64, "virtual_bins": 4096, "model": "cifar100-cnn", "trials": rows,
            "successes": successes, "success_rate": successes / trials,
            "expected_success_rate": one_shot_probability(4096, [1 / 4096, 1 / 4096])}


def deep(spec, clients, surrogate, args) -> dict:
    base = build_model("resnet18", spec, seed=0)
    out = {}
    for position in ("layer1", "layer3", "layer4", "avgpool"):
        model = imprint(base, spec, bins=128, position=position, linfunc="mean", surrogate=surrogate, seed=0)
        rows = []
        for c in clients[: args.deep_clients]:
            update = client_update(model, c, Protocol("fedsgd"), seed=0)
            rec = build_attack("imprint").reconstruct(update, model, spec)
            scores = evaluate(rec, c, spec)
            rows.append({"psnr": scores["psnr"], "iip": scores["iip"]})
        out[position] = {"input_shape": model.imprint_secrets()["input_shape"],
                         "iip_mean": statistics.mean(r["iip"] for r in rows),
                         "psnr_mean": statistics.mean(r["psnr"] for r in rows), "clients": len(rows)}
        print(f"deep {position}: {out[position]}", flush=True)
    return out


def cah(spec, clients, args) -> dict:
    base = build_model("cifar100-cnn", spec, seed=0)
    out = {}
    for rows_count in (64, 128, 256):
        for structure, attack in (("cumulative", "imprint"), ("cah", "cah")):
            model = imprint(base, spec, bins=rows_count, structure=structure, linfunc="mean", loc=0.0337,
                            scale=0.5179, seed=0)
            values = []
            for c in clients[: args.clients]:
                update = client_update(model, c, Protocol("fedsgd"), seed=0)
                rec = build_attack(attack).reconstruct(update, model, spec)
                values.append(evaluate(rec, c, spec, threshold=60, clip=False)["rec_percent"])
            out[f"{structure}-{rows_count}"] = statistics.mean(values)
    print(f"cah vs imprint (recovered % at 60 dB): {out}", flush=True)
    return out


def noise(spec, clients) -> dict:
    base = build_model("cifar100-cnn", spec, seed=0)
    out = {}
    for scale in (None, 100.0):
        model = imprint(base, spec, bins=128, linfunc="mean", loc=0.0337, scale=0.5179, connection_scale=scale,
                        seed=0)
        for b in (0.0, 1e-4, 1e-3, 1e-2, 1e-1):
            values = []
            for c in clients[:3]:
                update = client_update(model, c, Protocol("fedsgd"), seed=0, defense=f"laplacian:{b}")
                rec = build_attack("imprint", clip=True).reconstruct(update, model, spec)
                values.append(evaluate(rec, c, spec)["iip"])
            out[f"connection_scale={scale or 'default'} laplacian={b:g}"] = statistics.mean(values)
    print(f"noise (IIP): {out}", flush=True)
    return out


def text() -> dict:
    corpus = text_data.load(num_clients=1, samples_per_client=128, seed=0, seq_len=32, vocab_size=2000)
    client = corpus.clients[0]
    lm = build_model("text-transformer", corpus.spec, seed=0)
    model = imprint(lm, corpus.spec, bins=512, position="embedding", side="after", linfunc="randn",
                    surrogate=corpus.surrogate, seed=0)
    update = client_update(model, client, Protocol("fedsgd"), seed=0)
    rec = build_attack("imprint").reconstruct(update, model, corpus.spec)
    scores = text_data.token_accuracy(rec.inputs, client.inputs)
    out = {"sequences": 128, "seq_len": 32, "bins": 512, "vocab_size": len(corpus.vocabulary),
           "token_accuracy": scores["token_accuracy"], "exact_sequences": scores["exact_sequences"],
           "expected_exact": expected_recovered(128, 512), "reported_single": len(rec.extras["single_bins"]),
           "example": corpus.vocabulary.decode(rec.inputs[0])}
    print(f"text: {out}", flush=True)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", default=str(ROOT.parent / "shared" / "data" / "cifar10"))
    parser.add_argument("--out", default=fresh("imprint.json"), help="default: a new timestamped file in benchmarks/results/ (name the tracked file to update it)")
    parser.add_argument("--quick", action="store_true", help="one client per measurement, 3 one-shot trials")
    parser.add_argument("--only", help="comma-separated parts: fedsgd,time,fedavg,one_shot,deep,cah,noise,text")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.clients = 1 if args.quick else 10
    args.float64_clients = 1 if args.quick else 3
    args.fedavg_clients = 1 if args.quick else 5
    args.deep_clients = 1 if args.quick else 3
    trials = 3 if args.quick else 20
    parts = set(args.only.split(",")) if args.only else {"fedsgd", "time", "fedavg", "one_shot", "deep", "cah",
                                                          "noise", "text"}
    spec, clients = load("cifar10", root=args.data_root, num_clients=args.clients, samples_per_client=64, seed=0)
    _, test = load("cifar10", root=args.data_root, num_clients=1, samples_per_client=None, seed=0, split="test")
    _, train = load("cifar10", root=args.data_root, num_clients=1, samples_per_client=None, seed=0)
    surrogate = test[0].inputs[:256]
    path = Path(args.out)
    result = json.loads(path.read_text()) if path.is_file() and args.only else {}
    result.update({"benchmark": "imprint", "torch": torch.__version__, "python": platform.python_version(),
                   "machine": platform.machine(), "threads": torch.get_num_threads(), "quick": args.quick})
    start = time.perf_counter()
    if "time" in parts:
        result["recovery_seconds"] = recovery_time(spec, clients[0], surrogate, 5 if args.quick else 20)
        print(f"recovery time: {result['recovery_seconds']}", flush=True)
    if "fedsgd" in parts:
        result["fedsgd"] = fedsgd(spec, clients, surrogate, train[0].inputs, args)
    if "fedavg" in parts:
        result["fedavg"] = fedavg(spec, clients, surrogate, test[0].inputs, args)
    if "one_shot" in parts:
        result["one_shot"] = one_shot(spec, train[0], surrogate, trials)
    if "deep" in parts:
        result["deep"] = deep(spec, clients, surrogate, args)
    if "cah" in parts:
        result["cah"] = cah(spec, clients, args)
    if "noise" in parts:
        result["noise"] = noise(spec, clients)
    if "text" in parts:
        result["text"] = text()
    result["total_seconds"] = time.perf_counter() - start + result.get("total_seconds", 0.0) * bool(args.only)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
