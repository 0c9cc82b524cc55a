"""Defenses deployments run on the whole client update: NVFlare's privacy filters and Flower's DP.

Unlike :mod:`.defenses` (per-example gradients inside local training), these act once on the update the
client sends — the weight change Δ = θᶜ − θˢ (for FedSGD Δ = −η·g, and the gradient sent is −Δ/η). Each runs
its namesake's own algorithm, on numpy arrays with numpy's RandomState seeded from the client's generator,
so that under one seed the output equals the system's own code bit for bit (``tests/test_nvflare_filters.py``
runs NVFlare's classes and ``flwr``'s functions beside these):

* ``percentile:percentile=P,gamma=G[,steps=S]`` — NVFlare's ``PercentilePrivacy``
  (:func:`.nvflare_filters.percentile_privacy`): Δ/S, entries below the P-th percentile of |Δ/S| zeroed, the
  rest clipped to [−G, G], times S. P in [0, 100], G > 0 (NVFlare's defaults 10 and 0.01). Not DP: no ε.
* ``svt:fraction=F,epsilon=E,noise_var=V,gamma=G,tau=T[,replace=1,epsilon_threshold=,epsilon_query=,
  epsilon_release=,steps=S]`` — NVFlare ≥ 2.8's ``SVTPrivacy`` (:func:`.nvflare_filters.svt_privacy`), its
  defaults 0.1, 0.1, 0.1, 1e-5, 1e-6; ε as NVFlare's accountant records it: ε_t + ε_q + ε_r with ε_r = c·V.
  ``epsilon_*=0`` (the default) means NVFlare's default split.
* ``svt-legacy:…`` (the same first five keys, ``replace``, ``steps``) — NVFlare 2.0.18 … 2.7.3's ``SVTPrivacy``
  (:func:`.nvflare_filters.svt_legacy_privacy`); NVFlare reports no ε for it. ``svt-2.0:…`` — NVFlare 2.0.0 …
  2.0.16's, which sends the accepted but undrawn entries raw.
* ``flower-local-dp:clip=C,sensitivity=S,epsilon=E,delta=D`` — Flower's ``LocalDpMod``
  (flwr/clientapp/mod/localdp_mod.py, flwr 1.42): ``compute_clip_model_update`` (Δ scaled by min(1, C/‖Δ‖)),
  then N(0, s²) from ``np.random.normal`` cast to the parameters' dtype and added to θˢ + clip(Δ), with
  s = S·√(2 ln(1.25/D))/E (the classic Gaussian mechanism, Dwork & Roth Thm. A.1). ε = E, δ = D per round, as
  Flower states them (LocalDpMod does no accounting over rounds).
* ``flower-central-dp:noise=σ,clip=C,clients=K[,adaptive=1,server_side=1]`` — Flower's central DP
  (``DifferentialPrivacyClientSideFixedClipping`` with ``fixedclipping_mod``, or the adaptive pair, Andrew et al.
  2021): the client clips its update to norm C (``compute_clip_model_update``) and the **server** adds
  N(0, (σC/K)²) (``compute_stdv``) to the sum of K updates. The server sees each clipped update before its own
  noise, so against an honest-but-curious server only the clipping acts — which is what fedleak applies
  (adaptive clipping clips at C, the round's norm). With ``server_side=1``
  (``DifferentialPrivacyServerSideFixedClipping``) the server clips what it receives: nothing acts on the
  update it sees. ε is reported for the server's release (Flower's ``RdpAccountant`` when available).

Every parameter is validated: a missing or out-of-range one is a one-line :class:`~fedleak.errors.FedleakError`.
``steps=0`` (the default) divides by the round's local steps, what NVFlare's reference learners put in
``NUM_STEPS_CURRENT_ROUND`` (1 for FedSGD); ``steps=1`` is an executor that does not set it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from ..errors import FedleakError
from ..types import Params
from . import nvflare_filters as nvflare

_INF = math.inf
_NVFLARE_SVT = {"fraction": (0.1, 0.0, 1.0, False), "epsilon": (0.1, 0.0, _INF, False),
                "noise_var": (0.1, 0.0, _INF, False), "gamma": (1e-5, 0.0, _INF, False), "tau": (1e-6, 0.0, _INF, True),
                "replace": (1.0, 0.0, 1.0, True)}
_STEPS = {"steps": (0.0, 0.0, 1e9, True)}
#: kind -> {parameter: (default or None if required, low, high, low inclusive)}
SPECS = {
    "percentile": {"percentile": (10.0, 0.0, 100.0, True), "gamma": (0.01, 0.0, _INF, False), **_STEPS},
    "svt": {**_NVFLARE_SVT, "epsilon_threshold": (0.0, 0.0, _INF, True), "epsilon_query": (0.0, 0.0, _INF, True),
            "epsilon_release": (0.0, 0.0, _INF, True), **_STEPS},
    "svt-legacy": {**_NVFLARE_SVT, **_STEPS},
    "svt-2.0": {k: v for k, v in {**_NVFLARE_SVT, **_STEPS}.items() if k != "replace"},
    "flower-local-dp": {"clip": (None, 0.0, _INF, False), "sensitivity": (None, 0.0, _INF, True),
                        "epsilon": (None, 0.0, _INF, False), "delta": (None, 0.0, 1.0, False)},
    "flower-central-dp": {"noise": (None, 0.0, _INF, True), "clip": (None, 0.0, _INF, False),
                          "clients": (None, 1.0, _INF, True), "adaptive": (0.0, 0.0, 1.0, True),
                          "server_side": (0.0, 0.0, 1.0, True)},
}
FILTER_KINDS = tuple(SPECS)
_FLAGS = ("replace", "adaptive", "server_side")
_INTEGERS = ("clients", "steps")
#: the system and release whose code each kind follows (reported with the defense)
FOLLOWS = {"percentile": "NVFlare PercentilePrivacy (unchanged 2.2 … 2.9.0)", "svt": "NVFlare SVTPrivacy ≥ 2.8 (2.9.0)",
           "svt-legacy": "NVFlare SVTPrivacy 2.0.18 … 2.7.3", "svt-2.0": "NVFlare SVTPrivacy 2.0.0 … 2.0.16",
           "flower-local-dp": "Flower LocalDpMod (flwr 1.42)",
           "flower-central-dp": "Flower central DP, fixed/adaptive clipping (flwr 1.42)"}


@dataclass(frozen=True)
class UpdateFilter:
    """One update-level defense (``kind`` in :data:`FILTER_KINDS`) with its validated parameters."""

    kind: str
    params: dict = field(default_factory=dict)

    # the per-example Defense interface the rest of fedleak reads
    scale: float = 0.0
    clip: Optional[float] = None

    @classmethod
    def parse(cls, text: str) -> "UpdateFilter":
        kind, _, rest = text.strip().partition(":")
        kind = kind.strip().lower()
        if kind not in SPECS:
            raise FedleakError(f"unknown update filter {kind!r}; allowed: {', '.join(FILTER_KINDS)}")
        spec = SPECS[kind]
        given = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            key = key.strip().replace("-", "_")
            if not eq or key not in spec:
                raise FedleakError(f"defense {text!r}: {part!r} is not KEY=VALUE with KEY one of {', '.join(spec)}")
            try:
                number = float(value)
            except ValueError:
                raise FedleakError(f"defense {text!r}: {key} must be a number, got {value!r}") from None
            given[key] = number
        params = {}
        for key, (default, low, high, inclusive) in spec.items():
            value = given.get(key, default)
            if value is None:
                raise FedleakError(f"defense {text!r}: missing {key}= (needs {', '.join(k for k, v in spec.items() if v[0] is None)})")
            ok = math.isfinite(value) and (value >= low if inclusive else value > low) and value <= high
            if not ok:
                bound = f"{'≥' if inclusive else '>'} {low:g}" + (f" and ≤ {high:g}" if math.isfinite(high) else "")
                raise FedleakError(f"defense {text!r}: {key} must be {bound}, got {value:g}")
            if (key in _FLAGS and value not in (0.0, 1.0)) or (key in _INTEGERS and value != int(value)):
                raise FedleakError(f"defense {text!r}: {key} must be {'0 or 1' if key in _FLAGS else 'a whole number'}, "
                                   f"got {value:g}")
            params[key] = int(value) if key in _INTEGERS or key in _FLAGS else value
        if kind == "svt":  # NVFlare checks its budget split when it runs; fedleak when it is configured
            nvflare.epsilon_split(params["epsilon"], 1, params["epsilon_threshold"] or None,
                                  params["epsilon_query"] or None)
        clip = params.get("clip") if kind.startswith("flower") else None
        return cls(kind, params, 0.0, clip)

    # -- Defense-like interface ---------------------------------------------------------------
    @property
    def active(self) -> bool:
        return False  # nothing happens per example; :meth:`apply_update` acts after local training

    @property
    def changes_update(self) -> bool:
        """False when the server sees the update as trained (Flower's server-side clipping acts after it)."""
        return not (self.kind == "flower-central-dp" and self.params["server_side"])

    def to_text(self) -> str:
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in self.params.items())

    def to_json(self) -> dict:
        return {"kind": self.kind, **self.params, "level": "update", "follows": FOLLOWS[self.kind],
                "epsilon": self.epsilon()}

    def with_strength(self, strength: float) -> "UpdateFilter":
        main = {"percentile": "percentile", "svt": "epsilon", "svt-legacy": "epsilon", "svt-2.0": "epsilon",
                "flower-local-dp": "epsilon", "flower-central-dp": "noise"}[self.kind]
        return UpdateFilter.parse(f"{self.kind}:" + ",".join(
            f"{k}={(strength if k == main else v):g}" for k, v in self.params.items()))

    # -- the filter -----------------------------------------------------------------------------
    def apply_update(self, delta: Params, generator: Optional[torch.Generator] = None, steps: int = 1) -> Params:
        """The filtered weight change Δ (θᶜ − θˢ) of a round of ``steps`` local steps.

        ``steps`` is what the filter divides by unless its own ``steps=`` parameter is set (NVFlare's
        ``NUM_STEPS_CURRENT_ROUND``). The random draws come from a numpy ``RandomState`` seeded from ``generator``.
        """
        p = self.params
        rng = np.random.RandomState(_seed(generator))
        # numpy arrays as NVFlare's learners and Flower's ArrayRecords carry them: float64 stays, the rest float32
        arrays = {k: v.detach().to("cpu", torch.float64 if v.dtype == torch.float64 else torch.float32).numpy().copy()
                  for k, v in delta.items()}
        round_steps = int(p.get("steps") or steps)
        if self.kind == "percentile":
            out = nvflare.percentile_privacy(arrays, p["percentile"], p["gamma"], round_steps)
        elif self.kind == "svt":
            out, _ = nvflare.svt_privacy(arrays, p["fraction"], p["epsilon"], p["noise_var"], p["gamma"], p["tau"],
                                         round_steps, rng, bool(p["replace"]), p["epsilon_threshold"] or None,
                                         p["epsilon_query"] or None, p["epsilon_release"] or None)
        elif self.kind in ("svt-legacy", "svt-2.0"):
            out = nvflare.svt_legacy_privacy(arrays, p["fraction"], p["epsilon"], p["noise_var"], p["gamma"],
                                             p["tau"], round_steps, rng, bool(p.get("replace", 1)),
                                             release="2.0" if self.kind == "svt-2.0" else "2.3")
        else:
            names = list(arrays)
            server = [np.zeros_like(arrays[k]) for k in names]  # Δ is θᶜ − θˢ: θˢ = 0 gives the same clip and noise
            client = [arrays[k] for k in names]
            if self.kind == "flower-local-dp":
                released = flower_local_dp(server, client, p["clip"], p["sensitivity"], p["epsilon"], p["delta"], rng)
            elif p["server_side"]:
                released = client  # the server clips after it has seen the update
            else:
                released = flower_clip(server, client, p["clip"])
            out = dict(zip(names, released))
        return {k: torch.as_tensor(np.asarray(out[k])).to(device=v.device, dtype=v.dtype).reshape(v.shape)
                for k, v in delta.items()}

    def epsilon(self) -> Optional[dict]:
        """The ε this filter spends per round as its namesake reports it (``None`` when it is not DP)."""
        p = self.params
        if self.kind == "svt":
            return {"accountant": "pure_dp_sum", "delta": 0.0, "epsilon": p["epsilon"], "noise_var": p["noise_var"],
                    "note": "NVFlare ≥ 2.8 records ε_threshold + ε_query + ε_release per call, ε_release = "
                            "n_upload·noise_var unless given; the totals need the update's size (see `spent`)"}
        if self.kind in ("svt-legacy", "svt-2.0"):
            return {"epsilon": p["epsilon"], "epsilon_reported_by_nvflare": None,
                    "note": "NVFlare ≤ 2.7 reports no ε; `epsilon` sets its threshold and query noise, the release "
                            "noise is Laplace(2·gamma/noise_var) per value"}
        if self.kind == "flower-local-dp":
            return {"epsilon": p["epsilon"], "delta": p["delta"], "mechanism": "Gaussian, per round (LocalDpMod)",
                    "noise_std": local_dp_std(p["sensitivity"], p["epsilon"], p["delta"])}
        if self.kind == "flower-central-dp":
            return {"noise_multiplier": p["noise"], "clients": p["clients"], **central_epsilon(p["noise"]),
                    "noise_std_of_aggregate": flower_stdv(p["noise"], p["clip"], p["clients"]),
                    "note": "protects the aggregate released by the server, not the update the server sees"}
        return None

    def spent(self, num_values: int) -> Optional[dict]:
        """:meth:`epsilon` for an update of ``num_values`` entries (NVFlare's SVT record needs it)."""
        if self.kind != "svt":
            return self.epsilon()
        p = self.params
        return nvflare.svt_epsilon(num_values, p["fraction"], p["epsilon"], p["noise_var"],
                                   p["epsilon_threshold"] or None, p["epsilon_query"] or None,
                                   p["epsilon_release"] or None)


def _seed(generator: Optional[torch.Generator]) -> int:
    if generator is None:
        return 0
    return int(torch.randint(0, 2 ** 31 - 1, (1,), generator=generator, device=generator.device))


def flower_norm(arrays: list) -> float:
    """``flwr.supercore.differential_privacy.get_norm``: the L2 norm of all arrays, computed as Flower does."""
    return float(np.sqrt(sum(np.linalg.norm(a.flat) ** 2 for a in arrays)))


def flower_clip(server: list, client: list, clip: float) -> list:
    """``compute_clip_model_update(client, server, clip)``: θˢ + Δ·min(1, C/‖Δ‖), Δ = θᶜ − θˢ.

    Flower divides by ‖Δ‖ and fails on an all-zero update; here a zero update goes through unchanged.
    """
    update = [np.subtract(c, s) for c, s in zip(client, server)]
    norm = flower_norm(update)
    factor = min(1, clip / norm) if norm > 0 else 1
    for a in update:
        a *= factor
    return [s + u for s, u in zip(server, update)]


def local_dp_std(sensitivity: float, epsilon: float, delta: float) -> float:
    """LocalDpMod's noise standard deviation S·√(2 ln(1.25/δ))/ε."""
    return float(sensitivity * np.sqrt(2 * np.log(1.25 / delta)) / epsilon)


def flower_stdv(noise: float, clip: float, clients: int) -> float:
    """``compute_stdv``: σ·C/K, the noise Flower's server adds to the aggregate."""
    return float((noise * clip) / clients)


def flower_local_dp(server: list, client: list, clip: float, sensitivity: float, epsilon: float, delta: float,
                    rng: np.random.RandomState) -> list:
    """LocalDpMod on one reply: clip as :func:`flower_clip`, then ``add_gaussian_noise_inplace`` with ``rng``."""
    out = flower_clip(server, client, clip)
    std = local_dp_std(sensitivity, epsilon, delta)
    for a in out:
        a += rng.normal(0, std, a.shape).astype(a.dtype)
    return out


def central_epsilon(noise: float, rounds: int = 1, delta: float = 1e-5) -> dict:
    """ε of Flower's central DP release after ``rounds`` rounds, every client sampled (no amplification).

    fedleak's number: Opacus's RDP accountant (:mod:`fedleak.fl.accounting`, sample rate 1). Flower's own:
    ``flwr.serverapp.RdpAccountant`` (Flower ≥ 1.35) with ``SamplingMethod.NO_AMPLIFICATION`` when its optional
    backend ``dp-accounting`` (``flwr[dp]``) is installed; otherwise the reason it is missing. Both are RDP
    accountants of the same Gaussian mechanism; they differ only by their grid of Rényi orders.
    """
    from .accounting import PrivacyParameters, epsilon

    if noise <= 0:
        return {"epsilon_fedleak": math.inf, "epsilon_flower": None, "flower_note": "no noise: no DP guarantee"}
    out = {"delta": delta, "rounds": rounds,
           "epsilon_fedleak": epsilon(PrivacyParameters(noise, 1.0, rounds, delta), "rdp")}
    try:
        from flwr.serverapp import RdpAccountant
        from flwr.supercore.privacy_accounting import (GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig,
                                                       SamplingMethod)

        config = PrivacyConfig(target_delta=delta, population_size=1,
                               neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                               sampling_method=SamplingMethod.NO_AMPLIFICATION)
        accountant = RdpAccountant(config)
        accountant.compose(GaussianPrivacyEvent(noise, 1, 1), rounds)
        out["epsilon_flower"] = accountant.get_privacy_spent(delta).epsilon
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        out["epsilon_flower"] = None
        out["flower_note"] = f"Flower's RdpAccountant unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return out
