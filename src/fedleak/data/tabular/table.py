"""A table as read from a file: raw cell strings column by column, checked cell by cell.

Every check names the file, the row (1-based, data rows, the header not counted) and the column, so a
hospital's CSV with one bad cell gets one line saying where it is, not a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from ...errors import FedleakError
from .schema import TabularSchema, fit_schema

MISSING = ("", "nan", "NaN", "NA", "N/A", "null", "None")


@dataclass
class Table:
    """Raw cells of one file (``columns``: name → strings), which columns are which kind, and the label."""

    path: str
    columns: dict[str, list[str]]
    kinds: dict[str, str]
    label: str
    classes: Optional[tuple[str, ...]] = None
    categories: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.columns[self.label])

    def _where(self, row: int, column: str) -> str:
        return f"{self.path}: row {row + 1}, column {column!r}"

    def numbers(self, name: str) -> np.ndarray:
        """A continuous column as floats; a missing or non-numeric cell is an error naming row and column."""
        out = np.empty(len(self.columns[name]), dtype=np.float64)
        for i, cell in enumerate(self.columns[name]):
            text = str(cell).strip()
            if text in MISSING:
                raise FedleakError(f"{self._where(i, name)}: missing value where a number is expected")
            try:
                out[i] = float(text)
            except ValueError:
                raise FedleakError(f"{self._where(i, name)}: {text[:40]!r} is not a number") from None
            if not np.isfinite(out[i]):
                raise FedleakError(f"{self._where(i, name)}: {text[:40]!r} is not a finite number")
        return out

    def labels(self, classes: Sequence[str]) -> np.ndarray:
        lookup = {c: i for i, c in enumerate(classes)}
        out = np.empty(len(self), dtype=np.int64)
        for i, cell in enumerate(self.columns[self.label]):
            text = str(cell).strip()
            if text in MISSING:
                raise FedleakError(f"{self._where(i, self.label)}: missing label")
            if text not in lookup:
                raise FedleakError(f"{self._where(i, self.label)}: unknown class {text[:40]!r} "
                                   f"(the schema's classes: {', '.join(classes)})")
            out[i] = lookup[text]
        return out

    def cells(self, name: str, categories: Optional[Sequence[str]] = None) -> list[str]:
        """A categorical column's cells; missing cells and (with ``categories``) unknown ones are errors."""
        allowed = set(categories) if categories is not None else None
        out = []
        for i, cell in enumerate(self.columns[name]):
            text = str(cell).strip()
            if text in MISSING:
                raise FedleakError(f"{self._where(i, name)}: missing value (a category is expected)")
            if allowed is not None and text not in allowed:
                shown = ", ".join(list(categories)[:12]) + (" ..." if len(categories) > 12 else "")
                raise FedleakError(f"{self._where(i, name)}: unknown category {text[:40]!r} "
                                   f"(the schema lists {len(categories)}: {shown})")
            out.append(text)
        return out

    def typed(self, schema: Optional[TabularSchema] = None) -> dict[str, list]:
        """The feature columns converted and checked (categories against ``schema`` when given)."""
        known = {c.name: c for c in schema.columns} if schema is not None else {}
        out: dict[str, list] = {}
        for name, kind in self.kinds.items():
            if name not in self.columns:
                raise FedleakError(f"{self.path}: no column {name!r} (the schema needs it)")
            if kind == "continuous":
                out[name] = self.numbers(name).tolist()
            else:
                listed = known[name].categories if name in known else self.categories.get(name)
                out[name] = self.cells(name, listed)
        return out

    def class_names(self) -> tuple[str, ...]:
        if self.classes is not None:
            return tuple(self.classes)
        seen = sorted({str(c).strip() for c in self.columns[self.label]} - set(MISSING))
        if len(seen) < 2:
            raise FedleakError(f"{self.path}: the label column {self.label!r} holds {len(seen)} class(es); "
                               f"at least 2 are needed")
        return tuple(seen)

    def fit(self, *others: "Table") -> TabularSchema:
        """The schema over this table and ``others`` (train+test statistics, as the reference)."""
        typed = [t.typed() for t in (self, *others)]
        merged = {name: [v for part in typed for v in part[name]] for name in self.kinds}
        return fit_schema(merged, self.kinds, self.label, self.class_names(), self.categories)

    def encode(self, schema: TabularSchema) -> tuple[torch.Tensor, torch.Tensor]:
        """Standardized records (N, width) float32 and labels (N,) int64 under ``schema``."""
        typed = self.typed(schema)
        return schema.encode(typed), torch.from_numpy(self.labels(schema.classes))
