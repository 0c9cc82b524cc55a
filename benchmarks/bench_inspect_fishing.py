"""The inspector's weight-only checks (issue #30): fishing classifiers, and imprints with renamed keys,
transposed or permuted matrices — against honest models at initialization and after FedAvg training.

    .venv/bin/python benchmarks/bench_inspect_fishing.py [--quick] [--out PATH]

Honest: zoo models (femnist-cnn, lenet, mlp, convnet on digits; cifar100-cnn, resnet20, convnet on
photos) at initialization (3 seeds) and after 3 and 10 FedAvg rounds (2 seeds). Their four fishing
statistics (:mod:`fedleak.fl.inspect_fishing`) are recorded: the false-positive rate is the share of
honest models flagged at all (``Inspection.suspicious``). Malicious, from the trained honest models:
class fishing (:func:`fedleak.models.fishing.fishing`, several targets and shifts), feature fishing (the
target row reduced to one feature with a threshold bias, Wen et al. §3.3), a magnified feature column,
and imprint blocks (cumulative, sparse) whose state dict has random names, a transposed weight, and
permuted rows and columns. CPU, one thread, embedded data. Writes ``benchmarks/results/inspect-fishing.json``
(by default a fresh file beside it; ``--out`` names the tracked one).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import platform
import time

import torch

import fedleak
from fedleak import Protocol
from fedleak.fl.inspect import inspect_state
from fedleak.fl.inspect_fishing import LIMITS, classifier, fishing_statistics, limits_for
from fedleak.fl.training import train_fedavg
from fedleak.models.fishing import fishing
from fedleak.models.imprint import imprint
from _results import fresh  # noqa: E402  (benchmarks/ is the script's folder)


def honest(data, quick):
    zoo = [("femnist-cnn", "digits"), ("lenet", "digits"), ("mlp", "digits"), ("convnet", "digits"),
           ("cifar100-cnn", "photos"), ("resnet20", "photos"), ("convnet", "photos")]
    if quick:
        zoo = [zoo[1], zoo[2], zoo[4]]
    for name, d in zoo:
        spec, clients = data[d]
        for seed in range(1 if quick else 3):
            yield "init", f"{name}/{d}", spec, fedleak.models.build(name, spec, seed=seed)
        for rounds in ((3,) if quick else (3, 10)):
            for seed in range(1 if quick else 2):
                model = train_fedavg(fedleak.models.build(name, spec, seed=seed), clients[:6], rounds=rounds,
                                     clients_per_round=3, protocol=Protocol("fedavg", 2, 8, 0.05), seed=seed)
                yield f"fedavg-{rounds}-rounds", f"{name}/{d}", spec, model


def _feature_fishing(model, spec, target, feature):
    """Wen et al. §3.3: the target row reads one feature, with its bias at a threshold; other rows kept."""
    out = copy.deepcopy(model)
    name, _, _ = classifier(out.state_dict())
    params = dict(out.named_parameters())
    weight = params[name]
    bias = params[name[: -len("weight")] + "bias"]
    with torch.no_grad():
        scale = float(weight[target].norm())
        weight[target].zero_()
        weight[target, feature] = scale * 10
        bias[target] = -scale
    return out


def _magnified_column(model, feature, gain=50.0):
    out = copy.deepcopy(model)
    name, _, _ = classifier(out.state_dict())
    with torch.no_grad():
        dict(out.named_parameters())[name][:, feature] *= gain
    return out


def _disguised_state(model, generator):
    """The state dict with random names, every 2-D weight's rows and columns permuted (its bias with its
    rows) and the weight stored transposed; the order of entries kept (a bias follows its weight)."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    names = list(state)
    for name in names:
        tensor = state[name]
        if tensor.dim() == 2:
            rows = torch.randperm(tensor.shape[0], generator=generator)
            cols = torch.randperm(tensor.shape[1], generator=generator)
            state[name] = tensor[rows][:, cols].T.contiguous()
            bias = name[: -len("weight")] + "bias"
            if bias in state:
                state[bias] = state[bias][rows].contiguous()
    return {f"p{i:03d}_{int(torch.randint(10 ** 6, (1,), generator=generator))}": state[n]
            for i, n in enumerate(names)}


def malicious(trained, quick):
    for label, spec, model in trained:
        for target in ((0,) if quick else (0, spec.num_classes // 2)):
            for shift in (30.0,) if quick else (10.0, 30.0):
                yield "fishing-class", label, fishing(model, spec, target_class=target, shift=shift).state_dict()
            features = classifier(model.state_dict())[1].shape[1]
            yield "fishing-feature", label, _feature_fishing(model, spec, target, target % features).state_dict()
            yield "fishing-column", label, _magnified_column(model, target % features).state_dict()
        generator = torch.Generator().manual_seed(0)
        for structure in ("cumulative", "sparse"):
            try:
                block = imprint(model, spec, bins=64, structure=structure, linfunc="randn", seed=0)
            except fedleak.FedleakError:
                continue
            yield f"imprint-{structure}-renamed-transposed-permuted", label, _disguised_state(block, generator)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=fresh("inspect-fishing.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    data = {"digits": fedleak.data.load("digits", num_clients=8, samples_per_client=64, seed=3),
            "photos": fedleak.data.load("photos", num_clients=8, samples_per_client=64, seed=3)}
    honest_rows, trained = [], []
    for kind, label, spec, model in honest(data, args.quick):
        state = model.state_dict()
        inspection = inspect_state(state)
        _, weight, bias = classifier(state)
        honest_rows.append({"kind": kind, "model": label, "suspicious": inspection.suspicious,
                            "findings": [f.signature for f in inspection.findings if f.confidence >= 0.5],
                            "classes": int(weight.shape[0]), "statistics": fishing_statistics(weight, bias)})
        if kind != "init":
            trained.append((label, spec, model))
        print(f"honest {kind:18s} {label:22s} suspicious={inspection.suspicious}", flush=True)
    bad_rows = []
    for family, label, state in malicious(trained, args.quick):
        inspection = inspect_state(state)
        bad_rows.append({"family": family, "model": label, "flagged": inspection.suspicious,
                         "signatures": sorted({f.signature for f in inspection.findings if f.confidence >= 0.5})})
        print(f"malicious {family:45s} {label:22s} flagged={inspection.suspicious}", flush=True)
    stats = {k: max(r["statistics"].get(k, 0.0) for r in honest_rows) for k in LIMITS}
    # the row-norm statistic against its per-model limit (max(8, 2C)): the largest honest share of it
    stats["row_ratio_over_limit"] = max(r["statistics"]["row_ratio"] / limits_for(r["classes"])["row_ratio"]
                                        for r in honest_rows)
    families = sorted({r["family"] for r in bad_rows})
    result = {
        "benchmark": "bench_inspect_fishing", "quick": args.quick,
        "honest": {"models": len(honest_rows), "flagged": sum(r["suspicious"] for r in honest_rows),
                   "false_positive_rate": sum(r["suspicious"] for r in honest_rows) / len(honest_rows),
                   "max_statistics": stats, "limits": LIMITS},
        "malicious": {f: {"models": sum(r["family"] == f for r in bad_rows),
                          "flagged": sum(r["flagged"] for r in bad_rows if r["family"] == f)} for f in families},
        "rows": {"honest": honest_rows, "malicious": bad_rows},
        "environment": {"threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
                        "platform": platform.platform(), "torch": torch.__version__,
                        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                        "seconds": round(time.time() - start, 1)},
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({"honest": result["honest"], "malicious": result["malicious"]}, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
