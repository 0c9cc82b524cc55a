"""Local search after the decoder beam under dropout: moves that re-place one token, on the beam's own objective.

The beam (:func:`~.search.grow_causal` with ``rescore``) keeps a few prefixes per step, each step re-ranked by
every block's span (:class:`~.deep.LayerEvidence`). A true token it skips early shifts every later one by a
place, and under RoPE with an attention sink every later input then changes too; the beam cannot come back.
Measured on SmolLM2 (LoRA r 32, dropout 0.075, 1 × 16, ``bench_llm.py dager --seed 1``): the two clients below
ROUGE-1 0.9 had skipped a token ("7 ' response …" came back as "' response …") and yet the true sequence scores
lower on the beam's objective (summed log distance over the blocks, −43.7 against −36.7 and −42.5 against
−34.7), position by position, so the search, not the score, is what failed.

Here the beam's result is the start of a descent on that objective, whole sequences at once. Moves for each
position i and each candidate token c of the first test: substitute c at i; insert c at i (the last token
drops off); delete i (c is appended). They are screened by the one-span objective (the second probe's summed
log distance, a forward through two blocks), the ``keep`` best re-scored by the beam's objective (all blocks,
all positions, with the beam's repeat costs, :func:`~.search.repeat_penalty`), and the best is taken if it
lowers that objective; until no move does, or after ``rounds``. Under DAGER's clean (no-dropout) span test
none of this runs: there the span proves the sequence.
"""

from __future__ import annotations

from typing import Callable

import torch

from .partition import summed_log
from .search import repeat_penalty

Distances = Callable[[torch.Tensor], torch.Tensor]  # ids (B, T) -> distances (B, T)

#: moves per round and sequence (3 · positions · candidate tokens) above which the descent is not run: about
#: 2 ms each on SmolLM2 (1 × 16: 2,160 moves, 3–5 CPU-s a round); 1 × 64 would take minutes a round
MAX_MOVES = 6000


def moves(seq: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Every sequence one substitution, insertion (last token dropped) or deletion (token appended) away: (M, T)."""
    length, k = seq.numel(), tokens.numel()
    out = []
    for i in range(length):
        sub = seq.repeat(k, 1)
        sub[:, i] = tokens
        ins = torch.cat([seq[:i].repeat(k, 1), tokens.unsqueeze(1), seq[i:length - 1].repeat(k, 1)], 1)
        dele = torch.cat([seq[:i].repeat(k, 1), seq[i + 1:].repeat(k, 1), tokens.unsqueeze(1)], 1)
        out += [sub, ins, dele]
    moved = torch.unique(torch.cat(out), dim=0)
    return moved[(moved != seq).any(1)]


def objective(ids: torch.Tensor, distances: Distances, chunk: int = 1024) -> torch.Tensor:
    """The beam's objective of whole sequences: summed log distance plus the repeat costs, (B,)."""
    return summed_log(distances, ids, chunk) + repeat_penalty(ids).sum(1)


def polish(seqs: torch.Tensor, tokens: torch.Tensor, screen: Distances, score: Distances, *, rounds: int = 8,
           keep: int = 96, advance: Callable[[], None] | None = None) -> tuple[torch.Tensor, dict]:
    """Descend from each of ``seqs`` (N, T) by the moves above, never onto another of them (the beam returns N
    distinct sequences; SmolLM2 4 × 16: one moved onto its neighbour, which it scored as well as); returns the
    sequences and, per sequence, the
    objective before and after and the moves taken; not run (``skipped`` says why) above :data:`MAX_MOVES`."""
    count = 3 * seqs.shape[1] * tokens.numel()
    if count > MAX_MOVES:
        return seqs, {"skipped": f"{count} moves per round exceed the budget of {MAX_MOVES}"}
    seqs = seqs.clone()
    report = []
    for n in range(seqs.shape[0]):
        current = seqs[n]
        best = float(objective(current.unsqueeze(0), score)[0])
        start, taken = best, 0
        for _ in range(rounds):
            trial = moves(current, tokens)
            others = torch.cat([seqs[:n], seqs[n + 1:]])  # never onto another returned sequence
            trial = trial[~(trial.unsqueeze(1) == others.unsqueeze(0)).all(-1).any(1)]
            if trial.shape[0] == 0:
                break
            top = objective(trial, screen).argsort()[:keep]
            value = objective(trial[top], score)
            j = int(value.argmin())
            if float(value[j]) >= best:
                break
            current, best, taken = trial[top[j]], float(value[j]), taken + 1
        seqs[n] = current
        report.append({"objective_before": start, "objective_after": best, "moves": taken})
        if advance is not None:
            advance()
    return seqs, {"sequences": report}
