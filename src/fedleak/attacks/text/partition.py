"""Encoder sequences as a partition of the per-position tokens (DAGER §4.3, its maxBᴸ enumeration replaced).

When the first span's test is exact, position p's candidates are exactly the distinct tokens the N sequences
hold there (1 ≤ c_p ≤ N): every sequence takes one of them and every one of them is taken. DAGER enumerates
all combinations; :func:`~.search.search_encoder` picks each slot's token freely, so two slots can settle on
the same sequence. Here the constraint is kept: block-coordinate descent over positions, where position p's
tokens are assigned to the N slots at once by an optimal assignment (Hungarian algorithm, SciPy's
``linear_sum_assignment``) on the cost "slot i's summed log distance to the second span with token c at p",
every token used at least once; restarted from seeded random assignments, the best total kept. Under dropout
the second span's test is statistical (its inputs mix masks the server cannot replay), the summed log
distance still ranks the true partition first on the cases measured (``benchmarks/bench_llm.py``).

:func:`repair` — where a position holds fewer candidates than sequences, either sequences share a token there
or the first test missed one (under dropout the masked-copy test can stay stuck on a true input: 1 of 128 on
MiniLM 4 × 32). Each slot then tries the position's next closest tokens (``wider``: by the first test, and by
its plain screen, where a stuck fit still ranks high) and keeps one only if the summed log distance of its
sequence falls, then swaps of adjacent tokens around such positions.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from scipy.optimize import linear_sum_assignment

Distances = Callable[[torch.Tensor], torch.Tensor]  # ids (B, T) -> distances (B, T) of the probe inputs


def summed_log(second: Distances, ids: torch.Tensor, chunk: int = 2048) -> torch.Tensor:
    """Per sequence of ``ids`` (B, L) its summed log distance to the second span (the score both searches climb)."""
    dist = torch.cat([second(ids[i:i + chunk]) for i in range(0, ids.shape[0], chunk)]).double()
    return dist.clamp_min(1e-30).log().sum(1)


def fits_partition(cands: list[torch.Tensor], num_sequences: int) -> bool:
    """Whether every position holds between 1 and N candidates (the exact first test's shape)."""
    return all(1 <= c.numel() <= num_sequences for c in cands)


def search_partition(second: Distances, cands: list[torch.Tensor], num_sequences: int, *, sweeps: int = 6,
                     restarts: int = 8, generator: torch.Generator | None = None, chunk: int = 2048,
                     stop: Callable[[torch.Tensor], bool] | None = None,
                     advance: Callable[[], None] | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The N sequences whose summed log distances are least, each position's candidates all used.

    ``stop(distances (N, L))`` (optional): ends the restarts early (every sequence verifies). ``advance()`` is
    called after every sweep. Returns (sequences (N, L), per-position distances (N, L), diagnostics).
    """
    n, length = num_sequences, len(cands)

    def score(ids):
        return torch.cat([second(ids[i:i + chunk]) for i in range(0, ids.shape[0], chunk)]).double()

    def start(shuffle: bool) -> torch.Tensor:
        cols = []
        for c in cands:
            col = c.repeat(-(-n // c.numel()))[:n]
            if shuffle:
                col = col[torch.randperm(n, generator=generator)]
            cols.append(col)
        return torch.stack(cols, 1)

    best, best_dist, best_total, tries = None, None, math.inf, 0
    for attempt in range(restarts + 1):
        seqs = start(attempt > 0)
        for _ in range(sweeps):
            changed = False
            for p in range(length):
                c = cands[p]
                if c.numel() == 1:
                    continue
                trial = seqs.repeat_interleave(c.numel(), 0)
                trial[:, p] = c.repeat(n)
                cost = summed_log(second, trial, chunk).view(n, c.numel())
                chosen = c[_assign(cost)]
                changed |= bool((chosen != seqs[:, p]).any())
                seqs[:, p] = chosen
            if advance is not None:
                advance()
            if not changed:
                break
        dist = score(seqs)
        total = float(dist.clamp_min(1e-30).log().sum())
        tries = attempt + 1
        if total < best_total:
            best, best_dist, best_total = seqs.clone(), dist, total
        if stop is not None and stop(best_dist):
            break
    return best, best_dist, {"restarts": tries - 1, "summed_log_distance": best_total, "search": "partition"}


def _assign(cost: torch.Tensor) -> torch.Tensor:
    """Per slot the column of ``cost`` (N slots × c tokens, c ≤ N) in a least-cost assignment that uses every
    token at least once: c "must" columns (one per token) and N − c "free" columns (each slot's cheapest)."""
    n, c = cost.shape
    free = cost.min(1)
    matrix = torch.cat([cost, free.values.unsqueeze(1).expand(n, n - c)], 1).numpy()
    rows, cols = linear_sum_assignment(matrix)
    out = torch.empty(n, dtype=torch.long)
    for r, col in zip(rows.tolist(), cols.tolist()):
        out[r] = col if col < c else int(free.indices[r])
    return out


def repair(second: Distances, seqs: torch.Tensor, cands: list[torch.Tensor], wider: list[torch.Tensor],
           rounds: int = 3) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """At each position p with fewer candidates than sequences, every slot tries the tokens of ``cands[p]`` and
    ``wider[p]`` (the first test's next closest) in place of its own and keeps the best one if its sequence's
    summed log distance falls (and at the positions a swap touched), after adjacent swaps around such positions.
    Repeated while a round changes
    something, at most ``rounds`` times (a slot's best token can change once its neighbours are mended).
    Returns (sequences, (slot, position) pairs changed)."""
    n = seqs.shape[0]
    seqs, changed = seqs.clone(), []
    short = [p for p, c in enumerate(cands) if c.numel() < n]
    # a token taken from its neighbour's place ("mode '" for "' mode" where one of them was missed)
    pairs = sorted({(q, q + 1) for p in short for q in (p - 1, p) if 0 <= q < len(cands) - 1})

    for _ in range(rounds):
        moved = False
        for i in range(n):  # swaps first: a swapped pair is not read as two single errors
            for _ in range(len(pairs)):
                trial = seqs[i].repeat(len(pairs) + 1, 1)
                for k, (a, b) in enumerate(pairs, start=1):
                    trial[k, a], trial[k, b] = seqs[i, b], seqs[i, a]
                best = int(summed_log(second, trial).argmin())
                if best == 0:
                    break
                seqs[i], moved = trial[best], True
                changed += [(i, pairs[best - 1][0]), (i, pairs[best - 1][1])]
        for p in sorted(set(short) | {q for _, q in changed}):  # and where a swap moved a token
            options = torch.unique(torch.cat([cands[p], wider[p]]))
            for i in range(n):
                others = options[options != seqs[i, p]]
                trial = seqs[i].repeat(others.numel() + 1, 1)
                trial[1:, p] = others
                best = int(summed_log(second, trial).argmin())
                if best > 0:
                    seqs[i, p], moved = others[best - 1], True
                    changed.append((i, p))
        if not moved:
            break
    return seqs, changed
