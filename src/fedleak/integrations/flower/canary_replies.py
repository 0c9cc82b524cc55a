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
