"""A real Flower federation, in this process, audited for leakage while it runs.

    python -m fedleak.integrations.flower.demo --clients 3 --rounds 2 --out DIR [--malicious] [--inspect]

A ``ServerApp`` whose ``main`` runs Flower's own ``FedAvg`` wrapped in
:class:`~fedleak.integrations.flower.LeakageAudit`, ``ClientApp`` nodes that train the way Flower's
PyTorch templates do (load the ``ArrayRecord``, plain SGD, reply with ``state_dict()`` and
``num-examples``), real ``Message``s between them over :class:`~.grid.InlineGrid` (no Ray, no
SuperLink). Data: fedleak's embedded digits, one partition per node.

* Honest server (default): each reply is attacked with Inverting Gradients; the clients share
  their batch (evaluation mode, ``--no-truth`` to turn off) so the dashboard shows PSNR.
* ``--malicious``: the server ships an imprinted model (Fowl et al. 2022) with the matching
  ClientApp code and reads the clients' images back verbatim from their replies.
* ``--inspect``: the clients run :func:`~.client.inspector_mod`; with ``--malicious`` they refuse
  the imprinted model (error replies, recorded as ``error``).

Writes ``DIR/leakage.jsonl``, ``DIR/dashboard.html`` and the updates/reconstructions per round.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

import torch

from ... import data as fl_data
from ...errors import FedleakError
from ...types import Protocol
from .audit import LeakageAudit
# the apps live in :mod:`.demo_apps` (the tabular and text demos build on them too); re-exported here, where
# tests, benchmarks and the example app have always imported them
from .demo_apps import federate, federation_model, local_sgd, make_client_app, make_server_app  # noqa: F401


def run_demo(out, *, clients: int = 3, rounds: int = 2, samples: int = 4, malicious: bool = False,
             inspect: bool = False, share: bool = True, iterations: int = 150, lr: float = 0.05,
             seed: int = 0, blocking: bool = False, task: str = "image", model_name: Optional[str] = None,
             lora: int = 32, seq_len: int = 16) -> LeakageAudit:
    """Run the demo federation and return its :class:`LeakageAudit` (records in ``.records``).

    ``task="text"``: the FlowerTune-shaped LoRA federation of :mod:`.text_demo` (``model_name``, default
    ``gpt2-tiny``, ``lora`` rank, ``seq_len`` tokens, ``samples`` sequences per node), audited with ``dager``.
    ``task="tabular"``: the records federation of :mod:`.tabular_demo` (``model_name``: the table, ``adult`` by
    default, ``samples`` records per node), each reply attacked through the tabular modality (SPEAR, proved).
    """
    runner = DEMOS.get(task)
    if runner is None:
        raise FedleakError(f"--task must be {' or '.join(DEMOS)}, got {task!r}")
    # each task's federation reads the knobs it has (images: malicious, iterations; text: model, LoRA, length)
    return runner(out, clients=clients, rounds=rounds, samples=samples, malicious=malicious, inspect=inspect,
                  share=share, iterations=iterations, lr=lr, seed=seed, blocking=blocking, model_name=model_name,
                  lora=lora, seq_len=seq_len)


def _run_image_demo(out, *, clients, rounds, samples, malicious, inspect, share, iterations, lr, seed,
                    blocking, **_) -> LeakageAudit:
    """The image federation: embedded digits, LeNet (behind an imprint block with ``malicious``)."""
    for name, value, low in (("clients", clients, 1), ("rounds", rounds, 1), ("samples", samples, 1),
                             ("iterations", iterations, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FedleakError(f"--{name} must be an integer >= {low}, got {value!r}")
    spec, parts = fl_data.load("digits", num_clients=clients, samples_per_client=samples, seed=seed)
    model = federation_model(spec, malicious, seed)
    client_app = make_client_app(parts, lambda: federation_model(spec, malicious, seed), share=share, inspect=inspect)
    protocol = Protocol("fedavg", epochs=1, batch_size=samples, lr=lr, reshuffle=False)
    # the embedded digits are 8x8 images upsampled to 28x28, not 8-bit: no pixel-grid check (levels=0)
    attack, options = ("imprint", {"levels": 0}) if malicious else ("inverting-gradients", {"iterations": iterations})

    return federate(out, model, client_app, spec, protocol, clients=clients, rounds=rounds, blocking=blocking,
                    attack=attack, attack_options=options, ship=model if malicious else None)


def _run_text_demo(out, *, clients, rounds, samples, inspect, share, lr, seed, blocking, model_name, lora,
                   seq_len, **_) -> LeakageAudit:
    from .text_demo import make_text_client_app, text_federation

    for name, value, low in (("clients", clients, 1), ("rounds", rounds, 1), ("samples", samples, 1),
                             ("lora", lora, 1), ("seq-len", seq_len, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise FedleakError(f"--{name} must be an integer >= {low}, got {value!r}")
    spec, parts, model_fn = text_federation(model_name or "gpt2-tiny", clients, samples, seq_len, lora, seed)
    model = model_fn()
    client_app = make_text_client_app(parts, model_fn, share=share, inspect=inspect)
    protocol = Protocol("fedavg", epochs=1, batch_size=samples, lr=lr, reshuffle=False)

    return federate(out, model, client_app, spec, protocol, clients=clients, rounds=rounds, blocking=blocking,
                    attack="dager")


def _run_tabular_demo(out, **options) -> LeakageAudit:
    from .tabular_demo import run_tabular_demo

    return run_tabular_demo(out, **options)


#: the demo federations by ``--task``
DEMOS = {"image": _run_image_demo, "text": _run_text_demo, "tabular": _run_tabular_demo}


def record_line(r: dict) -> str:
    """One console line per record: status, scores, and why — the reason a reply was not attacked,
    or the leakage level with its evidence (e.g. why an exact text attack recovered nothing)."""
    scores = ", ".join(f"{k} {r[k]:.3g}" if isinstance(r[k], float) else f"{k} {r[k]}"
                       for k in ("verbatim", "attack_loss", "psnr", "rec_percent", "rouge1", "exact_sequences")
                       if r.get(k) is not None)
    line = f"round {r['round']} node {r['client']}: {r['status']}" + (f" ({r.get('attack')}: {scores})" if scores
                                                                       else "")
    if r.get("reason"):
        return line + f" — {r['reason']}"
    leakage = r.get("leakage")
    if isinstance(leakage, dict):
        line += f" — leakage {leakage['level']}: {leakage['evidence']}"
    return line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedleak.integrations.flower.demo",
                                     description="Run a real Flower federation in-process and audit it for leakage.")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4, help="images per client")
    parser.add_argument("--malicious", action="store_true", help="ship an imprinted model (Robbing the Fed)")
    parser.add_argument("--inspect", action="store_true", help="clients run fedleak's inspector mod")
    parser.add_argument("--no-truth", action="store_true", help="clients do not share their batch (no PSNR)")
    parser.add_argument("--iterations", type=int, default=150, help="Inverting Gradients iterations (honest server)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", choices=["image", "text", "tabular"], default="image",
                        help="text: a FlowerTune-shaped LoRA federation of a causal LM, audited with dager; tabular: "
                             "Adult records on the tabular MLP, audited with SPEAR (exact, checked by recomputing the "
                             "update) or TabLeak (an estimate)")
    parser.add_argument("--model", default=None, help="--task text: gpt2-tiny or llama-tiny; --task tabular: the "
                                                      "table, adult or german")
    parser.add_argument("--lora", type=int, default=32, help="--task text: LoRA rank R (alpha 2R; FlowerTune: 32)")
    parser.add_argument("--seq-len", type=int, default=16, help="--task text: tokens per sequence")
    parser.add_argument("--lr", type=float, default=None, help="client learning rate (default 0.05)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    try:
        audit = run_demo(args.out, clients=args.clients, rounds=args.rounds, samples=args.samples,
                         malicious=args.malicious, inspect=args.inspect, share=not args.no_truth,
                         iterations=args.iterations, seed=args.seed, task=args.task, model_name=args.model,
                         lora=args.lora, seq_len=args.seq_len, **({"lr": args.lr} if args.lr is not None else {}))
    except FedleakError as exc:
        print(f"fedleak: error: {exc}", file=sys.stderr)
        return 2
    for r in sorted(audit.records, key=lambda r: (r["round"], r["client"])):
        print(record_line(r))
    print(f"leakage records in {args.out}/leakage.jsonl, dashboard in {args.out}/dashboard.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
