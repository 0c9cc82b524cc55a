"""ServerApp: Flower's FedAvg wrapped in fedleak's LeakageAudit (honest, or a malicious server
shipping an imprinted model when ``malicious = true``)."""

from flwr.app import ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

import fedleak
from fedleak import Protocol
from fedleak.integrations.flower import LeakageAudit, model_record
from fedleak.integrations.flower.demo import federation_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    clients, samples, lr = int(cfg["num-clients"]), int(cfg["samples"]), float(cfg["lr"])
    malicious = bool(cfg["malicious"])
    spec = fedleak.data.spec_for("digits")
    model = federation_model(spec, malicious)
    # the embedded digits are not 8-bit images: the imprint readout skips its pixel-grid check
    attack, options = ("imprint", {"levels": 0}) if malicious else ("inverting-gradients",
                                                                    {"iterations": int(cfg["iterations"])})
    audit = LeakageAudit(FedAvg(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients), model,
                         str(cfg["out"]), spec=spec, protocol=Protocol("fedavg", lr=lr, reshuffle=False),
                         attack=attack, attack_options=options, ship=model if malicious else None)
    audit.start(grid=grid, initial_arrays=model_record(model), num_rounds=int(cfg["num-server-rounds"]),
                train_config=ConfigRecord({"lr": lr, "local-epochs": 1, "batch-size": samples}))
    audit.close()
