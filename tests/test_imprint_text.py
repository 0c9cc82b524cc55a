"""Robbing the Fed on text (App. A.4): imprint block after the token embeddings of a tiny LM."""

from __future__ import annotations

import pytest
import torch

from fedleak import FedleakError
from fedleak.attacks import build as build_attack
from fedleak.attacks.imprint import expected_recovered
from fedleak.data import text
from fedleak.fl.client import client_update
from fedleak.models import build as build_model
from fedleak.models.imprint import imprint
from fedleak.types import Protocol


@pytest.fixture(scope="module")
def corpus():
    return text.load(num_clients=2, samples_per_client=64, seed=0, seq_len=16, vocab_size=1500)


def test_tokenizer_and_vocabulary():
    tokens = text.tokenize("Hello, World!\n=====\nIt's 42 o'clock.")
    assert tokens == ["hello", ",", "world", "!", "it's", "42", "o'clock", "."]
    vocab = text.Vocabulary.build([["b", "a", "b", "c"], ["a", "b"]], 3)
    assert vocab.tokens == ("<unk>", "b", "a")
    assert vocab.encode(["a", "z", "b"]) == [2, 0, 1]
    assert vocab.decode(torch.tensor([1.0, 2.0])) == "b a"
    with pytest.raises(FedleakError):
        vocab.decode([7])
    with pytest.raises(FedleakError):
        text.Vocabulary.build([["a"]], 1)


def test_corpus_ships_with_dependencies(corpus):
    names = [name for name, _ in text.documents("all")]
    assert any(n.startswith("sklearn:") for n in names) and any(n.startswith("stdlib:") for n in names)
    assert corpus.spec.shape == (1, 1, 16) and corpus.spec.num_classes == len(corpus.vocabulary) == 1500
    a, b = corpus.clients
    assert a.inputs.shape == (64, 16) and a.labels.shape == (64,)
    assert a.inputs.dtype == torch.float32 and bool((a.inputs == a.inputs.round()).all())
    # the server's public text is disjoint from the clients' windows
    public = {tuple(r.long().tolist()) for r in corpus.surrogate}
    assert not public & {tuple(r.long().tolist()) for r in torch.cat([a.inputs, b.inputs])}
    again = text.load(num_clients=2, samples_per_client=64, seed=0, seq_len=16, vocab_size=1500)
    assert torch.equal(again.clients[0].inputs, a.inputs)
    with pytest.raises(FedleakError):
        text.load(num_clients=1000, samples_per_client=1000)
    with pytest.raises(FedleakError):
        text.documents("wikipedia")


def test_language_model_and_token_accuracy(corpus):
    model = build_model("text-transformer", corpus.spec)
    logits = model(corpus.clients[0].inputs[:3])
    assert logits.shape == (3, corpus.spec.num_classes)
    assert torch.equal(model(corpus.clients[0].inputs[:3].view(3, 1, 1, 16)), logits)
    truth = torch.tensor([[1, 2, 3], [4, 5, 6]])
    scores = text.token_accuracy(torch.tensor([[4.0, 5, 0], [1, 2, 3], [9, 9, 9]]), truth)
    assert scores["token_accuracy"] == pytest.approx(5 / 6) and scores["exact_sequences"] == 1
    assert scores["assignment"] == [1, 0]
    assert text.token_accuracy(torch.zeros(0, 3), truth)["token_accuracy"] == 0.0


def test_imprint_after_token_embeddings_recovers_sentences(corpus):
    """256 bins, 64 sequences of 16 tokens: the sequences alone in their bin come back token for token."""
    client = corpus.clients[0]
    lm = build_model("text-transformer", corpus.spec, seed=1)
    model = imprint(lm, corpus.spec, bins=256, position="embedding", side="after", linfunc="randn",
                    surrogate=corpus.surrogate, seed=0)
    secrets = model.imprint_secrets()
    assert secrets["input_shape"] == [16, 32] and secrets["tokens"] == {"embedding": "base.embedding.weight"}
    update = client_update(model, client, Protocol("fedsgd"))
    rec = build_attack("imprint").reconstruct(update, model, corpus.spec)
    assert rec.inputs.shape[1] == 16
    scores = text.token_accuracy(rec.inputs, client.inputs)
    expected = expected_recovered(64, 256)  # ≈ 49.9 of 64
    assert scores["exact_sequences"] >= expected - 10
    assert scores["token_accuracy"] >= 0.7
    assert abs(len(rec.extras["single_bins"]) - scores["exact_sequences"]) <= 6
