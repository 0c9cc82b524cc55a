"""A table's schema and its record encoding (TabLeak, Vero et al. ICML 2023, §2 and the reference's
``utils/encoder_decoder.py``).

Each categorical column becomes a one-hot block (a two-valued column too gets two entries), each
continuous column one raw entry; then every encoded entry — one-hot entries included — is z-scored with
the mean/std over the whole dataset (std 0 → 1). The label is not part of a record. The schema records
all of it (categories in order, per-entry mean/std, each continuous column's min/max and whether it holds
integers), so a reconstruction decodes back into the user's own column values: the argmax of each block,
continuous values de-standardized, clamped to [min, max] and rounded where the column holds integers.

The tolerance of a continuous column is 0.319·σ of its raw values (the reference's metric, §3 of the
research notes): a continuous cell is right iff |x̂ − x| ≤ tolerance.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Optional, Sequence

import numpy as np
import torch

from ...errors import FedleakError

KINDS = ("categorical", "continuous")
#: The reference's continuous tolerance, in standard deviations of the raw column.
TOLERANCE_SIGMAS = 0.319
MAX_COLUMNS = 10_000  # columns of one table (a wider file is refused before it is read)
MAX_CATEGORIES = 10_000  # categories of one column


@dataclass(frozen=True)
class Column:
    """One feature: its name, kind, categories (categorical) or raw statistics (continuous)."""

    name: str
    kind: str
    categories: tuple[str, ...] = ()
    mean: float = 0.0  # raw mean (continuous)
    std: float = 1.0  # raw std (continuous)
    low: float = 0.0  # raw min (continuous)
    high: float = 0.0  # raw max (continuous)
    integer: bool = False  # continuous values are whole numbers: decoded values are rounded

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise FedleakError(f"column {self.name!r}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "categorical" and not 1 <= len(self.categories) <= MAX_CATEGORIES:
            raise FedleakError(f"column {self.name!r}: a categorical column needs 1 to {MAX_CATEGORIES} categories, "
                               f"got {len(self.categories)}")
        if self.kind == "categorical" and len(set(self.categories)) != len(self.categories):
            raise FedleakError(f"column {self.name!r}: repeated categories")
        object.__setattr__(self, "categories", tuple(str(c) for c in self.categories))

    @property
    def width(self) -> int:
        return len(self.categories) if self.kind == "categorical" else 1

    @property
    def tolerance(self) -> float:
        """|x̂ − x| ≤ this counts a continuous cell as right (0.319 σ); 0 for categorical columns."""
        return TOLERANCE_SIGMAS * self.std if self.kind == "continuous" else 0.0


@dataclass(frozen=True)
class TabularSchema:
    """The columns of a table, its label and the z-scoring of every encoded entry."""

    columns: tuple[Column, ...]
    label: str
    classes: tuple[str, ...]
    entry_mean: tuple[float, ...] = field(default=())
    entry_std: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.columns:
            raise FedleakError("a table needs at least one feature column besides the label")
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise FedleakError(f"repeated column names in the schema: {sorted({n for n in names if names.count(n) > 1})}")
        if self.label in names:
            raise FedleakError(f"the label {self.label!r} cannot also be a feature column")
        if len(self.classes) < 2:
            raise FedleakError(f"the label {self.label!r} needs at least 2 classes, got {list(self.classes)}")
        width = sum(c.width for c in self.columns)
        if not self.entry_mean:
            object.__setattr__(self, "entry_mean", (0.0,) * width)
            object.__setattr__(self, "entry_std", (1.0,) * width)
        if len(self.entry_mean) != width or len(self.entry_std) != width:
            raise FedleakError(f"the schema's entry_mean/entry_std need {width} values (the encoded width)")

    # ----- layout -------------------------------------------------------------------------------------
    @property
    def width(self) -> int:
        return len(self.entry_mean)

    def blocks(self) -> list[tuple[Column, slice]]:
        """Each column with its slice of the encoded record."""
        out, start = [], 0
        for column in self.columns:
            out.append((column, slice(start, start + column.width)))
            start += column.width
        return out

    def categorical_blocks(self) -> list[slice]:
        return [s for c, s in self.blocks() if c.kind == "categorical"]

    def continuous_index(self) -> list[int]:
        return [s.start for c, s in self.blocks() if c.kind == "continuous"]

    def _stats(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean = torch.as_tensor(self.entry_mean, dtype=like.dtype, device=like.device)
        std = torch.as_tensor(self.entry_std, dtype=like.dtype, device=like.device)
        return mean, std

    def standardize(self, raw: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(raw)
        return (raw - mean) / std

    def destandardize(self, encoded: torch.Tensor) -> torch.Tensor:
        mean, std = self._stats(encoded)
        return encoded * std + mean

    # ----- encode / decode ----------------------------------------------------------------------------
    def encode(self, table: dict[str, Sequence]) -> torch.Tensor:
        """Records given column by column (category strings, numbers) → the standardized (N, width) float32."""
        n = len(next(iter(table.values()))) if table else 0
        raw = np.zeros((n, self.width), dtype=np.float64)
        for column, where in self.blocks():
            values = table[column.name]
            if column.kind == "continuous":
                raw[:, where.start] = np.asarray(values, dtype=np.float64)
            else:
                lookup = {c: i for i, c in enumerate(column.categories)}
                index = np.fromiter((lookup[str(v)] for v in values), dtype=np.int64, count=n)
                raw[np.arange(n), where.start + index] = 1.0
        return self.standardize(torch.from_numpy(raw)).float()

    def decode(self, encoded: torch.Tensor) -> dict[str, list]:
        """Standardized records (N, width) → column values: the argmax category of each block, continuous
        values de-standardized, clamped to the column's [min, max] and rounded for whole-number columns."""
        raw = self.destandardize(encoded.detach().to(torch.float64).cpu())
        out: dict[str, list] = {}
        for column, where in self.blocks():
            if column.kind == "categorical":
                index = raw[:, where].argmax(dim=1).tolist()
                out[column.name] = [column.categories[i] for i in index]
            else:
                values = raw[:, where.start].clamp(column.low, column.high)
                values = values.round() if column.integer else values
                out[column.name] = [float(v) for v in values.tolist()]
        return out

    def bounds(self, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardized [min, max] of the continuous entries (in :meth:`continuous_index` order)."""
        index = self.continuous_index()
        mean, std = self._stats(like)
        low = torch.tensor([c.low for c in self.columns if c.kind == "continuous"], dtype=like.dtype,
                           device=like.device)
        high = torch.tensor([c.high for c in self.columns if c.kind == "continuous"], dtype=like.dtype,
                            device=like.device)
        return (low - mean[index]) / std[index], (high - mean[index]) / std[index]

    # ----- JSON ---------------------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {"label": self.label, "classes": list(self.classes),
                "columns": [{"name": c.name, "kind": c.kind, **({"categories": list(c.categories)}
                                                                if c.kind == "categorical" else
                                                                {"mean": c.mean, "std": c.std, "low": c.low,
                                                                 "high": c.high, "integer": c.integer})}
                            for c in self.columns],
                "entry_mean": list(self.entry_mean), "entry_std": list(self.entry_std)}

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: dict) -> "TabularSchema":
        if not isinstance(data, dict):
            raise FedleakError(f"a tabular schema must be a JSON object, got {type(data).__name__}")
        try:
            columns = tuple(Column(**c) for c in data["columns"])
            return cls(columns, str(data["label"]), tuple(str(c) for c in data["classes"]),
                       tuple(float(v) for v in data.get("entry_mean", ())),
                       tuple(float(v) for v in data.get("entry_std", ())))
        except (KeyError, TypeError) as exc:
            raise FedleakError(f"a tabular schema is malformed: {exc}") from None


@lru_cache(maxsize=64)
def parse_schema(text: str) -> TabularSchema:
    """The :class:`TabularSchema` stored as JSON text in a ``DataSpec`` (cached: specs are immutable)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FedleakError(f"the data spec's tabular schema is not JSON: {exc}") from None
    return TabularSchema.from_json(data)


def fit_schema(table: dict[str, list], kinds: dict[str, str], label: str, classes: Sequence[str],
               categories: Optional[dict[str, Sequence[str]]] = None) -> TabularSchema:
    """The schema of a table: categories (given, else the sorted values seen), raw and per-entry statistics
    over all of ``table`` (the reference standardizes with train+test statistics)."""
    categories = categories or {}
    columns = []
    for name, kind in kinds.items():
        values = table[name]
        if kind == "categorical":
            seen = categories.get(name) or sorted({str(v) for v in values})
            columns.append(Column(name, kind, tuple(seen)))
        else:
            array = np.asarray(values, dtype=np.float64)
            std = float(array.std()) if array.size else 1.0
            columns.append(Column(name, kind, mean=float(array.mean()), std=std if std > 0 else 1.0,
                                  low=float(array.min()), high=float(array.max()),
                                  integer=bool(np.all(np.floor(array) == array))))
    draft = TabularSchema(tuple(columns), label, tuple(classes))
    raw = draft.destandardize(draft.encode(table).double())  # identity stats: the raw encoded table
    mean = raw.mean(0)
    std = raw.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    return TabularSchema(tuple(columns), label, tuple(classes), tuple(mean.tolist()), tuple(std.tolist()))


def is_finite_number(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
