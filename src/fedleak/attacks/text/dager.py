"""``dager``: exact text recovery from the spans of transformer weight gradients (Petrov et al., NeurIPS 2024).

Algorithm (DAGER §4): (1) span of the first attention projections' gradient → per position the
tokens whose first-layer input lies in it (:func:`~.search.token_candidates`); (2) sequences grown
through the span of the next linear layer — greedy left to right for decoders (DAGER Alg. 1), a
pruned coordinate search instead of DAGER's exhaustive maxBᴸ enumeration for encoders; (3) for a
causal LM, the final token of each sequence (zero gradient in every attention weight) from the
output-embedding gradient (:mod:`.final_token`). Beyond the reference: ranks and thresholds chosen
at the largest gap of the data (:mod:`.spans`), FedAvg tested at interpolated weights
(:func:`~.common.param_points`), LoRA through the adapters (:mod:`.probes`), block 0's MLP as the
second span (valid under a sequence-classification loss), dropout in the client's step (encoders: the
masked-copy test and a partition search with repair; decoders: a beam on the summed log span distance re-ranked
by every block's span, then a descent on that objective, :mod:`.polish`), and the exactness condition reported in
``extras["exactness"]``; ``extras["certain"]`` is True only when the update recomputed from the N recovered
sequences (and the labels read from the update) through the one client-update function matches the one sent
(:mod:`.verify`, the meaning of "proved" shared with SPEAR); the span test (``extras["span_verified"]``)
chooses the tokens, it is not the proof.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn

from ...types import DataSpec, Reconstruction, Update
from ..base import Attack, AttackOptions, register
from ..progress import counting, loop_progress
from .common import (exactness, first_inputs_fn, framing_tokens, param_points, positional_ambiguity, simulate,
                     task_of, text_result, vocab_size)
from .deep import LayerEvidence
from .final_token import recover_final
from .incremental import last_inputs
from .masks import RecoveredMasks
from .partition import fits_partition, repair, search_partition
from .polish import polish
from .probes import capture, is_causal, mark_masked_inputs, model_type, probes
from .spans import effective_width, rounding_noise
from .search import grow_causal, outside_level, search_encoder, split, token_candidates, vocabulary_distances
from .verify import verify as verify_update


#: tokens beyond the first test's candidates a slot tries where a position holds fewer than N (:func:`.repair`)
REPAIR_WIDTH = 64


#: a causal model under dropout: position 0's candidates also take this many tokens closest by the exact test's
#: spans alone (SmolLM2 LoRA r 32, dropout 0.075, 1 × 16, 8 clients: the first tokens ranked 25 to > 300 in the
#: vocabulary by the pooled test, which counts the query adapters' spans, and 4 to 77, one > 1000, without them)
FIRST_EXTRA = 32


@dataclass(frozen=True)
class DagerOptions(AttackOptions):
    #: θ points tested for FedAvg (θˢ and interpolations toward θᶜ, one per local step at most)
    fedavg_points: int = 4
    #: encoder search: coordinate-descent sweeps and restarts per unverified slot
    sweeps: int = 6
    restarts: int = 8
    #: candidate prefixes kept per step of the decoder growth, as a multiple of N
    beam_factor: int = 8
    #: read the final token of causal-LM sequences from the output-embedding gradient
    final_token: bool = True
    #: sequences evaluated per forward pass
    chunk: int = 2048
    #: when the client trained with dropout: grow decoder prefixes as a beam on the summed log span distance
    #: (the masked inputs lie in no span; :func:`~.search.grow_causal`)
    dropout_beam: bool = True
    #: ... and re-rank the beam's best prefixes by every block's span (:class:`~.deep.LayerEvidence`)
    layer_evidence: bool = True
    #: ... and descend from the beam's sequences on its own objective, moves of one token (:mod:`.polish`)
    polish_rounds: int = 8
    #: encoders under first-layer dropout: test sequences with the recovered masked copies (:mod:`.masks`)
    replay_masks: bool = True


class Dager(Attack):
    Options = DagerOptions
    name = "dager"
    positive = ("fedavg_points", "sweeps", "beam_factor", "chunk")
    non_negative = ("restarts", "polish_rounds")

    def _reconstruct(self, update: Update, model: nn.Module, spec: DataSpec) -> Reconstruction:
        start = time.perf_counter()
        opts = self.options
        model.eval()
        length = int(spec.shape[-1])
        n = int(update.num_samples)
        gradient = update.pseudo_gradient()
        first, second = probes(model, gradient, update.server_params, rounding_of(update))
        causal, task = is_causal(model), task_of(model)
        gen = torch.Generator().manual_seed(opts.seed)
        limit = calibrate_widths(model, update.server_params, first, second, vocab_size(model), length, gen)
        gap_found = first.proper and second.proper  # before any rank is substituted below
        if not gap_found:
            # no gap: past the limit nothing can be separated; below it (FedAvg's drifting inputs, noise)
            # the leading N·L directions — N and L are known to the server — stand in, never certain
            if n * length >= limit:  # a full span tests nothing
                exact = exactness(n * length, limit, first, second)
                return text_result(torch.zeros(0, length, dtype=torch.long), model, {
                    "exactness": exact, "certain": False, "verified": False, "first": first.describe(),
                    "second": second.describe(), "seconds": time.perf_counter() - start,
                    "note": "exactness condition fails: no sequence is returned"})
            first.spans = [sp if sp.proper else sp.with_rank(n * length) for sp in first.spans]
            second.spans = [sp if sp.proper else sp.with_rank(n * length) for sp in second.spans]
        points = param_points(update, opts.fedavg_points)
        extras = {"first": first.describe(), "second": second.describe(), "model_type": model_type(model),
                  "task": task, "points": len(points)}

        first_inputs = first_inputs_fn(model, points, first.modules[0])
        dropout = dropout_in_training(model)
        if dropout:  # does a dropout feed the first layer masked copies of its inputs? (then the test stays exact)
            probe_ids = torch.randint(vocab_size(model), (2, length), generator=gen)
            extras["first_masked_rate"] = mark_masked_inputs(model, update.server_params, first, probe_ids)

        pooled = bool(dropout) and opts.dropout_beam and bool(first.query_spans)  # statistical: all evidence

        def first_distance(x):  # (K, B, T, d) -> (B, T): closest θ point
            d = first.pooled_distance(x, fast=True) if pooled else first.distance(x, fast=True)
            return d.min(0).values.cpu()

        def first_masked(ids):  # shortlisted tokens: the masked-copy test, closest θ point
            return torch.stack([first.masked_distance(x) for x in first_inputs(ids)]).min(0).values.cpu()

        positional = model_type(model) != "llama"
        # progress (fedleak.attacks.progress): vocabulary chunks, then growth steps (decoders) or sweeps (encoders)
        total = math.ceil(vocab_size(model) / 1024) + (length if causal else (opts.restarts + 1) * opts.sweeps)
        with loop_progress(total, "search steps", "dager") as tick:
            advance = counting(tick)
            beam = opts.dropout_beam and bool(dropout)  # masked inputs: rank, not a gap
            masked = first.masked  # the masked-copy test restores the gap (spans.masked_fit)
            plain = vocabulary_distances(first_inputs, first_distance, vocab_size(model),
                                         length if positional else 1, advance=advance)
            cands, first_dist, tau1 = token_candidates(
                first_inputs, first_distance, vocab_size(model), length, positional, scanned=plain,
                at_least=first.rank if beam and not masked else 0, refine=first_masked if masked else None,
                shortlist=max(64, first.rank, 4 * n * (1 if positional else length)))
            extras["first_threshold"] = tau1
            if pooled and causal and not positional:  # position 0's query has no gradient: the pooled test ranks
                # its token low, the exact test's spans alone rank it high (FIRST_EXTRA)
                alone = vocabulary_distances(first_inputs, lambda x: first.distance(x, fast=True).min(0).values.cpu(),
                                             vocab_size(model), 1)[:, 0]
                top = alone.topk(FIRST_EXTRA, largest=False).indices
                cands[0] = torch.cat([cands[0], top[~torch.isin(top, cands[0])]])
            if masked and not causal:  # an encoder's position always holds a token: where several sequences share
                # one (a final [SEP]), their masked copies can hold the fit between them; the tokenizer's framing
                # token there, else the closest, stands in
                frame = framing_tokens(model, length)
                cands = [c if c.numel() else torch.tensor([frame[p]]) if p in frame else
                         first_dist[:, p].argmin().view(1) for p, c in enumerate(cands)]
            extras["candidates_per_position"] = [int(c.numel()) for c in cands]
            # under next-token loss with no target after the sequence, the final position has no gradient at all
            hidden_final = causal and task == "causal-lm" and cands[-1].numel() == 0
            steps = length - 1 if hidden_final else length
            exact = exactness(n * steps, limit, first, second, gap_found=gap_found)
            extras["exactness"] = exact
            ambiguous = positional_ambiguity(cands, first.rank) if positional and not masked else None
            if ambiguous is not None:
                exact["positional_ambiguity"] = ambiguous

            replay = None  # an encoder under first-layer dropout: block 0 gets the recovered masked copies
            if opts.replay_masks and masked and not causal and positional and all(c.numel() for c in cands):
                span = next(sp for sp in first.spans if sp.mask_rate > 0 and sp.transform is None)
                layout = RecoveredMasks.layout(cands)
                replay = RecoveredMasks(model, span, cands, first_inputs(layout)[0])

            def second_distance(ids):
                with replay.replayed(ids) if replay is not None else nullcontext():
                    return torch.stack([second.distance(capture(model, p, ids, second.modules[0]))
                                        for p in points]).min(0).values.cpu()

            outside = outside_level(second_distance, vocab_size(model), length, gen)
            extras["outside_min"] = float(outside.min())
            if causal:
                def pair_distance(prefixes, cand):
                    return torch.stack([second.distance(last_inputs(model, p, second.modules[0], prefixes, cand,
                                                                    opts.chunk)) for p in points]).min(0).values.cpu()

                # under dropout the one span ranks prefixes weakly: every block's span adds its own evidence
                evidence = (LayerEvidence.build(model, gradient, points[0], rounding_of(update))
                            if beam and opts.layer_evidence else None)
                extras["layer_evidence"] = evidence.count if evidence is not None else 0
                prefixes, info = grow_causal(second_distance, cands, steps, n, outside, chunk=opts.chunk,
                                             cap_factor=opts.beam_factor, pair_distance=pair_distance,
                                             advance=advance,
                                             inputs_of=lambda ids: capture(model, points[0], ids,
                                                                           second.modules[0]).cpu(),
                                             beam=beam, rescore=evidence.distance if evidence else None,
                                             more=None if evidence is None else
                                             [first_dist[:, p].topk(256, largest=False).indices
                                              for p in range(length)])
                extras["growth"] = info
                if evidence is not None and opts.polish_rounds and prefixes.shape[1] == steps:
                    prefixes, extras["polish"] = polish(
                        prefixes, torch.unique(torch.cat(cands[:steps])), second_distance,
                        lambda ids: evidence.distance(ids, last=False), rounds=opts.polish_rounds)
                verified = prefixes.shape[0] == n and prefixes.shape[1] == steps and info["clean"]
                ids = prefixes
                if hidden_final and prefixes.shape[1] == steps:
                    ids, final_info = self._final(model, update, prefixes, cands, opts)
                    extras["final_token"] = final_info
                elif ids.shape[1] < length:
                    ids = torch.cat([ids, torch.zeros(ids.shape[0], length - ids.shape[1], dtype=torch.long)], 1)
            elif fits_partition(cands, n):  # each position's tokens are exactly the N sequences' ones
                ids, dist, info = search_partition(
                    second_distance, cands, n, sweeps=opts.sweeps, restarts=opts.restarts, generator=gen,
                    chunk=opts.chunk, advance=advance,
                    stop=lambda d: bool((d.max(1).values <= split(d.max(1).values, outside, [])).all()))
                if masked:  # a true input the masked-copy test missed: the next closest tokens by that test and by
                    # the plain screen (a missed input's fit is stuck, but the screen ranks it high: MiniLM 16 × 16,
                    # the 40 missed inputs of one client ranked 0th to 32nd by the screen, 15th to 137th by the
                    # fit), and the batch's tokens (a token repeated along a sequence has masked copies at many
                    # positions, between which the test can settle), where one may be
                    bag = torch.unique(torch.cat(cands))
                    ids, info["repaired"] = repair(second_distance, ids, cands, [
                        torch.cat([first_dist[:, p].topk(REPAIR_WIDTH + c.numel(), largest=False).indices,
                                   plain[:, p].topk(REPAIR_WIDTH, largest=False).indices, bag])
                        for p, c in enumerate(cands)])
                    dist = second_distance(ids)
                info["threshold"] = split(dist.max(1).values, outside, [])
            else:
                ids, dist, info = search_encoder(second_distance, cands, n, outside, sweeps=opts.sweeps,
                                                 restarts=opts.restarts, generator=gen, chunk=opts.chunk,
                                                 advance=advance)
            if not causal:
                tau = info["threshold"]
                per_seq = dist.max(1).values
                verified = (bool((per_seq <= tau).all()) and ids.shape[0] == n
                            and len({tuple(r) for r in ids.tolist()}) == n)
                extras["search"] = {**info, "max_distance": [float(v) for v in per_seq]}
            extras["span_verified"] = bool(verified)  # every sequence's inputs below the span threshold
            # the leading-directions spans that stand in under noise still return what they found (never certain)
            tried = exact["holds"] or exactness(n * steps, limit, first, second)["holds"]
            if not tried and not verified:
                extras["note"] = "exactness condition fails and the recovery does not verify: no sequence is returned"
                ids = torch.zeros(0, length, dtype=torch.long)
            # proved = the update recomputed from the recovered sequences (and labels) matches the one sent
            check = verify_update(model, update, ids, spec.num_classes)
            exact["verification"] = check
            extras["verified"] = extras["certain"] = bool(check["matches"])
            if exact["holds"] and not check["matches"]:
                exact["reason"] += ("; but the update recomputed from the recovered sequences does not match the one "
                                    "sent" + (f" (relative error {check['relative_error']:.1e} ≥ {check['tolerance']:g})"
                                              if check["relative_error"] is not None else f" ({check.get('note')})"))
            if ambiguous is not None and not check["matches"]:  # why the order was not found
                exact["reason"] += "; " + ambiguous["reason"]
            if exact["holds"] and not check["matches"] and check.get("note"):  # e.g. LoRA: the targets are unread
                exact["reason"] += f" ({check['note']})"
            if dropout and exact["holds"] and not check["matches"]:
                exact["dropout"] = dropout
                if masked:  # the first test matched masked copies; later layers mix masks no one can replay
                    exact["reason"] += (f"; the client trained with dropout on ({dropout}): the first layer's inputs "
                                        "were masked copies of the token vectors, which the masked-copy test matched "
                                        "together with their masks, but the masks inside the later layers cannot be "
                                        "replayed: the sequences are the search's best estimate, not proved")
                elif not verified:  # the rank allows it, the span test does not pass: dropout is what fails
                    exact["reason"] += (f"; the client trained with dropout on ({dropout}): the layers' inputs were "
                                        "masked, rescaled copies of the token vectors, outside the span of the clean "
                                        "candidates: dropout, not rank, is what fails exactness; the sequences are "
                                        "the beam's best estimate, not proved")
                else:  # the sequences pass the span test; the masks cannot be replayed to prove them
                    exact["reason"] += (f"; the client trained with dropout on ({dropout}): its random masks cannot "
                                        "be replayed, so the recovery passes the span test but is not proved")
            extras["seconds"] = time.perf_counter() - start
            return text_result(ids, model, extras)

    @staticmethod
    def _final(model, update, prefixes, cands, opts):
        if not opts.final_token:
            pad = torch.zeros(prefixes.shape[0], 1, dtype=torch.long)
            return torch.cat([prefixes, pad], 1), {"recovered": False, "reason": "final_token option off"}
        used = set(prefixes.reshape(-1).tolist()) | set(torch.cat(cands).tolist())
        dummy = next(v for v in range(vocab_size(model)) if v not in used)
        finals, info = recover_final(model, update.server_params, update.pseudo_gradient(), prefixes,
                                     lambda ids: simulate(model, update, ids), dummy)
        return torch.cat([prefixes, finals.unsqueeze(1)], 1), info


def rounding_of(update: Update) -> dict:
    """FedAvg: per parameter the std of the float32 rounding in its pseudo-gradient entries
    (:func:`~.spans.rounding_noise`): the weights the client sends are rounded, and (θˢ − θᶜ)/η magnifies that
    by 1/η — in a later LoRA round (B ≠ 0) at FlowerTune's lr 5e-5 far above float32's ε. Empty for FedSGD."""
    if update.is_fedsgd or update.client_params is None:
        return {}
    steps = max(1, update.num_steps)
    return {k: rounding_noise(update.server_params[k], update.client_params[k], update.protocol.lr, steps)
            for k in update.server_params}


def dropout_in_training(model) -> str:
    """The dropout a client's train-mode step applies (``"p=0.1 × 13"``), empty when none acts."""
    rates_of = getattr(model, "dropout_rates", None)
    rates = rates_of() if callable(rates_of) else {}
    counts: dict = {}
    for name, p in rates.items():
        key = f"{'LoRA ' if 'lora_dropout' in name else ''}p={p:g}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} × {n}" for k, n in counts.items())


def calibrate_widths(model, params, first, second, vocab, length, generator) -> int:
    """Effective widths of both probes from random token sequences (:func:`~.spans.effective_width`);
    returns the smaller one, the exactness limit on token inputs per step."""
    width = max(s.basis.shape[0] for s in first.spans + second.spans)
    count = -(-2 * width // length) + 1
    ids = torch.randint(vocab, (count, length), generator=generator)
    for probe in (first, second):
        x = capture(model, params, ids, probe.modules[0])
        for span in probe.spans:
            effective_width(span, x)
    return min(s.width for s in first.spans + second.spans)


register("dager", Dager, "Petrov et al. 2024 DAGER: exact text recovery from gradient spans (data-chosen ranks, "
                         "final token from the LM head, FedAvg/LoRA, exactness reported)")
