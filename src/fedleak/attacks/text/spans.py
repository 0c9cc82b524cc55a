"""Gradient row/column spans and the data-chosen tolerances of DAGER (Petrov et al., NeurIPS 2024, §3–4).

For a linear layer Y = X W fed by the token representations X (one row per token), ∇W = Xᵀ ∇Y, so
the input rows lie in the column space of ∇W whenever fewer distinct rows than the layer width
enter the step (DAGER Lemma 3.1 / Thm. 3.2). DAGER fixes the rank tolerance and the span-distance
threshold by hand; here both come from the data:

* :func:`gap_rank` — the numerical rank is where the singular values drop most (largest ratio
  σᵢ/σᵢ₊₁, the float noise floor σ₁·max(m, n)·ε appended so that a full-rank matrix has its gap at
  the end);
* :func:`gap_threshold` — candidate distances split at the largest gap of their logarithms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import torch


#: with a known noise level, the least ratio σ_r/σ_{r+1} that counts as the edge of the data's span
NOISE_GAP = 4.0
#: a drop of the singular values at least this steep, after the largest one and still below σ₁·√ε, is where the
#: span's weakest true directions end (float32 rounding's own values differ by a few percent from one to the next)
SIGNIFICANT_GAP = 10.0
#: coordinates a first LoRA round's dropout may have zeroed that the adapter-space test forgives (Span._dropped_distance)
DROPS = 3


def gap_rank(singular: torch.Tensor, shape: Sequence[int], eps: Optional[float] = None,
             noise: float = 0.0) -> tuple[int, float]:
    """(rank, gap) of a matrix of ``shape`` from its singular values (descending).

    The rank is the index of the largest ratio σᵢ/σᵢ₊₁ over the values followed by the floor
    σ₁·max(shape)·ε (ε of float32, the precision the client computed its gradient in), among the
    splits whose lower side σᵢ₊₁ lies below σ₁·√ε — where float32 rounding, not data, dominates (a
    steep drop among large values, e.g. one dominant direction, is not a rank); ``gap`` is that ratio
    (1 when there is nothing above the floor).

    ``noise`` (≥ 0): the singular-value level of a known noise in the matrix — the float32 rounding of the
    weights a FedAvg client sends (:func:`rounding_noise`), which the pseudo-gradient (θˢ − θᶜ)/η divides by
    a small η. It raises the floor and the level a gap's lower side may reach to twice that level, and a
    ratio below :data:`NOISE_GAP` is then no gap (full rank: the noise fills the span).
    """
    s = singular.detach().double().clamp_min(0)
    if s.numel() == 0 or float(s[0]) == 0.0:
        return 0, 1.0
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    floor = max(float(s[0]) * max(shape) * eps, float(noise))
    # exact zeros are clamped at σ₁·ε/10, about where float32 rounding itself lies (so a structural zero below the
    # rounding makes no edge of its own), not at the conservative floor: a long span's true tail (a 512-token
    # sequence's 512 inputs on SmolLM2: σ₅₁₂ ≈ 8e-8·σ₁, the rounding 1.5e-8·σ₁) lies below σ₁·max(shape)·ε, and
    # clamping there flattened its edge into the noise (rank 496 found, the recovery failed at position 1)
    values = torch.cat([s, s.new_tensor([floor])]).clamp_min(min(floor, float(s[0]) * eps) * 0.1)
    ratios = values[:-1] / values[1:]
    low = max(float(s[0]) * math.sqrt(eps), 2.0 * float(noise))
    ratios = torch.where(values[1:] <= low, ratios, torch.zeros_like(ratios))
    best = int(torch.argmax(ratios))
    if noise > 0 and float(ratios[best]) < NOISE_GAP:  # a step within the noise is no edge of a span
        return s.numel(), float(ratios[best])
    # the edge into the rounding floor is the last clear drop, not always the largest: a token seen at one
    # position only (a sequence's last) gives a weak direction below the others (SmolLM2 16 × 16: σ₁₇₂ = 7e-7·σ₁
    # after a drop of 107 at 171, then 57 more down to the floor at 1.3e-8), and the largest drop cut it off
    later = torch.nonzero(ratios[best + 1:] >= SIGNIFICANT_GAP).flatten()
    if later.numel():
        best = best + 1 + int(later[-1])
    return best + 1, float(ratios[best])


def gap_threshold(distances: torch.Tensor, anchors: Sequence[float] = (), at_least: int = 0,
                  at_most: Optional[int] = None, weak: bool = False) -> float:
    """The threshold at the largest gap of log distances (with optional anchor values from earlier steps).

    Returns the geometric mean of the two values around the gap; +inf for fewer than two values.
    ``at_least``: only gaps that leave at least that many values below (under dropout the span's rank, the
    number of distinct inputs, bounds the candidates from below while their distances are spread out);
    ``at_most``: only gaps that leave at most that many below. ``weak``: a later gap at least half as wide
    (in log) and at least :data:`SIGNIFICANT_GAP` is taken instead — a true input along one of the span's weak
    directions (a token seen at one position only) is measured less precisely, so its distance sits between
    the other true ones and the false ones (SmolLM2 16 × 16: 1.4e-5, then 2.7e-3, then 0.11).
    """
    values = torch.cat([distances.detach().double().reshape(-1),
                        torch.tensor(list(anchors), dtype=torch.float64)]).clamp_min(1e-30)
    if values.numel() < 2:
        return math.inf
    logs = values.log().sort().values
    gaps = logs[1:] - logs[:-1]
    if at_least > 1:
        gaps[:min(at_least - 1, gaps.numel() - 1)] = -math.inf
    if at_most is not None and at_most < gaps.numel():
        gaps[max(at_most, at_least, 1):] = -math.inf
    i = int(torch.argmax(gaps))
    if weak:
        wide = max(float(gaps[i]) / 2, math.log(SIGNIFICANT_GAP))
        later = torch.nonzero(gaps[i + 1:] >= wide).flatten()
        if later.numel():
            i = i + 1 + int(later[-1])
    return float(((logs[i] + logs[i + 1]) / 2).exp())


@dataclass
class Span:
    """An orthonormal basis of a gradient's input span and the relative distance of vectors to it.

    ``transform`` (optional, (k, d)) maps a d-dimensional layer input into the space the span
    lives in (a LoRA adapter's A, DAGER §5.3): the tested vector is ``transform @ x``.
    """

    basis: torch.Tensor  # (k, r), orthonormal columns
    complement: torch.Tensor  # (k, k - r)
    rank: int
    width: int
    gap: float
    singular: torch.Tensor
    transform: Optional[torch.Tensor] = None
    name: str = ""
    #: the most directions the gradient can hold whatever the inputs (a LoRA A's gradient BᵀG·Xᵀ: the rank r)
    cap: Optional[int] = None
    #: > 0 when the span holds dropout-masked copies x⊙m/(1−p) of the tested inputs at this rate p (a dropout
    #: right before the layer, measured by :func:`~.probes.mark_masked_inputs`): :meth:`masked_distance` applies
    mask_rate: float = 0.0

    @classmethod
    def from_matrix(cls, matrix: torch.Tensor, name: str = "", transform: Optional[torch.Tensor] = None,
                    rank: Optional[int] = None, cap: Optional[int] = None, noise: float = 0.0) -> "Span":
        """The span of the columns of ``matrix`` (k × m), rank from :func:`gap_rank` unless given; ``cap``
        bounds the width (the span is proper only below it); ``noise``: the std of a known noise per entry
        (:func:`rounding_noise`)."""
        m = matrix.detach().double()
        u, s, _ = torch.linalg.svd(m, full_matrices=True)
        level = noise * (math.sqrt(m.shape[0]) + math.sqrt(m.shape[1]))  # iid noise's largest singular value
        r, gap = gap_rank(s, tuple(m.shape), noise=level)
        if rank is not None:
            r = rank
        width = m.shape[0] if cap is None else min(m.shape[0], cap)
        return cls(u[:, :r].contiguous(), u[:, r:].contiguous(), r, width, gap, s, transform, name, cap)

    @property
    def proper(self) -> bool:
        """Whether the span is a proper subspace (a span test can reject anything)."""
        return 0 < self.rank < self.width

    def distance(self, x: torch.Tensor, fast: bool = False) -> torch.Tensor:
        """Relative distance ‖x − ΠU x‖ / ‖x‖ of each row of ``x`` (…, d) to the span.

        ``fast``: in float32 (the vocabulary screen; in-span rows stay near 1e-6, outside rows ≫ 1e-3),
        else in float64.
        """
        dtype = torch.float32 if fast else self.basis.dtype
        x = x.to(dtype)
        if self.transform is not None and self.mask_rate > 0:  # LoRA dropout before a first round's A
            return self._dropped_distance(x, dtype)
        if self.transform is not None:
            x = x @ self.transform.to(dtype).T
        norm = x.norm(dim=-1)
        zero = norm <= 1e-12 * float(norm.detach().max().clamp_min(1e-30)) if norm.numel() else norm.bool()
        norm = norm.clamp_min(1e-30)
        if self.complement.shape[1] <= self.basis.shape[1]:
            residual = (x @ self.complement.to(dtype)).norm(dim=-1)
        else:
            basis = self.basis.to(dtype)
            residual = (x - (x @ basis) @ basis.T).norm(dim=-1)
        # a zero input (a zeroed padding embedding) carries no token: never "in" the span
        return torch.where(zero, torch.ones_like(norm), residual / norm)

    def _dropped_distance(self, x: torch.Tensor, dtype, drops: int = DROPS) -> torch.Tensor:
        """The distance of A·x to the span when up to ``drops`` coordinates of x may have been dropped first.

        In a first LoRA round the span lives in A's r dimensions and holds A·x̃, x̃ = x⊙m/(1−p): r coordinates
        cannot pin down a d-dimensional mask, so no exact test exists. What moves A·x̃ far from A·x is the drop
        of one of x's few large coordinates (a pretrained decoder's outlier channels, measured on SmolLM2: a
        true token ranked 556th of the vocabulary is 32nd once they may be dropped). Greedy: with ρ = CᵀA·y
        (C the complement), dropping coordinate i gives ‖ρ − yᵢMᵢ‖², M = CᵀA; the best ``drops`` are taken
        in turn. A wrong token gains as much per drop as a true one only by chance; the bound keeps it small
        (measured on SmolLM2 LoRA r 32, 1 × 16: ROUGE-1 0.76/0.82 with 2, 0.90/0.89 with 3 and 6, 0.32/0.96
        with 12). A zero input (a zeroed padding embedding) is never in the span.
        """
        a = self.transform.to(dtype)
        m = self.complement.to(dtype).T @ a  # (k − r, d)
        y = x.to(dtype)
        norm = (y @ a.T).norm(dim=-1)
        zero = norm <= 1e-12 * float(norm.detach().max().clamp_min(1e-30)) if norm.numel() else norm.bool()
        norm = norm.clamp_min(1e-30)
        rho = y @ m.T
        col = (m * m).sum(0)
        for _ in range(drops):
            gain = -2 * y * (rho @ m) + y * y * col  # change of ‖ρ‖² per dropped coordinate
            best = gain.argmin(-1, keepdim=True)
            better = gain.gather(-1, best) < 0
            step = torch.where(better, y.gather(-1, best), torch.zeros_like(norm.unsqueeze(-1)))
            rho = rho - step * m.T[best.squeeze(-1)]
            y = y.scatter(-1, best, torch.where(better, torch.zeros_like(step), y.gather(-1, best)))
        return torch.where(zero, torch.ones_like(norm), rho.norm(dim=-1) / norm)  # a zero input: never in

    def masked_distance(self, x: torch.Tensor) -> torch.Tensor:
        """Relative distance of each row of ``x`` (…, d) to the span when a dropout mask may have zeroed any
        coordinates first (:func:`masked_fit`); the plain :meth:`distance` for a span without ``mask_rate``."""
        if self.mask_rate <= 0 or self.transform is not None:
            return self.distance(x)
        return masked_fit(x, self.basis, self.mask_rate)[0]

    def with_rank(self, rank: int) -> "Span":
        """The same singular vectors split at ``rank`` (a rank known from N and L when noise hides the gap)."""
        u = torch.cat([self.basis, self.complement], dim=1)
        rank = max(1, min(int(rank), u.shape[1] - 1))
        return Span(u[:, :rank].contiguous(), u[:, rank:].contiguous(), rank, self.width, self.gap, self.singular,
                    self.transform, self.name, self.cap, self.mask_rate)

    def describe(self) -> dict:
        return {"name": self.name, "rank": self.rank, "width": self.width, "gap": self.gap}


def masked_fit(x: torch.Tensor, basis: torch.Tensor, rate: float, sweeps: int = 40, slack: float = 6.0,
               restarts: int = 4, floor: float = 1e-5, seed: int = 0,
               pursuit: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Whether a masked copy of each row of ``x`` lies in the span of ``basis``: (relative residual, dropped mask).

    A client that trains with dropout right before a linear layer feeds it x̃ = x⊙m/(1−p), m ∈ {0, 1}ᵈ, so the
    gradient's span holds x̃, not x (DAGER's test fails; GRAB, CCS '25, optimizes the masks jointly with the
    tokens). The scale is absorbed by the span, so the test is: is there a set D of coordinates such that x
    with D zeroed lies in the span — min over c, D of ‖Uc − x⊙(1−1_D)‖. Exact for a true input (residual at the
    float floor, the mask recovered) while ≈ p·d coordinates are dropped and the kept ones outnumber the span's
    rank; a wrong token keeps a residual of order 0.1 since d − |D| equations cannot be met by rank-many
    coefficients.

    Solved by alternating minimization: project y (x with D zeroed) onto the span, v = UUᵀy; a coordinate
    is dropped when v is nearer 0 than x there (the largest first, their number grown over the first sweeps up
    to the bound below); then single-coordinate flips with the exact change of the squared residual,
    Δ = 2δrᵢ + δ²(1 − Pᵢᵢ) for adding δ at coordinate i, while one lowers it. Rows still above ``floor`` are
    searched again from the drop set matching pursuit selects (``pursuit``, :func:`_pursuit`: sparse recovery of
    D, which the flips' own starts miss when a token's masked copies are several or its drop count is high), then
    from ``restarts`` seeded random drop sets of rate p. Measured on the 128 true inputs of one MiniLM 4 × 32
    batch (``tests/test_text_dropout.py``): 127 found with the pursuit and 4 restarts, 124 with 16 restarts and
    no pursuit, 120 with 4 (:func:`~.partition.repair` recovers what the test still misses). |D| never
    exceeds p·d + ``slack``·√(d·p(1−p)) (a wrong token with every coordinate free could be zeroed into the span).
    """
    u = basis.double()
    x = x.detach().double()
    d = x.shape[-1]
    bound = int(rate * d + slack * math.sqrt(d * rate * (1 - rate))) + 1
    drop = torch.zeros_like(x, dtype=torch.bool)
    grow = max(1, sweeps // 4)
    for sweep in range(sweeps):
        y = torch.where(drop, torch.zeros_like(x), x)
        v = (y @ u) @ u.T
        score = (x - v).abs() - v.abs()  # > 0: the span's value is nearer 0 than x
        k = min(d, bound, max(1, bound * (sweep + 1) // grow))
        top = score.topk(k, dim=-1)
        drop = torch.zeros_like(drop).scatter(-1, top.indices, top.values > 0)
    residual, drop = _flip(x, u, drop, bound)
    if pursuit:
        stuck = residual > floor
        if bool(stuck.any()):
            res, dr = _flip(x[stuck], u, _pursuit(x[stuck], u, bound), bound)
            better = res < residual[stuck]
            idx = stuck.nonzero(as_tuple=True)
            residual[idx] = torch.where(better, res, residual[stuck])
            drop[idx] = torch.where(better.unsqueeze(-1), dr, drop[stuck])
    gen = torch.Generator().manual_seed(seed)
    for _ in range(restarts):
        stuck = residual > floor
        if not bool(stuck.any()):
            break
        xs = x[stuck]
        start = torch.rand(xs.shape, generator=gen).to(xs.device) < rate
        res, dr = _flip(xs, u, start, bound)
        better = res < residual[stuck]
        idx = stuck.nonzero(as_tuple=True)
        residual[idx] = torch.where(better, res, residual[stuck])
        drop[idx] = torch.where(better.unsqueeze(-1), dr, drop[stuck])
    return residual, drop


def _pursuit(x: torch.Tensor, u: torch.Tensor, bound: int, floor: float = 1e-5) -> torch.Tensor:
    """A drop set for each row of ``x`` (K, d) by orthogonal matching pursuit (Pati et al. 1993) on the relaxed
    problem min ‖P⊥(x − Σ_{i∈D} wᵢeᵢ)‖ with free wᵢ: each step adds the coordinate of the largest normalized
    residual |rᵢ|/√P⊥ᵢᵢ and refits w on D by least squares; the set with the least residual (at most ``bound``
    coordinates) is returned. A sparse-recovery start for :func:`_flip`: it finds drop sets the coordinate
    search misses from its own starts (measured on MiniLM 4 × 32: 5 of the 6 true inputs the flips left stuck)."""
    d = x.shape[-1]
    pperp = torch.eye(d, dtype=u.dtype, device=u.device) - u @ u.T
    scale = pperp.diagonal().clamp_min(1e-6).sqrt()
    px = x @ pperp
    xx = (x * px).sum(-1)
    norm = x.norm(dim=-1).clamp_min(1e-30)
    chosen = torch.zeros(x.shape[0], 0, dtype=torch.long, device=x.device)
    res, best = px, (xx.clamp_min(0).sqrt() / norm)
    best_size = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    for t in range(1, bound + 1):
        score = (res.abs() / scale).scatter(1, chosen, -1.0) if t > 1 else res.abs() / scale
        chosen = torch.cat([chosen, score.argmax(1, keepdim=True)], 1)
        gram = pperp[chosen.unsqueeze(-1), chosen.unsqueeze(-2)]
        rhs = px.gather(1, chosen)
        w = torch.linalg.solve(gram + 1e-6 * torch.eye(t, dtype=gram.dtype, device=gram.device), rhs)
        res = px - torch.zeros_like(px).scatter(1, chosen, w) @ pperp  # P⊥ symmetric: a dense product, no gather
        rel = res.norm(dim=-1) / norm  # ‖P⊥(x − Σ wᵢeᵢ)‖: no cancellation in float32
        improved = rel < best
        best = torch.where(improved, rel, best)
        best_size = torch.where(improved, t, best_size)
        if bool((best < floor).all()):
            break
    keep = torch.arange(chosen.shape[1], device=x.device).unsqueeze(0) < best_size.unsqueeze(1)
    return torch.zeros_like(x, dtype=torch.bool).scatter(1, chosen, keep)


def _flip(x: torch.Tensor, u: torch.Tensor, drop: torch.Tensor, bound: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy single-coordinate flips of the drop set while one lowers the squared residual (see masked_fit).

    The residual r = P⊥y (P⊥ = I − UUᵀ) is kept up to date: flipping coordinate i by δ adds δ·P⊥[:, i], one row
    of P⊥ per candidate instead of a projection onto the span (measured on MiniLM 4 × 32: the search's cost
    fell from 35 to a few CPU-s), and is recomputed exactly at the end."""
    shape = x.shape
    x, drop = x.reshape(-1, shape[-1]), drop.reshape(-1, shape[-1])
    pperp = torch.eye(u.shape[0], dtype=u.dtype, device=u.device) - u @ u.T
    diag = pperp.diagonal()
    final = drop.clone()
    rows = torch.arange(x.shape[0], device=x.device)  # the rows still improving (a row without a better flip is
    xa, da = x, drop  # at its own local minimum for good: the others never change it)
    norm2 = (xa * xa).sum(-1, keepdim=True)
    r = torch.where(da, torch.zeros_like(xa), xa) @ pperp
    count = da.sum(-1, keepdim=True)
    for _ in range(2 * bound + 16):
        delta = torch.where(da, xa, -xa)  # flip: a dropped coordinate back to x, a kept one to 0
        gain = 2 * delta * r + delta * delta * diag
        gain = torch.where((count >= bound) & ~da, torch.full_like(gain, math.inf), gain)
        best = gain.argmin(-1, keepdim=True)
        better = gain.gather(-1, best) < -1e-12 * norm2
        if not bool(better.all()):  # settled rows leave the loop
            final[rows[~better.squeeze(-1)]] = da[~better.squeeze(-1)]
            keep = better.squeeze(-1)
            rows, xa, da, r, count, norm2, best, delta = (t[keep] for t in (rows, xa, da, r, count, norm2, best, delta))
            if rows.numel() == 0:
                break
        step = delta.gather(-1, best)
        r = r + step * pperp[best.squeeze(-1)]
        count = count + torch.where(da.gather(-1, best), -1, 1)
        da = da ^ torch.zeros_like(da).scatter(-1, best, True)
    final[rows] = da
    drop = final
    y = torch.where(drop, torch.zeros_like(x), x)
    residual = (y - (y @ u) @ u.T).norm(dim=-1) / x.norm(dim=-1).clamp_min(1e-30)
    return residual.reshape(shape[:-1]), drop.reshape(shape)


def max_distance(spans: Sequence[Span], x: torch.Tensor) -> torch.Tensor:
    """The largest distance over several spans (a vector must lie in each of them)."""
    out = None
    for span in spans:
        d = span.distance(x)
        out = d if out is None else torch.maximum(out, d)
    return out


def effective_width(span: Span, inputs: torch.Tensor) -> int:
    """The dimension the layer's inputs can reach, from ``inputs`` (…, d) of random tokens.

    A LayerNorm without bias feeds centred vectors (rank ≤ d − 1), a LoRA A maps into r dimensions:
    a span is proper only below this width, not below d; a LoRA A's own gradient holds at most r
    directions (``span.cap``). Sets and returns ``span.width``.
    """
    x = inputs.reshape(-1, inputs.shape[-1]).double()
    if span.transform is not None:
        x = x @ span.transform.double().T
    s = torch.linalg.svdvals(x)
    span.width = gap_rank(s, tuple(x.shape))[0]
    if span.cap is not None:
        span.width = min(span.width, span.cap)
    return span.width


def rounding_noise(server: torch.Tensor, client: torch.Tensor, lr: float, steps: int = 1) -> float:
    """The std per entry of the float32 rounding in a FedAvg pseudo-gradient (θˢ − θᶜ)/η of one tensor.

    Every local step rounds the weights to float32: an error uniform within half a unit in the last place
    (std ulp/√12), summed over the steps, divided by η. Zero where both are exactly representable deltas
    from zero (PEFT's B = 0 in round 1: θᶜ = −η·g is itself the float32 value sent, exact at any lr).
    """
    c = client.detach().float()
    ulp = (torch.nextafter(c.abs(), torch.full_like(c, math.inf)) - c.abs())
    ulp = torch.where(server.detach() == 0, torch.zeros_like(ulp), ulp)  # from zero: θᶜ is the value itself
    rms = float(ulp.double().pow(2).mean().sqrt()) if ulp.numel() else 0.0
    return rms / math.sqrt(12) * math.sqrt(max(1, steps)) / max(float(lr), 1e-30)
