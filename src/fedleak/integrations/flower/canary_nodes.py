"""Canary *nodes*: Andrew et al.'s canary clients run through the user's own ClientApp mods (issue 42, item 2).

:class:`.canary.CanaryAudit` adds canaries on the server, after any client-side mod: it cannot see a
``fixedclipping_mod``, ``adaptiveclipping_mod`` or ``LocalDpMod`` missing on some nodes (Flower FLIP #1122: the
client-side DP mods are opt-in per ClientApp). Here a canary is a *node* of the federation:

* canary j (Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for
  Federated Learning", ICLR 2024 §3) is attached to real node k = j mod K and runs **that node's ClientApp mod
  chain** — the very mod objects, in the order Flower's ``make_ffn`` chained them (read back from the
  ClientApp, :func:`train_mods`) — around a train function that answers θ_t + r_j·C_t·u_j (u_j a seeded unit
  direction, C_t the round's clip norm from the wrapper's config or the audit's ``clip``, r_j = 1 or ``scale``:
  :class:`fedleak.privacy.canaries.Canaries`). The mods then clip and noise it exactly as they do the node's own
  update; a node built without its mod sends its canaries as they are.
* Each canary is included with probability ½ (Steinke, Nasr, Jagielski, NeurIPS 2023, Alg. 1): the included ones
  are extra nodes of the grid, sampled, clipped, noised and averaged by the user's own strategy (Flower's DP
  wrappers around FedAvg) like any node; the others never exist.

Two statistics, both from what the server receives:

* **the replies** (what a server without secure aggregation sees): a canary reply's projection on its direction,
  ⟨reply − θ_t, u_j⟩/C_t, is 1 (+ the mod's noise s/C_t) when the node clipped it and r_j when it did not; per real
  node, a one-sided z-test of its large canaries' mean projection against 1 with the claimed per-reply noise,
  Bonferroni over the nodes, names the nodes whose mod is missing (:func:`reply_test`);
* **the released aggregates** (what anyone who sees the model sees): all-iterates and final-model scores, the
  one-run bounds, the claim test and the per-node separation test of :func:`fedleak.privacy.diagnose.diagnose`;
  and the noise-scale test: the aggregates projected on the directions of canaries never sent carry the wrapper's
  noise (plus the real updates' variance), a χ² lower tail against the claimed noise (:class:`.NoiseProbe`).

What this can and cannot see in a real deployment: the server sees replies only; a mod's presence on a node is
inferred from the replies of that node's canaries, which requires the node's operator to run the canary ClientApp
(the user's app, canary train function inside its mods) next to the real one — the audit cannot look inside a
node that does not. Cost: every included canary is one more ClientApp call (no training) and one more reply per
round: T·m/2 canary replies, and the DP wrapper's ``num_sampled_clients`` must count them (the strategy is built
by ``strategy_fn(nodes)`` for the total).
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable, Optional, Sequence, Union

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp.strategy import Strategy
from flwr.supercore.task_identity import TaskIdentity

from ...errors import FedleakError
from ...privacy.buffer_check import BufferCheck, dp_chain
from ...privacy.canaries import Canaries
from .canary_replies import NOISE_MARGIN, NoiseProbe, reply_test  # noqa: F401  (re-exported)
from .grid import InlineGrid

#: canary j is node CANARY_NODE + j (real nodes are 1…K)
CANARY_NODE = 1_000_000
KEY_CLIPPING_NORM = "clipping_norm"
#: the names of the entries integer-typed in the initial arrays, sent to canary nodes (left out of the canary vector
#: even after a DP wrapper released them as floats: flwr #8381, :mod:`fedleak.privacy.buffer_check`)
KEY_SKIP = "fedleak-integer-arrays"


def train_mods(app, action: str = "default") -> list:
    """The mods around ``app``'s train function, outermost first, as Flower chained them (``make_ffn``'s closures:
    the ClientApp's own mods, then the ``@app.train(mods=...)`` ones)."""
    if not isinstance(app, ClientApp):
        raise FedleakError(f"the node's ClientApp must be a flwr.clientapp.ClientApp, got {type(app).__name__}")
    func = app._registered_funcs.get(f"train.{action}") or app._call  # noqa: SLF001 - Flower's own chain, read only
    if func is None:
        raise FedleakError(f"the ClientApp registers no train function 'train.{action}'")
    mods = []
    while getattr(func, "__code__", None) is not None and func.__code__.co_name == "new_ffn" and func.__closure__:
        cells = dict(zip(func.__code__.co_freevars, (c.cell_contents for c in func.__closure__)))
        if "_mod" not in cells or "_ffn" not in cells:
            break
        mods.append(cells["_mod"])
        func = cells["_ffn"]
    return mods


def _floats(record: ArrayRecord, arrays: Optional[list] = None, skip=frozenset()) -> tuple[np.ndarray, list]:
    arrays = record.to_numpy_ndarrays() if arrays is None else arrays  # Flower deserializes on every call
    layout = [(name, a.shape, a.dtype) for name, a in zip(record.keys(), arrays)]
    flat = np.concatenate([a.reshape(-1).astype(np.float64) for name, a in zip(record.keys(), arrays)
                           if np.issubdtype(a.dtype, np.floating) and name not in skip] or [np.zeros(0)])
    return flat, layout


def _rebuild(record: ArrayRecord, flat: np.ndarray, arrays: Optional[list] = None, skip=frozenset()) -> ArrayRecord:
    out, start = {}, 0
    for name, a in zip(record.keys(), record.to_numpy_ndarrays() if arrays is None else arrays):
        if np.issubdtype(a.dtype, np.floating) and name not in skip:
            a = flat[start:start + a.size].reshape(a.shape).astype(a.dtype)
            start += a.size
        out[name] = Array(np.ascontiguousarray(a).reshape(a.shape))  # a 0-d buffer stays 0-d
    return ArrayRecord(out)


class _Plan:
    """What the canary train functions share with the server side of the audit."""

    def __init__(self, canaries: Canaries, clip: Optional[float]) -> None:
        self.canaries, self.clip = canaries, clip
        self.metrics: dict = {}  # node k → its real reply's metrics this round (num-examples: the round's mean)
        self.examples: list = []
        self.directions: dict = {}
        self.skip: frozenset = frozenset()  # entries integer-typed in the initial arrays (never canary coordinates)

    def direction(self, j: int, dim: int) -> np.ndarray:
        if j in self.directions:
            return self.directions[j]
        u = Canaries(self.canaries.count, dim, self.canaries.seed, self.canaries.scale,
                     self.canaries.nodes).direction(j).double().numpy()
        if len(self.directions) * dim < 50_000_000:  # cached up to 400 MB, rebuilt from its seed beyond
            self.directions[j] = u
        return u

    def reply_fn(self, j: int):
        """Canary j's train function: θ_t + r_j·C_t·u_j, the metrics of a real reply of the round."""
        raw = float(self.canaries.raw_norm(np.array([j]))[0])
        home = int(self.canaries.node(np.array([j]))[0])

        def train(msg: Message, context) -> Message:
            key, record = next(iter(msg.content.array_records.items()))
            config = next(iter(msg.content.config_records.values()), ConfigRecord())
            clip = float(config[KEY_CLIPPING_NORM]) if KEY_CLIPPING_NORM in config else self.clip
            if clip is None:
                raise FedleakError("canary nodes: no clipping_norm in the train config; pass clip=")
            arrays = record.to_numpy_ndarrays()
            skip = self.skip | frozenset(config.get(KEY_SKIP, []))
            theta, _ = _floats(record, arrays, skip)
            new = theta + raw * clip * self.direction(j, theta.size)
            # the metric keys of its own node's reply (a key a mod adds, such as the norm bit, is the mod's to add)
            metrics = dict(self.metrics.get(home) or next(iter(self.metrics.values()), None) or {"num-examples": 1})
            if "num-examples" in metrics and self.examples:
                metrics["num-examples"] = type(metrics["num-examples"])(np.mean(self.examples))
            return Message(RecordDict({key: _rebuild(record, new, arrays, skip), "metrics": MetricRecord(metrics)}),
                           reply_to=msg)

        return train


def canary_app(user_app: ClientApp, train: Callable) -> ClientApp:
    """A ClientApp running ``train`` inside ``user_app``'s own train mods (same objects, same order)."""
    app = ClientApp(mods=train_mods(user_app))
    app.train()(train)
    return app


class _Recorder(Strategy):
    """The user's strategy, unchanged; records θ_t, C_t, the canary replies' projections and the aggregates."""

    def __init__(self, strategy: Strategy, plan: _Plan, log=None, total_rounds: int = 0,
                 probe: Optional[NoiseProbe] = None) -> None:
        self.strategy, self.plan, self.log, self.total_rounds, self.probe = strategy, plan, log, total_rounds, probe
        self.theta0 = self.theta = None
        self.clip_t, self.clip_norms, self.unit_sum, self.last, self.rounds = None, [], None, None, 0
        self.projection_sum = np.zeros(plan.canaries.count)
        self.residual_sum = np.zeros(plan.canaries.count)  # ‖reply − θ_t − projection·u‖²/C_t², summed over rounds
        self.replies = np.zeros(plan.canaries.count, int)
        self.buffers = BufferCheck()  # integer buffers the release clipped or noised (flwr #8381)
        self.buffer_check, self.weight_key = dp_chain(strategy)  # under a Flower DP wrapper only

    def summary(self) -> None:
        self.strategy.summary()

    def configure_train(self, server_round, arrays, config, grid):
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        if self.theta0 is None:
            self.plan.skip = frozenset(name for name, a in zip(arrays.keys(), arrays.to_numpy_ndarrays())
                                       if not np.issubdtype(a.dtype, np.floating))
        self.theta, _ = _floats(arrays, skip=self.plan.skip)
        if self.theta0 is None:
            self.theta0 = self.theta.copy()
        sent = next((m for m in messages if m.content.config_records), None)
        cfg = next(iter(sent.content.config_records.values()), {}) if sent else {}
        self.clip_t = float(cfg[KEY_CLIPPING_NORM]) if KEY_CLIPPING_NORM in cfg else float(
            getattr(self.strategy, "clipping_norm", None) or self.plan.clip)
        self.plan.metrics, self.plan.examples = {}, []
        return messages

    def aggregate_train(self, server_round, replies):
        replies = list(replies)
        for r in replies:
            j = r.metadata.src_node_id - CANARY_NODE
            if 0 <= j < self.plan.canaries.count and not r.has_error() and r.content.array_records:
                flat, _ = _floats(next(iter(r.content.array_records.values())), skip=self.plan.skip)
                u = self.plan.direction(j, flat.size)
                change = flat - self.theta
                along = float(u @ change)
                self.projection_sum[j] += along / self.clip_t
                self.residual_sum[j] += max(float(change @ change) - along ** 2, 0.0) / self.clip_t ** 2
                self.replies[j] += 1
        ok = [r for r in replies if not r.has_error() and r.content.array_records] if self.buffer_check else []
        self.buffers.replies([next(iter(r.content.array_records.values())) for r in ok], None if not self.weight_key
                             else [dict(next(iter(r.content.metric_records.values()), {})).get(self.weight_key, 1)
                                   if r.content.metric_records else 1 for r in ok])
        try:
            result = self.strategy.aggregate_train(server_round, replies)
        except Exception as exc:  # noqa: BLE001 - Flower refusing the replies is itself a finding about the nodes
            raise FedleakError(f"{type(self.strategy).__name__} refused round {server_round}'s replies "
                               f"({type(exc).__name__}: {str(exc)[:160]}){_odd_replies(replies)}") from None
        if result and result[0] is not None:
            if self.buffer_check:
                self.buffers.release(result[0], server_round)
            new, _ = _floats(result[0], skip=self.plan.skip)
            step = new - self.theta
            if self.probe is not None:  # the released aggregate on the unseen canaries' directions (noise test)
                self.probe.add(step)
            norm = np.linalg.norm(step)
            self.unit_sum = (0 if self.unit_sum is None else self.unit_sum) + (step / norm if norm > 0 else step)
            self.last, self.rounds = new, self.rounds + 1
            self.clip_norms.append(self.clip_t)
            if self.log:
                canary = sum(r.metadata.src_node_id >= CANARY_NODE for r in replies)
                self.log(f"round {self.rounds}/{self.total_rounds}: {len(replies) - canary} nodes + {canary} canary "
                         f"nodes aggregated by {type(self.strategy).__name__}, clip norm {self.clip_t:.4g}")
        return result

    def configure_evaluate(self, server_round, arrays, config, grid):
        return [m for m in self.strategy.configure_evaluate(server_round, arrays, config, grid)
                if m.metadata.dst_node_id < CANARY_NODE]

    def aggregate_evaluate(self, server_round, replies):
        return self.strategy.aggregate_evaluate(server_round, replies)


def _odd_replies(replies: list) -> str:
    """Which nodes' replies lack metric keys the others carry (e.g. adaptiveclipping_mod's norm bit: the mod missing
    there), as a clause for an error line; real nodes are named 0…K−1, canary nodes by their canary."""
    keys = {}
    for r in replies:
        if not r.has_error() and r.content.metric_records:
            keys[r.metadata.src_node_id] = set(next(iter(r.content.metric_records.values())).keys())
    if not keys:
        return ""
    every = set.union(*keys.values())
    odd = sorted(n for n, k in keys.items() if k != every)
    if not odd or len(odd) == len(keys):
        return ""
    real = [str(n - 1) for n in odd if n < CANARY_NODE]
    canaries = sum(n >= CANARY_NODE for n in odd)
    missing = sorted(every - set.intersection(*(keys[n] for n in odd)))
    who = (f"nodes {', '.join(real)}" if real else "") + (" and " if real and canaries else "") + \
        (f"{canaries} canary nodes running their ClientApps" if canaries else "")
    return f": the replies of {who} lack {', '.join(missing)}, which the others carry"


class _Grid(InlineGrid):
    """Real nodes answer first, so a canary reply can carry the round's real metrics (FedAvg's consistency)."""

    def __init__(self, apps: dict, plan: _Plan, **kwargs) -> None:
        self.apps, self.plan = apps, plan
        super().__init__(self._dispatch, len(apps), node_ids=list(apps), **kwargs)

    def _dispatch(self, message: Message, context) -> Message:
        node = context.node_id
        reply = self.apps[node](message, context)
        if node < CANARY_NODE and not reply.has_error() and reply.content.metric_records \
                and message.metadata.message_type.startswith("train"):
            metrics = dict(next(iter(reply.content.metric_records.values())))
            self.plan.metrics[node - 1] = metrics
            if "num-examples" in metrics:
                self.plan.examples.append(float(metrics["num-examples"]))
        return reply

    def push_messages(self, messages):
        messages = sorted(messages, key=lambda m: m.metadata.dst_node_id >= CANARY_NODE)
        return super().push_messages(messages)


def run_canary_nodes(client_apps: Union[ClientApp, Sequence[ClientApp], Callable[[int], ClientApp]],
                     strategy_fn: Callable[[int], Strategy], initial_arrays: ArrayRecord, *, nodes: int, rounds: int,
                     canaries: int = 200, scale: float = 10.0, clip: Optional[float] = None,
                     claimed_noise: Optional[Callable[[Strategy, int], float]] = None, reply_noise: float = 0.0,
                     seed: int = 0, delta: float = 1e-5, train_config: Optional[ConfigRecord] = None,
                     node_configs: Optional[list] = None, canary_set: Optional[Canaries] = None,
                     log: Optional[Callable[[str], None]] = None, keep_final: bool = False) -> dict:
    """Run the user's federation with canary nodes in process and test the replies and the aggregates.

    ``client_apps``: one ClientApp for every node, one per node, or ``node → ClientApp`` (node 0…K−1; a node built
    without its mod is how a missing mod is planted); ``strategy_fn(n)``: the user's server strategy for n sampled
    nodes (n = K + included canaries: a DP wrapper's ``num_sampled_clients``), sampling every node
    (``fraction_train=1``); ``clip``: the canaries' C when the train config carries no ``clipping_norm``
    (LocalDpMod's, server-side wrappers); ``claimed_noise(strategy, n)``: the noise multiplier of the sum the
    canaries should see (default: the chain's ``noise_multiplier``·(n / ``num_sampled_clients``)); ``reply_noise``:
    the claimed noise on one reply in units of C (LocalDpMod's s/C; 0 for central DP); ``canary_set``: the canaries
    (default ``Canaries(canaries, d, seed, scale, nodes)``); ``log``: a line per round; ``keep_final``: also return
    ``model_change`` ‖θ_T − θ_0‖. ``buffer_finding``: integer entries
    (BatchNorm's counter) a DP wrapper released off the replies' average (:mod:`fedleak.privacy.buffer_check`), or
    None."""
    from ...privacy.diagnose import diagnose
    from ...privacy.estimate import estimate
    from ...privacy.gdp import composed_mu
    from ...privacy.one_run import lower_bounds

    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= 1000:
        raise FedleakError(f"canary nodes: nodes must be an integer from 1 to 1000, got {nodes!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 10_000:
        raise FedleakError(f"canary nodes: rounds must be an integer from 1 to 10000, got {rounds!r}")
    if isinstance(canaries, bool) or not isinstance(canaries, int) or not 2 <= canaries <= 100_000:
        raise FedleakError(f"canary nodes: canaries must be an integer from 2 to 100000, got {canaries!r}")
    if not isinstance(initial_arrays, ArrayRecord):
        raise FedleakError(f"canary nodes: initial_arrays must be a flwr ArrayRecord, got {type(initial_arrays).__name__}")
    if isinstance(client_apps, ClientApp):
        apps = [client_apps] * nodes
    elif callable(client_apps):
        apps = [client_apps(k) for k in range(nodes)]
    else:
        apps = list(client_apps)
    if len(apps) != nodes or not all(isinstance(a, ClientApp) for a in apps):
        raise FedleakError(f"canary nodes: client_apps must give one flwr ClientApp per node ({nodes})")
    started = time.perf_counter()
    dim = _floats(initial_arrays)[0].size
    if canary_set is not None:
        if canary_set.dim != dim or canary_set.nodes != nodes:
            raise FedleakError(f"canary nodes: canary_set has {canary_set.dim} dimensions and {canary_set.nodes} "
                               f"nodes, the federation {dim} and {nodes}")
        canaries = canary_set.count
    plan = _Plan(canary_set or Canaries(canaries, dim, int(seed), float(scale), nodes), clip)
    included, raw, node = plan.canaries.included, plan.canaries.raw_norm(np.arange(canaries)), plan.canaries.node(
        np.arange(canaries))
    by_node = {k + 1: apps[k] for k in range(nodes)}
    for j in np.flatnonzero(included):
        by_node[CANARY_NODE + int(j)] = canary_app(apps[int(node[j])], plan.reply_fn(int(j)))
    configs = [*(node_configs or [{"partition-id": k, "num-partitions": nodes} for k in range(nodes)]),
               *({"partition-id": int(node[j]), "num-partitions": nodes, "fedleak-canary": int(j)}
                 for j in np.flatnonzero(included))]
    total = len(by_node)
    logger, level = logging.getLogger("flwr"), logging.getLogger("flwr").level
    logger.setLevel(logging.ERROR)  # Flower's INFO line per mod call and round, its warnings on the audit's FedAvg
    try:
        strategy = strategy_fn(total)
    finally:
        logger.setLevel(level)
    if not isinstance(strategy, Strategy):
        raise FedleakError(f"canary nodes: strategy_fn must return a Flower Strategy, got {type(strategy).__name__}")
    probes = NoiseProbe.choose(np.flatnonzero(~included), dim)
    probe = NoiseProbe(np.stack([plan.canaries.direction(int(j)).numpy() for j in probes]) if probes.size
                       else np.zeros((0, dim), np.float32))
    recorder = _Recorder(strategy, plan, log, rounds, probe)
    grid = _Grid(by_node, plan, node_configs=configs)
    state = np.random.get_state()  # Flower's mods and wrappers draw their noise from numpy's global generator
    np.random.seed(int(np.random.SeedSequence([int(seed), 42]).generate_state(1)[0]))
    # the identity Flower's runtime gives the ServerApp process (messages take run and node ids from it)
    saved = (TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id)  # noqa: SLF001
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run.run_id, SUPERLINK_NODE_ID
    logger.setLevel(logging.WARNING)
    try:
        recorder.start(grid, initial_arrays, num_rounds=rounds, train_config=train_config)
    finally:
        np.random.set_state(state)
        TaskIdentity._task_id, TaskIdentity._run_id, TaskIdentity._node_id = saved  # noqa: SLF001
        logger.setLevel(level)
    if recorder.unit_sum is None:
        raise FedleakError("canary nodes: the strategy aggregated no round (every reply failed?)")
    seconds_run = time.perf_counter() - started
    final = recorder.last - recorder.theta0
    null_all = np.linalg.norm(recorder.unit_sum) / math.sqrt(dim)
    final_unit = final / max(np.linalg.norm(final), 1e-300)
    scores = {"all-iterates": np.empty(canaries), "final-model": np.empty(canaries)}
    for index, block in plan.canaries.blocks():
        b = block.double().numpy()
        scores["all-iterates"][index] = b @ recorder.unit_sum / null_all
        scores["final-model"][index] = (b @ final_unit) * math.sqrt(dim)
    chain, noise = strategy, None
    for _ in range(16):
        if getattr(chain, "noise_multiplier", None) is not None:
            noise = float(chain.noise_multiplier) * total / float(getattr(chain, "num_sampled_clients", total))
            break
        chain = getattr(chain, "strategy", None)
    if claimed_noise is not None:
        noise = float(claimed_noise(strategy, total))
    if noise is None or not noise > 0:
        raise FedleakError("canary nodes: no claimed noise (no DP wrapper's noise_multiplier; pass claimed_noise=)")
    mu = composed_mu(noise, recorder.rounds)
    check = diagnose(scores["all-iterates"], included, raw, node, mu, noise, nodes, delta=delta)
    replies = reply_test(recorder.projection_sum, recorder.replies, included, raw, node, nodes, reply_noise,
                         residual=recorder.residual_sum, dim=dim)
    return {"level": "client", "source": "flower canary nodes", "strategy": type(strategy).__name__,
            "nodes": nodes, "canaries": canaries, "canaries_inserted": int(included.sum()), "rounds": recorder.rounds,
            "dimension": dim, "clip_norms": recorder.clip_norms, "delta": delta, "noise_multiplier_seen": noise,
            "mu_claimed": mu,
            "mods": {k: [getattr(m, "__name__", type(m).__name__) for m in train_mods(apps[k])] for k in range(nodes)},
            "lower_bounds": {t: lower_bounds(s, included, delta) for t, s in scores.items()},
            "estimates": {t: estimate(s, included, delta, null_sd=1.0) for t, s in scores.items()},
            "aggregate_test": check, "reply_test": replies,
            "noise_test": probe.test([noise * c / total for c in recorder.clip_norms]),
            "nodes_flagged_by_replies": [r["node"] for r in replies if r["flagged"]],
            "nodes_flagged_by_aggregates": check["flagged_clients"], "buffer_finding": recorder.buffers.finding(),
            "cost": {"canary_replies": int(recorder.replies.sum()), "clientapp_calls_added": int(recorder.replies.sum()),
                     "seconds": round(seconds_run, 3), "rounds": recorder.rounds},
            "sees": ("the server sees replies only: a node's mod is inferred from its canaries' replies (projection "
                     "on the canary direction) and from the released aggregates; a node that does not run the canary "
                     "ClientApp beside its own cannot be audited"),
            "scores": {t: s.tolist() for t, s in scores.items()}, "included": included.tolist(),
            **({"model_change": float(np.linalg.norm(final))} if keep_final else {})}
