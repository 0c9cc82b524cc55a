"""Text attacks (attacks/text): dager, tiger, tag on gpt2-tiny and the pretrained MiniLM, fixed seeds."""

from __future__ import annotations

import math

import pytest
import torch

from fedleak import data, metrics, models
from fedleak.attacks import build
from fedleak.attacks.text.spans import gap_rank
from fedleak.errors import FedleakError
from fedleak.fl.client import client_update
from fedleak.types import ClientData, Protocol

pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def lm():
    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    return spec, clients[0]


@pytest.fixture(scope="module")
def cls():
    spec, clients = data.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="classification")
    # dropout off on request: these tests check the span attacks' logic (dropout as shipped: test_llm.py)
    return spec, clients[0], models.build("minilm", spec, seed=0, dropout="off")


def _attack(name, spec, client, model, protocol=Protocol("fedsgd", lr=0.01), **options):
    update = client_update(model, client, protocol)
    rec = build(name, **options).reconstruct(update, model, spec)
    return rec, metrics.evaluate(rec, client, spec, tokenizer=model.tokenizer)


def test_gap_rank_finds_the_rank_of_a_low_rank_matrix():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(64, 5, generator=g) @ torch.randn(5, 96, generator=g)
    s = torch.linalg.svdvals(m)
    assert gap_rank(s, m.shape)[0] == 5
    assert gap_rank(torch.linalg.svdvals(torch.randn(32, 48, generator=g)), (32, 48))[0] == 32


def test_a_weak_true_direction_is_kept_by_the_rank_and_the_first_threshold():
    """SmolLM2 16 × 16: a token seen only at a sequence's last position gives the span a weak direction
    (σ₁₇₂ = 7e-7·σ₁ after a drop of 107 at 171, then 57 down to the rounding floor); its distance to the span is
    less precise (2.7e-3, the other true tokens ≤ 1.4e-5, false ones ≥ 0.11). Both edges are the last clear
    drop, not the largest one (the sequence ending in it was lost before)."""
    from fedleak.attacks.text.spans import gap_threshold

    data = torch.cat([torch.logspace(0, math.log10(7.64e-5), 171, dtype=torch.float64),
                      torch.tensor([7.1e-7], dtype=torch.float64),
                      torch.linspace(1.26e-8, 6e-9, 404, dtype=torch.float64)])
    assert gap_rank(data, (1728, 576))[0] == 172
    dist = torch.cat([torch.logspace(-6, math.log10(1.4e-5), 171), torch.tensor([2.75e-3]),
                      torch.linspace(0.113, 0.9, 5000)])
    assert 2.75e-3 < gap_threshold(dist, weak=True) < 0.113
    assert 1.4e-5 < gap_threshold(dist) < 2.75e-3  # the largest gap alone (the other thresholds keep it)


def test_gap_rank_keeps_a_long_spans_tail_below_the_conservative_floor():
    """A 512-token sequence on SmolLM2 (layer 0's MLP gradient, 3072 × 576): the data's singular values decay
    smoothly to 8e-8·σ₁ at 512, the float32 rounding sits at 1.5e-8·σ₁. The tail lies below σ₁·max(shape)·ε
    (3.7e-4·σ₁); clamping there flattened it and put the rank at 496, where DAGER then failed at position 1."""
    data = torch.logspace(0, math.log10(7.85e-8), 512, dtype=torch.float64)
    noise = torch.linspace(1.69e-8, 1.2e-8, 576 - 512, dtype=torch.float64)
    assert gap_rank(torch.cat([data, noise]), (3072, 576))[0] == 512


@pytest.mark.parametrize("protocol", [Protocol("fedsgd", lr=0.01), Protocol("fedavg", epochs=2, lr=0.01)],
                         ids=["fedsgd", "fedavg-2-steps"])
def test_dager_exact_on_gpt2_tiny(lm, protocol):
    spec, client = lm
    model = models.build("gpt2-tiny", spec, seed=0)
    rec, m = _attack("dager", spec, client, model, protocol)
    assert m["exact_sequences"] == 1.0
    assert rec.extras["exactness"]["holds"] is True
    assert rec.extras["verified"] is True  # every recovered prefix lies in the spans (at an interpolated θ for FedAvg)
    assert rec.extras["text"] and len(rec.extras["text"]) == 2


def test_dager_final_token_from_the_lm_head(lm):
    """No target after the sequence: the final token has no attention gradient, the LM head gives it."""
    spec, client = lm
    hidden = ClientData(client.inputs, torch.full_like(client.labels, -100), client.client_id)
    model = models.build("gpt2-tiny", spec, seed=0)
    rec, m = _attack("dager", spec, hidden, model)
    assert rec.extras["candidates_per_position"][-1] == 0  # invisible to every span test
    assert rec.extras["final_token"]["recovered"] and rec.extras["final_token"]["residual_after"] < 1e-3
    assert m["exact_sequences"] == 1.0 and rec.extras["certain"]


def test_dager_lora_and_its_rank_limit(lm):
    spec, client = lm
    rec, m = _attack("dager", spec, client, models.build("gpt2-tiny", spec, seed=0, lora=32))
    assert m["exact_sequences"] == 1.0 and rec.extras["exactness"]["limit"] == 32
    model = models.build("gpt2-tiny", spec, seed=0, lora=8)  # 16 tokens > rank 8
    rec = build("dager").reconstruct(client_update(model, client, Protocol("fedsgd", lr=0.01)), model, spec)
    exact = rec.extras["exactness"]
    assert exact["holds"] is False and exact["tokens"] == 16 and exact["limit"] == 8 and "exceed" in exact["reason"]
    assert rec.inputs.shape == (0, 8) and rec.extras["certain"] is False


@pytest.mark.parametrize("name,options", [("dager", {}), ("tiger", {"steps": 40})], ids=["dager", "tiger"])
def test_span_attacks_on_pretrained_minilm(cls, name, options):
    spec, client, model = cls
    rec, m = _attack(name, spec, client, model, **options)
    assert m["rouge1"] >= 0.9 and m["exact_sequences"] == 1.0
    assert rec.extras["certain"] is True


def test_tag_baseline_runs_and_is_never_certain(lm):
    spec, client = lm
    rec, m = _attack("tag", spec, client, models.build("gpt2-tiny", spec, seed=0), steps=2)
    assert rec.inputs.shape == (2, 8) and rec.extras["certain"] is False and 0.0 <= m["token_accuracy"] <= 1.0


def test_bad_option_is_one_line():
    with pytest.raises(FedleakError) as err:
        build("dager", sweeps=0)
    assert "\n" not in str(err.value) and "sweeps" in str(err.value)
    with pytest.raises(FedleakError, match="bogus"):
        build("tiger", bogus=1)


def test_dager_sequence_classification_on_a_decoder():
    """The reference returns nothing here: the last block's attention gradient is rank-deficient (only the
    read-out token queries); block 0's MLP is the second span instead."""
    from transformers import GPT2Config, GPT2ForSequenceClassification

    from fedleak.attacks.text.common import simulate
    from fedleak.types import DataSpec, Update

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=30522, n_positions=32, resid_pdrop=0,
                     embd_pdrop=0, attn_pdrop=0, num_labels=2, pad_token_id=0)
    model = GPT2ForSequenceClassification(cfg).eval()
    ids = torch.randint(1000, 30000, (3, 8))
    params = {k: v.detach() for k, v in model.named_parameters()}
    zero = Update(params, Protocol("fedsgd", lr=0.01), 3, gradient={k: torch.zeros_like(v) for k, v in params.items()})
    update = Update(params, zero.protocol, 3, gradient=simulate(model, zero, ids, torch.tensor([0, 1, 1])))
    rec = build("dager").reconstruct(update, model, DataSpec("t", (1, 1, 8), 2, (0.0,), (1.0,)))
    assert sorted(map(tuple, rec.inputs.tolist())) == sorted(map(tuple, ids.tolist()))
    assert rec.extras["certain"] and rec.extras["second"]["modules"] == ["transformer.h.0.mlp.c_fc"]


def test_dager_reports_the_width_limit():
    """16 × 8 = 128 token inputs > gpt2-tiny's effective width 127 (a bias-free LayerNorm centres its output)."""
    spec, clients = data.load("text", num_clients=1, samples_per_client=16, seq_len=8, task="causal-lm")
    model = models.build("gpt2-tiny", spec, seed=0)
    rec = build("dager").reconstruct(client_update(model, clients[0], Protocol("fedsgd", lr=0.01)), model, spec)
    exact = rec.extras["exactness"]
    assert exact["holds"] is False and exact["tokens"] == 128 and exact["limit"] == 127
    assert rec.inputs.shape == (0, 8) and not rec.extras["certain"]


def test_select_spanning_prefers_sequences_over_a_repeated_token():
    """Under RoPE a prefix repeating one token has the same input at every position (one direction) and
    passes the span test closer than the true sequences; the final choice takes the prefixes that add
    the most directions (SmolLM2 2 x 16: 0 -> 2 of 2 exact, benchmarks/results/llm_dager.json)."""
    from fedleak.attacks.text.search import select_spanning

    g = torch.Generator().manual_seed(0)
    true = torch.randn(2, 6, 32, generator=g, dtype=torch.float64)  # two sequences, 6 positions, width 32
    repeated = true[:, :1].expand(-1, 6, -1)  # each one's first position, repeated
    inputs = torch.cat([repeated, true])  # survivors: the two degenerate chains first, then the true ones
    worst = torch.tensor([1e-9, 1e-9, 1e-3, 1e-3])  # the chains are the closest to the span
    assert sorted(select_spanning(inputs, worst, 2).tolist()) == [2, 3]


def test_dager_recovers_a_rope_decoder_batch_exactly():
    """llama-tiny (RoPE, RMSNorm: LLaMA's layout, as SmolLM2) FedSGD 2 x 8: both sequences whole and proved."""
    from fedleak import data as fdata, metrics, models as fmodels
    from fedleak.fl.client import client_update as update_of

    spec, clients = fdata.load("text", num_clients=1, samples_per_client=2, seq_len=8, task="causal-lm")
    model = fmodels.build("llama-tiny", spec, seed=0, dropout="off")
    update = update_of(model, clients[0], Protocol("fedsgd", lr=0.01), seed=0)
    rec = build("dager").reconstruct(update, model, spec)
    assert metrics.evaluate(rec, clients[0], spec, tokenizer=model.tokenizer)["exact_sequences"] == 1.0
    assert rec.extras["certain"]
