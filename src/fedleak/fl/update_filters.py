"""Defenses deployments run on the whole client update: NVFlare's privacy filters and Flower's DP.

Unlike :mod:`.defenses` (per-example gradients inside local training), these act once on the update the
client sends — the weight change Δ = θᶜ − θˢ (for FedSGD Δ = −η·g, and the gradient sent is −Δ/η):

* ``percentile:percentile=P,gamma=G`` — NVFlare's ``PercentilePrivacy`` (Shokri & Shmatikov, CCS 2015, "share
  the largest values"): entries of Δ whose absolute value is below the P-th percentile of |Δ| are zeroed, the
  rest are clipped to [−G, G]. P in [0, 100], G > 0 (NVFlare defaults 10 and 0.01).
* ``svt:fraction=F,epsilon=E,noise_var=V,gamma=G,tau=T`` — NVFlare's ``SVTPrivacy``: the sparse vector technique
  (Lyu, Su, Li, "Understanding the Sparse Vector Technique for Differential Privacy", VLDB 2017, Alg. 1) over
  the entries of Δ clipped to [−G, G]: at most c = ⌈F·|Δ|⌉ entries whose noisy magnitude passes the noisy
  threshold T are released, each with Laplace(V) noise and clipped to [−G, G]; the rest are zero. Budget split
  as in Alg. 1: ε₁ = E/2 for the threshold (noise Lap(Δf/ε₁)) and ε₂ = E/2 for the c answers (noise
  Lap(2cΔf/ε₂)), Δf = G. The released values cost a further ε₃ = c·2G/V (Laplace mechanism, composed over the c
  values); :meth:`UpdateFilter.epsilon` reports ε₁ + ε₂ (what NVFlare calls ε) and ε₃ separately.
* ``flower-local-dp:clip=C,sensitivity=S,epsilon=E,delta=D`` — Flower's ``LocalDpMod``: Δ clipped to L2 norm C,
  then N(0, s²) added with s = S·√(2 ln(1.25/D))/E (the classic Gaussian mechanism, Dwork & Roth Thm. A.1;
  flwr.supercore.differential_privacy.add_localdp_gaussian_noise_to_params). ε = E per round.
* ``flower-central-dp:noise=σ,clip=C,clients=K[,adaptive=1]`` — Flower's central DP
  (``DifferentialPrivacyServerSide/ClientSideFixedClipping``, or adaptive clipping, Andrew et al. 2021): every
  client update is clipped to norm C and the **server** adds N(0, (σC/K)²) to the mean of K updates. The server
  sees each clipped update before its own noise, so against an honest-but-curious server only the clipping
  acts — which is what fedleak applies (adaptive clipping starts from C in the first round). The noise
  protects the released model from third parties; ε is reported for that release.

Every parameter is validated: a missing or out-of-range one is a one-line :class:`~fedleak.errors.FedleakError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..errors import FedleakError
from ..types import Params

#: kind -> {parameter: (default or None if required, low, high, low inclusive)}
SPECS = {
    "percentile": {"percentile": (10.0, 0.0, 100.0, True), "gamma": (0.01, 0.0, math.inf, False)},
    "svt": {"fraction": (0.1, 0.0, 1.0, False), "epsilon": (0.1, 0.0, math.inf, False),
            "noise_var": (0.1, 0.0, math.inf, False), "gamma": (1e-5, 0.0, math.inf, False),
            "tau": (1e-6, 0.0, math.inf, True)},
    "flower-local-dp": {"clip": (None, 0.0, math.inf, False), "sensitivity": (None, 0.0, math.inf, False),
                        "epsilon": (None, 0.0, math.inf, False), "delta": (None, 0.0, 1.0, False)},
    "flower-central-dp": {"noise": (None, 0.0, math.inf, True), "clip": (None, 0.0, math.inf, False),
                          "clients": (None, 1.0, math.inf, True), "adaptive": (0.0, 0.0, 1.0, True)},
}
FILTER_KINDS = tuple(SPECS)


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
            params[key] = value
        if kind == "flower-central-dp":
            params["clients"] = int(params["clients"])
        clip = params.get("clip") if kind.startswith("flower") else None
        return cls(kind, params, 0.0, clip)

    # -- Defense-like interface ---------------------------------------------------------------
    @property
    def active(self) -> bool:
        return False  # nothing happens per example; :meth:`apply_update` acts after local training

    def to_text(self) -> str:
        return f"{self.kind}:" + ",".join(f"{k}={v:g}" for k, v in self.params.items())

    def to_json(self) -> dict:
        return {"kind": self.kind, **self.params, "level": "update", "epsilon": self.epsilon()}

    def with_strength(self, strength: float) -> "UpdateFilter":
        main = {"percentile": "percentile", "svt": "epsilon", "flower-local-dp": "epsilon",
                "flower-central-dp": "noise"}[self.kind]
        return UpdateFilter.parse(f"{self.kind}:" + ",".join(
            f"{k}={(strength if k == main else v):g}" for k, v in self.params.items()))

    # -- the filter -----------------------------------------------------------------------------
    def apply_update(self, delta: Params, generator: Optional[torch.Generator] = None) -> Params:
        """The filtered weight change Δ (θᶜ − θˢ)."""
        names = list(delta)
        flat = torch.cat([delta[k].reshape(-1) for k in names])
        p = self.params
        if self.kind == "percentile":
            cutoff = torch.quantile(flat.abs().double().cpu(), p["percentile"] / 100.0).to(flat)
            out = torch.where(flat.abs() >= cutoff, flat, torch.zeros_like(flat)).clamp(-p["gamma"], p["gamma"])
        elif self.kind == "svt":
            out = _svt(flat, p, generator)
        elif self.kind == "flower-local-dp":
            out = _clip(flat, p["clip"])
            std = p["sensitivity"] * math.sqrt(2 * math.log(1.25 / p["delta"])) / p["epsilon"]
            out = out + std * torch.randn(out.shape, generator=generator, device=out.device, dtype=out.dtype)
        else:  # flower-central-dp: the server sees the clipped update, its noise comes after aggregation
            out = _clip(flat, p["clip"])
        result, start = {}, 0
        for k in names:
            n = delta[k].numel()
            result[k] = out[start:start + n].reshape(delta[k].shape)
            start += n
        return result

    def epsilon(self) -> Optional[dict]:
        """The ε this filter spends per round, by its own parameters (``None`` when it is not DP)."""
        p = self.params
        if self.kind == "svt":
            release = None  # c depends on the update size: filled in by :meth:`spent` when it is known
            return {"epsilon_svt": p["epsilon"], "epsilon_release_per_value": 2 * p["gamma"] / p["noise_var"],
                    "epsilon_release": release, "note": "SVT (Lyu et al. 2017 Alg. 1): ε₁ + ε₂ = epsilon; each "
                    "released value's Laplace(noise_var) noise costs 2·gamma/noise_var more"}
        if self.kind == "flower-local-dp":
            return {"epsilon": p["epsilon"], "delta": p["delta"], "mechanism": "Gaussian, per round"}
        if self.kind == "flower-central-dp":
            return {"noise_multiplier": p["noise"], "clients": p["clients"], **central_epsilon(p["noise"]),
                    "note": "protects the aggregate released by the server, not the update the server sees"}
        return None

    def spent(self, num_values: int) -> Optional[dict]:
        """:meth:`epsilon` with the SVT release cost for an update of ``num_values`` entries."""
        eps = self.epsilon()
        if eps is not None and self.kind == "svt":
            count = min(num_values, math.ceil(self.params["fraction"] * num_values))
            eps["released_at_most"] = count
            eps["epsilon_release"] = count * eps["epsilon_release_per_value"]
        return eps


def _clip(flat: torch.Tensor, norm: float) -> torch.Tensor:
    return flat * min(1.0, norm / (float(flat.norm()) + 1e-12))


def _laplace(shape, scale: float, like: torch.Tensor, generator) -> torch.Tensor:
    u = torch.rand(shape, generator=generator, device=like.device, dtype=like.dtype) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-7))


def _svt(flat: torch.Tensor, p: dict, generator) -> torch.Tensor:
    """Lyu et al. 2017, Alg. 1 over |Δ_i| (clipped to γ), at most c answers, then Laplace release."""
    gamma = p["gamma"]
    x = flat.clamp(-gamma, gamma)
    count = min(x.numel(), math.ceil(p["fraction"] * x.numel()))
    eps1 = eps2 = p["epsilon"] / 2
    threshold = p["tau"] + float(_laplace((1,), gamma / eps1, x, generator))
    noisy = x.abs() + _laplace(x.shape, 2 * count * gamma / eps2, x, generator)
    order = torch.randperm(x.numel(), generator=generator, device=x.device)  # queries in random order
    above = order[noisy[order] >= threshold][:count]  # Alg. 1 stops after c answers above the threshold
    out = torch.zeros_like(x)
    released = x[above] + _laplace(above.shape, p["noise_var"], x, generator)
    out[above] = released.clamp(-gamma, gamma)
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
