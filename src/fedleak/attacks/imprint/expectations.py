"""Proposition 1 of Fowl et al. 2022 (App. A.1) and its relatives: how many inputs an imprint block recovers.

:func:`expected_recovered` is the exact expected number of inputs alone in their bin;
:func:`expected_recovered_paper` the formula as printed in App. A.1; :func:`one_shot_probability`
the success probability of the one-shot block (§4.2); :func:`simulate_recovered` a Monte Carlo
check (Fig. 1).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional, Sequence

import torch

from ...errors import FedleakError


def _check_n(n) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise FedleakError(f"the number of inputs n must be a positive integer, got {n!r}")
    return n


def _masses(masses) -> list[float]:
    values = [float(m) for m in masses]
    if not values or any(not (0.0 <= m <= 1.0) or not math.isfinite(m) for m in values) or sum(values) > 1 + 1e-9:
        raise FedleakError("bin masses must be probabilities in [0, 1] summing to at most 1")
    return values


def expected_recovered(n: int, k: Optional[int] = None, *, masses: Optional[Sequence[float]] = None) -> float:
    """Expected number of the n inputs that are alone in their bin (Proposition 1), exactly.

    Inputs are i.i.d. draws of the data distribution and bin j has probability mass pⱼ (the
    proposition's equal-mass bins: pⱼ = 1/k). Input t is recovered verbatim iff no other input
    shares its bin, so by linearity of expectation

        E[#recovered] = Σⱼ n · pⱼ · (1 − pⱼ)ⁿ⁻¹   ( = n·(1 − 1/k)ⁿ⁻¹ for k equal bins ),

    evaluated in exact rational arithmetic for equal bins. Bins whose masses sum to less than 1
    leave the rest of the distribution uncaptured (e.g. the one-shot block).

    The closed form printed in App. A.1 counts occupancy patterns ("stars and bars") as if all
    were equally likely, which i.i.d. inputs do not make them; it is
    :func:`expected_recovered_paper`, kept for comparison. This function is the expectation a
    simulation of i.i.d. inputs converges to (tests check both against their simulations).
    """
    n = _check_n(n)
    if masses is None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise FedleakError(f"the number of bins k must be a positive integer, got {k!r}")
        value = n * Fraction(k - 1, k) ** (n - 1)
        return float(value)
    if k is not None:
        raise FedleakError("give the number of bins k or their masses, not both")
    return float(sum(n * p * (1.0 - p) ** (n - 1) for p in _masses(masses)))


def expected_recovered_paper(n: int, k: int, *, residual: bool = True) -> float:
    """The formula of Proposition 1 as printed in App. A.1 (k > n > 2), in exact arithmetic.

    (1/C(k+n−1, k−1)) · Σ_{i=1}^{n−2} i·C(k, i)·Σ_{j=1}^{⌊(n−i)/2⌋} C(k−i, j)·C(n−i−j−1, j−1)
    + r(n, k),  r(n, k) = n·C(k, n)/C(k+n−1, k−1) − n/k.

    Without the last term (``residual=False`` drops only −n/k) it is the expected number of
    singly-occupied bins when every occupancy pattern of n indistinguishable inputs in k bins is
    equally likely (Bose–Einstein statistics), not under i.i.d. inputs; see
    :func:`expected_recovered`.
    """
    n = _check_n(n)
    if isinstance(k, bool) or not isinstance(k, int) or not k > n > 2:
        raise FedleakError(f"the printed formula needs integers k > n > 2, got n={n!r}, k={k!r}")
    total = 0
    for i in range(1, n - 1):
        inner = sum(math.comb(k - i, j) * math.comb(n - i - j - 1, j - 1) for j in range(1, (n - i) // 2 + 1))
        total += i * math.comb(k, i) * inner
    patterns = math.comb(k + n - 1, k - 1)
    value = Fraction(total, patterns) + Fraction(n * math.comb(k, n), patterns)
    if residual:
        value -= Fraction(n, k)
    return float(value)


def one_shot_probability(n: int, masses: Sequence[float]) -> float:
    """P(at least one of the given bins holds exactly one of n i.i.d. inputs) (§4.2, Fig. 1b).

    Inclusion–exclusion over subsets S of the bins: Σ_S (−1)^{|S|+1} · n!/(n−|S|)! · Π_{j∈S} pⱼ ·
    (1 − Σ_{j∈S} pⱼ)^{n−|S|}. For one bin of mass p this is n·p·(1−p)ⁿ⁻¹ (at most ≈ 1/e); two
    bins of mass 1/n each give ≈ 2/e − 1/e² ≈ 0.60.
    """
    n = _check_n(n)
    p = _masses(masses)
    if len(p) > 20:
        raise FedleakError("one_shot_probability takes at most 20 bins")
    total = 0.0
    for subset in range(1, 1 << len(p)):
        members = [p[j] for j in range(len(p)) if subset >> j & 1]
        size = len(members)
        if size > n:
            continue
        term = math.perm(n, size) * math.prod(members) * max(0.0, 1.0 - sum(members)) ** (n - size)
        total += term if size % 2 else -term
    return total


def simulate_recovered(n: int, masses: Sequence[float], trials: int = 1000, seed: int = 0) -> torch.Tensor:
    """Number of inputs alone in their bin in ``trials`` simulated batches of n i.i.d. inputs."""
    n = _check_n(n)
    p = torch.tensor(_masses(masses), dtype=torch.float64)
    rest = max(0.0, 1.0 - float(p.sum()))
    probs = torch.cat([p, torch.tensor([rest], dtype=torch.float64)])  # last: outside every bin
    generator = torch.Generator().manual_seed(seed)
    draws = torch.multinomial(probs.expand(trials, -1), n, replacement=True, generator=generator)
    counts = torch.zeros(trials, probs.numel(), dtype=torch.int64).scatter_add_(1, draws, torch.ones_like(draws))
    return (counts[:, :-1] == 1).sum(1)
