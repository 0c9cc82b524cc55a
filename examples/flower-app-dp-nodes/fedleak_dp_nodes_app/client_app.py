"""ClientApp: each node clips its update with Flower's ``fixedclipping_mod`` (client-side DP: the server's
``DifferentialPrivacyClientSideFixedClipping`` adds the noise) — unless its build leaves the mod out. With the run
config's ``dp = "local"`` each node runs Flower's ``LocalDpMod`` instead (clip to ``clip``, then Gaussian noise for
(``local-epsilon``, ``local-delta``) on its own reply; the server's FedAvg adds none).

Flower's client-side DP mods are opt-in per ClientApp (FLIP #1122): a node whose operator builds the app without
the mod sends its update unclipped, and the server's wrapper only checks that the clip norm was *sent*. This app
builds one ClientApp per partition; the run config's ``no-clip-on`` (e.g. ``"1,3"``) lists the partitions built
without their DP mod (``fixedclipping_mod``, or ``LocalDpMod``) — the misconfiguration ``fedleak audit --flower-app``
finds with canary nodes.
"""

from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import LocalDpMod, fixedclipping_mod

import fedleak
from fedleak.integrations.flower import node_settings
from fedleak.integrations.flower.demo import make_client_app

from .task import Net

app = ClientApp()
_apps: dict = {}


def without_clipping(context: Context) -> set:
    """The partitions built without the mod (the run config's ``no-clip-on``)."""
    text = str(context.run_config.get("no-clip-on", ""))
    return {int(p) for p in text.replace(",", " ").split()}


@app.train()
def train(msg: Message, context: Context) -> Message:
    settings = node_settings(context)
    clipped = settings.partition_id not in without_clipping(context)
    cfg = context.run_config
    local = str(cfg.get("dp", "central")) == "local"
    key = (settings.num_partitions, int(cfg["samples"]), clipped, local, float(cfg["clip"]),
           float(cfg.get("local-epsilon", 8.0)), float(cfg.get("local-delta", 1e-5)))
    if key not in _apps:
        _, parts = fedleak.data.load("digits", num_clients=key[0], samples_per_client=key[1], seed=0)
        mod = LocalDpMod(key[4], key[4], key[5], key[6]) if local else fixedclipping_mod  # sensitivity = C
        _apps[key] = make_client_app(parts, Net, mods=[mod] if clipped else [])
    return _apps[key](msg, context)
