"""ClientApp: trains on one partition of fedleak's embedded digits; optionally runs fedleak's
inspector mod (refuses imprinted models) and shares its batch with the audit (simulation only)."""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

import fedleak
from fedleak.integrations.flower.demo import federation_model, make_client_app

app = ClientApp()
_apps = {}


@app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    key = (int(context.node_config["num-partitions"]), bool(cfg["malicious"]), bool(cfg["share-truth"]))
    if key not in _apps:
        spec, parts = fedleak.data.load("digits", num_clients=key[0], samples_per_client=int(cfg["samples"]), seed=0)
        _apps[key] = make_client_app(parts, lambda: federation_model(spec, key[1]), share=key[2],
                                     inspect=bool(cfg["inspect"]))
    return _apps[key](msg, context)
