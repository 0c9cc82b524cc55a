"""The inspector against honest models of the architectures people federate (issue 47 class 9).

    .venv/bin/python benchmarks/bench_inspect_honest.py [--seeds 3] [--out PATH]

Honest (``honest_zoo.py``, plain torch): VGG-11 (two initializations and classifiers), ResNet-18, MobileNetV2,
ViT-tiny (truncated-normal and zero-initialized head), two MLPs; 10 classes; each at initialization, after 20
plain SGD steps (lr 0.05, batch 8) on a client holding all classes, and after 20 steps on a client holding one
class (a non-IID client); ``--seeds`` seeds. The false-positive rate is the share flagged by
:func:`fedleak.fl.inspect.inspect_state` (``suspicious``). Malicious, built from every trained honest model: class
fishing (Wen et al. §3.2, :func:`fedleak.models.fishing.fishing`, two targets), feature fishing (§3.3: the target
row on one feature with a threshold bias) and a magnified feature column (the detection rate, which must stay 1).
CPU, one thread. Writes ``benchmarks/results/inspect-honest.json`` (a fresh file beside it unless ``--out``),
rewritten after every model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fedleak  # noqa: E402
from fedleak.fl.inspect import inspect_state  # noqa: E402
from fedleak.fl.inspect_fishing import LIMITS, classifier, fishing_statistics, limits_for  # noqa: E402
from fedleak.models.fishing import fishing  # noqa: E402

from _results import fresh  # noqa: E402
from bench_inspect_fishing import _feature_fishing, _magnified_column  # noqa: E402
from honest_zoo import ARCHITECTURES, build, client_data, sgd_steps  # noqa: E402

CLASSES = 10
KINDS = (("init", 0, False), ("sgd-20", 20, False), ("sgd-20-one-class", 20, True))


def honest(seeds):
    for name, (_, shape) in ARCHITECTURES.items():
        for seed in range(seeds):
            for kind, steps, one_class in KINDS:
                model = build(name, CLASSES, seed)
                if steps:
                    x, y = client_data(shape, CLASSES, seed=seed, one_class=one_class)
                    sgd_steps(model, x, y, steps, batch=8, seed=seed)
                yield name, seed, kind, model


def malicious(model, spec):
    for target in (0, CLASSES // 2):
        yield "fishing-class", fishing(model, spec, target_class=target, shift=30.0).state_dict()
        features = classifier(model.state_dict())[1].shape[1]
        yield "fishing-feature", _feature_fishing(model, spec, target, target % features).state_dict()
        yield "fishing-column", _magnified_column(model, target % features).state_dict()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=fresh("inspect-honest.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    spec = fedleak.DataSpec("photos10", (3, 32, 32), CLASSES, (0.0,) * 3, (1.0,) * 3)
    honest_rows, bad_rows = [], []

    def write():
        flagged = [r for r in honest_rows if r["suspicious"]]
        stats = {k: max((r["statistics"].get(k) or 0.0 for r in honest_rows), default=0.0) for k in LIMITS}
        stats["row_ratio_over_limit"] = max((r["statistics"]["row_ratio"] / limits_for(r["classes"])["row_ratio"]
                                             for r in honest_rows), default=0.0)
        families = sorted({r["family"] for r in bad_rows})
        result = {
            "benchmark": "bench_inspect_honest", "seeds": args.seeds, "classes": CLASSES,
            "architectures": list(ARCHITECTURES), "kinds": [k for k, _, _ in KINDS],
            "honest": {"models": len(honest_rows), "flagged": len(flagged),
                       "false_positive_rate": len(flagged) / max(len(honest_rows), 1),
                       "flagged_models": [f"{r['model']}/{r['kind']}/seed{r['seed']}" for r in flagged],
                       "max_statistics": stats, "limits": LIMITS},
            "malicious": {f: {"models": sum(r["family"] == f for r in bad_rows),
                              "flagged": sum(r["flagged"] for r in bad_rows if r["family"] == f)} for f in families},
            "rows": {"honest": honest_rows, "malicious": bad_rows},
            "environment": {"threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
                            "platform": platform.platform(), "torch": torch.__version__,
                            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                            "seconds": round(time.time() - start, 1)},
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(result, handle, indent=1)
        os.replace(tmp, args.out)
        return result

    for name, seed, kind, model in honest(args.seeds):
        state = model.state_dict()
        inspection = inspect_state(state)
        _, weight, bias = classifier(state)
        honest_rows.append({"model": name, "seed": seed, "kind": kind, "suspicious": inspection.suspicious,
                            "findings": [f"{f.layer}: {f.signature} {f.confidence:.2f}" for f in inspection.findings
                                         if f.confidence >= 0.5],
                            "classes": int(weight.shape[0]), "statistics": fishing_statistics(weight, bias)})
        print(f"honest {name:20s} seed {seed} {kind:18s} suspicious={inspection.suspicious} "
              f"{honest_rows[-1]['findings']}", flush=True)
        if kind != "init":
            for family, bad in malicious(model, spec):
                flagged = inspect_state(bad).suspicious
                bad_rows.append({"family": family, "model": f"{name}/{kind}/seed{seed}", "flagged": flagged})
                if not flagged:
                    print(f"  MISSED {family} on {name}/{kind}/seed{seed}", flush=True)
        write()
    result = write()
    print(json.dumps({"honest": {k: v for k, v in result["honest"].items() if k != "max_statistics"},
                      "malicious": result["malicious"]}, indent=1))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
