"""Defenses applied to every per-example gradient inside the client update.

Dimitrov et al., App. B.1 / Table 6 (research note §A.10): at every local step, *each
per-example gradient* is perturbed before the minibatch average —

* ``gaussian``: add i.i.d. N(0, σ²) to every coordinate (``dp_gaussian_σ``);
* ``laplacian``: add i.i.d. Laplace(0, b) to every coordinate (``dp_laplacian_b``);
* ``pruning``: zero every coordinate independently with probability p, no rescaling
  (``random_pruning_p``).

``clip`` optionally bounds each per-example gradient's global L2 norm first (the clipping step of
DP-SGD, Abadi et al. 2016). The paper's defenses use no clipping.

``dp-sgd`` (``"dp-sgd:clip=C,noise=σ"``) is DP-SGD itself (Abadi et al. 2016, Alg. 1): every
per-example gradient is clipped to norm C and the minibatch mean receives Gaussian noise
N(0, σ²C²)/B, B the batch size. The noise is added here as B independent N(0, σ²C²/B) draws, one per
example, whose sum has exactly the distribution N(0, σ²C²) of Alg. 1's single draw, so the client
update's "defend each example, then average" path (:mod:`fedleak.fl.client`) runs it unchanged.
ε for a federation is computed by :mod:`fedleak.fl.accounting` with Opacus's accountants.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Optional

import torch

from ..errors import FedleakError
from ..types import Params

KINDS = ("none", "gaussian", "laplacian", "pruning", "dp-sgd")
_PAPER_NAMES = {"dp_gaussian": "gaussian", "dp_laplacian": "laplacian", "random_pruning": "pruning"}


#: the largest defense strength or clipping norm (beyond it noise overflows float32)
MAX_STRENGTH = 1e6  # = fedleak.config.boundary.MAX_RATE
#: the largest clipping norm (a norm that never binds, e.g. 1e9, is allowed; 1e308 overflows the norms)
MAX_CLIP = 1e12


@dataclass(frozen=True)
class Defense:
    """A per-example gradient defense: ``kind`` with strength ``scale`` (σ, b, p, or DP-SGD's noise
    multiplier σ) and optional ``clip`` (required by ``dp-sgd``)."""

    kind: str = "none"
    scale: float = 0.0
    clip: Optional[float] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FedleakError(f"unknown defense {self.kind!r}; allowed: {', '.join(KINDS)}")
        for name, value, most in (("strength", self.scale, MAX_STRENGTH), ("clip", self.clip, MAX_CLIP)):
            if value is None and name == "clip":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or abs(value) > most:
                raise FedleakError(f"defense {self.kind} {name} must be a finite number up to {most:g}, "
                                   f"got {value!r}")
        if self.scale < 0:
            if self.kind == "dp-sgd":
                raise FedleakError(f"dp-sgd noise multiplier σ must be positive (or 0: clipping only), got {self.scale}")
            raise FedleakError(f"defense scale must be non-negative, got {self.scale}")
        if self.kind == "pruning" and not 0 <= self.scale < 1:
            raise FedleakError(f"pruning probability must be in [0, 1), got {self.scale}")
        if self.clip is not None and self.clip <= 0:
            raise FedleakError(f"clipping norm must be positive, got {self.clip}")
        if self.kind == "dp-sgd" and self.clip is None:  # noise=0 is allowed: clipping only
            raise FedleakError("dp-sgd needs a clipping norm: use e.g. 'dp-sgd:clip=1,noise=0.5'")

    @property
    def active(self) -> bool:
        return self.clip is not None or (self.kind != "none" and self.scale > 0)

    @classmethod
    def parse(cls, text: str | dict | None) -> "Defense":
        """Parse ``"gaussian:0.01"``, ``"dp_gaussian_0.01"`` (the paper's names), ``"gaussian:0.01,clip=1"``,
        ``"dp-sgd:clip=1,noise=0.5"``, ``"none"`` or a dict."""
        if text is None:
            return cls()
        if isinstance(text, Defense) or type(text).__name__ == "UpdateFilter":
            return text
        if isinstance(text, dict):
            unknown = sorted(set(map(str, text)) - {"kind", "scale", "clip"})
            if unknown:
                raise FedleakError(f"defense {text!r}: unknown key(s) {', '.join(unknown)}; allowed: kind, scale, clip")
            return cls(**text)
        if not isinstance(text, str):
            raise FedleakError(f"a defense is a string like 'gaussian:0.01' or a mapping, got {text!r}")
        try:
            return cls._parse_text(text.strip())
        except FedleakError as exc:
            message = str(exc)
            if repr(text.strip()) in message:
                raise FedleakError(message) from None
            inner = re.match(r"defense '[^']*':? ", message)  # the spec as normalized inside: name the user's text
            raise FedleakError(f"defense {text.strip()!r}: {message[inner.end():] if inner else message}") from None

    @classmethod
    def _parse_text(cls, text: str) -> "Defense":
        """The spec split by :func:`fedleak.config.specs.parse_spec` (one set of rules for every spec)."""
        from ..config.specs import parse_spec
        from .update_filters import FILTER_KINDS, SPECS, UpdateFilter  # update-level defenses (NVFlare, Flower)

        if text in ("", "none"):
            return cls()
        match = re.fullmatch(r"(dp_gaussian|dp_laplacian|random_pruning)_(.*)", text)
        if match:
            text = f"{_PAPER_NAMES[match.group(1)]}:{match.group(2)}"
        kind = text.partition(":")[0].strip().lower()
        if kind in FILTER_KINDS:
            integers = [k for k in ("clients", "adaptive") if k in SPECS[kind]]
            _, values = parse_spec(text, "defense", keys=tuple(SPECS[kind]), integers=integers)
            return UpdateFilter.parse(f"{kind}:" + ",".join(f"{k}={v!r}" for k, v in values.items()))
        if kind not in KINDS or kind == "none":
            raise FedleakError(f"unknown defense {kind!r} in {text!r}; allowed: {', '.join(KINDS + FILTER_KINDS)}")
        if kind == "dp-sgd":
            _, values = parse_spec(text, "defense", keys=("clip", "noise"), positional="noise",
                                   aliases={"sigma": "noise"})
            missing = [k for k in ("clip", "noise") if k not in values]
            if missing:
                raise FedleakError(f"defense {text!r} needs {' and '.join(k + '=' for k in missing)}: "
                                   "use e.g. 'dp-sgd:clip=1,noise=0.5' (noise=0: clipping only)")
            return cls(kind, values["noise"], values["clip"])
        _, values = parse_spec(text, "defense", keys=("scale", "clip"), positional="scale",
                               aliases={"sigma": "scale", "b": "scale", "p": "scale", "noise": "scale"})
        if "scale" not in values:
            raise FedleakError(f"defense {text!r} has no strength; use e.g. '{kind}:0.01'")
        return cls(kind, values["scale"], values.get("clip"))

    def to_text(self) -> str:
        """The spec :meth:`parse` reads back (``"none"``, ``"gaussian:0.01"``, ``"dp-sgd:clip=1,noise=0.5"``)."""
        if self.kind == "dp-sgd":
            return f"dp-sgd:clip={self.clip:g},noise={self.scale:g}"
        if not self.active:
            return "none"
        text = f"{self.kind}:{self.scale:g}"
        return text + (f",clip={self.clip:g}" if self.clip is not None else "")

    def with_strength(self, strength: float) -> "Defense":
        """The same defense at another strength (σ, b, p or DP-SGD's σ): what ``--sweep defense=`` varies."""
        return Defense(self.kind, float(strength), self.clip)

    def to_json(self) -> dict:
        return asdict(self)

    def apply(self, per_example: Params, generator: Optional[torch.Generator] = None) -> Params:
        """Perturb per-example gradients (leading dimension = examples)."""
        grads = per_example
        if self.clip is not None:
            grads = clip_per_example(grads, self.clip)
        if self.kind == "none" or self.scale == 0:
            return grads
        if self.kind == "dp-sgd":
            # B draws of N(0, σ²C²/B) per coordinate: their sum is Alg. 1's N(0, σ²C²) (module docstring)
            batch = next(iter(grads.values())).shape[0]
            std = self.scale * self.clip / batch ** 0.5
            return {name: g + std * _randn_like(g, generator) for name, g in grads.items()}
        out = {}
        for name, g in grads.items():
            if self.kind == "gaussian":
                out[name] = g + self.scale * _randn_like(g, generator)
            elif self.kind == "laplacian":
                out[name] = g + _laplace_like(g, self.scale, generator)
            else:
                keep = _rand_like(g, generator) >= self.scale
                out[name] = g * keep
        return out


def clip_per_example(per_example: Params, max_norm: float) -> Params:
    """Scale each example's gradient so its global L2 norm is at most ``max_norm``."""
    sq = sum(g.reshape(g.shape[0], -1).pow(2).sum(1) for g in per_example.values())
    factor = (max_norm / (sq.sqrt() + 1e-12)).clamp(max=1.0)
    return {k: g * factor.view(-1, *([1] * (g.dim() - 1))) for k, g in per_example.items()}


def _rand_like(t: torch.Tensor, generator) -> torch.Tensor:
    return torch.rand(t.shape, generator=generator, device=t.device, dtype=t.dtype)


def _randn_like(t: torch.Tensor, generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype)


def _laplace_like(t: torch.Tensor, scale: float, generator) -> torch.Tensor:
    # inverse CDF of Laplace(0, b): -b·sign(u)·log(1 − 2|u|), u ~ U(−½, ½)
    u = _rand_like(t, generator) - 0.5
    return -scale * torch.sign(u) * torch.log1p(-2 * u.abs().clamp(max=0.5 - 1e-7))
