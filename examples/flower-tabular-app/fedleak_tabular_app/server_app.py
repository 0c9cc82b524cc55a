"""The server: Flower's FedAvg over every node, the local training (lr, epochs, batch size) sent in the train config."""

from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from fedleak_tabular_app.task import make_model

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg = context.run_config
    nodes = int(cfg["num-clients"])
    strategy = FedAvg(fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(make_model().state_dict()),
                   num_rounds=int(cfg["num-server-rounds"]),
                   train_config=ConfigRecord({"lr": float(cfg["lr"]), "local-epochs": int(cfg["local-epochs"]),
                                              "batch-size": int(cfg["batch-size"])}))
