"""``CanaryAudit``: Andrew et al.'s canary clients inside a live Flower federation (issue #29, item 1).

A Message-API strategy wrapping the one that aggregates — typically Flower's DP wrapper around ``FedAvg``
(``DifferentialPrivacyServerSideFixedClipping``, …``AdaptiveClipping``, or the client-side pairs) — a sibling of
:class:`.audit.LeakageAudit`. It changes nothing the wrapped strategy samples or sends; every round it adds the
*inserted* canaries to the replies the wrapped strategy aggregates, so they go through Flower's own clipping,
averaging and noise:

* Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, "One-shot Empirical Privacy Estimation for Federated
  Learning" (ICLR 2024, §3): a canary client returns θ_t + C_t·u_j every round, u_j a random unit direction
  (rebuilt from the seed, :class:`fedleak.privacy.canaries.Canaries`), C_t the wrapped strategy's clipping norm
  of the round (adaptive clipping included); m canaries, each inserted with probability ½ (Steinke et al.
  NeurIPS 2023, Alg. 1), the others kept unseen. A canary reply carries the round's mean ``num-examples`` and
  the other metric values of the first real reply (FedAvg's consistency checks), so FedAvg weighs it as one
  more client. Flower sizes its noise σC/n for n = ``num_sampled_clients`` replies: set it to the real clients
  plus :attr:`inserted` (without a wrapper accountant, which insists on n = the nodes sampled) for the
  canaries to see the claimed σ; otherwise the report states the multiplier they do see, σ·(K + inserted)/n.
* After the run (:meth:`report`): all-iterates Σ_t cos(u_j, A_t) over the aggregates A_t = θ_{t+1} − θ_t, and
  final-model cos(u_j, θ_T − θ_0), each in units of its closed-form null sd (‖Σ_t A_t/‖A_t‖‖/√d, 1/√d); for both
  threats the one-run lower bounds (:func:`fedleak.privacy.one_run.lower_bounds`) and the Gaussian estimate
  (:func:`fedleak.privacy.estimate.estimate`), beside Flower's accountant ε: ``privacy_spent()`` of the wrapped
  strategy when it keeps one, else Flower's ``RdpAccountant`` for its ``noise_multiplier`` over the rounds run
  (an adaptive wrapper keeps there σ_Δ, the update's share of σ: the ε of what the canaries can see)
  (:func:`fedleak.fl.update_filters.central_epsilon`), and the exact √T/σ-GDP ε of both σ; ``claim_test``: the
  one-run f-DP test (Mahloujifar et al., as :mod:`fedleak.privacy.diagnose` runs it) of "the canaries see
  √T/σ-GDP", p < 0.01 proving the DP claimed is not in force; ``noise_test``: the aggregates projected on the
  unseen canaries' directions against the wrapper's claimed noise σ·C_t/n
  (:class:`fedleak.integrations.flower.canary_replies.NoiseProbe`, ≥ 0.9× the claim, χ² lower tail).

What it cannot see: a client-side mod (``fixedclipping_mod``, ``LocalDpMod``) missing on some nodes — its
canaries join after the clients. :mod:`.canary_nodes` runs canaries as nodes through each node's own mod chain.

Memory: the running sum Σ_t A_t/‖A_t‖ and θ_0 (two d-vectors); the inserted canaries' replies exist only while
a round is aggregated (Flower's API takes replies as messages).
"""

from __future__ import annotations

import json
import math
import os
from typing import Iterable, Optional

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from ...errors import FedleakError
from ...privacy.canaries import Canaries
from .canary_replies import NoiseProbe
from .guard import ReplyGuard

#: the most canaries of one audit (each is a d-vector rebuilt in blocks; m beyond this is no better estimate)
MAX_CANARIES = 100_000


def _flat(record: ArrayRecord) -> tuple[np.ndarray, list]:
    """The record's floating arrays as one float64 vector, and (name, shape, dtype) to rebuild it."""
    arrays = {name: array.numpy() for name, array in record.items()}
    layout = [(name, a.shape, a.dtype) for name, a in arrays.items() if np.issubdtype(a.dtype, np.floating)]
    return np.concatenate([arrays[n].reshape(-1).astype(np.float64) for n, _, _ in layout]), layout


class CanaryAudit(Strategy):
    """Canary clients in a real Flower strategy's aggregation (module docstring).

    ``strategy``: the Message-API strategy that aggregates (a DP wrapper around FedAvg). ``canaries``: m ≥ 2.
    ``clip``: the canaries' norm when the strategy has no ``clipping_norm`` attribute. ``delta``: δ of the ε
    statements. ``out``: folder for ``canary-audit.json`` (written by :meth:`report`).
    """

    def __init__(self, strategy, canaries: int = 100, *, clip: Optional[float] = None, seed: int = 0,
                 delta: float = 1e-5, out=None) -> None:
        if not isinstance(strategy, Strategy):
            raise FedleakError(f"CanaryAudit wraps a Flower Message-API strategy (flwr.serverapp.strategy.Strategy), "
                               f"got {type(strategy).__name__}")
        if isinstance(canaries, bool) or not isinstance(canaries, int) or not 2 <= canaries <= MAX_CANARIES:
            raise FedleakError(f"CanaryAudit: canaries must be an integer from 2 to {MAX_CANARIES}, got {canaries!r}")
        from ...config.boundary import api_arguments

        api_arguments("CanaryAudit", seed=(seed, int, "an integer seed from 0 to 2**32-1"),
                      out=(out, (str, os.PathLike, type(None)), "a folder path or None"))
        if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float))
                                 or not math.isfinite(clip) or clip <= 0):
            raise FedleakError(f"CanaryAudit: clip must be a finite number > 0, got {clip!r}")
        if clip is None and not hasattr(strategy, "clipping_norm"):
            raise FedleakError("CanaryAudit: the strategy has no clipping_norm; pass clip= (the canaries' norm)")
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
            raise FedleakError(f"CanaryAudit: delta must be in (0, 1), got {delta!r}")
        self.strategy, self.count, self.clip, self.seed, self.delta = strategy, canaries, clip, int(seed), float(delta)
        self.included = Canaries(canaries, 1, self.seed, 1.0).included
        self.inserted = int(self.included.sum())
        self.out = out
        self._theta0: Optional[np.ndarray] = None
        self._current: Optional[tuple[np.ndarray, list]] = None
        self._unit_sum: Optional[np.ndarray] = None
        self._last: Optional[np.ndarray] = None
        self._clip_t, self.rounds, self.clip_norms, self.aggregated = None, 0, [], []
        self._probe: Optional[NoiseProbe] = None  # the noise-scale test on the unseen canaries' directions
        self._guard, self.quarantined = ReplyGuard(), []  # the guard of every wrapper (guard.py)

    def summary(self) -> None:
        self.strategy.summary()

    def _canaries(self, dim: int) -> Canaries:
        return Canaries(self.count, dim, self.seed, 1.0)  # all at the clip norm: any clipping side leaves them so

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        messages = list(self.strategy.configure_train(server_round, arrays, config, grid))
        self._guard.sent(server_round, messages)
        self._current = _flat(arrays)
        if self._theta0 is None:
            self._theta0 = self._current[0].copy()
        # the round's clip norm, read before an adaptive wrapper updates it in aggregate_train
        self._clip_t = float(getattr(self.strategy, "clipping_norm", None) or self.clip)
        return messages

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        replies = self._guard.passed(server_round, replies, self.quarantined, type(self.strategy).__name__)
        real = [r for r in replies if not r.has_error() and r.content.array_records and r.content.metric_records]
        if self._current is None or not real:
            return self.strategy.aggregate_train(server_round, replies)
        theta, layout = self._current
        first = real[0].content
        array_key, metric_key = next(iter(first.array_records)), next(iter(first.metric_records))
        metrics = dict(first.metric_records[metric_key])
        weights = [float(r.content.metric_records[metric_key].get("num-examples", 1)) for r in real
                   if metric_key in r.content.metric_records]
        if "num-examples" in metrics:
            metrics["num-examples"] = type(metrics["num-examples"])(np.mean(weights)) if weights else 1
        canaries = self._canaries(theta.size)
        made = []
        for index, block in canaries.blocks():
            for j, u in zip(index, block):
                if self.included[j]:
                    made.append(self._reply(theta + self._clip_t * u.double().numpy(), layout, array_key, metric_key,
                                            metrics, real[0]))
        result = self.strategy.aggregate_train(server_round, replies + made)
        if result and result[0] is not None:
            new, _ = _flat(result[0])
            step = new - theta
            if self._probe is None:
                chosen = NoiseProbe.choose(np.flatnonzero(~self.included), theta.size)
                self._probe = NoiseProbe(np.stack([canaries.direction(int(j)).numpy() for j in chosen])
                                         if chosen.size else np.zeros((0, theta.size), np.float32))
            self._probe.add(step)
            norm = np.linalg.norm(step)
            unit = step / norm if norm > 0 else step
            self._unit_sum = unit if self._unit_sum is None else self._unit_sum + unit
            self._last = new
            self.rounds += 1
            self.clip_norms.append(self._clip_t)
            self.aggregated.append(len(real) + len(made))
        return result

    def _accountant(self) -> dict:
        """Flower's ε for the wrapped strategy's σ, and the σ the canaries see (FedAvg's equal weights)."""
        from ...fl.update_filters import central_epsilon
        from ...privacy.gdp import composed_mu, epsilon_of

        out: dict = {}
        spent = getattr(self.strategy, "privacy_spent", None)
        try:
            eps = spent() if callable(spent) else None
            if eps is not None:
                out["flower_rdp"] = float(eps.epsilon)
                out["flower_rdp_source"] = "the wrapped strategy's own accountant (privacy_spent)"
        except Exception as exc:  # noqa: BLE001 - the accountant is reported, never fatal
            out["flower_rdp_note"] = f"{type(exc).__name__}: {exc}"[:200]
        noise, sampled = getattr(self.strategy, "noise_multiplier", None), getattr(self.strategy, "num_sampled_clients",
                                                                                  None)
        if isinstance(noise, (int, float)) and noise > 0:
            if "flower_rdp" not in out:
                flower = central_epsilon(float(noise), self.rounds, self.delta)
                out["flower_rdp"] = flower.get("epsilon_flower")
                out["flower_rdp_source"] = "Flower's RdpAccountant, no amplification, σ of the wrapped strategy"
            out["noise_multiplier"] = float(noise)
            out["gdp_exact"] = epsilon_of(composed_mu(float(noise), self.rounds), self.delta)
            if isinstance(sampled, (int, float)) and self.aggregated:
                # noise σC/n on the mean of (real + canary) replies, a canary C/(real + canaries) of it
                seen = float(noise) * float(np.mean(self.aggregated)) / sampled
                out["canary_noise_multiplier"] = seen
                out["canary_gdp_exact"] = epsilon_of(composed_mu(seen, self.rounds), self.delta)
        return out

    @staticmethod
    def _reply(vector: np.ndarray, layout: list, array_key: str, metric_key: str, metrics: dict,
               like: Message) -> Message:
        arrays, start = {}, 0
        for name, shape, dtype in layout:
            size = int(np.prod(shape))
            arrays[name] = torch.from_numpy(vector[start:start + size].reshape(shape).astype(dtype))
            start += size
        content = RecordDict({array_key: ArrayRecord(arrays), metric_key: MetricRecord(metrics)})
        return Message(content=content, dst_node_id=like.metadata.src_node_id, message_type=like.metadata.message_type)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        return self.strategy.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> Optional[MetricRecord]:
        return self.strategy.aggregate_evaluate(server_round, replies)

    def gaussian_by_construction(self) -> Optional[str]:
        """Why the canaries' noise is Gaussian by construction (the wrapped strategy is one of Flower's DP wrappers,
        which add Gaussian noise to the aggregate), or None: then a μ-GDP figure is an estimate, not a proof."""
        import flwr.serverapp.strategy as flower_strategies

        wrappers = {getattr(flower_strategies, name) for name in dir(flower_strategies)
                    if name.startswith("DifferentialPrivacy")}
        if type(self.strategy) in wrappers:  # Flower's own class: a subclass may change what the noise is
            return f"Flower's {type(self.strategy).__name__} adds Gaussian noise to the aggregate"
        return None

    def report(self) -> dict:
        """Both threats' canary statistics, one-run bounds and estimates, beside Flower's accountant ε."""
        from ...privacy.estimate import estimate
        from ...privacy.one_run import lower_bounds

        if self._unit_sum is None or self._last is None:
            raise FedleakError("CanaryAudit.report(): no round was aggregated yet")
        d = self._unit_sum.size
        final = self._last - self._theta0
        null_all = np.linalg.norm(self._unit_sum) / math.sqrt(d)
        final_unit = final / max(np.linalg.norm(final), 1e-300)
        scores = {"all-iterates": np.empty(self.count), "final-model": np.empty(self.count)}
        for index, block in self._canaries(d).blocks():
            b = block.double().numpy()
            scores["all-iterates"][index] = b @ self._unit_sum / null_all
            scores["final-model"][index] = (b @ final_unit) * math.sqrt(d)
        result = {"level": "client", "source": "flower", "strategy": type(self.strategy).__name__,
                  "canaries": self.count, "canaries_inserted": self.inserted, "rounds": self.rounds, "delta": self.delta,
                  "clip_norms": self.clip_norms, "dimension": d, "quarantined": self.quarantined,
                  "lower_bounds": {t: lower_bounds(s, self.included, self.delta) for t, s in scores.items()},
                  "estimates": {t: estimate(s, self.included, self.delta, null_sd=1.0) for t, s in scores.items()}}
        # the Gaussian f-DP figure is proved only where the noise is Gaussian by construction (one of Flower's DP
        # wrappers); for any other aggregator the assumption-free bound (Steinke et al.) is the proved ε
        from ...privacy.verdict import headline_bound

        gaussian = self.gaussian_by_construction()
        result["epsilon_lower"], result["assumption"] = headline_bound(result["lower_bounds"]["all-iterates"], gaussian)
        result["epsilon_estimate"] = result["estimates"]["all-iterates"]["epsilon"]
        result["threat"] = "all-iterates"
        result["epsilon_accountant"] = acc = self._accountant()
        if acc.get("canary_noise_multiplier"):  # is the σ the canaries should see in force? (as fedleak dp-audit asks)
            from ...privacy.diagnose import claim_guesses
            from ...privacy.gdp import composed_mu
            from ...privacy.one_run import gdp_p_value

            mu = composed_mu(acc["canary_noise_multiplier"], self.rounds)
            g = claim_guesses(scores["all-iterates"], self.included, mu)[0]
            p = gdp_p_value(mu, g)
            result["claim_test"] = {**g.to_json(), "mu_claimed": mu, "p_value": p, "alpha": 0.01,
                                    "rejected": p < 0.01, "gaussian": gaussian,
                                    "evidence": ("proved" if gaussian else "estimated") if p < 0.01 else None}
            sampled = float(getattr(self.strategy, "num_sampled_clients", 0) or 0)
            if self._probe is not None and sampled > 0:  # the released aggregates' noise against σ·C_t/n
                result["noise_test"] = self._probe.test([acc["noise_multiplier"] * c / sampled for c in self.clip_norms])
        result["scores"] = {t: s.tolist() for t, s in scores.items()}
        if self.out is not None:
            from ...runs.outdir import prepare_out_dir

            folder = prepare_out_dir(self.out, "out")
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / "canary-audit.json.tmp"  # atomic: a report is the old one or the whole new one
            tmp.write_text(json.dumps(result, indent=1, allow_nan=True) + "\n")
            tmp.replace(folder / "canary-audit.json")
        return result
