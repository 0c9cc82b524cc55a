"""A DP-FedAvg federation run through Flower's own DP code, with canary nodes (client-level DP, fixed or adaptive
clipping, or LocalDpMod).

Every client is a Flower node whose ClientApp carries the claimed client-side mod around fedleak's one client
update (:func:`fedleak.fl.client.client_update`): ``fixedclipping_mod`` under Flower's
``DifferentialPrivacyClientSideFixedClipping`` (McMahan et al., "Learning Differentially Private Recurrent Language
Models", ICLR 2018, DP-FedAvg: clip each update to C, the server adds N(0, σ²C²) to the sum and averages),
``adaptiveclipping_mod`` under ``DifferentialPrivacyClientSideAdaptiveClipping`` (Andrew, Thakkar, McMahan,
Ramaswamy, NeurIPS 2021, Alg. 1, as flwr 1.42 runs it: clipped-count noise σ_b, update noise σ_Δ,
C_{t+1} = C_t·exp(−η_C(noisy clipped fraction − γ)); :func:`adaptive_noise` is the same split, checked before any
work), or ``LocalDpMod`` under plain ``FedAvg``. Canary nodes (Andrew et al. ICLR 2024 §3; Steinke et al. NeurIPS
2023 inclusion coins) run node j mod K's own mod chain (:mod:`fedleak.integrations.flower.canary_nodes`): Flower's
clipping, noise and averaging decide what every canary shows; nothing here re-implements them.

Faults (to show what the audit detects; none by default) are planted, never simulated (:mod:`.flower_faults`):
``noise=F`` — Flower's ``add_gaussian_noise_inplace`` draws F × the σ it is given; ``no-dp=3,7`` — nodes 3 and 7's
ClientApps are built without the mod; ``no-clip`` — Flower's clipping functions return the update unclipped.

Statistics (Andrew et al. §3): all-iterates — Σₜ cos(u, Aₜ) over the rounds' aggregates Aₜ; final model —
cos(u, θ_T − θ_0), both in units of their closed-form null standard deviation (for a unit vector u independent of
x, ⟨u, x⟩ has variance ‖x‖²/d: Σₜ cos has sd ‖Σₜ Aₜ/‖Aₜ‖‖/√d, the final cosine 1/√d); the per-node reply test
(:func:`fedleak.integrations.flower.canary_nodes.reply_test`); and the noise-scale test: the released Aₜ projected
on the directions of canaries left out by their coin, a χ² lower tail against the claimed noise
(:class:`fedleak.integrations.flower.canary_replies.NoiseProbe`; read from the aggregates, never from a fault).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from ..errors import FedleakError
from ..fl.client import client_update
from ..types import Protocol
from ..types.params import buffers_of, params_of
from .canaries import Canaries


def noise_factor(value: str) -> float:
    """``--fault noise=F``'s F: the factor applied to the claimed noise (0 = noise off), finite and ≥ 0."""
    try:
        noise = float(value)
    except ValueError:
        noise = math.nan
    if not (math.isfinite(noise) and noise >= 0):
        raise FedleakError(f"--fault noise=F needs a finite F ≥ 0, got {value!r}")
    return noise


@dataclass(frozen=True)
class Fault:
    """A deliberate misconfiguration of the simulated federation (for testing the audit)."""

    noise_factor: float = 1.0
    no_dp_clients: tuple = ()
    no_clip: bool = False

    @classmethod
    def parse(cls, specs, clients: int) -> "Fault":
        noise, missing, after = 1.0, (), False
        for spec in specs or ():
            key, eq, value = str(spec).strip().partition("=")
            key = key.strip().lower()
            if key == "noise" and eq:
                noise = noise_factor(value)
            elif key == "no-dp" and eq:
                try:
                    missing = tuple(sorted({int(v) for v in value.split(",") if v.strip()}))
                except ValueError:
                    raise FedleakError(f"--fault no-dp= needs client indices like 3,7, got {value!r}") from None
                if not missing or min(missing) < 0 or max(missing) >= clients:
                    raise FedleakError(f"--fault no-dp= needs client indices in 0..{clients - 1}, got {value!r}")
            elif key == "no-clip" and not eq:
                after = True
            else:
                raise FedleakError(f"--fault {spec!r}: allowed noise=F, no-dp=I,J,..., no-clip")
        return cls(noise, missing, after)

    @property
    def any(self) -> bool:
        return self.noise_factor != 1.0 or bool(self.no_dp_clients) or self.no_clip

    def to_json(self) -> dict:
        return {"noise_factor": self.noise_factor, "no_dp_clients": list(self.no_dp_clients), "no_clip": self.no_clip,
                "planted": "inside Flower's code (privacy/flower_faults.py); no-dp nodes built without the mod"}


#: Flower's adaptive-clipping defaults (``DifferentialPrivacy…AdaptiveClipping``, flwr 1.42): target quantile γ,
#: clip-norm learning rate η_C; the clipped-count noise σ_b defaults to (sampled clients)/20
TARGET_QUANTILE, CLIP_NORM_LR = 0.5, 0.2


@dataclass(frozen=True)
class DPSetting:
    """The claimed client-level DP: noise multiplier σ, clip norm C (the initial one when ``adaptive``), rounds T
    (every client every round)."""

    noise: float
    clip: float
    rounds: int
    adaptive: bool = False

    def __post_init__(self) -> None:
        for name, value in (("noise multiplier σ", self.noise), ("clip norm C", self.clip)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise FedleakError(f"--defense: the {name} must be a finite number > 0, got {value!r}")
        if int(self.rounds) != self.rounds or self.rounds < 1:
            raise FedleakError(f"--rounds must be an integer ≥ 1, got {self.rounds!r}")


@dataclass
class FederationResult:
    """What the auditor keeps: per-canary statistics (in null-sd units) for both threats."""

    included: np.ndarray
    scores: dict  # threat -> np.ndarray (m,)
    raw_norm: np.ndarray
    node: np.ndarray
    dim: int
    seconds: dict = field(default_factory=dict)
    model_change: float = 0.0
    clip_norms: list = field(default_factory=list)  # C_t of every round (constant without adaptive clipping)
    adaptive: dict = field(default_factory=dict)  # σ_b and σ_Δ of adaptive clipping (Flower's split of σ)
    replies: list = field(default_factory=list)  # the per-node reply test (canary_nodes.reply_test)
    noise_test: dict = field(default_factory=dict)  # the aggregates' noise scale (canary_replies.NoiseProbe)


def adaptive_noise(noise: float, sampled: int) -> tuple[float, float]:
    """(σ_b, σ_Δ): Flower's ``compute_adaptive_noise_params`` (Andrew et al. 2021, Thm. 1): the clipped count gets
    N(0, σ_b²) with σ_b = sampled/20, the update N(0, (σ_Δ C_t)²) with σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), so that
    the two releases together cost what one Gaussian release of multiplier σ does."""
    count_sd = sampled / 20
    if noise >= 2 * count_sd:
        raise FedleakError(f"--defense: adaptive clipping needs σ < 2·σ_b = {2 * count_sd:g} (Flower's clipped-count "
                           f"noise σ_b = clients/20 with {sampled} clients and canaries), got σ = {noise:g}")
    return count_sd, (noise ** -2 - (2 * count_sd) ** -2) ** -0.5


def _node_app(model, data, protocol: Protocol, seed: int, k: int, mods: list):
    """Node k's ClientApp as a user writes one: ``mods`` on the app, a train function that runs fedleak's one client
    update (:func:`fedleak.fl.client.client_update`) from the received weights on the node's data."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp

    buffers = buffers_of(model)
    app = ClientApp(mods=list(mods))

    @app.train()
    def train(msg: Message, context) -> Message:
        key, record = next(iter(msg.content.array_records.items()))
        config = next(iter(msg.content.config_records.values()), {})
        current = {name: torch.from_numpy(a.copy()) for name, a in zip(record.keys(), record.to_numpy_ndarrays())}
        t = int(config.get("server-round", 1)) - 1
        update = client_update(model, data, protocol, seed=int(seed) * 100_003 + t * 1_009 + k, params=current,
                               buffers=buffers)
        final = update.final_params()
        arrays = ArrayRecord({name: Array(final[name].detach().cpu().numpy().astype(np.float32)) for name in current})
        return Message(RecordDict({key: arrays, "metrics": MetricRecord({"num-examples": len(data)})}), reply_to=msg)

    return app


def run_federation(model, clients, protocol: Protocol, dp: DPSetting, canaries: Canaries, *, fault: Fault = Fault(),
                   seed: int = 0, log: Optional[Callable[[str], None]] = None, local=None) -> FederationResult:
    """Run T rounds of the federation through Flower's own code with canary nodes; score every canary.

    Every client is a node whose ClientApp carries the claimed mod (``fixedclipping_mod`` under Flower's
    ``DifferentialPrivacyClientSideFixedClipping``, ``adaptiveclipping_mod`` under the adaptive pair, or
    ``local``'s ``LocalDpMod`` under plain ``FedAvg``) around fedleak's client update; canary j is a node running
    node j mod K's mod chain (:mod:`fedleak.integrations.flower.canary_nodes`). A ``fault`` is planted, never
    simulated: ``no_dp_clients`` build those nodes' ClientApps without the mod, ``noise_factor`` and ``no_clip``
    patch Flower's own noise and clipping functions (:mod:`.flower_faults`). The canaries' claim is the setting's
    σ for the sum of all K + inserted replies (LocalDpMod: s·√(K + inserted)/C, every node with the mod)."""
    try:
        from flwr.app import Array, ArrayRecord
        from flwr.clientapp.mod import LocalDpMod, adaptiveclipping_mod, fixedclipping_mod
        from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                             DifferentialPrivacyClientSideFixedClipping, FedAvg)
    except ImportError:
        raise FedleakError("the client-level DP audit runs Flower's own DP code: pip install 'fedleak[flower]'") from None
    from ..integrations.flower.canary_nodes import run_canary_nodes
    from .flower_faults import planted

    start_time = time.perf_counter()
    params = params_of(model)
    d = sum(v.numel() for v in params.values())
    if canaries.dim != d:
        raise FedleakError(f"canaries have {canaries.dim} dimensions, the model {d}")
    k_clients = len(clients)
    if local is not None:
        mod = LocalDpMod(clipping_norm=local.clip, sensitivity=local.sensitivity, epsilon=local.epsilon,
                         delta=local.delta)
    else:
        mod = adaptiveclipping_mod if dp.adaptive else fixedclipping_mod
    apps = [_node_app(model, data, protocol, seed, k, [] if k in fault.no_dp_clients else [mod])
            for k, data in enumerate(clients)]
    made: dict = {}

    def strategy_fn(n: int):
        inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
        if local is not None:
            made["strategy"] = inner
        elif dp.adaptive:
            made["strategy"] = DifferentialPrivacyClientSideAdaptiveClipping(
                inner, noise_multiplier=dp.noise, num_sampled_clients=n, initial_clipping_norm=dp.clip,
                target_clipped_quantile=TARGET_QUANTILE, clip_norm_lr=CLIP_NORM_LR)
        else:
            made["strategy"] = DifferentialPrivacyClientSideFixedClipping(inner, noise_multiplier=dp.noise,
                                                                          clipping_norm=dp.clip, num_sampled_clients=n)
        return made["strategy"]

    initial = ArrayRecord({name: Array(v.detach().cpu().numpy().astype(np.float32)) for name, v in params.items()})
    if local is not None:
        claimed, reply_noise = (lambda strategy, n: local.std * math.sqrt(n) / local.clip), local.std / local.clip
    else:
        claimed, reply_noise = (lambda strategy, n: dp.noise), 0.0
    with planted(fault.noise_factor, fault.no_clip):
        r = run_canary_nodes(apps, strategy_fn, initial, nodes=k_clients, rounds=dp.rounds, canary_set=canaries,
                             clip=float(dp.clip), claimed_noise=claimed, reply_noise=reply_noise, seed=seed, log=log,
                             keep_final=True)
    included = np.asarray(r["included"], bool)
    adaptive = {}
    if dp.adaptive:
        wrapper = made["strategy"]
        adaptive = {"clipped_count_stddev": float(wrapper.clipped_count_stddev),
                    "update_noise_multiplier": float(wrapper.noise_multiplier)}
    seconds = {"rounds": r["cost"]["seconds"], "scoring": round(time.perf_counter() - start_time - r["cost"]["seconds"], 3)}
    return FederationResult(included, {t: np.asarray(v) for t, v in r["scores"].items()},
                            canaries.raw_norm(np.arange(canaries.count)), canaries.node(np.arange(canaries.count)), d,
                            seconds, float(r["model_change"]), r["clip_norms"], adaptive, replies=r["reply_test"],
                            noise_test=r["noise_test"])
