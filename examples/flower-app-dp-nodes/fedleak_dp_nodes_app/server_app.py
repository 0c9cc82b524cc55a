"""ServerApp: Flower's FedAvg inside ``DifferentialPrivacyClientSideFixedClipping`` (the nodes clip with
``fixedclipping_mod``, the server adds Gaussian noise σ·C/n to the mean of the n sampled replies); with
``dp = "local"`` Flower's FedAvg alone (each node's ``LocalDpMod`` clips and noises its own reply)."""

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, FedAvg

from .task import Net

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    clients = int(cfg["num-clients"])
    strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=clients, min_available_nodes=clients)
    if str(cfg.get("dp", "central")) != "local":
        strategy = DifferentialPrivacyClientSideFixedClipping(
            strategy, noise_multiplier=float(cfg["noise"]), clipping_norm=float(cfg["clip"]),
            num_sampled_clients=clients)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(Net().state_dict()), num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"]), "batch-size": int(cfg["samples"])}))
