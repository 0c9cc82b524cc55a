"""The per-node reply test of canary nodes: what a server without secure aggregation sees of each node's mod.

A canary node (:mod:`.canary_nodes`) runs a real node's own ClientApp mod chain on a canary update of raw norm
r·C along a direction u only it uses. Its reply's projection on u, divided by C, is 1 if the node's mod clipped it
and r if not (Flower's ``fixedclipping_mod`` / ``adaptiveclipping_mod``); with ``LocalDpMod`` the reply's
residual off u is the mod's Gaussian noise alone (McMahan et al. 2018 / Flower's local DP: clip, then add
N(0, s²) per coordinate), so its χ² tail tests the noise in force against the claim.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

#: the reply noise test flags a node whose replies carry less than this fraction of the claimed noise
NOISE_MARGIN = 0.9


def reply_test(projection: np.ndarray, replies: np.ndarray, included: np.ndarray, raw_norm: np.ndarray,
               node: np.ndarray, nodes: int, reply_noise: float, alpha: float = 0.01,
               residual: Optional[np.ndarray] = None, dim: int = 0) -> list:
    """Per real node, from its canary replies alone (what a server without secure aggregation sees):

    * clipping — the mean projection ⟨reply − θ_t, u⟩/C_t of its inserted large canaries against 1 (a clipped
      canary), one-sided z-test with the claimed per-reply noise s/C (0 for central DP: then any excess above float
      error, 1e-4, is the finding);
    * noise (``reply_noise`` > 0, LocalDpMod) — the replies' residual off the canary direction is the mod's noise
      alone: ‖residual‖²/(s/C)² is χ² with (d − 1) degrees of freedom per reply under the claim; its lower tail
      at :data:`NOISE_MARGIN`·s tests "materially less noise than claimed" and ``noise_ratio`` is the measured over
      the claimed standard deviation.

    Bonferroni over the nodes and the two tests."""
    from scipy.stats import chi2
    from scipy.stats import norm as normal

    out = []
    for k in range(nodes):
        sel = (node == k) & included & (replies > 0)
        large = sel & (raw_norm > 1)
        n = int(replies[large].sum())
        if not sel.any():
            continue
        row: dict = {"node": k, "canary_replies": int(replies[sel].sum())}
        p_clip = 1.0
        if n:
            mean = float(projection[large].sum() / n)
            sd = max(float(reply_noise), 1e-4) / math.sqrt(n)
            p_clip = float(normal.sf((mean - 1.0) / sd))
            row.update({"mean_projection": mean, "p_clipping": p_clip})
        p_noise = 1.0
        if reply_noise > 0 and residual is not None and dim > 1:
            dof = float(replies[sel].sum()) * (dim - 1)
            rss = float(residual[sel].sum())
            # a material deficit only: H0 "sd ≥ NOISE_MARGIN × the claim" (with millions of degrees of freedom a
            # χ² test against the claim itself flags a 0.1 % deficit, e.g. float32 rounding)
            p_noise = float(chi2.cdf(rss / (NOISE_MARGIN * reply_noise) ** 2, dof))
            row.update({"noise_ratio": math.sqrt(rss / dof) / reply_noise, "p_noise_low": p_noise})
        row["p_value"] = min(p_clip, p_noise)
        row["flagged"] = row["p_value"] < alpha / (2 * nodes)
        row["reasons"] = ([f"canaries come back unclipped (mean projection {row['mean_projection']:.3g}, 1 if "
                           "clipped)"] if p_clip < alpha / (2 * nodes) else []) + \
            ([f"reply noise {row['noise_ratio']:.2g}× the claimed"] if p_noise < alpha / (2 * nodes) else [])
        out.append(row)
    return out


#: the noise-scale test's probe directions: at most this many unseen canaries, and at most PROBE_FLOATS floats held
PROBES, PROBE_FLOATS = 128, 16_000_000


class NoiseProbe:
    """The noise-scale test from the released aggregates alone (issue 42): Gaussian noise N(0, s²I) on the aggregate
    A_t = θ_{t+1} − θ_t, projected on k fixed directions U (k × d) that no node ever sent (canaries left out by their
    coin), gives U·z_t ~ N(0, s²·UUᵀ); so q_t = (U A_t)ᵀ(UUᵀ)⁻¹(U A_t)/s_t² is χ²(k) whatever the directions'
    angles (Gram-whitened, not assumed orthogonal). The real updates x_t (clipped replies, the inserted canaries)
    are independent of z_t and of U (seeded, never sent): U A_t ~ N(U x_t, s²·UUᵀ), a non-central χ² that is
    stochastically larger, and Σₜ q_t dominates χ²(T·k) (sequentially, given the past): a lower tail below the
    claimed s is a valid one-sided test that needs no assumption about the clients.

    ``directions``: the probes (rows), fixed before the run (the first unseen canaries)."""

    def __init__(self, directions: np.ndarray) -> None:
        self.u = np.asarray(directions, np.float32)
        gram = (self.u.astype(np.float64) @ self.u.T.astype(np.float64)) if self.u.size else np.zeros((0, 0))
        self.chol = np.linalg.cholesky(gram) if len(gram) else gram
        self.quadratic: list = []  # q_t·s_t²: (U A_t)ᵀ(UUᵀ)⁻¹(U A_t), one per round

    @staticmethod
    def choose(unseen: np.ndarray, dim: int) -> np.ndarray:
        """The probe canaries, pre-registered: the first unseen ones, up to :data:`PROBES`, ≤ d/2 and
        :data:`PROBE_FLOATS`/d of them (memory)."""
        k = max(0, min(PROBES, dim // 2, PROBE_FLOATS // max(dim, 1), unseen.size))
        return np.sort(unseen)[:k]

    def add(self, step: np.ndarray) -> None:
        if not len(self.chol):
            return
        from scipy.linalg import solve_triangular

        w = solve_triangular(self.chol, (self.u @ step.astype(np.float32)).astype(np.float64), lower=True)
        self.quadratic.append(float(w @ w))

    @staticmethod
    def typical_p(factor: float, dof: int, margin: float = NOISE_MARGIN) -> float:
        """The test's p in a typical run (statistic at its mean) with the noise at ``factor`` × the claim and the real
        updates' share negligible: for :func:`fedleak.privacy.verdict.smallest_noise_fault`."""
        from scipy.stats import chi2

        return float(chi2.cdf(dof * factor ** 2 / margin ** 2, dof)) if dof > 0 else 1.0

    def test(self, claimed_sd: list, alpha: float = 0.01, margin: float = NOISE_MARGIN) -> dict:
        """``claimed_sd``: the claimed per-coordinate noise sd s_t of each round's aggregate. H0 "the noise in force is
        ≥ ``margin`` × the claim" (a material deficit, as :func:`reply_test`): p = P(χ²(T·k) ≤ Σₜ q_t / margin²)."""
        from scipy.stats import chi2

        k, rounds = len(self.chol), min(len(self.quadratic), len(claimed_sd))
        dof = k * rounds
        if dof == 0:
            return {"probes": k, "rounds": rounds, "dof": 0, "p_value": 1.0, "flagged": False, "noise_ratio": None}
        stat = sum(q / float(s) ** 2 for q, s in zip(self.quadratic, claimed_sd))
        p = float(chi2.cdf(stat / margin ** 2, dof))
        return {"probes": k, "rounds": rounds, "dof": dof, "statistic": stat, "noise_ratio": math.sqrt(stat / dof),
                "margin": margin, "p_value": p, "flagged": p < alpha, "alpha": alpha,
                "test": "χ² lower tail of the released aggregates projected on unseen canaries' directions "
                        "(Gram-whitened) against the claimed noise sd × margin; real updates can only add variance"}
