"""A simulated DP-FedAvg federation with canary clients (client-level DP, fixed or adaptive clipping).

The mechanism is Flower's central DP with fixed clipping (``DifferentialPrivacyServerSideFixedClipping``;
``…ClientSideFixedClipping`` with the ``fixedclipping_mod`` on every client; McMahan et al., "Learning
Differentially Private Recurrent Language Models", ICLR 2018, DP-FedAvg): every round each of the K
clients trains from the global weights with fedleak's one client update (:func:`fedleak.fl.client.client_update`),
its weight change Δ is clipped to L2 norm C, the server sums the clipped changes, adds N(0, σ²C²I) and
averages; the global model moves by that average (server learning rate 1). Canary clients
(:mod:`.canaries`, Andrew et al. ICLR 2024) send the same direction every round and pass through the
same clipping; the included ones are summed in every round.

Adaptive clipping (``adaptive=1``: Flower's ``DifferentialPrivacyServerSideAdaptiveClipping`` / the client-side pair
with ``adaptiveclipping_mod``; Andrew, Thakkar, McMahan, Ramaswamy, "Differentially Private Learning with Adaptive
Clipping", NeurIPS 2021, Alg. 1) as flwr 1.42 runs it: round t clips at C_t, counts the updates whose norm
exceeded C_t (Flower's norm bit), releases the count with N(0, σ_b²), adds N(0, (σ_Δ C_t)²) to the sum
(:func:`adaptive_noise`) and moves C_{t+1} = C_t·exp(−η_C(noisy clipped fraction − γ)). The canaries follow the
clip norm (raw norm C_t or s·C_t in round t, as Andrew et al. ICLR 2024 scale canaries to the current clip
norm); those above it count as clipped.

Faults (to show what the audit detects; none by default): ``noise=F`` — the noise actually added is F
times the claimed σ; ``no-dp=3,7`` — clients 3 and 7 run without the client-side clipping (their
updates and the canaries they send reach the sum unclipped); ``clip-after-noise`` — the server adds the
noise to the sum of unclipped updates and clips the noisy sum afterwards (to (K + canaries)·C).

Statistics (Andrew et al. §3): all-iterates — Σₜ cos(u, Aₜ) over the rounds' aggregates Aₜ; final model —
cos(u, θ_T − θ_0). Both are reported in units of their closed-form null standard deviation (for a unit
vector u independent of x, ⟨u, x⟩ has variance ‖x‖²/d: Σₜ cos has sd ‖Σₜ Aₜ/‖Aₜ‖‖/√d, the final cosine 1/√d).
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
    clip_after_noise: bool = False

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
            elif key == "clip-after-noise" and not eq:
                after = True
            else:
                raise FedleakError(f"--fault {spec!r}: allowed noise=F, no-dp=I,J,..., clip-after-noise")
        return cls(noise, missing, after)

    @property
    def any(self) -> bool:
        return self.noise_factor != 1.0 or bool(self.no_dp_clients) or self.clip_after_noise

    def to_json(self) -> dict:
        return {"noise_factor": self.noise_factor, "no_dp_clients": list(self.no_dp_clients),
                "clip_after_noise": self.clip_after_noise}


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


def adaptive_noise(noise: float, sampled: int) -> tuple[float, float]:
    """(σ_b, σ_Δ): Flower's ``compute_adaptive_noise_params`` (Andrew et al. 2021, Thm. 1): the clipped count gets
    N(0, σ_b²) with σ_b = sampled/20, the update N(0, (σ_Δ C_t)²) with σ_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2), so that
    the two releases together cost what one Gaussian release of multiplier σ does."""
    count_sd = sampled / 20
    if noise >= 2 * count_sd:
        raise FedleakError(f"--defense: adaptive clipping needs σ < 2·σ_b = {2 * count_sd:g} (Flower's clipped-count "
                           f"noise σ_b = clients/20 with {sampled} clients and canaries), got σ = {noise:g}")
    return count_sd, (noise ** -2 - (2 * count_sd) ** -2) ** -0.5


def _flat(params: dict) -> torch.Tensor:
    return torch.cat([v.detach().reshape(-1).to(torch.float32) for v in params.values()])


def _unflat(flat: torch.Tensor, like: dict) -> dict:
    out, start = {}, 0
    for k, v in like.items():
        out[k] = flat[start:start + v.numel()].reshape(v.shape).to(v.dtype)
        start += v.numel()
    return out


def _clip(x: torch.Tensor, norm: float) -> torch.Tensor:
    return x * min(1.0, norm / (float(x.norm()) + 1e-12))


def run_federation(model, clients, protocol: Protocol, dp: DPSetting, canaries: Canaries, *, fault: Fault = Fault(),
                   seed: int = 0, log: Optional[Callable[[str], None]] = None, local=None) -> FederationResult:
    """Run T rounds of DP-FedAvg with ``clients`` (fedleak ClientData) and ``canaries``; score every canary.

    ``local`` (a :class:`.local_dp.LocalDp`): Flower's ``LocalDpMod`` on every client instead of the server's noise
    (:mod:`.local_dp`): each real client's reply goes through :func:`fedleak.fl.update_filters.flower_local_dp`
    (Flower's own clipping and noise, bit for bit), each included canary client clips to C and its own noise
    N(0, s²I) joins the sum (drawn as one N(0, n·s²I) for the n canary clients: equal in distribution); the
    clients of ``fault.no_dp_clients`` run without the mod (raw updates, their canaries unclipped)."""
    start_time = time.perf_counter()
    params, buffers = params_of(model), buffers_of(model)
    theta0 = _flat(params)
    d = theta0.numel()
    if canaries.dim != d:
        raise FedleakError(f"canaries have {canaries.dim} dimensions, the model {d}")
    k_clients = len(clients)
    included = canaries.included
    m_in = int(included.sum())
    unclipped_nodes = set(fault.no_dp_clients)
    c = float(dp.clip)
    # the included canaries' contribution to every round's sum, after their node's clipping (streamed)
    canary_sum = torch.zeros(d)
    for index, block in canaries.blocks():
        keep = included[index]
        if not keep.any():
            continue
        raw = torch.as_tensor(canaries.raw_norm(index) * c, dtype=torch.float32)[:, None] * block
        unclipped = [fault.clip_after_noise or int(n) in unclipped_nodes for n in canaries.node(index)]
        norms = torch.where(torch.as_tensor(unclipped)[:, None], raw, block * c)  # clipping a norm-sC canary: C·u
        canary_sum += norms[torch.as_tensor(keep)].sum(0)
    t_canaries = time.perf_counter()
    noise_gen = torch.Generator().manual_seed(int(np.random.SeedSequence([int(seed), 2]).generate_state(1)[0]))
    aggregates = torch.empty(dp.rounds, d)
    current = dict(params)
    sampled = k_clients + m_in
    count_sd, update_noise = adaptive_noise(dp.noise, sampled) if dp.adaptive else (0.0, dp.noise)
    if local is not None:  # the canary clients' own LocalDpMod noise, summed; no server noise
        nodes = canaries.node(np.arange(canaries.count))
        with_mod = int((included & ~np.isin(nodes, list(unclipped_nodes))).sum())
        update_noise = local.std * math.sqrt(with_mod) / c
    # canaries above the clip norm are clipped every round (Flower's norm bit: scaling factor < 1)
    canaries_clipped = int((included & (canaries.raw_norm(np.arange(canaries.count)) > 1)).sum())
    c_t, clip_norms = c, []
    for t in range(dp.rounds):
        clip_norms.append(c_t)
        total = canary_sum * (c_t / c)  # adaptive clipping: the canaries follow the round's clip norm (Andrew et al.)
        clipped = canaries_clipped
        for k, data in enumerate(clients):
            update = client_update(model, data, protocol, seed=int(seed) * 100_003 + t * 1_009 + k,
                                   params=current, buffers=buffers)
            delta = _flat(update.final_params()) - _flat(current)
            clipped += int(float(delta.norm()) > c_t)
            if local is not None and k not in unclipped_nodes:
                delta = local.release(current, update.final_params(), seed, t, k) - _flat(current)
            elif not (fault.clip_after_noise or k in unclipped_nodes):
                delta = _clip(delta, c_t)
            total += delta
        noise = torch.randn(d, generator=noise_gen) * (fault.noise_factor * update_noise * c_t)
        noisy = total + noise
        if fault.clip_after_noise:
            noisy = _clip(noisy, c_t * sampled)
        aggregate = noisy / sampled
        aggregates[t] = aggregate
        current = _unflat(_flat(current) + aggregate, current)
        if dp.adaptive:  # Flower's geometric update from the noisy clipped fraction (dp_adaptive_clipping.py)
            fraction = (clipped + count_sd * float(torch.randn(1, generator=noise_gen))) / sampled
            c_t *= math.exp(-CLIP_NORM_LR * (fraction - TARGET_QUANTILE))
        if log:
            log(f"round {t + 1}/{dp.rounds}: {k_clients} clients + {m_in} canaries aggregated"
                + (f", clip norm {c_t:.4g} next" if dp.adaptive else ""))
    t_rounds = time.perf_counter()
    final = _flat(current) - theta0
    unit = aggregates / aggregates.norm(dim=1, keepdim=True).clamp_min(1e-30)
    null_all = float(unit.sum(0).norm()) / math.sqrt(d)
    null_final = 1.0 / math.sqrt(d)
    final_unit = final / final.norm().clamp_min(1e-30)
    scores_all = np.empty(canaries.count)
    scores_final = np.empty(canaries.count)
    for index, block in canaries.blocks():
        scores_all[index] = (block @ unit.T).sum(1).double().numpy() / null_all
        scores_final[index] = (block @ final_unit).double().numpy() / null_final
    end = time.perf_counter()
    return FederationResult(included, {"all-iterates": scores_all, "final-model": scores_final},
                            canaries.raw_norm(np.arange(canaries.count)), canaries.node(np.arange(canaries.count)), d,
                            {"canaries": t_canaries - start_time, "rounds": t_rounds - t_canaries,
                             "scoring": end - t_rounds}, float(final.norm()), clip_norms,
                            {"clipped_count_stddev": count_sd, "update_noise_multiplier": update_noise}
                            if dp.adaptive else {})
