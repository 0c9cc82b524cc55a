"""``LeakageAudit``: live leakage auditing of a Flower federation on the Message API.

A drop-in ``flwr.serverapp.strategy.Strategy`` wrapping any other (FedAvg, FedProx, FedAdam, the
DP wrappers, …). It changes nothing the wrapped strategy samples, sends or aggregates; around it,
every round, it

1. remembers what each node was sent (``configure_train``: the ``ArrayRecord``, converted once
   per distinct record, and the ``ConfigRecord``);
2. turns each node's reply into a :class:`fedleak.Update` (``aggregate_train``): θˢ and θᶜ by
   name, the protocol from the train config (``local-epochs``/``local_epochs``/``epochs``,
   ``batch-size``/``batch_size``, ``lr``/``learning-rate``/``learning_rate``, over the ``protocol``
   given), N from the ``MetricRecord``'s ``num-examples``, the node id;
3. attacks it in a worker pool (a thread pool: the round is not blocked unless ``blocking=True``)
   with the attack that fits (:func:`.scoring.choose_attack`) or the one given, and appends one
   JSON line per reply to ``OUT/leakage.jsonl`` (under a lock) and rewrites
   ``OUT/dashboard.html``.

**Guarded by default** (``guard=True``, :mod:`.guard`): a reply the wrapped strategy could not
aggregate (no ``ArrayRecord``, two, a wrong shape or dtype, an extra or missing key, NaN weights, a
missing or absurd ``num-examples``, a configured metric missing) is *quarantined*: recorded as
``quarantined`` with the reason and not handed to the strategy, which aggregates the others exactly as
it would have without fedleak — no reply can end the federation. What is valid follows from what the
server sent, never from a vote of the replies; metric keys not every passed reply has are dropped
before aggregation (``metrics_dropped`` in the reply's record), never a reason to quarantine another.
``guard=False`` hands every reply to the strategy unchanged (and the strategy may raise). A
reply the strategy receives but fedleak cannot read as an update is recorded as ``rejected``
and not attacked; error replies (e.g. a client's inspector refusing the model) are recorded as
``error`` and passed on. ``ship=`` makes the audit a malicious server: it sends that model
(e.g. :func:`fedleak.models.imprint`'s) instead of the global one every round — see
``docs/flower.md`` for the threat model.

Every attacked record carries ``leakage`` (``high`` or ``inconclusive``, with its evidence) decided
from what the attacker knows; in evaluation mode a simulated client that opted in shares its
batch (:func:`.client.share_truth`, a ``ConfigRecord`` no Flower code touches), the audit adds
PSNR / Rec % / IIP marked ``truth: client-reported`` — such scores can raise ``leakage``, never
lower it. The DP in force (Flower's wrappers on either side of the audit, the mods a client
reports), what the reply had been through, and Flower's accountant ε after the round are in the
record's ``dp`` (:mod:`.dp`).
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Iterable, Optional, Union

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from torch import nn

from ...errors import FedleakError
from ...types import ClientData, DataSpec, Params, Protocol, Update
from . import dp as flower_dp
from .client import DP_KEY, read_truth, save_truth
from .convert import client_metadata, model_record, protocol_from_config, split_record, update_from_params
from .dashboard import write_dashboard
from .guard import ReplyGuard
from .scoring import attack_update, choose_attack, leakage_level

log = logging.getLogger("fedleak.flower")


class LeakageAudit(Strategy):
    """Record, attack and score every client reply of a Message-API federation (module docstring).

    ``strategy``: the Message-API strategy doing the real work. ``model``: the architecture the
    federation trains (default: ``ship``). ``out``: where ``leakage.jsonl``, ``dashboard.html``
    and ``round-R/node-N/{update,reconstruction}`` go. ``spec``: the data spec, needed to attack.
    ``protocol``: the clients' local training, per round overridden by the train config, or a
    callable ``(round, config) -> Protocol``. ``attack``: ``"auto"`` (default), a name, a built
    attack, or ``None`` to only record. ``workers``: attack threads. ``evaluation``: score against
    a batch a client shared (client-reported). ``save_updates``: keep each update on disk.
    ``guard``: quarantine replies the wrapped strategy could not aggregate (default; :mod:`.guard`).
    ``metric_keys``: the metrics every reply must carry (optional; others are dropped before aggregation).
    ``accountant``: a Flower accountant (``RdpAccountant``) for a fixed-clipping DP wrapper placed
    *around* the audit, which Flower does not let account itself (:func:`.dp.epsilon`).
    """

    def __init__(self, strategy, model: Optional[nn.Module], out, *, spec: Optional[DataSpec] = None,
                 protocol: Union[Protocol, Callable[[int, dict], Protocol], None] = None, attack="auto",
                 attack_options: Optional[dict] = None, ship: Optional[nn.Module] = None, blocking: bool = False,
                 workers: int = 1, evaluation: bool = True, save_updates: bool = True,
                 arrayrecord_key: Optional[str] = None, num_examples_key: str = "num-examples",
                 guard: bool = True, accountant=None, metric_keys=None) -> None:
        if not isinstance(strategy, Strategy):
            raise FedleakError(f"LeakageAudit wraps a Flower Message-API strategy (an instance of "
                               f"flwr.serverapp.strategy.Strategy, e.g. FedAvg()), got {type(strategy).__module__}."
                               f"{type(strategy).__name__}; for flwr.server.strategy use LeakageRecorder")
        model = ship if model is None else model
        if not isinstance(model, nn.Module):
            raise FedleakError(f"LeakageAudit needs the torch model of the federation, got {type(model).__name__}")
        if ship is not None and not isinstance(ship, nn.Module):
            raise FedleakError(f"ship= must be a torch model to send to the clients, got {type(ship).__name__}")
        if attack is not None and not isinstance(spec, DataSpec):
            raise FedleakError("LeakageAudit: attacking replies needs spec=fedleak.DataSpec (input shape, classes, "
                               "normalization); pass attack=None to only record")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise FedleakError(f"LeakageAudit: workers must be a positive integer, got {workers!r}")
        from ...config.boundary import api_arguments

        api_arguments("LeakageAudit", attack_options=(attack_options, (dict, type(None)), "a mapping or None"),
                      blocking=(blocking, bool, "True or False"), evaluation=(evaluation, bool, "True or False"),
                      save_updates=(save_updates, bool, "True or False"), guard=(guard, bool, "True or False"),
                      arrayrecord_key=(arrayrecord_key, (str, type(None)), "a record key or None"),
                      num_examples_key=(num_examples_key, str, "a metric name"))
        protocol = Protocol("fedavg") if protocol is None else protocol
        if not isinstance(protocol, Protocol) and not callable(protocol):
            raise FedleakError(f"protocol must be a fedleak.Protocol or a callable, got {type(protocol).__name__}")
        self.strategy, self.model, self.ship, self.spec, self.protocol = strategy, model, ship, spec, protocol
        self.attack_name = attack if isinstance(attack, str) else None
        self.attack_options = dict(attack_options or {})
        self._attacks: dict[str, object] = {}
        self.attack = attack if attack is not None and not isinstance(attack, str) else None
        if isinstance(attack, str) and attack != "auto":
            self.attack = self._build(attack)  # unknown names and options fail here, not mid-federation
        self.blocking, self.evaluation, self.save_updates = bool(blocking), bool(evaluation), bool(save_updates)
        if not isinstance(guard, bool):
            raise FedleakError(f"LeakageAudit: guard must be True or False, got {guard!r}")
        self.guard = guard
        self.accountant = accountant  # a Flower accountant for a fixed-clipping wrapper around the audit (dp.py)
        self.arrayrecord_key, self.num_examples_key = arrayrecord_key, num_examples_key
        self._guard = ReplyGuard(num_examples_key, metric_keys, arrayrecord_key)
        from ...runs.outdir import prepare_out_dir

        self.out = prepare_out_dir(out, "out")
        self.out.mkdir(parents=True, exist_ok=True)
        self.records: list[dict] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fedleak-audit")
        self._futures: list[Future] = []
        self._sent: dict[tuple[int, int], tuple[tuple[Params, Params], dict]] = {}
        self._dp: dict[int, tuple[list, int]] = {}  # round -> ([(wrapper, position, description)], sample size)

    # -- the strategy interface -----------------------------------------------------------------
    def summary(self) -> None:
        log.info("fedleak LeakageAudit around %s, writing %s", type(self.strategy).__name__, self.out)
        self.strategy.summary()

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        if self.ship is not None:
            arrays = model_record(self.ship)
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        converted: dict[int, tuple[Params, Params]] = {}
        for message in messages:
            _, record = self._array_record(message.content, "the train message")
            if id(record) not in converted:  # strategies send one record to every node: convert it once
                converted[id(record)] = split_record(self.model, record, "arrays the server sent")
            sent_config = dict(next(iter(message.content.config_records.values()), {}))
            node = message.metadata.dst_node_id
            self._sent[(server_round, node)] = (converted[id(record)], sent_config)
        if self.guard:
            self._guard.sent(server_round, messages)
        try:  # σ and this round's C, read before the round's adaptive update changes C
            found = [(w, pos, flower_dp.describe(w, pos)) for w, pos in flower_dp.wrappers(self)]
        except Exception as exc:  # noqa: BLE001 - recording the DP must never stop the federation
            log.warning("fedleak: could not read the DP wrappers: %s", exc)
            found = []
        self._dp[server_round] = (found, len(messages))
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        passed, trimmed = list(replies), {}
        if self.guard:
            screened = self._guard.screen(server_round, passed)
            for reply, reason in screened.quarantined:
                self._write({"round": int(server_round), "client": self._node(reply), "status": "quarantined",
                             "reason": f"not passed to {type(self.strategy).__name__}: {reason}"[:500]})
            passed, trimmed = screened.passed, screened.trimmed
        jobs = [self._prepare(server_round, reply) for reply in passed]  # read before the strategy clips
        for reply, job in zip(passed, jobs):
            if job is not None and id(reply) in trimmed:  # metric keys not every reply had (guard.reconcile)
                job[0]["metrics_dropped"] = trimmed[id(reply)][:20]
        result = None
        try:
            result = self.strategy.aggregate_train(server_round, passed)
        finally:
            dp_info = self._round_dp(server_round, bool(result and result[0]))
            for job in jobs:
                if job is not None:
                    if dp_info is not None or job[0].get("dp"):
                        job[0]["dp"] = self._reply_dp(dp_info, job[0].pop("dp", None))
                    self._submit(*job)
            self._sent = {key: value for key, value in self._sent.items() if key[0] != server_round}
            self._dp.pop(server_round, None)
            if self.blocking:
                self.wait()
        return result

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Optional[MetricRecord]:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def start(self, grid: Grid, initial_arrays: ArrayRecord, *args, **kwargs):
        """Flower's ``Strategy.start``, then wait for the attacks still running."""
        try:
            return super().start(grid, initial_arrays, *args, **kwargs)
        finally:
            self.wait()

    # -- recording ------------------------------------------------------------------------------
    def round_protocol(self, server_round: int, config: dict) -> Protocol:
        if callable(self.protocol) and not isinstance(self.protocol, Protocol):
            protocol = self.protocol(server_round, config)
            if not isinstance(protocol, Protocol):
                raise FedleakError(f"the protocol callable returned {type(protocol).__name__}, not a fedleak.Protocol")
            return protocol
        return protocol_from_config(self.protocol, config)

    def receive(self, server_round: int, reply: Message) -> str:
        """Record one reply; start its attack. Returns the record's status (never raises for a
        bad reply: its problem becomes the record's ``reason``)."""
        job = self._prepare(server_round, reply)
        if job is None:
            return self.records[-1]["status"] if self.records else "rejected"
        self._submit(*job)
        return "accepted"

    @staticmethod
    def _node(reply: Message) -> int:
        try:
            return int(reply.metadata.src_node_id)
        except Exception:  # noqa: BLE001 - a reply without a usable node id is still only skipped
            return -1

    def _prepare(self, server_round: int, reply: Message):
        """``(entry, update, truth)`` for a reply to attack, or ``None`` (its record written)."""
        entry = {"round": int(server_round), "client": self._node(reply)}
        try:
            if reply.has_error():
                self._write({**entry, "status": "error", "reason": str(reply.error.reason)[:500]})
                return None
            update = self._update(server_round, entry["client"], reply.content)
        except Exception as exc:  # noqa: BLE001 - whatever a client sends, the federation goes on
            reason = str(exc) if isinstance(exc, FedleakError) else f"malformed reply ({type(exc).__name__}: {exc})"
            self._write({**entry, "status": "rejected", "reason": reason[:500]})
            return None
        entry.update(num_examples=update.num_samples, protocol=update.protocol.to_json())
        truth = None
        if self.evaluation:
            try:
                truth = read_truth(reply.content, update.num_samples)
            except Exception as exc:  # noqa: BLE001 - a bad shared batch costs the scores, not the reply
                entry["truth_error"] = (str(exc) if isinstance(exc, FedleakError) else type(exc).__name__)[:300]
            if truth is not None:
                entry["truth"] = "client-reported"
        reported = self._client_dp(reply.content)
        if reported:
            entry["dp"] = reported
        if self.attack is None and self.attack_name is None:
            entry["status"] = "recorded"
            truth = None
        return entry, update, truth

    def _submit(self, entry: dict, update: Update, truth: Optional[ClientData]) -> None:
        self._futures.append(self._pool.submit(self._job, entry, update, truth))

    def _round_dp(self, server_round: int, released: bool) -> Optional[dict]:
        found, sample_size = self._dp.get(server_round, ([], 0))
        if not found:
            return None
        info = {"mechanisms": [d for _, _, d in found]}
        for wrapper, position, _ in found:
            try:
                spent = flower_dp.epsilon(wrapper, position, sample_size if released else 0, self.accountant)
            except Exception as exc:  # noqa: BLE001 - an accountant failing must not end the round
                spent = {"epsilon_error": f"{type(exc).__name__}: {exc}"[:200]}
            if spent is not None:
                info.update(spent)
        return info

    @staticmethod
    def _reply_dp(round_dp: Optional[dict], reported: Optional[list]) -> dict:
        info = dict(round_dp or {"mechanisms": []})
        info["mechanisms"] = list(info["mechanisms"]) + list(reported or [])
        info["sees"] = flower_dp.sees(info["mechanisms"])
        return info

    @staticmethod
    def _client_dp(content: RecordDict) -> Optional[list]:
        """The DP mods a client says it runs (its ``fedleak-dp`` record), sanitized, marked client-reported."""
        record = content.get(DP_KEY) if DP_KEY in content else None
        if record is None:
            return None
        try:
            mods = json.loads(record["mods"]) if isinstance(record.get("mods"), str) and len(record["mods"]) < 8192 \
                else None
        except Exception:  # noqa: BLE001
            mods = None
        keep = {"mechanism", "where", "clipping", "clipping_norm", "noise_std", "noise", "epsilon", "delta",
                "sensitivity"}
        out = []
        for mod in mods if isinstance(mods, list) else []:
            if isinstance(mod, dict):
                clean = {k: v for k, v in mod.items() if k in keep and isinstance(v, (str, int, float))
                         and not isinstance(v, bool) and (not isinstance(v, str) or len(v) < 100)}
                out.append({**clean, "origin": "client-reported"})
        return out[:8] or None

    def wait(self) -> None:
        """Block until every attack started so far has finished and been written."""
        pending, self._futures = self._futures, []
        wait(pending)

    def close(self) -> None:
        """Wait for the attacks, then stop the worker pool."""
        self.wait()
        self._pool.shutdown(wait=True)

    # -- internals ------------------------------------------------------------------------------
    def _build(self, name: str):
        if name not in self._attacks:
            from ...attacks import build

            self._attacks[name] = build(name, **self.attack_options)
        return self._attacks[name]

    def _array_record(self, content: RecordDict, what: str) -> tuple[str, ArrayRecord]:
        records = content.array_records
        if self.arrayrecord_key is not None:
            if self.arrayrecord_key not in records:
                raise FedleakError(f"{what} has no ArrayRecord {self.arrayrecord_key!r} (it has {sorted(records)})")
            return self.arrayrecord_key, records[self.arrayrecord_key]
        if len(records) != 1:
            raise FedleakError(f"{what} holds {len(records)} ArrayRecords ({sorted(records)}); expected one, or "
                               f"pass arrayrecord_key=")
        return next(iter(records.items()))

    def _update(self, server_round: int, node: int, content: RecordDict) -> Update:
        if (server_round, node) not in self._sent:
            raise FedleakError(f"node {node} replied in round {server_round} but was sent no model by this strategy")
        (server, buffers), config = self._sent[(server_round, node)]
        _, record = self._array_record(content, "the reply")
        client, _ = split_record(self.model, record, "arrays the client returned")
        metrics = content.metric_records
        if len(metrics) != 1 or self.num_examples_key not in next(iter(metrics.values())):
            raise FedleakError(f"the reply needs one MetricRecord with {self.num_examples_key!r} (the client's number "
                               f"of examples); it has {len(metrics)} MetricRecord(s)")
        num_examples = next(iter(metrics.values()))[self.num_examples_key]
        protocol = self.round_protocol(server_round, config)
        meta = {"round": server_round, "client_id": str(node), "train_config": client_metadata(config),
                "client_metrics": client_metadata(next(iter(metrics.values())))}
        if hasattr(self.model, "imprint_secrets"):
            meta["imprint"] = self.model.imprint_secrets()
        return update_from_params(server, buffers, client, num_examples, protocol, meta)

    def _job(self, entry: dict, update: Update, truth: Optional[ClientData]) -> None:
        """Worker: save the update, attack and score it, write the record. Never raises."""
        where = self.out / f"round-{entry['round']}" / f"node-{entry['client']}"
        try:
            if self.save_updates:
                entry["update"] = str(update.save(where / "update"))
            if entry.get("status") != "recorded":
                attack = self.attack or self._build(choose_attack(self.model, update.protocol, self.spec,
                                                                       update.num_samples))
                entry["attack"] = getattr(attack, "variant", attack.name)
                rec, scores = attack_update(attack, update, self.model, self.spec, truth)
                entry["reconstruction"] = str(rec.save(where / "reconstruction"))
                if truth is not None and self.save_updates:  # the report's originals beside the reconstructions
                    entry["truth_file"] = str(save_truth(where / "truth.safetensors", truth))
                entry.update(scores, status="attacked", evaluated=truth is not None)
                entry["leakage"] = leakage_level(entry)
        except Exception as exc:  # an attack failing on one reply must not stop the audit
            entry.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        self._write(entry)

    def _write(self, entry: dict) -> None:
        with self._lock:
            self.records.append(entry)
            with open(self.out / "leakage.jsonl", "a") as fh:
                fh.write(json.dumps(entry) + "\n")
            try:
                write_dashboard(self.out / "dashboard.html", self.records, self.spec,
                                f"fedleak: leakage audit of a Flower federation ({type(self.strategy).__name__})")
            except Exception as exc:  # the dashboard is a view; losing one refresh must not stop the audit
                log.warning("fedleak: dashboard not updated: %s", exc)
