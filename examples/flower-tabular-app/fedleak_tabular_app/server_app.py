"""The server: Flower's FedAvg over every node, the local training (lr, epochs, batch size) sent in the train config;
with ``dp-noise`` > 0, inside Flower's server-side DP wrapper (fixed clipping at ``dp-clip``), whose claim
``fedleak-canaries`` tests."""

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg

from fedleak_tabular_app.task import make_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    nodes = int(cfg["num-clients"])
    strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
    if float(cfg["dp-noise"]) > 0:
        strategy = DifferentialPrivacyServerSideFixedClipping(strategy, noise_multiplier=float(cfg["dp-noise"]),
                                                              clipping_norm=float(cfg["dp-clip"]),
                                                              num_sampled_clients=nodes)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(make_model().state_dict()),
                   num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"]), "local-epochs": int(cfg["local-epochs"]),
                                              "batch-size": int(cfg["batch-size"])}))
