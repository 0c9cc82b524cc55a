"""A new user's small inputs (issue 33 item 5): a short ``.txt`` names what would fit; a shortened
preset says in its labels what ran."""

import pytest

import fedleak
from fedleak.config import apply_overrides, load_preset
from fedleak.errors import FedleakError

TEXT = "the quick brown fox jumps over the lazy dog and then some more words follow here to make a short file\n"


def test_a_short_text_file_names_the_samples_and_sequence_length_that_fit(tmp_path):
    """About 1 s: the one-line error suggests --samples and a --seq-len, and the suggested --seq-len loads."""
    path = tmp_path / "mine.txt"
    path.write_text(TEXT)
    with pytest.raises(FedleakError) as caught:
        fedleak.data.load("text", root=path, num_clients=1, samples_per_client=10, seq_len=16, task="causal-lm")
    message = str(caught.value)
    assert "\n" not in message and "fewer than samples_per_client=10" in message
    have = int(message.split("the text holds ")[1].split(" ")[0])
    assert f"--samples {have}" in message
    shorter = int(message.split("--seq-len ")[1].split(" ")[0])
    assert 2 <= shorter < 16
    _, clients = fedleak.data.load("text", root=path, num_clients=1, samples_per_client=10, seq_len=shorter,
                                   task="causal-lm")
    assert len(clients[0]) == 10
    _, clients = fedleak.data.load("text", root=path, num_clients=1, samples_per_client=have, seq_len=16,
                                   task="causal-lm")
    assert len(clients[0]) == have


def test_agic_cifar100_quick_runs_only_budgets_its_labels_name():
    config = apply_overrides(load_preset("agic-table4-cifar100"), quick=True)
    assert [s.name for s in config.settings] == ["it100"]
    for variant in config.variants:
        assert variant.name.endswith(f"-{variant.options['iterations']}"), variant
