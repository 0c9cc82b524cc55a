"""ServerApp: Flower's FedAvg audited by fedleak's LeakageAudit (honest, or a malicious server
shipping an imprinted model when ``malicious = true``), optionally under one of Flower's DP modes
(``dp``: none, server-fixed, server-adaptive, client-fixed, client-adaptive, local; ``dp-audit``:
``outer`` = the audit wraps the DP wrapper, ``inner`` = the DP wrapper wraps the audit).

The audit writes into ``out``: a relative path is taken inside this app's folder (where Flower
installed the FAB), one sub-folder per run (``run-<run id>``) — never the SuperLink's working
directory; an absolute path is used as given.
"""

from pathlib import Path

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import fedleak
from fedleak import Protocol
from fedleak.integrations.flower import LeakageAudit, model_record, recipes
from fedleak.integrations.flower.demo import federation_model

app = ServerApp()


def out_dir(context: Context) -> Path:
    out = Path(str(context.run_config.get("out", "fedleak-audit")))
    if not out.is_absolute():
        out = Path(__file__).resolve().parent.parent / out / f"run-{context.run_id}"
    return out


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    clients, samples, lr = int(cfg["num-clients"]), int(cfg["samples"]), float(cfg["lr"])
    malicious, mode, position = bool(cfg["malicious"]), str(cfg.get("dp", "none")), str(cfg.get("dp-audit", "outer"))
    recipes.check(mode, position)
    spec = fedleak.data.spec_for("digits")
    model = federation_model(spec, malicious)
    # the embedded digits are not 8-bit images: the imprint readout skips its pixel-grid check
    attack, options = ("imprint", {"levels": 0}) if malicious else ("inverting-gradients",
                                                                    {"iterations": int(cfg["iterations"])})
    out = out_dir(context)
    print(f"fedleak: auditing run {context.run_id} into {out}", flush=True)

    def make_audit(strategy, accountant):
        return LeakageAudit(strategy, model, out, spec=spec, protocol=Protocol("fedavg", lr=lr, reshuffle=False),
                            attack=attack, attack_options=options, ship=model if malicious else None,
                            accountant=accountant)

    base = FedAvg(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients)
    strategy, audit = recipes.server_strategy(mode, position, base, make_audit, noise=float(cfg.get("noise", 0.5)),
                                              clip=float(cfg.get("clip", 0.05)), clients=clients)
    try:
        strategy.start(grid=grid, initial_arrays=model_record(model), num_rounds=int(cfg["num-server-rounds"]),
                       train_config=ConfigRecord({"lr": lr, "local-epochs": 1, "batch-size": samples}))
    finally:
        audit.close()
    print(f"fedleak: {len(audit.records)} records in {audit.out / 'leakage.jsonl'}", flush=True)
