"""The ``fedleak audit`` command-line flags, and flags → :class:`AuditConfig`.

Flags and ``--config audit.yaml`` keys are the same; a flag given on the command line wins over
the file. ``cli.py`` only calls :func:`add_arguments` and :func:`config_from_args`.
"""

from __future__ import annotations

import argparse

from .config import KNOBS, AuditConfig

#: flag destinations that map 1:1 onto AuditConfig keys
_KEYS = ("model", "weights", "model_seed", "data", "data_root", "samples", "clients", "algorithm", "epochs",
         "batch_size", "lr", "static_batches", "rounds", "sample_rate", "delta", "sweep", "bins", "iterations",
         "quick", "seed", "device", "seq_len", "lora", "lora_warmup", "text_field", "label_field", "tune",
         "tune_clients", "budget", "dropout", "lora_dropout", "flowertune", "membership", "candidates", "optimizer")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="audit.yaml with the same keys as these flags (flags win)")
    p.add_argument("--out", default="fedleak-report", help="report folder (default: fedleak-report)")
    g = p.add_argument_group("what you deploy")
    g.add_argument("--model", help="zoo name (fedleak models) or MODULE:FACTORY / path/to/file.py:FACTORY "
                   "returning an nn.Module (called with the DataSpec if it takes an argument); default femnist-cnn")
    g.add_argument("--weights", help="trained checkpoint: .safetensors, or a .pt/.pth state dict (weights_only)")
    g.add_argument("--model-seed", type=int, help="seed of the model's initial weights (default 0)")
    g.add_argument("--data", help="dataset name (fedleak datasets; default: digits, embedded); tables: adult, german "
                                  "or a .csv/.parquet file with --label COLUMN (docs/tabular.md)")
    g.add_argument("--data-root", help="folder with the dataset files")
    g.add_argument("--samples", type=int, help="samples per client N (default 4 FedSGD, 10 FedAvg)")
    g.add_argument("--clients", type=int, help="clients (or aggregates) to audit; the report gives the distribution")
    g.add_argument("--algorithm", choices=["fedsgd", "fedavg"], help="client protocol (default: both)")
    g.add_argument("--epochs", type=int, help="local epochs E (FedAvg; default 5)")
    g.add_argument("--batch-size", type=int, help="local batch size m (FedAvg; default 5)")
    g.add_argument("--lr", type=float, help="client learning rate η (default 0.004)")
    g.add_argument("--optimizer", choices=["sgd", "adamw"],
                   help="the clients' local optimizer: plain SGD (default) or AdamW (a fresh state each round, "
                        "constant lr, Hugging Face Trainer defaults; FlowerTune's)")
    g.add_argument("--static-batches", action="store_true", default=None, help="no reshuffling between epochs")
    g.add_argument("--defense", action="append", metavar="SPEC",
                   help="repeatable: gaussian:σ, laplacian:b, pruning:p, dp-sgd:clip=C,noise=σ, secagg:K; update filters: "
                   "percentile:percentile=P,gamma=G, svt:fraction=F,epsilon=E,noise_var=V,gamma=G,tau=T (NVFlare ≥ 2.8; svt-legacy: ≤ 2.7), "
                   "flower-local-dp:clip=C,sensitivity=S,epsilon=E,delta=D, flower-central-dp:noise=σ,clip=C,clients=K")
    g.add_argument("--rounds", type=int, help="DP-SGD: rounds a client takes part in (default 1)")
    g.add_argument("--sample-rate", type=float, help="DP-SGD: per-step sampling rate q (default batch size / N)")
    g.add_argument("--delta", type=float, help="DP-SGD: δ of the (ε, δ) guarantee (default 1e-5)")
    g = p.add_argument_group("language models (--data text)")
    g.add_argument("--seq-len", type=int, help="tokens per sequence L (default 16)")
    g.add_argument("--lora", type=int, metavar="R", help="LoRA adapters of rank R (alpha 2R) on the attention "
                   "projections; the update holds only the adapters (FlowerTune)")
    g.add_argument("--lora-warmup", type=int, metavar="STEPS",
                   help="train the adapters STEPS steps on other text first (a later round: B != 0)")
    g.add_argument("--dropout", choices=["shipped", "off"],
                   help="dropout in the clients' training: as the model's config says (default) or off")
    g.add_argument("--lora-dropout", type=float, metavar="P", help="PEFT's adapter dropout (default 0; FlowerTune 0.075)")
    g.add_argument("--flowertune", action="store_true", default=None,
                   help="Flower's FlowerTune client: LoRA r 32, alpha 64, dropout 0.075, PEFT's default targets, "
                        "batch 16 x 512 tokens, 10 local steps, lr 5e-5, membership of candidate documents; other "
                        "flags override parts (on CPU the sequences are scaled down to 64 tokens, said in the report)")
    g.add_argument("--membership", type=int, metavar="M",
                   help="membership test of M candidate documents (half in the client's data; default 0, "
                        "FlowerTune 64)")
    g.add_argument("--candidates", metavar="FILE",
                   help="UTF-8 text file of candidate documents, one per non-empty line, for the membership "
                        "test: half of them (seeded) are put in the audited client's data, the rest are not")
    g.add_argument("--text-field", help="text field of .jsonl records (default text)")
    g.add_argument("--label-field", "--label", dest="label_field",
                   help="label field of .jsonl records for classifiers, or a table's label column (default label)")
    g = p.add_argument_group("your Flower app (docs/flower.md, 'Audit your app')")
    g.add_argument("--flower-app", metavar="PATH", help="run the Flower app in PATH (its pyproject.toml, ServerApp, "
                   "ClientApp) in Flower's simulation with its strategy audited; --model / --data override its "
                   "[tool.fedleak] table")
    g.add_argument("--run-config", metavar="'K=V ...'", help="--flower-app: run config overrides, as flwr run's")
    g.add_argument("--malicious-run-config", metavar="'K=V ...'",
                   help="--flower-app: the overrides under which the app's ServerApp ships a malicious model (a second run)")
    g.add_argument("--supernodes", type=int, help="--flower-app: simulated nodes (default: the run config's "
                   "num-clients, else 2)")
    g.add_argument("--canaries", type=int, help="--flower-app: DP canaries in the strategy's DP wrapper (0: off; "
                   "default: the run config's fedleak-canaries)")
    g.add_argument("--canary-nodes", type=int, help="--flower-app: canary nodes running each node's own ClientApp "
                   "mods (0: off; default: the run config's fedleak-canary-nodes)")
    g.add_argument("--share-truth", action="store_true", default=None,
                   help="--flower-app: simulated clients share their batch (FEDLEAK_NODE_CONFIG share-truth=true)")
    g = p.add_argument_group("what the audit does")
    g.add_argument("--sweep", metavar="KNOB=V1,V2,...", help=f"one knob over values: {', '.join(KNOBS)}")
    g.add_argument("--attacks", help="comma-separated attacks replacing the threat models' choice (fedleak attacks)")
    g.add_argument("--no-malicious", action="store_true", default=None,
                   help="skip the malicious server (clients verify the architecture they receive)")
    g.add_argument("--bins", type=int, help="imprint bins of the malicious server (default 64)")
    g.add_argument("--iterations", type=int, help="optimization steps of every attack (default: per attack)")
    g.add_argument("--quick", action="store_true", default=None, help="short attack budgets (under a minute)")
    g.add_argument("--budget", metavar="TIME", help="wall-clock budget (90s, 5m, 1h, 1h30m): optimization attacks are "
                   "shortened by one factor to fit (exact attacks never), said in the plan and the verdict")
    g.add_argument("--tune", type=int, metavar="TRIALS",
                   help="tune every optimization attack with TRIALS Optuna trials on surrogate clients simulated "
                        "from a disjoint split of the data (never the audited clients); default 0 (off)")
    g.add_argument("--tune-clients", type=int, help="surrogate clients the tuner simulates (default 2)")
    g.add_argument("--seed", type=int)
    g.add_argument("--device", help="cpu (default), cuda, cuda:1, mps")
    g.add_argument("--quiet", action="store_true", help="no progress output")
    g.add_argument("--no-progress", action="store_true", help="alias of --quiet for the progress bar")


def config_from_args(args) -> AuditConfig:
    """The YAML file (if any), then every flag given on the command line."""
    from ...config.specs import split_names

    base = AuditConfig.from_yaml(args.config) if args.config else AuditConfig()
    given = {k: getattr(args, k) for k in _KEYS if getattr(args, k, None) is not None}
    if args.defense:
        given["defense"] = tuple(args.defense)
    if args.attacks is not None:
        given["attacks"] = split_names(args.attacks, "--attacks")
    if args.no_malicious:
        given["malicious"] = False
    from ...config.boundary import settings_model, validate
    from ...errors import FedleakError
    from .config import Sweep, parse_defenses
    from .time_budget import parse_budget

    validate(settings_model(AuditConfig), given, style="flag")  # errors name the flag (--batch-size)
    for flag, key, check in (("--defense", "defense", parse_defenses), ("--sweep", "sweep", Sweep.parse),
                              ("--budget", "budget", parse_budget)):
        if key in given:
            try:
                check(given[key])
            except FedleakError as exc:
                raise FedleakError(f"{flag}: {exc}") from None
    return base.merged(given)
