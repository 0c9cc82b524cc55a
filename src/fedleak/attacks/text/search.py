"""Token candidates from the first span and sequence search through the second (DAGER §4.1–4.3).

* :func:`token_candidates` — every (token v, position p) input of the first attention projections,
  as the model computes it, tested by its distance to the first span; the vocabulary is scanned
  in chunks of all-v sequences (one forward gives v at every position), no per-token loop.
* :func:`grow_causal` — decoders: sequences grow left to right; a prefix survives when the
  second probe's input at its last position lies in the second span (DAGER Alg. 1, greedy).
* :func:`search_encoder` — encoders: the second probe's input at a position depends on the whole
  sequence, so DAGER enumerates all combinations of the per-position candidates (maxBᴸ). Here a
  pruned search instead: coordinate descent over positions per sequence slot (each position's
  candidates tried with the rest of the slot fixed, the slot's summed span distance minimised),
  restarted from fresh seeded choices for slots that do not verify or repeat another slot.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from .spans import gap_threshold

#: beam growth under dropout: the added log distance per earlier use of the same token in a prefix
REPEAT_COST = math.log(2.0)
#: ... and for a token that continues a run of one token from position 0 (under RoPE "v v" feeds the second
#: probe the input of "v" at position 0 again: as close as a true first token, and rare in text; a doubled
#: token later on, "\n\n", is an input of its own and costs only the repeat)
DOUBLED_COST = math.log(16.0)

#: beam with rescore: how much worse (log distance) than the median step a best continuation may be before the
#: step is retried over more candidate tokens (SmolLM2 LoRA r 32 dropout 1 × 16, the 4 clients it was chosen on:
#: mean ROUGE-1 0.857 without the retry, 0.895 at 0.5, 0.917 at 0.3; held-out clients: bench_llm.py --seed 1)
EXPAND_MARGIN = 0.3

Distances = Callable[[torch.Tensor], torch.Tensor]  # ids (B, T) -> distances (B, T) of the probe inputs


def token_candidates(first_inputs: Callable[[torch.Tensor], torch.Tensor], first_distance, vocab: int,
                     length: int, positional: bool, chunk: int = 1024, max_per_position: int = 4096,
                     advance: Callable[[], None] | None = None,
                     at_least: int = 0, refine: Distances | None = None,
                     shortlist: int = 64, scanned: torch.Tensor | None = None
                     ) -> tuple[list[torch.Tensor], torch.Tensor, float]:
    """Per position the tokens whose first-layer input lies in the first span.

    ``advance()`` (progress, :mod:`fedleak.attacks.progress`) is called after every vocabulary chunk.
    Returns (candidates per position sorted by distance, distances (V, L), threshold).
    ``positional`` False (RoPE): the input does not depend on the position, one column is computed.
    ``at_least``: the threshold leaves at least that many (token, position) inputs below it, and at most twice
    as many (dropout: the span's rank counts the distinct inputs; no gap separates masked copies).
    ``refine(ids)`` (optional, ids (K, width) -> distances): the ``shortlist`` closest tokens per position by the
    plain screen are re-tested by it and every other token counts as at distance 1 — the masked-copy test
    (:func:`~.spans.masked_fit`) costs too much for the whole vocabulary but restores the gap under dropout.
    ``scanned`` (optional): the plain screen's distances (V, width), already computed (:func:`vocabulary_distances`).
    """
    width = length if positional else 1
    dist = scanned if scanned is not None else vocabulary_distances(first_inputs, first_distance, vocab, width,
                                                                    chunk, advance)
    if refine is not None:
        top = dist.topk(min(shortlist, dist.shape[0]), dim=0, largest=False).indices  # (K, width)
        fine = refine(top).float().reshape(top.shape)
        dist = torch.ones_like(dist).scatter(0, top, fine.clamp(max=1.0))
    if not positional:
        dist = dist.expand(-1, length)
    tau = gap_threshold(_lowest(dist if positional else dist[:, :1]), at_least=at_least,
                        at_most=2 * at_least if at_least else None, weak=not at_least and refine is None)
    cands = []
    for p in range(length):
        col = dist[:, p]
        idx = torch.nonzero(col <= tau).flatten()
        cands.append(idx[col[idx].argsort()][:max_per_position])
    return cands, dist, tau


def repeat_penalty(seqs: torch.Tensor, last: bool = False) -> torch.Tensor:
    """Per position (B, T) the beam's cost of repeating a token: :data:`REPEAT_COST` per earlier use of it in the
    sequence, :data:`DOUBLED_COST` more where it continues a run of one token from position 0. ``last``: only
    the last position's, (B,) (a beam step's new token: O(T) per prefix, not O(T²))."""
    if last:
        earlier = (seqs[:, :-1] == seqs[:, -1:]).sum(1).double()
        run = (seqs == seqs[:, :1]).all(1) & (seqs.shape[1] > 1)
    else:
        earlier = (seqs.unsqueeze(2) == seqs.unsqueeze(1)).tril(-1).sum(2).double()
        run = (seqs == seqs[:, :1]).long().cumprod(1).bool()
        run[:, 0] = False
    return REPEAT_COST * earlier + DOUBLED_COST * run.double()


def vocabulary_distances(first_inputs: Callable[[torch.Tensor], torch.Tensor], first_distance, vocab: int,
                         width: int, chunk: int = 1024, advance: Callable[[], None] | None = None) -> torch.Tensor:
    """The first test's distance of every token at each of ``width`` positions, (V, width): chunks of all-v
    sequences, one forward each; ``advance()`` after every chunk."""
    parts = []
    for start in range(0, vocab, chunk):
        ids = torch.arange(start, min(vocab, start + chunk)).unsqueeze(1).expand(-1, width)
        parts.append(first_distance(first_inputs(ids)).float())
        if advance is not None:
            advance()
    return torch.cat(parts)


def _lowest(dist: torch.Tensor, keep: int = 200_000) -> torch.Tensor:
    flat = dist.reshape(-1)
    if flat.numel() <= keep:
        return flat
    return flat.topk(keep, largest=False).values


def outside_level(second: Distances, vocab: int, length: int, generator: torch.Generator,
                  count: int = 32) -> torch.Tensor:
    """Distances of random token sequences (almost surely outside the span): the "out" anchors."""
    ids = torch.randint(vocab, (count, length), generator=generator)
    return second(ids).reshape(-1).double()


def split(dist: torch.Tensor, outside: torch.Tensor, accepted: list[float]) -> float:
    """The acceptance threshold: the largest log gap of these distances pooled with the known-outside
    anchors and the distances accepted so far, never above the smallest outside anchor."""
    pool = torch.cat([dist.reshape(-1).double(), outside, torch.tensor(accepted, dtype=torch.float64)])
    low = float(outside.min())
    tau = gap_threshold(pool[pool <= low])
    below = pool[pool <= tau]
    # a real split is wider than the spread of the outside anchors themselves
    if below.numel() and float(outside.max() / outside.min()) >= low / float(below.max().clamp_min(1e-30)):
        return 0.0
    return tau


def grow_causal(second: Distances, cands: list[torch.Tensor], steps: int, num_sequences: int,
                outside: torch.Tensor, chunk: int = 4096, cap_factor: int = 8,
                pair_distance=None, advance: Callable[[], None] | None = None,
                inputs_of: Callable[[torch.Tensor], torch.Tensor] | None = None,
                beam: bool = False, rescore: Callable[[torch.Tensor], torch.Tensor] | None = None,
                rescore_factor: int = 4, more: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, dict]:
    """Greedy left-to-right growth of prefixes through the second span (DAGER Alg. 1).

    Returns the surviving prefixes (P, steps) and diagnostics (threshold, per-step survivors,
    whether every step had a clean gap). At most ``cap_factor``·N prefixes are kept per step.
    ``pair_distance(prefixes, cand)`` (optional) gives the new position's distances of all pairs at
    once (:mod:`.incremental`, the first block's key/value cache) instead of whole-pair passes.
    ``advance()`` is called after every growth step (progress). ``inputs_of(prefixes)`` (optional) gives the
    second probe's inputs (P, steps, d) of whole prefixes; when more than N survive, the N kept are those whose
    inputs together span the most directions (:func:`select_spanning`), not merely the closest.

    ``beam`` (dropout in the client's step): the span holds masked, rescaled copies of the true inputs, so no
    candidate lies in it and no split separates them; the ``cap_factor``·N prefixes with the smallest summed
    log distance are kept at every step instead (a beam search on the distance, in the spirit of DAGER's
    ranking of candidates by distance, §4.2), and the N best by that sum are returned, never clean.
    ``rescore(pairs)`` (optional, beam only): the ``rescore_factor``·cap best pairs by the one-span distance are
    scored again by it (the last position's distance; :class:`~.deep.LayerEvidence`, every block's span) and the
    beam keeps the best of them by that instead. ``more`` (optional, per step the next closest tokens of the first
    test): where the best re-scored continuation is worse than the steps' median by :data:`EXPAND_MARGIN`, the
    step is tried again over them too, and kept if it does better (``expanded`` in the diagnostics).
    """
    prefixes = torch.zeros(1, 0, dtype=torch.long)
    worst = torch.zeros(1, dtype=torch.float64)  # per prefix: its largest accepted distance / threshold
    accepted_max, rejected_min, survivors, clean = 0.0, math.inf, [], True
    accepted: list[float] = []
    cap = max(1, cap_factor * num_sequences)
    score = torch.zeros(1, dtype=torch.float64)  # beam: per prefix, its summed log distance
    history: list[float] = []  # beam with rescore: per step the best re-scored log distance
    expanded: list[int] = []

    def extend(cand):
        """Every (current prefix, candidate) pair and the second probe's distance at its new position."""
        pairs = torch.cat([prefixes.repeat_interleave(cand.numel(), 0),
                           cand.repeat(prefixes.shape[0]).unsqueeze(1)], dim=1)
        if pair_distance is not None:
            return pairs, pair_distance(prefixes, cand).double()
        return pairs, torch.cat([second(pairs[i:i + chunk])[:, -1] for i in range(0, pairs.shape[0], chunk)]).double()

    def beam_step(cand):
        """One beam step over ``cand``: (pairs, distances, kept indices, totals, best re-scored log distance)."""
        pairs, dist = extend(cand)
        # a token the prefix already holds costs log 2 per earlier use: under RoPE, chains that cycle through
        # a few tokens stay as close to the masked span as the true continuation (see select_spanning)
        prev = score.repeat_interleave(cand.numel())
        penalty = repeat_penalty(pairs, last=True)
        total = prev + dist.clamp_min(1e-30).log() + penalty
        # at most cap_factor prefixes per first token: N sequences need N starts, and the best-scored one's
        # variants filled the beam (SmolLM2 LoRA r 128, dropout 0.075, 4 × 16: two sequences came back three times)
        keep, best = quota(total.argsort(), pairs[:, 0], cap_factor, cap), None
        if rescore is not None:
            top = quota(total.argsort(), pairs[:, 0], rescore_factor * cap_factor, rescore_factor * cap)
            deep = torch.cat([rescore(pairs[top[i:i + chunk]]) for i in range(0, top.numel(), chunk)]).double()
            logs = deep.clamp_min(1e-30).log()
            total = prev[top] + logs + penalty[top]
            order = quota(total.argsort(), pairs[top, 0], cap_factor, cap)
            keep, total = top[order], total.new_zeros(pairs.shape[0]).index_copy(0, top[order], total[order])
            best = float(logs.min())
        return pairs, dist, keep, total, best

    for t in range(steps):
        cand = cands[t]
        if cand.numel() == 0:
            clean = False
            break
        if beam:
            pairs, dist, keep, total, best = beam_step(cand)
            if best is not None and more is not None and len(history) >= 2 and \
                    best > sorted(history)[len(history) // 2] + EXPAND_MARGIN:
                # no candidate continues as well as the steps so far: the true token may have missed the first
                # test's threshold; the next closest tokens are tried too, and kept only if they do better
                wider = torch.cat([cand, more[t][~torch.isin(more[t], cand)]])
                trial = beam_step(wider)
                if trial[4] < best:
                    (pairs, dist, keep, total, best), cand = trial, wider
                    expanded.append(t)
            if best is not None:
                history.append(best)
            score, prefixes = total[keep], pairs[keep]
            worst = worst.repeat_interleave(cand.numel())[keep]
            survivors.append(int(keep.numel()))
            if advance is not None:
                advance()
            continue
        pairs, dist = extend(cand)
        tau = split(dist, outside, accepted[-4 * num_sequences:])
        order = dist.argsort()
        keep = order[dist[order] <= tau]
        if keep.numel() < num_sequences:  # fewer than N below the split (shared prefixes, or drift): keep
            keep = order[:num_sequences]  # the N closest; a false one dies later or fails the final check
        if keep.numel() > cap:
            clean = False
            keep = keep[:cap]
        below = dist[keep] <= tau
        accepted_max = max(accepted_max, float(dist[keep][below].max()) if bool(below.any()) else 0.0)
        accepted.extend(dist[keep][below].tolist())
        rest = dist[dist > tau]
        if rest.numel():
            rejected_min = min(rejected_min, float(rest.min()))
        ratio = dist[keep] / max(tau, 1e-30)
        worst = torch.maximum(worst.repeat_interleave(cand.numel())[keep], ratio)
        prefixes = pairs[keep]
        survivors.append(int(keep.numel()))
        if advance is not None:
            advance()
    selected_by = "distance"
    if beam:
        clean = False
        if prefixes.shape[0] > num_sequences:
            best, selected_by = _distinct_best(prefixes, score, num_sequences), "summed log distance (beam)"
            prefixes, worst = prefixes[best], worst[best]
    elif prefixes.shape[0] > num_sequences:  # more survivors than sequences: keep N of them
        if inputs_of is not None:
            best, selected_by = select_spanning(inputs_of(prefixes), worst, num_sequences), "span coverage"
        else:  # the N prefixes that stayed closest to the span
            best = worst.argsort()[:num_sequences]
        prefixes, worst = prefixes[best], worst[best]
    clean = clean and bool((worst <= 1).all())
    return prefixes, {"survivors": survivors, "accepted_max": accepted_max,
                      "rejected_min": None if rejected_min == math.inf else rejected_min, "clean": clean,
                      "selected_by": selected_by, "expanded": expanded}


def quota(order: torch.Tensor, groups: torch.Tensor, per_group: int, limit: int) -> torch.Tensor:
    """The first ``limit`` of ``order`` (indices, best first) taking at most ``per_group`` of each value of
    ``groups`` (indexed like the items), then, if that leaves fewer than ``limit``, the best of the rest."""
    _, group = torch.unique(groups[order], return_inverse=True)
    by_group = torch.sort(group, stable=True).indices  # grouped, score order kept within each group
    counts = torch.bincount(group)
    starts = counts.cumsum(0) - counts
    within = torch.empty_like(group)  # each item's rank within its group, in score order
    within[by_group] = torch.arange(group.numel()) - starts[group[by_group]]
    fits = within < per_group
    return torch.cat([order[fits], order[~fits]])[:limit]


def _distinct_best(prefixes: torch.Tensor, score: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` best-scored prefixes (lowest ``score``), preferring ones that do not share their first token
    with a better one (a beam tends to fill with variants of one sequence)."""
    order = score.argsort().tolist()
    firsts, chosen = set(), []
    for i in order:
        if int(prefixes[i, 0]) not in firsts:
            chosen.append(i)
            firsts.add(int(prefixes[i, 0]))
        if len(chosen) == n:
            break
    chosen += [i for i in order if i not in chosen][:n - len(chosen)]
    return torch.tensor(chosen, dtype=torch.long)


def select_spanning(inputs: torch.Tensor, worst: torch.Tensor, n: int, tol: float = 1e-3) -> torch.Tensor:
    """Indices of ``n`` of the surviving prefixes whose inputs (P, T, d) together span the most directions.

    Under RoPE a prefix that repeats one token passes every span test: attention over identical keys and
    values returns the same vector at every position, the vector of that token at position 0 — which lies in
    the span whenever a true sequence starts with it (measured on SmolLM2: ``253 253 …`` at distance 5e-7
    beside the true ``253 23020 …``). Such a prefix adds one direction to the span; a true sequence adds one
    per distinct position. Greedy: repeatedly take the prefix whose unit-normalized inputs add the most
    directions (singular values of its residual off the directions taken so far above ``tol``), ties by
    the smaller distance ratio ``worst``.
    """
    rows = inputs.double()
    rows = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    basis = rows.new_zeros(0, rows.shape[-1])
    chosen: list[int] = []
    for _ in range(min(n, rows.shape[0])):
        best, best_key, best_dirs = -1, None, None
        for i in range(rows.shape[0]):
            if i in chosen:
                continue
            residual = rows[i] - (rows[i] @ basis.T) @ basis
            _, s, vh = torch.linalg.svd(residual, full_matrices=False)
            key = (-int((s > tol).sum()), float(worst[i]))
            if best_key is None or key < best_key:
                best, best_key, best_dirs = i, key, vh[s > tol]
        chosen.append(best)
        basis = torch.cat([basis, best_dirs])
    return torch.tensor(chosen, dtype=torch.long)


def search_encoder(second: Distances, cands: list[torch.Tensor], num_sequences: int, outside: torch.Tensor, *,
                   sweeps: int = 6,
                   restarts: int = 8, generator: torch.Generator | None = None,
                   chunk: int = 2048, init: torch.Tensor | None = None,
                   advance: Callable[[], None] | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Pruned search for encoders: coordinate descent per slot with restarts (see module docstring).

    ``advance()`` is called after every sweep (progress): at most (restarts + 1) × sweeps of them.
    Returns (sequences (N, L), per-position distances (N, L), diagnostics).
    """
    length = len(cands)
    cands = [c if c.numel() else torch.zeros(1, dtype=torch.long) for c in cands]
    slots = torch.stack([torch.stack([c[n % c.numel()] for c in cands]) for n in range(num_sequences)])
    if init is not None:  # a continuous relaxation's snapped tokens (tiger)
        slots = init.clone()

    def score(ids):
        return torch.cat([second(ids[i:i + chunk]) for i in range(0, ids.shape[0], chunk)]).double()

    def descend(seqs):
        for _ in range(sweeps):
            changed = False
            for p in range(length):
                c = cands[p]
                if c.numel() == 1:
                    seqs[:, p] = c[0]
                    continue
                trial = seqs.repeat_interleave(c.numel(), 0)
                trial[:, p] = c.repeat(seqs.shape[0])
                total = score(trial).clamp_min(1e-12).log().sum(1).view(seqs.shape[0], c.numel())
                best = c[total.argmin(1)]
                changed |= bool((best != seqs[:, p]).any())
                seqs[:, p] = best
            changed |= swap(seqs)
            if advance is not None:
                advance()
            if not changed:
                break
        return seqs

    def swap(seqs):
        """Try exchanging every pair of positions of every slot (tokens that sit one place off)."""
        pairs = torch.combinations(torch.arange(length), 2)
        changed = False
        for i in range(seqs.shape[0]):
            base = seqs[i]
            trial = base.repeat(pairs.shape[0] + 1, 1)
            rows = torch.arange(1, pairs.shape[0] + 1)
            trial[rows, pairs[:, 0]] = base[pairs[:, 1]]
            trial[rows, pairs[:, 1]] = base[pairs[:, 0]]
            total = score(trial).clamp_min(1e-12).log().sum(1)
            best = int(total.argmin())
            if best != 0:
                seqs[i] = trial[best]
                changed = True
        return changed

    slots = descend(slots)
    dist = score(slots)
    tried = 0
    while tried < restarts:
        tau = split(dist.max(1).values, outside, [])
        ok = dist.max(1).values <= tau
        dup = _duplicates(slots)
        redo = torch.nonzero(~ok | dup).flatten()
        if redo.numel() == 0:
            break
        fresh = torch.stack([torch.stack([c[torch.randint(c.numel(), (1,), generator=generator)[0]] for c in cands])
                             for _ in range(redo.numel())])
        slots[redo] = descend(fresh)
        dist[redo] = score(slots[redo])
        tried += 1
    return slots, dist, {"restarts": tried, "threshold": split(dist.max(1).values, outside, [])}


def _duplicates(seqs: torch.Tensor) -> torch.Tensor:
    """True for every row equal to an earlier row."""
    seen, out = set(), []
    for row in seqs.tolist():
        key = tuple(row)
        out.append(key in seen)
        seen.add(key)
    return torch.tensor(out, dtype=torch.bool)
