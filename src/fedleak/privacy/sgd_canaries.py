"""Gradient canaries inside a DP-SGD client: Dirac canaries streamed from a seed, inserted into the real step.

Steinke, Nasr, Jagielski, "Privacy Auditing with One (1) Training Run" (NeurIPS 2023), §7 white-box
auditing: instead of canary *examples*, the auditor inserts canary *gradients*; the strongest are Dirac
canaries, zero everywhere but one coordinate. Canary j is the gradient ``raw_j·e_{c_j}`` on coordinate c_j
(m distinct coordinates drawn without replacement from the model's d from the seed), each canary included
in the run independently with probability ½ (Alg. 1). A canary costs one integer; none is ever built as a
d-vector, so m is limited only by m ≤ d.

Like real examples under Poisson subsampling (the accountants' assumption, Abadi et al. 2016 §3.1;
Opacus), every included canary joins each step's batch independently with probability q as one more
per-example gradient row (raw norm C for every fourth canary, ``scale``·C for the others) and goes through the
client's own DP-SGD defense with the examples: its per-example clipping (under working clipping all reach norm
C; where clipping is missing the large ones stand out, which tells a clipping fault from a noise fault) and its
Gaussian noise N(0, σ²C²) on the sum. :class:`CanaryStep` does this around the client's own DP-SGD defense
(:class:`fedleak.fl.defenses.Defense` ``dp-sgd``: nothing here clips a canary) inside fedleak's one local
training loop (:func:`fedleak.fl.client.local_training`).

White-box observation (Steinke et al. §7; all-iterates): the auditor sees every iterate θ_t and knows the
training data and the batch order (both independent of the canary coins), so it can subtract the real
examples' clipped gradient sum S_t at θ_t from the observed noisy sum B_t·(θ_t − θ_{t+1})/η; what is left on
coordinate c_j is the canary's contribution plus N(0, σ²C²). :attr:`CanaryStep.known_sums` records S_t on
the canary coordinates at each step (what that auditor computes); the observation itself is read from the
iterates by :mod:`.sgd_audit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import FedleakError
from ..fl.defenses import Defense, clip_per_example


@dataclass(frozen=True)
class DiracCanaries:
    """m Dirac gradient canaries on distinct coordinates of a d-parameter model, coins and coordinates from ``seed``."""

    count: int
    dim: int
    seed: int = 0
    scale: float = 10.0

    def __post_init__(self) -> None:
        if int(self.count) != self.count or self.count < 2:
            raise FedleakError(f"--canaries must be an integer ≥ 2, got {self.count!r}")
        if self.count > self.dim:
            raise FedleakError(f"--canaries {self.count} exceeds the model's {self.dim} parameters (a Dirac canary "
                               "needs a coordinate of its own)")
        if not (math.isfinite(self.scale) and self.scale >= 1):
            raise FedleakError(f"--canary-scale must be a finite number ≥ 1, got {self.scale!r}")

    @property
    def included(self) -> np.ndarray:
        """Steinke et al. Alg. 1: independent fair coins (bool array of m)."""
        rng = np.random.default_rng(np.random.SeedSequence([int(self.seed), 0x5EED]))
        return rng.random(self.count) < 0.5

    @property
    def coordinates(self) -> np.ndarray:
        """Canary j's coordinate c_j in the flattened parameters (distinct, drawn from the seed)."""
        rng = np.random.default_rng(np.random.SeedSequence([int(self.seed), 0xD1AC]))
        return rng.choice(self.dim, size=self.count, replace=False)

    def raw_norm(self, j=None) -> np.ndarray:
        """Raw norm in clip norms C: 1 for j ≡ 0 (mod 4), ``scale`` otherwise."""
        j = np.arange(self.count) if j is None else np.asarray(j)
        return np.where(j % 4 == 0, 1.0, self.scale)


class CanaryStep:
    """The client's DP-SGD step with the canaries of this step added (a drop-in for the ``defense`` of
    :func:`fedleak.fl.client.local_training`, which calls :meth:`apply` on the per-example gradients).

    ``inner`` is the DP-SGD the client *actually* runs (the claim, or a faulty version of it);
    ``claimed_clip`` the C the auditor believes in (for the known sums). Each step draws, for every included
    canary, a coin with probability ``sample_rate`` (Poisson subsampling) from its own seeded generator.
    """

    active = True

    def __init__(self, inner: Defense, canaries: DiracCanaries, claimed_clip: float, sample_rate: float,
                 names_shapes: list, seed: int = 0) -> None:
        self.inner, self.canaries, self.claimed_clip, self.q = inner, canaries, float(claimed_clip), float(sample_rate)
        self._included = canaries.included
        coords = canaries.coordinates
        # the raw canary gradient, never pre-clipped: the defense's own per-example clipping decides (apply)
        self._value = torch.as_tensor(canaries.raw_norm() * self.claimed_clip, dtype=torch.float32)
        self._shapes = dict(names_shapes)
        # the canary coordinates per parameter tensor: (name, positions in the canary list, flat index in the tensor)
        self._where, start = [], 0
        for name, numel in names_shapes:
            sel = np.nonzero((coords >= start) & (coords < start + numel))[0]
            if sel.size:
                self._where.append((name, torch.as_tensor(sel), torch.as_tensor(coords[sel] - start)))
            start += numel
        self._rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xC0A1]))
        self.known_sums: list[np.ndarray] = []
        self.batch_sizes: list[int] = []
        self.sampled: list[int] = []

    def to_json(self) -> dict:
        return self.inner.to_json()

    def gather(self, per_example_sum: dict) -> np.ndarray:
        """The values of a parameter-shaped dict on the m canary coordinates (float64, canary order)."""
        out = np.zeros(self.canaries.count)
        for name, sel, idx in self._where:
            out[sel.numpy()] = per_example_sum[name].reshape(-1)[idx].double().numpy()
        return out

    def apply(self, per_example: dict, generator=None) -> dict:
        """The real DP-SGD (``inner``: clip each example, add noise) on the examples and this step's canaries, each
        sampled canary one more example row: the defense's own per-example clipping and noise act on it."""
        known = clip_per_example(per_example, self.claimed_clip)
        self.known_sums.append(self.gather({k: g.sum(0) for k, g in known.items()}))
        batch = next(iter(per_example.values())).shape[0]
        take = np.flatnonzero(self._included & (self._rng.random(self.canaries.count) < self.q))
        self.sampled.append(int(take.size))
        self.batch_sizes.append(int(batch + take.size))  # the batch mean divides by examples + canary rows
        rows = {name: torch.zeros((take.size, g[0].numel()), dtype=g.dtype, device=g.device)
                for name, g in per_example.items()}
        position = np.full(self.canaries.count, -1)
        position[take] = np.arange(take.size)
        for name, sel, idx in self._where:
            r = position[sel.numpy()]
            keep = r >= 0
            rows[name][torch.as_tensor(r[keep]), idx[torch.as_tensor(keep)]] = \
                self._value[sel[torch.as_tensor(keep)]].to(rows[name].dtype)
        joined = {name: torch.cat([g, rows[name].reshape(take.size, *g.shape[1:])], 0) for name, g in per_example.items()}
        return dict(self.inner.apply(joined, generator))
