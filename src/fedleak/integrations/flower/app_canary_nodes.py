"""Canary *nodes* inside ``fedleak audit --flower-app``: the user's app in Flower's simulation, with canaries that
run each node's own ClientApp mods (issue 42, item 2).

:mod:`.canary_nodes` runs canary nodes on fedleak's in-process grid; here they are nodes of Flower 1.42's real
simulation of the user's app (Ray actors, the user's ServerApp and strategy):

* **client side** — :class:`CanaryNodeApp` is the ClientApp the simulation loads. Nodes with partition-id < K
  (the app's real node count) are handed to the user's ClientApp unchanged, with the node config they would have
  without canaries (``num-partitions`` = K). Partition K + i is the i-th *included* canary j (Steinke, Nasr,
  Jagielski 2023: each canary included with probability ½; :class:`fedleak.privacy.canaries.Canaries`) of real
  node k = j mod K: the user's ClientApp is called with node k's node config, and whichever ClientApp answers
  node k (the loaded one, or one the app builds for that node inside its train function) runs **its own mods**
  (read back from that ClientApp object, :func:`.canary_nodes.train_mods`) around the canary train function
  (:meth:`.canary_nodes._Plan.reply_fn`: θ_t + r_j·C_t·u_j, Andrew et al. ICLR 2024 §3). The node's own train
  function still runs once (its reply is replaced by the canary inside the mods): that is how a ClientApp that
  builds its mods per node is followed to the one that answers. A node built without its mod sends its canary
  as it is.
* **server side** — :func:`attach` puts a recorder (:class:`.canary_nodes._Recorder`) around the strategy the
  ServerApp starts: the ServerApp's strategy samples the canary nodes like any node, their replies are read as
  the server received them (projection on u_j, :func:`.canary_replies.reply_test`) and then aggregated by the
  user's strategy (its DP wrapper's clipping check and noise), going around :class:`.audit.LeakageAudit` (a
  canary holds no data to attack). The released aggregates give the one-run scores and the aggregate test
  (:func:`fedleak.privacy.diagnose.diagnose`). Which node is a canary the server knows from the simulation's
  node → partition map (in a deployment: from the node operators who run the canary ClientApp).

What a server can and cannot see in a real deployment (:data:`SEES`).
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import numpy as np
from flwr.app import Context, MetricRecord
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import Strategy

from ...errors import FedleakError
from ...privacy.canaries import Canaries
from .app_chains import CLIENTAPP_CALL, chain, own_train
from .canary_nodes import CANARY_NODE, KEY_CLIPPING_NORM, KEY_SKIP, _floats, _Plan, _Recorder, canary_app
from .canary_replies import reply_test

#: canary nodes at most (each included one is a simulated node beside the app's own: 64 in all, app_audit)
MAX_CANARY_NODES = 120
#: raw norm of the large canaries in units of the clip norm
SCALE = 10.0
SEES = " ".join("""in a deployment the server sees replies only: a node's mod is inferred from the replies of
that node's canaries (their projection on the canary's direction: 1 if the mod clipped it, 10 if not) and from the
released aggregates; this needs the node's operator to run the canary ClientApp (this wrapper around the node's own
ClientApp) beside the real one — a node that does not is not audited, and what its ClientApp does inside is never
seen""".split())


def homes(canaries: Canaries, nodes: int) -> np.ndarray:
    """The real node of each canary: the included canaries above the clip norm dealt round-robin over the nodes,
    likewise those at the clip norm and the excluded ones, so every node is tested once there are K included large
    canaries (which node a canary serves changes no canary's inclusion coin, Steinke et al.'s design)."""
    j = np.arange(canaries.count)
    kind = np.where(canaries.included, np.where(canaries.raw_norm(j) > 1, 0, 1), 2)
    out = np.empty(canaries.count, int)
    for value in range(3):
        out[kind == value] = np.arange(int((kind == value).sum())) % max(1, nodes)
    return out


def plan(nodes: int, count: int, seed: int = 0) -> Canaries:
    """The canaries of ``nodes`` real nodes, or one line saying why ``count`` does not fit."""
    if isinstance(count, bool) or not isinstance(count, int) or not 2 <= count <= MAX_CANARY_NODES:
        raise FedleakError(f"canary nodes (--canary-nodes, run config fedleak-canary-nodes, [tool.fedleak] "
                           f"canary-nodes) must be 0 (off) or an integer from 2 to {MAX_CANARY_NODES}, got {count!r}")
    canaries = Canaries(count, 1, int(seed), SCALE, nodes)
    j = np.arange(count)
    testable = canaries.included & (canaries.raw_norm(j) > 1)
    missing = [k for k in range(nodes) if not (testable & (homes(canaries, nodes) == k)).any()]
    total = nodes + int(canaries.included.sum())
    if missing:
        raise FedleakError(f"canary nodes {count}: node(s) {', '.join(map(str, missing))} of {nodes} would have no "
                           f"included canary of raw norm > C ({int(testable.sum())} of the {count} drawn, each "
                           "included with probability ½): give more canary nodes")
    if total > 64:
        raise FedleakError(f"canary nodes {count}: {nodes} nodes + {total - nodes} included canary nodes = {total} "
                           "simulated nodes, more than 64 on this machine: give fewer canary nodes")
    return canaries


class _Swap(threading.local):
    train = None  # the canary train function of the call in progress (None: no canary call)
    nested = False  # a ClientApp called inside the train function answered (its canary is inside its mods)


_SWAP = _Swap()


def _canary_call(self: ClientApp, message, context):
    """``ClientApp.__call__`` during a canary call: this app's own mods around its train function, whose reply is
    the canary unless a ClientApp it calls answered (then that app's mods already hold the canary)."""
    if _SWAP.train is None or not message.metadata.message_type.startswith("train"):
        return CLIENTAPP_CALL(self, message, context)
    leaf = own_train(self)

    def probe(msg, ctx):
        _SWAP.nested = False
        reply = leaf(msg, ctx)
        return reply if _SWAP.nested else _SWAP.train(msg, ctx)

    reply = CLIENTAPP_CALL(canary_app(self, probe), message, context)
    _SWAP.nested = True
    return reply


class CanaryNodeApp(ClientApp):
    """The ClientApp the simulation loads: the user's for partitions < ``nodes``, a canary node beyond."""

    def __init__(self, user_app: ClientApp, nodes: int, canaries: Canaries, run_config: Optional[dict] = None) -> None:
        super().__init__()
        self.user_app, self.nodes, self.canaries = user_app, nodes, canaries
        self.run_config = dict(run_config or {})  # the run's config, for reading the nodes' LocalDpMod claim
        self.index = [int(j) for j in np.flatnonzero(canaries.included)]

    def __call__(self, message, context: Context):
        partition = int(context.node_config.get("partition-id", 0))
        j = self.index[partition - self.nodes] if partition >= self.nodes else None
        home = partition if j is None else int(homes(self.canaries, self.nodes)[j])
        node = Context(run_id=context.run_id, node_id=context.node_id, run_config=context.run_config,
                       node_config={**context.node_config, "partition-id": home, "num-partitions": self.nodes},
                       state=context.state)
        if j is None or not message.metadata.message_type.startswith("train"):
            return self.user_app(message, node)
        _SWAP.train, _SWAP.nested = _Plan(self.canaries, None).reply_fn(j), False
        ClientApp.__call__ = _canary_call
        try:
            return _canary_call(self.user_app, message, node)
        finally:
            ClientApp.__call__, _SWAP.train = CLIENTAPP_CALL, None


class _Bypass(Strategy):
    """Around :class:`.audit.LeakageAudit` (``above=True``: above it, keeps the canary replies aside; below it:
    hands them back), so that the canaries reach the user's strategy but are never attacked."""

    def __init__(self, strategy: Strategy, stash: list, above: bool) -> None:
        self.strategy, self.stash, self.above = strategy, stash, above

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round, arrays, config, grid):
        return self.strategy.configure_train(server_round, arrays, config, grid)

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        if self.above:
            self.stash[:] = [r for r in replies
                             if CANARY_NODE <= r.metadata.src_node_id < CANARY_NODE + MAX_CANARY_NODES]
            replies = [r for r in replies if all(r is not s for s in self.stash)]
        else:
            replies, self.stash[:] = replies + self.stash, []
        return self.strategy.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round, replies):
        return self.strategy.aggregate_evaluate(server_round, replies)


class NodeRecorder(_Recorder):
    """The recorder of :mod:`.canary_nodes` on Flower's node ids: a canary's reply is renamed ``CANARY_NODE + j``
    (from the simulation's node → partition map), given the round's mean metrics of the real replies (the weight
    FedAvg gives it, the keys Flower requires), and recorded; canary nodes are not asked to evaluate."""

    def __init__(self, strategy: Strategy, canaries: Canaries, nodes: int, partitions: dict, audits: list,
                 client: Optional[CanaryNodeApp] = None) -> None:
        super().__init__(strategy, _Plan(canaries, None))
        self.nodes, self.partitions, self.audits, self.names, self.error = nodes, partitions, audits, {}, None
        self.client, self.claim = client, None  # the claim of the nodes' LocalDpMod (app_canary_claim), if read
        self.index = [int(j) for j in np.flatnonzero(canaries.included)]

    def canary(self, node_id: int) -> Optional[int]:
        partition = self.partitions.get(int(node_id), -1)
        return self.index[partition - self.nodes] if partition >= self.nodes else None

    def configure_train(self, server_round, arrays, config, grid):
        if self.plan.clip is None and self.client is not None and KEY_CLIPPING_NORM not in config \
                and not any(getattr(n, "clipping_norm", None) for n in chain(self.strategy)):
            self._read_claim(arrays, config)
        try:
            messages = super().configure_train(server_round, arrays, config, grid)
        except TypeError:  # no clipping_norm in the config, the strategy or the plan
            messages = []
        if self.claim is not None:  # the canaries' C: the claim's clip norm, sent to the canary nodes only
            messages = [_with_clip(m, self.plan.clip) if self.canary(m.metadata.dst_node_id) is not None else m
                        for m in messages]
        if self.plan.skip:  # integer entries of the initial arrays: never canary coordinates, even once released as
            messages = [_with_config(m, {KEY_SKIP: sorted(self.plan.skip)})  # floats (flwr #8381, buffer_check)
                        if self.canary(m.metadata.dst_node_id) is not None else m for m in messages]
        if not messages or not any(KEY_CLIPPING_NORM in c for m in messages for c in m.content.config_records.values()):
            self.error = ("canary nodes need the clip norm the nodes' mods use: the train config the strategy sends "
                          f"carries no {KEY_CLIPPING_NORM} (Flower's client-side DP wrappers, "
                          "DifferentialPrivacyClientSide{Fixed,Adaptive}Clipping, send it) and no node's ClientApp "
                          "carries a LocalDpMod")
            raise FedleakError(self.error)
        return messages

    def _read_claim(self, arrays, config) -> None:
        """The claim of the nodes' LocalDpMods (:func:`.app_canary_claim.local_dp_claim`), before round 1."""
        from flwr.app import RecordDict

        from .app_canary_claim import local_dp_claim

        keys = next(((getattr(n, "arrayrecord_key", None), getattr(n, "configrecord_key", None))
                     for n in chain(self.strategy) if getattr(n, "arrayrecord_key", None)), ("arrays", "config"))
        content = RecordDict({keys[0]: arrays, keys[1]: config})
        try:
            self.claim = local_dp_claim(self.client.user_app, content, self.nodes, self.client.run_config)
        except FedleakError as exc:
            self.error = str(exc)
            raise
        if self.claim is not None:
            self.plan.clip = self.claim["clipping_norm"]

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        real = [r for r in replies if self.canary(r.metadata.src_node_id) is None and not r.has_error()
                and r.content.metric_records]
        for r in replies:
            j = self.canary(r.metadata.src_node_id)
            if j is None:
                continue
            self.names[CANARY_NODE + j] = r.metadata.src_node_id
            r.metadata.__dict__["_src_node_id"] = CANARY_NODE + j  # noqa: the reply's sender, renamed for _Recorder
            if real and not r.has_error():
                _real_metrics(r, real)
        return super().aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round, arrays, config, grid):
        return [m for m in self.strategy.configure_evaluate(server_round, arrays, config, grid)
                if self.canary(m.metadata.dst_node_id) is None]

    def start(self, grid, initial_arrays, *args, **kwargs):
        try:
            return super().start(grid, initial_arrays, *args, **kwargs)
        finally:
            for audit in self.audits:
                audit.wait()


def _with_clip(message, clip: float):
    """``message`` (its content shared with the other nodes' messages) with its own content whose config also
    carries ``clipping_norm`` = ``clip``: what a canary node's train function reads its C from."""
    return _with_config(message, {KEY_CLIPPING_NORM: float(clip)})


def _with_config(message, values: dict):
    """``message`` with its own content whose config also carries ``values`` (the other nodes' messages keep theirs)."""
    from flwr.app import ConfigRecord, RecordDict

    content = RecordDict({key: (ConfigRecord({**dict(value), **values}) if isinstance(value, ConfigRecord) else value)
                          for key, value in message.content.items()})
    if not content.config_records:
        content["config"] = ConfigRecord(dict(values))
    message.content = content
    return message


def _real_metrics(reply, real: list) -> None:
    """A canary reply's metrics: the round's mean of the real replies' (same record name and keys: Flower requires
    them, and FedAvg weighs a reply by its num-examples), with the canary's own value of any other key they share
    (a key its node's mod adds, such as adaptiveclipping_mod's norm bit)."""
    name, first = next(iter(real[0].content.metric_records.items()))
    own = dict(next(iter(reply.content.metric_records.values()), {}))
    metrics = {}
    for key, value in first.items():
        values = [next(iter(x.content.metric_records.values())).get(key) for x in real]
        if isinstance(value, (int, float)) and all(isinstance(v, (int, float)) for v in values):
            mean = float(np.mean(values))
            metrics[key] = int(round(mean)) if isinstance(value, int) else mean
        else:
            metrics[key] = value
        if key in own and key != "num-examples":
            metrics[key] = own[key]
    for key in list(reply.content.metric_records):
        del reply.content[key]
    reply.content[name] = MetricRecord(metrics)


def attach(top: Strategy, audit, canaries: Canaries, nodes: int, partitions: dict,
           client: Optional[CanaryNodeApp] = None) -> NodeRecorder:
    """``top`` (the strategy the ServerApp starts, holding ``audit``) with the canary nodes' recorder around it and
    the canary replies going around ``audit``; ``client``: the ClientApp the simulation runs (the nodes'
    LocalDpMod claim is read from it where the train config carries no clip norm)."""
    for node in chain(top):
        if getattr(node, "accountant", None) is not None and getattr(node, "num_sampled_clients", None):
            raise FedleakError(f"canary nodes cannot join {type(node).__name__}: its Flower accountant refuses a round "
                               f"whose sample differs from num_sampled_clients ({node.num_sampled_clients}); audit "
                               "a copy of the app whose DP wrapper has no accountant (the canaries test the noise)")
    stash: list = []
    parents = [n for n in chain(top) if getattr(n, "strategy", None) is audit]
    audit.strategy = _Bypass(audit.strategy, stash, above=False)
    bypass = _Bypass(audit, stash, above=True)
    if parents:
        parents[0].strategy = bypass
    return NodeRecorder(bypass if top is audit else top, canaries, nodes, partitions, [audit], client)


def _claimed_noise(recorder: NodeRecorder, replies: float) -> Optional[float]:
    """σ of the sum the canaries see: the wrapper's noise_multiplier · replies / num_sampled_clients (its noise is
    sized for num_sampled_clients replies, the mean is over all of them); with the nodes' LocalDpMod claim, s·√n/C
    (n replies each noised N(0, s²), as ``fedleak dp-audit`` claims it: :mod:`fedleak.privacy.federation`)."""
    if recorder.claim is not None:
        return recorder.claim["noise_std"] * math.sqrt(replies) / recorder.claim["clipping_norm"]
    for node in chain(recorder.strategy):
        if getattr(node, "noise_multiplier", None) is not None and getattr(node, "num_sampled_clients", None):
            return float(node.noise_multiplier) * replies / float(node.num_sampled_clients)
    return None


def result(recorder: NodeRecorder, seconds: float, delta: float = 1e-5) -> dict:
    """The canary nodes' findings: the per-node reply test and, where the strategy adds noise, the aggregate test
    and one-run bounds (the same statistics as :func:`.canary_nodes.run_canary_nodes`)."""
    from ...privacy.diagnose import diagnose
    from ...privacy.estimate import estimate
    from ...privacy.gdp import composed_mu
    from ...privacy.one_run import lower_bounds

    c = recorder.plan.canaries
    j = np.arange(c.count)
    included, raw, node = c.included, c.raw_norm(j), homes(c, recorder.nodes)
    out = {"level": "client", "source": "flower canary nodes in Flower's simulation of the app",
           "nodes": recorder.nodes, "canaries": c.count, "canaries_inserted": int(included.sum()),
           "rounds": recorder.rounds, "clip_norms": recorder.clip_norms, "sees": SEES,
           "buffer_finding": recorder.buffers.finding(),  # integer buffers released noised (flwr #8381)
           "cost": {"canary_replies": int(recorder.replies.sum()), "seconds": round(seconds, 3),
                    "per_canary_reply": "one ClientApp call of the node's own train function (its reply replaced "
                                        "by the canary inside the node's mods) and one more reply to aggregate"}}
    if recorder.unit_sum is None or not recorder.replies.any():
        return {**out, "reply_test": [], "nodes_flagged_by_replies": [],
                "note": "no canary reply was aggregated (every canary node's reply failed, or no round ran)"}
    claim = recorder.claim  # LocalDpMod: each reply carries noise s, tested against s/C (canary_replies)
    reply_noise = claim["noise_std"] / claim["clipping_norm"] if claim else 0.0
    replies = reply_test(recorder.projection_sum, recorder.replies, included, raw, node, recorder.nodes, reply_noise,
                         residual=recorder.residual_sum, dim=recorder.theta0.size)
    out.update(reply_test=replies, nodes_flagged_by_replies=[r["node"] for r in replies if r["flagged"]])
    if claim:
        out.update(claim=claim, noise_by=f"the nodes' LocalDpMod adds it to each reply; claim tested: C = "
                                         f"{claim['clipping_norm']:g}, sensitivity {claim['sensitivity']:g}, (ε, δ) = "
                                         f"({claim['epsilon']:g}, {claim['delta']:g}) per round, s = "
                                         f"{claim['noise_std']:.3g}, stated by {claim['stated_by']}")
    noise = _claimed_noise(recorder, recorder.nodes + float(included.sum()))
    if noise is None or not noise > 0:
        return {**out, "note": "the strategy adds no noise fedleak can read (no noise_multiplier): the aggregate "
                               "test did not run, the replies were tested for clipping only"}
    dim = recorder.theta0.size
    full = Canaries(c.count, dim, c.seed, c.scale, c.nodes)
    change = recorder.last - recorder.theta0
    directions = {"all-iterates": (recorder.unit_sum, math.sqrt(dim) / np.linalg.norm(recorder.unit_sum)),
                  "final-model": (change, math.sqrt(dim) / max(np.linalg.norm(change), 1e-300))}
    scores = {t: np.empty(c.count) for t in directions}
    for index, block in full.blocks():
        for t, (v, factor) in directions.items():
            scores[t][index] = block.double().numpy() @ v * factor
    mu = composed_mu(noise, recorder.rounds)
    check = diagnose(scores["all-iterates"], included, raw, node, mu, noise, recorder.nodes, delta=delta)
    out.update(noise_multiplier_seen=noise, mu_claimed=mu, aggregate_test=check,
               nodes_flagged_by_aggregates=check["flagged_clients"],
               lower_bounds={t: lower_bounds(s, included, delta) for t, s in scores.items()},
               estimates={t: estimate(s, included, delta, null_sd=1.0) for t, s in scores.items()})
    return out
