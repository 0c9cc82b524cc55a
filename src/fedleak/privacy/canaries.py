"""Canary clients: seeded random directions, streamed, never all held in memory.

Andrew et al. (ICLR 2024, §3): a canary client returns the same random direction every round instead
of a model update; for a random unit vector u in d dimensions, ⟨u, x⟩/‖x‖ of any vector x independent
of u is close to N(0, 1/d), which gives the closed-form null. Steinke et al.'s one-run game (NeurIPS
2023, Alg. 1) includes each canary independently with probability ½; the others are the "unseen" ones.

Canary j's direction is drawn from its own generator seeded from (seed, j), so any canary is rebuilt
on demand in O(d) memory and a block of canaries in O(block·d). Canaries come in two raw norms
before the DP clipping: C (Andrew et al.'s canary, at the clip norm) for every fourth one (j ≡ 0 mod 4)
and ``scale``·C for the others. Under working clipping both become norm C and score alike; where updates are
not clipped before the noise, the large ones stand out — which is how the audit tells missing
clipping from missing noise. Canary j is sent from client node ``j mod K`` (so a node whose
client-side DP is missing shows up as that node's canaries).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch

from ..errors import FedleakError

BLOCK = 64


@dataclass(frozen=True)
class Canaries:
    """``count`` canary clients in ``dim`` dimensions; ``included`` drawn with probability ½ from ``seed``."""

    count: int
    dim: int
    seed: int = 0
    scale: float = 10.0
    nodes: int = 1

    def __post_init__(self) -> None:
        if int(self.count) != self.count or self.count < 2:
            raise FedleakError(f"--canaries must be an integer ≥ 2, got {self.count!r}")
        if not (math.isfinite(self.scale) and self.scale >= 1):
            raise FedleakError(f"--canary-scale must be a finite number ≥ 1, got {self.scale!r}")

    @property
    def included(self) -> np.ndarray:
        """Which canaries take part (Steinke et al.: independent fair coins), as a bool array."""
        rng = np.random.default_rng(np.random.SeedSequence([int(self.seed), 0x5EED]))
        return rng.random(self.count) < 0.5

    def raw_norm(self, j: np.ndarray) -> np.ndarray:
        """Raw norm of canaries ``j`` in units of the clip norm C: 1 for j ≡ 0 (mod 4), ``scale`` otherwise."""
        return np.where(np.asarray(j) % 4 == 0, 1.0, self.scale)

    def node(self, j: np.ndarray) -> np.ndarray:
        return np.asarray(j) % max(1, self.nodes)

    def direction(self, j: int, dtype=torch.float32) -> torch.Tensor:
        """Canary ``j``'s unit direction (rebuilt from its own seed)."""
        g = torch.Generator().manual_seed(int(np.random.SeedSequence([int(self.seed), 1, int(j)]).generate_state(1)[0]))
        u = torch.randn(self.dim, generator=g, dtype=dtype)
        return u / u.norm()

    def blocks(self, block: int = BLOCK, dtype=torch.float32) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
        """(indices, unit directions as a block × d matrix), ``block`` canaries at a time."""
        for start in range(0, self.count, block):
            index = np.arange(start, min(start + block, self.count))
            yield index, torch.stack([self.direction(int(j), dtype) for j in index])
