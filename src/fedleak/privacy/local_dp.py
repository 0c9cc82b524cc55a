"""Flower's ``LocalDpMod`` audited: canary clients in a federation whose clients add their own noise (issue #29).

``fedleak dp-audit --defense flower-local-dp:clip=C,sensitivity=S,epsilon=E,delta=D --clients K``: every client
runs Flower's own local DP mod (``flwr.clientapp.mod.LocalDpMod``, flwr 1.42, on the node's ClientApp;
:func:`fedleak.fl.update_filters.flower_local_dp` is the same arithmetic for fedleak's filters): its update Δ is
clipped to C and N(0, s²I) with
s = S·√(2 ln(1.25/D))/E is added before it leaves the client (the classic Gaussian mechanism, Dwork & Roth
Thm. A.1; Flower states ε = E, δ = D per round and does no accounting over rounds). Canary nodes (Andrew et
al. ICLR '24 §3) run the same mod object; Flower's FedAvg averages (:func:`.federation.run_federation`).

What is claimed, per client (``epsilon_accountant``): Flower's per-round statement (E, D) and its T-fold basic
composition T·E at T·D, beside the composed Gaussian mechanism of multiplier s/C over T rounds (exact GDP
μ = √T·C/s, Opacus RDP/PRV, Flower's RdpAccountant: :func:`.accountants.accountant_epsilons`). When S < C the
mod's noise is calibrated to less than the clipped update's L2 sensitivity C (add/remove one client): Flower's
stated E understates the release, a finding. What the canaries see is the *average* of all noisy replies: the
sum carries noise of standard deviation s·√n (n clients and canary clients with the mod), so the canary test's
claim is μ_agg = √T·C/(s·√n)-GDP (:func:`aggregate_noise`) — a weaker release, post-processing of the
per-client ones, so the lower bound (Steinke et al. NeurIPS '23 §5; Mahloujifar et al. ICML '25) is a valid
lower bound on the per-client ε too, and looser by up to √n.

"Mod missing on some clients" (Flower FLIP #1122: the mod is opt-in): ``--fault no-dp=I,J`` — nodes I, J's
ClientApps are built without the mod, so they and their canary nodes send raw updates; the per-node reply test
(projection and residual noise) and the z-tests of :func:`.diagnose.diagnose` name them. The claim stays "every node
with the mod" (:func:`aggregate_noise` of all K + inserted replies), whatever is planted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import FedleakError
from ..fl.update_filters import flower_local_dp, local_dp_std


@dataclass(frozen=True)
class LocalDp:
    """The claimed ``LocalDpMod(clipping_norm=C, sensitivity=S, epsilon=E, delta=D)``."""

    clip: float
    sensitivity: float
    epsilon: float
    delta: float

    @classmethod
    def from_filter(cls, parsed) -> "LocalDp":
        p = parsed.params
        return cls(float(p["clip"]), float(p["sensitivity"]), float(p["epsilon"]), float(p["delta"]))

    @property
    def std(self) -> float:
        """s = S·√(2 ln(1.25/D))/E, the noise each client adds (:func:`fedleak.fl.update_filters.local_dp_std`)."""
        return local_dp_std(self.sensitivity, self.epsilon, self.delta)

    @property
    def client_noise(self) -> float:
        """The per-client noise multiplier s/C of the mod's Gaussian release of a norm-≤C update."""
        return self.std / self.clip

    def release(self, current: dict, final: dict, seed: int, t: int, k: int) -> torch.Tensor:
        """Client k's reply in round t after the mod, flattened: Flower's clipping and noise on numpy arrays with
        a RandomState seeded from (seed, t, k) — deterministic given the seed."""
        server = [v.detach().cpu().numpy().astype(np.float32, copy=True) for v in current.values()]
        client = [final[name].detach().cpu().numpy().astype(np.float32, copy=True) for name in current]
        state = np.random.SeedSequence([int(seed), 1122, int(t), int(k)]).generate_state(1)[0]
        out = flower_local_dp(server, client, self.clip, self.sensitivity, self.epsilon, self.delta,
                              np.random.RandomState(int(state) % (2 ** 32)))
        return torch.cat([torch.from_numpy(np.ascontiguousarray(a)).reshape(-1).float() for a in out])


def aggregate_noise(local: LocalDp, with_mod: int) -> float:
    """The noise multiplier σ_agg = s·√n/C of the sum of n replies that carry the mod's noise."""
    if with_mod < 1:
        raise FedleakError("--fault no-dp=: every client and canary without the mod leaves no noise to audit")
    return local.std * math.sqrt(with_mod) / local.clip


def implied_epsilons(local: LocalDp, rounds: int, delta: float) -> dict:
    """The per-client ε the mod implies over T rounds, by every account (see the module text)."""
    from .accountants import accountant_epsilons

    out = accountant_epsilons(local.client_noise, rounds, delta)
    out["flower_per_round"] = local.epsilon
    out["flower_per_round_delta"] = local.delta
    out["flower_basic_composition"] = rounds * local.epsilon
    out["flower_basic_composition_delta"] = rounds * local.delta
    out["note"] = ("per client, at --delta; flower_* are LocalDpMod's own (ε, δ) per round (sensitivity S) and their "
                   "T-fold basic composition; the others compose the Gaussian mechanism of multiplier s/C (L2 "
                   "sensitivity C of a clipped update, add/remove one client)")
    return out


def sensitivity_finding(local: LocalDp) -> list:
    """A finding when the mod's sensitivity S is below the clip norm C (Flower does not check it)."""
    if local.sensitivity >= local.clip:
        return []
    return [f"Proved (arithmetic): LocalDpMod's sensitivity S = {local.sensitivity:g} is below its clipping norm "
            f"C = {local.clip:g}: the noise s = {local.std:.4g} is calibrated to S, but a clipped update moves by up "
            f"to C, so the per-round ε is {local.epsilon * local.clip / local.sensitivity:.3g}, not the stated "
            f"{local.epsilon:g} (sensitivity setting; set sensitivity ≥ clipping_norm)."]
