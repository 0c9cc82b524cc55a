"""The ``fedleak dp-audit`` flags; ``cli.py`` calls :func:`add_arguments` and :func:`run_from_args` only.

Model, data, clients, rounds, ``--defense`` and ``--out`` are named as ``fedleak audit`` names them (the
defense spec is parsed by the same :func:`fedleak.audit.plan.config.parse_defenses`). ``--level`` picks what is
audited: ``client`` (client-level DP of DP-FedAvg) or ``example`` (one client's DP-SGD, its examples' privacy);
by default the level the ``--defense`` names.
"""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="fedleak-dp-audit", help="report folder (default: fedleak-dp-audit)")
    g = p.add_argument_group("what you deploy")
    g.add_argument("--model", default="femnist-cnn", help="zoo name (fedleak models); default femnist-cnn")
    g.add_argument("--model-seed", type=int, default=0)
    g.add_argument("--data", default="digits", help="dataset name (fedleak datasets; default: digits, embedded)")
    g.add_argument("--data-root", help="folder with the dataset files")
    g.add_argument("--samples", type=float, default=20, help="samples per client (default 20)")
    g.add_argument("--clients", type=float, help="clients per round K (default: clients= of --defense)")
    g.add_argument("--rounds", type=float, default=10, help="rounds T, every client in every round (default 10); "
                   "--level example: the client's rounds, each --epochs × ⌈samples/batch⌉ DP-SGD steps")
    g.add_argument("--epochs", type=int, default=1, help="local epochs E (default 1)")
    g.add_argument("--batch-size", type=int, help="local batch size (default: all samples)")
    g.add_argument("--lr", type=float, default=0.004, help="client learning rate (default 0.004)")
    g.add_argument("--train", metavar="FILE.py", help="audit your own Opacus training instead: the file defines "
                   "train(model, dataset) (your loop with PrivacyEngine.make_private; returns the engine), model() and "
                   "dataset(); the claim is your engine's ε (docs/dp-audit.md)")
    g.add_argument("--defense", action="append", metavar="SPEC",
                   help="the claimed DP: flower-central-dp:noise=σ,clip=C,clients=K (client level) or "
                        "dp-sgd:clip=C,noise=σ (example level: DP-SGD inside a client, q = batch/samples)")
    g.add_argument("--level", choices=["client", "example", "lora"],
                   help="what is audited: client-level DP of the federation, the example-level DP-SGD of one "
                        "client, or (lora) the clients' DP-LoRA updates against DP-SGD on the adapters, Opacus #820 "
                        "(default: the level --defense names)")
    g.add_argument("--lora", type=float, help="LoRA rank R of the model's adapters (--level lora)")
    g.add_argument("--lora-reply", metavar="BEFORE,AFTER", help="--level lora: also check a real client's saved "
                   "reply (two tensor files: the weights it got, the reply it sent)")
    g = p.add_argument_group("the audit")
    g.add_argument("--canaries", type=float, default=1000, help="canary clients m (--level example: Dirac gradient "
                   "canaries, m ≤ parameters), each inserted with probability 1/2 (default 1000)")
    g.add_argument("--canary-scale", type=float, default=10.0, help="raw norm of three canaries in four, in clip "
                   "norms (default 10; every fourth sits at the clip norm)")
    g.add_argument("--delta", type=float, default=1e-5, help="δ of the (ε, δ) statements (default 1e-5)")
    g.add_argument("--threat", default="all-iterates", choices=["all-iterates", "final-model"],
                   help="headline threat model (both are reported)")
    g.add_argument("--fault", action="append", metavar="FAULT",
                   help="plant a misconfiguration inside the real DP code: noise=F (Flower's noise call draws F × its "
                        "σ), no-dp=I,J (nodes I, J built without the client-side mod), no-clip (Flower's clipping "
                        "skipped); --level example: noise=F (F = 0: noise off), no-clip; --level lora: "
                        "lora-unprocessed=I,J, lora-partial=I,J, lora-base-moves=I,J")
    g.add_argument("--leakage-metrics", metavar="PATH", help="metrics.json of `fedleak audit --defense` at the same "
                   "σ and clip: its reconstruction results are reported beside the ε (docs/dp-audit.md)")
    g.add_argument("--with-attacks", action="store_true", help="run a quick `fedleak audit` (FedSGD, 1 image, 2 "
                   "clients) at the audited defense and report what its attacks recover beside the ε")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--no-plot", action="store_true", help="skip dp-audit.png")
    g.add_argument("--quiet", action="store_true", help="no progress output")


def _number(value):
    """Integers given as floats (argparse type=float, so that nan/inf reach the one-line checks) stay integers."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def run_from_args(args, log=print) -> dict:
    from .audit import dp_audit

    if args.train is not None:  # the user's own Opacus training (:mod:`.train_file`, :mod:`.opacus_audit`)
        from .train_file import load_train_file

        if args.defense:
            from ..errors import FedleakError

            raise FedleakError("--defense: with --train the claim is your PrivacyEngine's own ε; leave --defense out")
        train, model, dataset = load_train_file(args.train)
        result = dp_audit(train=train, model=model, dataset=dataset, canaries=_number(args.canaries), delta=args.delta,
                          seed=args.seed, threat=args.threat, out=args.out)
        for line in result["summary"]:
            log(line)
        return result
    result = dp_audit(defense=args.defense, model=args.model, model_seed=args.model_seed, data=args.data,
                      data_root=args.data_root, samples=_number(args.samples),
                      clients=_number(args.clients) if args.clients is not None else None,
                      rounds=_number(args.rounds), epochs=args.epochs, batch_size=args.batch_size, lr=args.lr,
                      canaries=_number(args.canaries), canary_scale=args.canary_scale, delta=args.delta,
                      seed=args.seed, threat=args.threat, fault=args.fault or (), out=args.out,
                      log=None if args.quiet else log, plot=not args.no_plot, level=args.level,
                      lora=_number(args.lora) if args.lora is not None else None,
                      lora_reply=args.lora_reply, leakage_metrics=args.leakage_metrics,
                      with_attacks=args.with_attacks)
    for line in result["summary"]:
        log(line)
    return result
