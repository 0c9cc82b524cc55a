"""What NVFlare's and Flower's update filters leave of one FedSGD update of femnist-cnn.

One FedSGD update (femnist-cnn, 8 images of the embedded digits data, seed 0) goes through every update-level
filter fedleak runs, at the system's default setting and two others, over ``--seeds`` filter seeds. Per setting:
the cosine between the released and the true weight change Δ (mean, min, max over seeds), the share of Δ's
entries released (non-zero), and ε as the system reports it. Where ``nvflare`` is installed its own
``PercentilePrivacy``/``SVTPrivacy`` classes run on the same Δ and seed beside fedleak's and the two outputs
are compared element for element (``identical_to_nvflare``).

Writes ``benchmarks/results/defenses.json`` (``--out``) and, with ``--docs docs/defenses.md``, rewrites the
table between that file's ``<!-- defenses-table -->`` markers from the JSON (``--table-only`` rebuilds it from
an existing JSON without measuring). Run: ``python benchmarks/bench_defenses.py --out
benchmarks/results/defenses.json --docs docs/defenses.md`` (about 10 CPU-s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import fresh  # noqa: E402

import fedleak  # noqa: E402
from fedleak.fl.update_filters import UpdateFilter  # noqa: E402
from fedleak.types import Protocol  # noqa: E402

#: (label, spec): each system's default first, then two other settings
SETTINGS = [
    ("NVFlare default", "percentile:percentile=10,gamma=0.01"),
    ("keep top 10%", "percentile:percentile=90,gamma=0.01"),
    ("keep top 1%, γ 1e-3", "percentile:percentile=99,gamma=0.001"),
    ("NVFlare default", "svt:fraction=0.1,epsilon=0.1,noise_var=0.1,gamma=1e-5,tau=1e-6"),
    ("γ 1e-3, ε 1", "svt:fraction=0.1,epsilon=1,noise_var=0.1,gamma=1e-3,tau=1e-4"),
    ("γ 1e-3, ε 10, noise_var 10", "svt:fraction=0.1,epsilon=10,noise_var=10,gamma=1e-3,tau=1e-4"),
    ("NVFlare default", "svt-legacy:fraction=0.1,epsilon=0.1,noise_var=0.1,gamma=1e-5,tau=1e-6"),
    ("γ 1e-3, ε 1", "svt-legacy:fraction=0.1,epsilon=1,noise_var=0.1,gamma=1e-3,tau=1e-4"),
    ("γ 1e-3, ε 10, noise_var 10", "svt-legacy:fraction=0.1,epsilon=10,noise_var=10,gamma=1e-3,tau=1e-4"),
    ("NVFlare default", "svt-2.0:fraction=0.1,epsilon=0.1,noise_var=0.1,gamma=1e-5,tau=1e-6"),
    ("γ 1e-3, ε 1", "svt-2.0:fraction=0.1,epsilon=1,noise_var=0.1,gamma=1e-3,tau=1e-4"),
    ("γ 1e-3, ε 10, noise_var 10", "svt-2.0:fraction=0.1,epsilon=10,noise_var=10,gamma=1e-3,tau=1e-4"),
    ("ε 1, δ 1e-5, C 1", "flower-local-dp:clip=1,sensitivity=1,epsilon=1,delta=1e-5"),
    ("ε 100, δ 1e-5, C 1", "flower-local-dp:clip=1,sensitivity=1,epsilon=100,delta=1e-5"),
    ("ε 10⁴, δ 1e-5, C 1", "flower-local-dp:clip=1,sensitivity=1,epsilon=10000,delta=1e-5"),
    ("client-side clip C 0.1, σ 1", "flower-central-dp:noise=1,clip=0.1,clients=10"),
    ("server-side clip C 0.1, σ 1", "flower-central-dp:noise=1,clip=0.1,clients=10,server_side=1"),
]


PROTOCOL = Protocol("fedsgd")


def _update():
    spec, clients = fedleak.data.load("digits", num_clients=1, samples_per_client=8, seed=0)
    model = fedleak.models.build("femnist-cnn", spec, seed=0)
    protocol = PROTOCOL
    update = fedleak.client_update(model, clients[0], protocol)
    return {k: -protocol.lr * g for k, g in update.gradient.items()}


def _flat(params) -> np.ndarray:
    return np.concatenate([np.asarray(params[k], dtype=np.float64).ravel() for k in sorted(params)])


def _nvflare(kind: str, params: dict, delta: dict, seed: int):
    """NVFlare's own class on Δ, its global RNG seeded as fedleak seeds its RandomState; None if not installed."""
    try:
        from nvflare.apis.dxo import DXO, DataKind, MetaKey
        from nvflare.apis.fl_context import FLContext
        from nvflare.apis.shareable import Shareable
        from nvflare.app_common.filters.percentile_privacy import PercentilePrivacy
        from nvflare.app_common.filters.svt_privacy import SVTPrivacy
    except ImportError:
        return None
    if kind == "percentile":
        filt = PercentilePrivacy(percentile=params["percentile"], gamma=params["gamma"])
    elif kind == "svt":
        filt = SVTPrivacy(fraction=params["fraction"], epsilon=params["epsilon"], noise_var=params["noise_var"],
                          gamma=params["gamma"], tau=params["tau"], replace=bool(params["replace"]))
    else:
        return None
    dxo = DXO(DataKind.WEIGHT_DIFF, data={k: v.numpy().copy() for k, v in delta.items()},
              meta={MetaKey.NUM_STEPS_CURRENT_ROUND: 1})
    np.random.seed(seed)
    return filt.process_dxo(dxo, Shareable(), FLContext()).data


def _epsilon(f: UpdateFilter, size: int):
    eps = f.spent(size)
    if eps is None:
        return None
    for key in ("epsilon_total", "epsilon_fedleak", "epsilon"):
        if eps.get(key) is not None:
            return eps[key]
    return None


def measure(seeds: int) -> list[dict]:
    delta = _update()
    true = _flat({k: v.numpy() for k, v in delta.items()})
    rows = []
    for label, text in SETTINGS:
        f = UpdateFilter.parse(text)
        cosines, shares, identical = [], [], []
        for seed in range(seeds):
            generator = torch.Generator().manual_seed(seed)
            rng_seed = int(torch.randint(0, 2 ** 31 - 1, (1,), generator=torch.Generator().manual_seed(seed)))
            out = _flat({k: v.numpy() for k, v in f.apply_update(delta, generator, 1).items()})
            norm = np.linalg.norm(out) * np.linalg.norm(true)
            cosines.append(float(out @ true / norm) if norm > 0 else 0.0)
            shares.append(float(np.count_nonzero(out)) / out.size)
            theirs = _nvflare(f.kind, f.params, delta, rng_seed)
            if theirs is not None:
                identical.append(bool(np.array_equal(_flat(theirs).astype(np.float32), out.astype(np.float32))))
        rows.append({"defense": f.kind, "setting": label, "spec": f.to_text(), "follows": f.to_json()["follows"],
                     "cosine_mean": float(np.mean(cosines)), "cosine_min": float(np.min(cosines)),
                     "cosine_max": float(np.max(cosines)), "share_released": float(np.mean(shares)),
                     "epsilon": _epsilon(f, true.size), "epsilon_record": f.spent(true.size),
                     "identical_to_nvflare": all(identical) if identical else None})
    return rows


def _fmt(x) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and (abs(x) >= 1e4 or (x != 0 and abs(x) < 1e-3)):
        return f"{x:.2e}"
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def table(result: dict) -> str:
    lines = ["| defense | setting | cosine(released, true Δ) mean [min, max] | share released | ε as reported | "
             "same output as NVFlare's class |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        same = {True: "yes, bit for bit", False: "NO", None: "—"}[r["identical_to_nvflare"]]
        record = r["epsilon_record"] or {}
        eps = {"percentile": "not DP",
               "svt": f"{_fmt(r['epsilon'])} (NVFlare's pure-DP sum, per round)",
               "flower-local-dp": f"{_fmt(r['epsilon'])} per round, δ {_fmt(record.get('delta'))}",
               "flower-central-dp": f"{_fmt(r['epsilon'])} for the server's release (1 round, δ "
                                    f"{_fmt(record.get('delta'))}); none against the server"}.get(
            r["defense"], f"none reported (sets ε = {_fmt(r['epsilon'])})")
        lines.append(f"| `{r['defense']}` | {r['setting']} | {_fmt(r['cosine_mean'])} [{_fmt(r['cosine_min'])}, "
                     f"{_fmt(r['cosine_max'])}] | {_fmt(r['share_released'])} | {eps} | {same} |")
    meta = result["meta"]
    lines.append("")
    lines.append(f"*{meta['update']}; {meta['seeds']} filter seeds; nvflare {meta['nvflare']}, flwr {meta['flwr']}; "
                 f"from `benchmarks/results/defenses.json` ({meta['date']}).*")
    return "\n".join(lines)


def write_docs(result: dict, path: Path) -> None:
    start, end = "<!-- defenses-table -->", "<!-- /defenses-table -->"
    text = path.read_text()
    if start not in text or end not in text:
        raise SystemExit(f"{path} has no {start} … {end} markers")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{table(result)}\n{end}{tail}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=fresh("defenses.json"))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--docs", type=Path, help="rewrite the table in this markdown file")
    p.add_argument("--table-only", action="store_true", help="read --out and rebuild the --docs table")
    args = p.parse_args()
    if args.table_only:
        result = json.loads(Path(args.out).read_text())
    else:
        torch.set_num_threads(1)
        try:
            import nvflare
            nv_version = nvflare.__version__
        except ImportError:
            nv_version = None
        import flwr

        result = {"meta": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "threads": torch.get_num_threads(), "load_average": os.getloadavg(), "device": "cpu",
                           "platform": platform.platform(), "torch": torch.__version__, "nvflare": nv_version,
                           "flwr": flwr.__version__, "seeds": args.seeds,
                           "update": "one FedSGD update of femnist-cnn (seed 0) on 8 embedded digits images, "
                                     f"Δ = −η·g, η = {PROTOCOL.lr:g}, 338,778 entries"},
                  "rows": measure(args.seeds)}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    if args.docs:
        write_docs(result, args.docs)
    print(table(result))


if __name__ == "__main__":
    main()
