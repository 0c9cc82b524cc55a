"""Span recovery when the client trains with dropout (issue 28): the masked-copy span test, the encoder partition
search, and DAGER on the shipped MiniLM with its own dropout 0.1 (a real pretrained encoder, as deployed)."""

from __future__ import annotations

import pytest
import torch

from fedleak.attacks.text.partition import _assign, fits_partition, search_partition
from fedleak.attacks.text.spans import Span, masked_fit


def _masked_span(rate=0.1, d=96, k=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(32, d, generator=g, dtype=torch.float64)
    keep = torch.rand(k, d, generator=g) >= rate
    masked = x[:k] * keep / (1 - rate)  # what a train-mode step feeds the layer
    grad = torch.randn(k, 40, generator=g, dtype=torch.float64).T @ masked  # ∇W = G X̃ (40 outputs)
    return x, keep, Span.from_matrix(grad.T)


def test_masked_fit_finds_the_dropped_copy_and_its_mask():
    x, keep, span = _masked_span()
    assert span.rank == 8
    residual, drop = masked_fit(x, span.basis, 0.1)
    assert float(residual[:8].max()) < 1e-9  # the inputs that entered the step: exact, masks recovered
    assert torch.equal(drop[:8], ~keep)
    assert float(residual[8:].min()) > 1e-2  # inputs that did not: far above the float floor
    plain = span.distance(x[:8])
    assert float(plain.min()) > 1e-2  # DAGER's plain test rejects every true input


def test_masked_fit_never_zeros_a_wrong_input_into_the_span():
    """The drop set is bounded (p·d plus a slack): with every coordinate free any vector would fit."""
    x, _, span = _masked_span(seed=3)
    residual, drop = masked_fit(x[8:], span.basis, 0.1, restarts=32)
    assert float(residual.min()) > 1e-2
    assert int(drop.sum(-1).max()) <= int(0.1 * 96 + 6 * (96 * 0.09) ** 0.5) + 1


def test_span_masked_distance_only_where_a_mask_acts():
    x, _, span = _masked_span()
    assert torch.equal(span.masked_distance(x), span.distance(x))  # no mask_rate: the plain test
    span.mask_rate = 0.1
    assert float(span.masked_distance(x[:8]).max()) < 1e-9


def test_assignment_uses_every_token_at_least_once():
    cost = torch.tensor([[0.0, 5.0], [0.0, 6.0], [0.0, 9.0]], dtype=torch.float64)  # all slots prefer token 0
    chosen = _assign(cost)
    assert sorted(set(chosen.tolist())) == [0, 1] and int(chosen[0]) == 1  # the cheapest slot takes token 1


def test_partition_search_keeps_slots_apart():
    """Two slots free to choose both settle on the better sequence; a partition cannot."""
    truth = torch.tensor([[5, 1, 7, 3, 9], [5, 2, 8, 4, 6]])

    def second(ids):
        mismatch = torch.stack([(ids != t).float().mean(1) for t in truth]).min(0).values
        bias = (ids[:, 1] == 2).float() * 0.01  # the second sequence a little farther
        return (1e-6 + mismatch + bias).unsqueeze(1).expand(-1, ids.shape[1])

    cands = [torch.unique(truth[:, p]) for p in range(truth.shape[1])]
    assert fits_partition(cands, 2) and not fits_partition(cands, 1)
    seqs, dist, info = search_partition(second, cands, 2, generator=torch.Generator().manual_seed(0))
    assert {tuple(r) for r in seqs.tolist()} == {tuple(r) for r in truth.tolist()}
    assert info["search"] == "partition"


def test_repair_restores_a_missed_token_and_a_swapped_pair():
    """The first test missed token 8 at position 2 (one candidate where two sequences differ); elsewhere the search
    left two tokens swapped. On a score where a position is closer the more of its sequence is true (the second
    span's input carries the context), the repair takes 8 from the wider list and swaps the pair back."""
    from fedleak.attacks.text.partition import repair

    truth = torch.tensor([[1, 3, 7, 4], [1, 6, 8, 9]])

    def second(ids):
        match = torch.stack([(ids == t).float() for t in truth])  # (rows, B, T)
        near = (match * match.mean(2, keepdim=True)).amax(0)  # a true token, weighted by its row's agreement
        return 0.1 - 0.09 * near

    cands = [torch.tensor([1]), torch.tensor([3, 6]), torch.tensor([7]), torch.tensor([4, 9])]
    wider = [torch.tensor([2, 5]), torch.tensor([2, 5]), torch.tensor([8, 2]), torch.tensor([2, 5])]
    missed = torch.tensor([[1, 3, 7, 4], [1, 6, 7, 9]])
    fixed, changed = repair(second, missed, cands, wider)
    assert torch.equal(fixed, truth) and changed == [(1, 2)]
    swapped = torch.tensor([[1, 7, 3, 4], [1, 6, 8, 9]])
    fixed, changed = repair(second, swapped, cands, wider)
    assert torch.equal(fixed, truth) and (0, 1) in changed and (0, 2) in changed


def _minilm_dager_shipped_dropout(batch: int, seq_len: int):
    """MiniLM as shipped (dropout 0.1 acting), FedSGD lr 1e-4, seed 0: (reconstruction, client, spec, model)."""
    from fedleak import data, models
    from fedleak.attacks import build
    from fedleak.fl.client import client_update
    from fedleak.types import Protocol

    spec, clients = data.load("text", num_clients=1, samples_per_client=batch, seq_len=seq_len,
                              task="classification", seed=0)
    model = models.build("minilm", spec, seed=0, dropout="shipped")
    update = client_update(model, clients[0], Protocol("fedsgd", lr=1e-4), seed=0)
    return build("dager").reconstruct(update, model, spec), clients[0], spec, model


def test_dager_recovers_minilm_under_its_shipped_dropout():
    """MiniLM as shipped (hidden and attention dropout 0.1) in train mode, FedSGD 4 × 16 (64 token inputs): the
    first layer's inputs are masked copies (measured, rate 0.1), the masked-copy test with its pursuit start
    finds the (token, position) inputs, the partition search orders them and the repair restores what the search
    missed (measured on this seed: all four sequences exact, token accuracy 1.0, one token repaired at (2, 9);
    benchmarks: 16 of 16 over 4 clients at 4 × 16, 32 of 32 over 8 clients at issue 28's 4 × 32,
    ``llm_minilm_dropout_4x16.json``, ``_4x32.json``). The bars leave one sequence and 2 % of the tokens. The
    masks of the later layers cannot be replayed: never proved. (One test for what were two, 2 × 16 and 4 × 32:
    22 CPU-s instead of 18 + 67; the masked-copy test at 4 × 32 is checked by the matching-pursuit test below.)"""
    pytest.importorskip("transformers")
    from fedleak import metrics

    rec, client, spec, model = _minilm_dager_shipped_dropout(4, 16)
    assert abs(rec.extras["first_masked_rate"] - 0.1) < 1e-4
    assert rec.extras["search"]["search"] == "partition"
    scores = metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)
    assert scores["exact_sequences"] >= 0.75 and scores["token_accuracy"] >= 0.98 and scores["rouge1"] >= 0.9
    exact = rec.extras["exactness"]
    assert not rec.extras["certain"] and "masked-copy test matched" in exact["reason"]
    assert "not proved" in exact["reason"] and "is what fails" not in exact["reason"]  # it did not fail here


def test_layer_evidence_scores_true_continuations_closer_than_wrong_ones(monkeypatch):
    """A six-block LLaMA with LoRA dropout 0.075 in a first round (B = 0: the forward is the clean one): every
    block's span, each with its own mask, places the true sequence's inputs closer than the same sequence
    with one token replaced (random weights; measured: 0.165 against at least 0.268, a ratio of 0.62; the bar
    is 0.8). On SmolLM2's 30 blocks the margin is far larger (docs/llm.md)."""
    pytest.importorskip("peft")
    from fedleak import data, models
    from fedleak.attacks.text.common import vocab_size
    from fedleak.attacks.text.deep import LayerEvidence
    from fedleak.fl.client import client_update
    from fedleak.models.hf import builders
    from fedleak.types import Protocol

    arch, config = builders.CONFIGS["llama-tiny"]
    monkeypatch.setitem(builders.CONFIGS, "llama-tiny", (arch, {**config, "num_hidden_layers": 6}))
    spec, clients = data.load("text", num_clients=1, samples_per_client=1, seq_len=12, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft", lora_dropout=0.075)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    model.eval()
    evidence = LayerEvidence.build(model, update.pseudo_gradient(), update.server_params)
    assert evidence is not None and evidence.count == 5  # blocks 1..5, v_proj (q_proj: position 0 unheld)
    ids = clients[0].inputs
    wrong = ids.repeat(8, 1)
    wrong[:, 6] = torch.randint(vocab_size(model), (8,), generator=torch.Generator().manual_seed(1))
    wrong[:, 6] = torch.where(wrong[:, 6] == ids[0, 6], wrong[:, 6] + 1, wrong[:, 6])
    true_d = evidence.distance(ids[:, :7])
    wrong_d = evidence.distance(wrong[:, :7])
    assert float(true_d.max()) < 0.8 * float(wrong_d.min())


def test_recovered_masks_replay_the_masked_copies_into_block_zero():
    """The masks the first test recovered are the client's: with them block 0 receives exactly the masked copies
    (checked against the train-mode input of the client's own step), and 1 where a token's mask is unknown."""
    pytest.importorskip("transformers")
    from fedleak import data, models
    from fedleak.attacks.text.masks import RecoveredMasks
    from fedleak.attacks.text.probes import capture, mark_masked_inputs, probes
    from fedleak.fl.client import client_update
    from fedleak.types import Protocol

    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=16, task="classification",
                              seed=0)
    model = models.build("minilm", spec, seed=0, dropout="shipped")
    update = client_update(model, clients[0], Protocol("fedsgd", lr=1e-4), seed=0)
    model.eval()
    first, _ = probes(model, update.pseudo_gradient(), update.server_params)
    assert abs(mark_masked_inputs(model, update.server_params, first, clients[0].inputs) - 0.1) < 1e-4
    ids = clients[0].inputs
    cands = [torch.unique(ids[:, p]) for p in range(ids.shape[1])]
    layout = RecoveredMasks.layout(cands)
    replay = RecoveredMasks(model, first.spans[0], cands, capture(model, update.server_params, layout,
                                                                   first.modules[0]))
    clean = capture(model, update.server_params, ids, first.modules[0])
    with replay.replayed(ids):
        seen = capture(model, update.server_params, ids, first.modules[0])
    masked = seen.double() / clean.double().where(clean.abs() > 1e-9, torch.ones_like(clean.double()))
    distinct = [p for p in range(ids.shape[1]) if ids[0, p] != ids[1, p]]  # a shared token has two masks
    assert torch.allclose(first.spans[0].distance(seen[:, distinct].reshape(-1, seen.shape[-1])),
                          torch.zeros(2 * len(distinct), dtype=torch.float64), atol=1e-5)
    assert set(masked.round(decimals=4).unique().tolist()) <= {0.0, round(1 / 0.9, 4), 1.0}
    other = ids.clone()
    other[0, 3] = 999  # a token with no recovered mask: left as it is
    assert torch.equal(replay.factors(other, 384)[0, 3], torch.ones(384, dtype=replay.keep[0].dtype))


def test_dager_re_ranks_its_beam_by_every_block_under_lora_dropout(monkeypatch):
    """DAGER on the six-block LLaMA, LoRA r 32 with dropout 0.075, first round: the beam is re-ranked by the 5
    blocks' spans and the two sequences of this seed come back whole (measured: both). Never proved: the
    masks cannot be replayed."""
    pytest.importorskip("peft")
    from fedleak import data, metrics, models
    from fedleak.attacks import build
    from fedleak.fl.client import client_update
    from fedleak.models.hf import builders
    from fedleak.types import Protocol

    arch, config = builders.CONFIGS["llama-tiny"]
    monkeypatch.setitem(builders.CONFIGS, "llama-tiny", (arch, {**config, "num_hidden_layers": 6}))
    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = models.build("llama-tiny", spec, seed=0, lora=32, lora_targets="peft", lora_dropout=0.075)
    update = client_update(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    assert rec.extras["layer_evidence"] == 5
    assert metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0
    assert not rec.extras["certain"]


def test_matching_pursuit_finds_the_masked_copies_the_flips_miss():
    """MiniLM as shipped, 4 × 32: the 128 true first-layer inputs against the span of their masked copies (rank
    128 of 384). Measured on this seed: 127 found with the matching-pursuit start, 120 without it (the flips'
    own starts settle between copies); the bars leave a margin of one."""
    pytest.importorskip("transformers")
    from fedleak import data, models
    from fedleak.attacks.text.common import first_inputs_fn
    from fedleak.attacks.text.dager import rounding_of
    from fedleak.attacks.text.probes import mark_masked_inputs, probes
    from fedleak.fl.client import client_update
    from fedleak.types import Protocol

    spec, clients = data.load("text", num_clients=1, samples_per_client=4, seq_len=32, task="classification",
                              seed=0)
    model = models.build("minilm", spec, seed=0, dropout="shipped")
    update = client_update(model, clients[0], Protocol("fedsgd", lr=1e-4), seed=0)
    first, _ = probes(model, update.pseudo_gradient(), update.server_params, rounding_of(update))
    model.eval()
    rate = mark_masked_inputs(model, update.server_params, first, clients[0].inputs[:2])
    span = first.spans[0]
    assert span.rank == 128 and abs(rate - 0.1) < 1e-4
    x = first_inputs_fn(model, [update.server_params], first.modules[0])(clients[0].inputs)[0].reshape(-1, 384)
    found = int((masked_fit(x, span.basis, span.mask_rate)[0] < 1e-4).sum())
    alone = int((masked_fit(x, span.basis, span.mask_rate, pursuit=False)[0] < 1e-4).sum())
    assert found >= 126 and alone <= 125


def test_polish_moves_are_one_token_away_and_undo_a_skipped_token():
    """The local search after the beam: every move substitutes, inserts (last token dropped) or deletes (token
    appended) one token; on a distance that holds the true token at each place below the rest, a sequence
    that skipped a token and carries a wrong one is brought back whole (two moves: insert, substitute)."""
    from fedleak.attacks.text.polish import MAX_MOVES, moves, polish

    seq = torch.tensor([1, 2, 3])
    tokens = torch.tensor([1, 2, 3, 4])
    moved = moves(seq, tokens)
    assert not (moved == seq).all(1).any() and len({tuple(r) for r in moved.tolist()}) == moved.shape[0]
    assert [4, 1, 2] in moved.tolist() and [1, 3, 4] in moved.tolist() and [1, 4, 3] in moved.tolist()
    s, expected = seq.tolist(), set()
    for i in range(3):
        for c in tokens.tolist():
            expected |= {tuple(s[:i] + [c] + s[i + 1:]), tuple((s[:i] + [c] + s[i:])[:3]),
                         tuple(s[:i] + s[i + 1:] + [c])}
    assert {tuple(r) for r in moved.tolist()} == expected - {tuple(s)}

    truth = torch.tensor([5, 6, 7, 8, 9, 10])

    def distances(ids):  # the true token at its place is close, anything else far
        return torch.where(ids == truth, torch.tensor(0.01), torch.tensor(1.0))

    start = torch.tensor([[5, 6, 8, 9, 10, 11]])  # 7 skipped, a stray 11 at the end
    done, info = polish(start, torch.arange(5, 12), distances, distances)
    assert done.tolist() == [truth.tolist()]
    assert info["sequences"][0]["moves"] == 1 and info["sequences"][0]["objective_after"] < \
        info["sequences"][0]["objective_before"]
    stays, info = polish(truth.unsqueeze(0), torch.arange(5, 12), distances, distances)
    assert torch.equal(stays[0], truth) and info["sequences"][0]["moves"] == 0
    long = torch.arange(MAX_MOVES // 3 + 1).unsqueeze(0)  # past the budget: returned as it is, and said so
    kept, info = polish(long, torch.tensor([0]), distances, distances)
    assert torch.equal(kept, long) and "exceed the budget" in info["skipped"]


def test_repeat_penalty_costs_runs_from_the_start_not_a_later_doubled_token():
    """Under RoPE a run "v v …" from position 0 repeats position 0's input; "\\n\\n" later is its own input and
    costs only the repeat."""
    import math

    from fedleak.attacks.text.search import DOUBLED_COST, REPEAT_COST, repeat_penalty

    cost = repeat_penalty(torch.tensor([[4, 4, 4, 5, 6, 6]]))[0].tolist()
    assert cost[0] == 0 and math.isclose(cost[1], REPEAT_COST + DOUBLED_COST)
    assert math.isclose(cost[2], 2 * REPEAT_COST + DOUBLED_COST)
    assert cost[3] == cost[4] == 0 and math.isclose(cost[5], REPEAT_COST)


def test_beam_quota_keeps_a_start_for_every_sequence_and_polish_never_merges_two():
    """The beam keeps at most cap_factor prefixes per first token (N sequences need N starts; SmolLM2 LoRA r 128
    4 × 16 came back as one sequence three times); the descent never moves a sequence onto another one."""
    from fedleak.attacks.text.polish import polish
    from fedleak.attacks.text.search import quota

    order = torch.tensor([5, 4, 3, 2, 1, 0])  # best first
    groups = torch.tensor([7, 7, 9, 9, 9, 9])  # items 2..5 start with token 9
    assert quota(order, groups, 2, 4).tolist() == [5, 4, 1, 0]
    assert quota(order, groups, 2, 6).tolist() == [5, 4, 1, 0, 3, 2]  # too few groups: the best of the rest
    assert quota(order, groups, 8, 3).tolist() == [5, 4, 3]  # a quota at the cap changes nothing (N = 1)

    truth = torch.tensor([1, 2, 3, 4])

    def distances(ids):
        return torch.where(ids == truth, torch.tensor(0.01), torch.tensor(1.0))

    seqs = torch.stack([truth, torch.tensor([1, 2, 3, 5])])  # the second is one substitution from the first
    done, _ = polish(seqs, torch.arange(1, 6), distances, distances)
    assert torch.equal(done[0], truth) and not torch.equal(done[1], truth)
