"""Arrow tables to and from the dataframes users hold: pandas (a dependency) and polars (used
when installed, never required)."""

from __future__ import annotations

import sys
from typing import Any

import pyarrow as pa

from qengine.errors import InterfaceError
from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import scratch_connection


def is_data(value: Any) -> bool:
    """Whether ``value`` is something :func:`arrow_table` turns into a table (without reading it)."""
    import pandas as pd

    polars = sys.modules.get("polars")  # a polars DataFrame exists only once polars is imported
    return isinstance(value, pa.Table | pa.RecordBatchReader | pa.RecordBatch | pd.DataFrame) or (
        polars is not None and isinstance(value, polars.DataFrame)
    )


def arrow_table(data: Any) -> pa.Table | None:
    """``data`` as an Arrow table, if it is data: an Arrow table, record batch or reader, a
    pandas or polars DataFrame; None for anything else."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        return pa.Table.from_pandas(data, preserve_index=False)
    polars = sys.modules.get("polars")
    if polars is not None and isinstance(data, polars.DataFrame):
        return data.to_arrow()
    return None


def pandas_frame(table: pa.Table) -> Any:
    """A result (its carried DuckDB types tagged, ``sandbox.carried_types``) as the pandas
    DataFrame DuckDB's ``df()`` makes of it: DuckDB converts by its types (a DECIMAL or HUGEINT
    to float64, a DATE to datetime64), not as Arrow does, so DuckDB converts it here too."""
    con = scratch_connection()
    try:
        con.register("result", table)
        return con.sql(restoring_query("result", table.schema) or "SELECT * FROM result").df()
    finally:
        con.close()


def polars_frame(table: pa.Table) -> Any:
    """``table`` as a polars DataFrame; polars is optional, so its absence is the user's to fix."""
    try:
        import polars
    except ImportError as e:
        raise InterfaceError("a polars DataFrame needs polars, which is not installed: pip install polars") from e
    return polars.from_arrow(table)
