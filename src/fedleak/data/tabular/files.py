"""The user's own table: a CSV or Parquet file, a label column and a schema (given or inferred).

The schema says which columns are categorical and which continuous (a JSON file or a mapping
``{"column": "categorical" | "continuous" | "drop"}``, optionally ``{"column": ["cat", "egories"]}`` to fix a
column's category list). Without one it is inferred — a column whose every cell is a number and which holds
more than ``max_categories`` distinct values is continuous, every other column categorical — and the inferred
schema is printed as a summary so the user can check and fix it. A mostly numeric column with a few
non-numbers is continuous, its bad cells errors naming their row.

The file is checked before it is read: a Parquet file must carry Parquet's magic bytes, a table wider than
:data:`~fedleak.data.tabular.schema.MAX_COLUMNS` is refused from its header, a label column that does not
exist and a column with no values are errors naming the file and column; cell errors name the row too
(:mod:`.table`). Needs pandas (and pyarrow for Parquet): ``pip install -e ".[tabular]"``.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Callable, Optional

from ...errors import FedleakError
from .schema import KINDS, MAX_COLUMNS
from .table import MISSING, Table

SUFFIXES = (".csv", ".tsv", ".txt", ".parquet", ".pq")
INFER_MAX_CATEGORIES = 20


def _pandas():
    try:
        import pandas
    except ImportError:
        raise FedleakError('reading a CSV/Parquet table needs pandas: pip install -e ".[tabular]"') from None
    return pandas


def _header_width(path: Path, delimiter: str) -> int:
    """Columns in the CSV header, counted from its first line without reading the file."""
    with path.open("r", encoding="utf-8", errors="replace", newline="") as handle:
        first = handle.readline(64 * 1024 * 1024)
    return len(next(csv.reader([first], delimiter=delimiter), []))


def read_frame(path) -> dict[str, list[str]]:
    """Every column of a CSV or Parquet file as strings (missing cells as "")."""
    path = Path(path)
    if not path.is_file():
        raise FedleakError(f"{path}: file not found")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise FedleakError(f"{path}: unknown table format {suffix or '(no suffix)'!r}; allowed: {', '.join(SUFFIXES)}")
    pandas = _pandas()
    if suffix in (".parquet", ".pq"):
        with path.open("rb") as handle:
            head = handle.read(4)
            handle.seek(max(path.stat().st_size - 4, 0))
            tail = handle.read(4)
        if head != b"PAR1" or tail != b"PAR1" or path.stat().st_size < 12:
            raise FedleakError(f"{path}: not a Parquet file (no PAR1 magic bytes at its start and end)")
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise FedleakError(f'{path}: reading Parquet needs pyarrow: pip install -e ".[tabular]"') from None
        try:
            width = pq.ParquetFile(path).metadata.num_columns
        except Exception as exc:  # pyarrow raises its own ArrowInvalid / OSError on a damaged file
            raise FedleakError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0][:120]})") from None
        _check_width(path, width)
        try:
            frame = pandas.read_parquet(path)
        except Exception as exc:
            raise FedleakError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0][:120]})") from None
        frame = frame.astype(object).where(frame.notna(), "")
        return {str(c): [str(v) for v in frame[c].tolist()] for c in frame.columns}
    delimiter = "\t" if suffix == ".tsv" else ","
    _check_width(path, _header_width(path, delimiter))
    try:
        frame = pandas.read_csv(path, dtype=str, keep_default_na=False, na_filter=False, sep=delimiter,
                                skipinitialspace=True)
    except Exception as exc:  # pandas' ParserError / EmptyDataError / UnicodeDecodeError
        raise FedleakError(f"{path}: not a readable CSV table ({str(exc).splitlines()[0][:160]})") from None
    return {str(c).strip(): frame[c].tolist() for c in frame.columns}


def _check_width(path: Path, width: int) -> None:
    if width > MAX_COLUMNS:
        raise FedleakError(f"{path}: {width} columns, more than the {MAX_COLUMNS} a table may have")
    if width < 2:
        raise FedleakError(f"{path}: {width} column(s); a table needs a label and at least one feature column")


def read_schema(schema) -> dict:
    """A schema given as a mapping or a JSON file's path."""
    if schema is None or isinstance(schema, dict):
        return dict(schema or {})
    path = Path(schema)
    if not path.is_file():
        raise FedleakError(f"{path}: schema file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FedleakError(f"{path}: the schema is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FedleakError(f"{path}: the schema must be a JSON object mapping column names to kinds")
    return data


def _infer(values: list[str], max_categories: int) -> str:
    """Continuous when at least 90 % of the present cells are numbers of more than ``max_categories`` distinct
    values (the few others are then reported as bad cells: "thirty" in an age column), else categorical."""
    present = [v.strip() for v in values if v.strip() not in MISSING]
    numbers = set()
    for v in present:
        try:
            numbers.add(float(v))
        except ValueError:
            pass
    share = sum(1 for v in present if _is_number(v)) / max(len(present), 1)
    return "continuous" if share >= 0.9 and len(numbers) > max_categories else "categorical"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_table(path, label: str, schema=None, *, echo: Optional[Callable[[str], None]] = None,
               max_categories: int = INFER_MAX_CATEGORIES) -> Table:
    """The user's table: label column ``label``, feature kinds from ``schema`` or inferred (summary to ``echo``)."""
    columns = read_frame(path)
    given = read_schema(schema)
    if not isinstance(label, str) or label not in columns:
        shown = ", ".join(list(columns)[:20]) + (" ..." if len(columns) > 20 else "")
        raise FedleakError(f"{path}: no label column {label!r}; its columns: {shown}")
    for name, values in columns.items():
        if all(str(v).strip() in MISSING for v in values):
            raise FedleakError(f"{path}: column {name!r} is empty (no value in any of its {len(values)} rows)")
    unknown = sorted(set(given) - set(columns))
    if unknown:
        raise FedleakError(f"{path}: the schema names column(s) {unknown} that the file does not have")
    kinds, categories = {}, {}
    for name in columns:
        if name == label:
            continue
        kind = given.get(name)
        if isinstance(kind, list):
            categories[name] = tuple(str(c) for c in kind)
            kind = "categorical"
        if kind == "drop":
            continue
        if kind is None:
            kind = _infer(columns[name], max_categories)
        if kind not in KINDS:
            raise FedleakError(f"{path}: schema kind of column {name!r} must be one of "
                               f"{', '.join(KINDS)}, drop or a list of categories, got {kind!r}")
        kinds[name] = kind
    if not kinds:
        raise FedleakError(f"{path}: no feature column left besides the label {label!r}")
    table = Table(str(path), {k: columns[k] for k in (*kinds, label)}, kinds, label, categories=categories)
    if echo is not None and not given:
        echo(summary(table))
    return table


def summary(table: Table) -> str:
    """The inferred schema in a few lines (what the user checks, and the JSON to pass to fix it)."""
    cont = [n for n, k in table.kinds.items() if k == "continuous"]
    cat = [n for n, k in table.kinds.items() if k == "categorical"]
    lines = [f"{table.path}: {len(table)} rows; label {table.label!r} ({len(table.class_names())} classes); "
             f"inferred {len(cont)} continuous column(s): {', '.join(cont) or '-'}; "
             f"{len(cat)} categorical: {', '.join(cat) or '-'}",
             "  to fix a kind pass a schema JSON, e.g. " + json.dumps({n: k for n, k in list(table.kinds.items())[:3]})]
    return "\n".join(lines)
