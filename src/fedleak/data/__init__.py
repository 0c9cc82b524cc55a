"""Datasets as federated clients.

``fedleak.data.load(name, root=None, num_clients=10, samples_per_client=50, seed=0, split="train",
**options)`` returns ``(DataSpec, list[ClientData])`` with normalized inputs; :data:`DATASETS`
names the datasets and :func:`spec_for` gives a dataset's spec without loading it.
:mod:`fedleak.data.partition` holds the IID / Dirichlet / sequential client splits.

One module per job: :mod:`.leaf` (FEMNIST JSON), :mod:`.cifar` (+ :mod:`.safe_pickle`),
:mod:`.mnist` (IDX), :mod:`.imagefolder`, :mod:`.embedded` (digits, photos), :mod:`.partition`,
:mod:`.registry`.
"""

from . import partition
from .registry import DATASETS, load, spec_for

__all__ = ["DATASETS", "load", "spec_for", "partition"]
