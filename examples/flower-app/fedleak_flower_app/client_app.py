"""ClientApp: trains on one partition of fedleak's embedded digits.

What the client protects and shares is the node's own decision, read from its node config
(``flower-supernode --node-config "partition-id=0 num-partitions=3 inspect=true share-truth=false"``;
for Flower's simulation engine, whose node config holds only the partition, from the environment
variable ``FEDLEAK_NODE_CONFIG``): ``inspect`` runs fedleak's inspector mod (refuses imprinted
models), ``share-truth`` sends the training batch for scoring (simulations only). The run config
the server side submits can only make a client stricter (``inspect=true``, ``share-truth=false``).
The DP mods Flower's client-side DP modes need follow the run config's ``dp`` (they only clip or
add noise: stricter).
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

import fedleak
from fedleak.integrations.flower import node_settings, recipes
from fedleak.integrations.flower.demo import federation_model, make_client_app

app = ClientApp()
_apps = {}


@app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = context.run_config
    settings = node_settings(context)  # one line naming a missing partition-id / num-partitions
    mode = str(cfg.get("dp", "none"))
    key = (settings.num_partitions, bool(cfg["malicious"]), mode, float(cfg.get("clip", 0.05)))
    if key not in _apps:
        spec, parts = fedleak.data.load("digits", num_clients=key[0], samples_per_client=int(cfg["samples"]), seed=0)
        _apps[key] = make_client_app(parts, lambda: federation_model(spec, key[1]),
                                     mods=recipes.client_mods(mode, key[3]))
    return _apps[key](msg, context)
