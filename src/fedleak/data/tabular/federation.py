"""Tables as federated clients: the :class:`~fedleak.types.DataSpec` of a table and its clients' records.

Partitions: ``iid`` and ``dirichlet`` (label skew, :mod:`fedleak.data.partition`), ``sequential`` (file
order), and ``column`` — one client per value of a column (``by="site"``: a hospital, a state; cross-silo
non-IID), the largest groups first. The schema (categories, statistics) is fitted on the whole table (with the
test split for Adult and German, as the reference), so every client and the server share one encoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import FedleakError, unknown_choice
from ...types import ClientData, DataSpec
from .. import partition as _partition
from .builtin import BUILTIN, load_builtin
from .files import read_table
from .schema import TabularSchema
from .table import Table

PARTITIONS = {**_partition.PARTITIONS, "column": "one client per value of the column named by 'by' (cross-silo)"}
OPTIONS = ("label", "schema", "partition", "alpha", "by", "echo")


def spec_of(schema: TabularSchema, name: str) -> DataSpec:
    """The :class:`DataSpec` of a table under ``schema`` (inputs are already standardized: mean 0, std 1)."""
    return DataSpec(name=name, shape=(1, 1, schema.width), num_classes=len(schema.classes), mean=(0.0,),
                    std=(1.0,), class_names=tuple(schema.classes), modality="tabular", tabular=schema.dumps())


def open_table(name_or_path, root=None, label: Optional[str] = None, schema=None,
               echo=None) -> tuple[Table, Optional[Table], str]:
    """(train table, test table or None, display name) of a built-in table or the user's file."""
    key = str(name_or_path).strip().lower()
    if key in BUILTIN:
        train, test = load_builtin(key, root)
        if label is not None and label != train.label:
            raise FedleakError(f"dataset {key!r} has the label column {train.label!r}, not {label!r}")
        return train, test, key
    path = Path(name_or_path)
    if label is None:
        raise FedleakError(f"{path}: name the label column of the table (label=..., --label COLUMN)")
    return read_table(path, label, schema, echo=echo), None, path.name


def clients_of(table: Table, schema: TabularSchema, spec: DataSpec, num_clients: int,
               per_client: Optional[int], seed: int = 0, partition: str = "iid", alpha: float = 0.5,
               by: Optional[str] = None) -> list[ClientData]:
    """The table's records split into clients (see the module docstring)."""
    if partition not in PARTITIONS:
        raise unknown_choice("partition", partition, PARTITIONS)
    inputs, labels = table.encode(schema)
    if partition == "column":
        if by is None or by not in table.columns:
            raise FedleakError(f"{table.path}: partition 'column' needs by=<a column of the table>, got {by!r}")
        values = np.asarray([str(v) for v in table.columns[by]])
        groups, counts = np.unique(values, return_counts=True)
        order = np.argsort(-counts, kind="stable")
        parts = [np.flatnonzero(values == groups[i]) for i in order[:num_clients]]
        rng = np.random.default_rng(seed)
        parts = [rng.permutation(p)[:per_client] if per_client else p for p in parts]
        ids = [f"{by}={groups[i]}" for i in order[:num_clients]]
    elif partition == "dirichlet":
        parts = _partition.dirichlet(labels.numpy(), num_clients, per_client, alpha=alpha, seed=seed)
        ids = [f"client-{k}" for k in range(len(parts))]
    elif partition == "sequential":
        parts = _partition.sequential(len(table), num_clients, per_client)
        ids = [f"client-{k}" for k in range(len(parts))]
    else:
        parts = _partition.iid(len(table), num_clients, per_client, seed=seed)
        ids = [f"client-{k}" for k in range(len(parts))]
    return [ClientData(inputs[p], labels[p], ident) for p, ident in zip(parts, ids) if len(p)]


def load(name_or_path, root=None, num_clients: int = 10, samples_per_client: Optional[int] = 32, seed: int = 0,
         split: str = "train", **options) -> tuple[DataSpec, list[ClientData]]:
    """``(spec, clients)`` of a table; options ``label``, ``schema``, ``partition``, ``alpha``, ``by``, ``echo``."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise FedleakError(f"unknown option(s) {unknown} for a table; allowed: {', '.join(OPTIONS)}")
    train, test, name = open_table(name_or_path, root, options.get("label"), options.get("schema"),
                                   options.get("echo"))
    schema = train.fit(*([test] if test is not None else []))
    spec = spec_of(schema, name)
    table = test if (split == "test" and test is not None) else train
    by = options.get("by")
    if by is not None and by not in table.columns:
        raise FedleakError(f"{table.path}: no column {by!r} to partition by")
    clients = clients_of(table, schema, spec, num_clients, samples_per_client, seed,
                         options.get("partition", "column" if by else "iid"), options.get("alpha", 0.5), by)
    return spec, clients
