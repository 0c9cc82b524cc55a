"""Each node trains the model on its own records: plain SGD on the mean cross-entropy, its records in order in
batches of ``batch-size``, ``local-epochs`` times (as Flower's PyTorch templates train), and replies with the weights.

A node opts in to share its batch with the audit (evaluation mode; a deployment's nodes never do) through its node
config, which ``fedleak audit --flower-app --share-truth`` (or ``share-truth`` in ``[tool.fedleak]``) sets.
"""

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fedleak.integrations.flower import node_settings, share_truth
from fedleak_tabular_app.task import make_model, partition

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    settings = node_settings(context)
    x, y = partition(settings.partition_id, settings.num_partitions, int(context.run_config["records"]))
    model = make_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    config = msg.content["config"]
    batch, lr = int(config["batch-size"]), float(config["lr"])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(int(config["local-epochs"])):
        for start in range(0, len(x), batch):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x[start:start + batch]), y[start:start + batch])
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        loss = float(F.cross_entropy(model(x), y))
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"train-loss": loss, "num-examples": len(x)})})
    if settings.share_truth:
        share_truth(content, x, y)
    return Message(content, reply_to=msg)
