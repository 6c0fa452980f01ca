"""Arrow tables to and from the dataframes users hold: pandas (a dependency) and polars (used
when installed, never required)."""

from __future__ import annotations

import sys
from typing import Any

import duckdb
import pyarrow as pa

from qengine.errors import DataError, InterfaceError
from qengine.planner.frontend import deduplicated
from qengine.sandbox.carried_types import restoring_query, tagged_result
from qengine.sandbox.connection import scratch_connection


def is_data(value: Any) -> bool:
    """Whether ``value`` is something :func:`arrow_table` turns into a table (without reading it)."""
    import pandas as pd

    polars = sys.modules.get("polars")  # a polars DataFrame exists only once polars is imported
    return isinstance(value, pa.Table | pa.RecordBatchReader | pa.RecordBatch | pd.DataFrame) or (
        polars is not None and isinstance(value, polars.DataFrame)
    )


def arrow_table(data: Any) -> pa.Table | None:
    """``data`` as an Arrow table of DuckDB's types, if it is data: an Arrow table, record
    batch or reader, a pandas or polars DataFrame; None for anything else.

    DuckDB reads the data as its own ``from_df``/``from_arrow`` would, so a registered table
    holds what DuckDB would hold: a pandas Categorical is an ENUM in its categories' order (it
    sorted alphabetically as Arrow's dictionary), an object column of mixed values VARCHAR (it
    failed in Arrow's conversion), a timestamp with a zone is in UTC, a large or dictionary
    string a string, an Arrow null column an INTEGER; types Arrow does not carry are tagged
    (``sandbox.carried_types``)."""
    import pandas as pd

    polars = sys.modules.get("polars")
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif polars is not None and isinstance(data, polars.DataFrame):
        data = data.to_arrow()
    if not isinstance(data, pa.Table | pa.RecordBatchReader | pd.DataFrame):
        return None
    con = scratch_connection()
    try:
        relation = con.from_df(data) if isinstance(data, pd.DataFrame) else con.from_arrow(data)
        return tagged_result(relation)
    except duckdb.Error as e:
        raise DataError(f"cannot read the data: {str(e).splitlines()[0]}") from e
    finally:
        con.close()


def pandas_frame(table: pa.Table) -> Any:
    """A result (its carried DuckDB types tagged, ``sandbox.carried_types``) as the pandas
    DataFrame DuckDB's ``df()`` makes of it: DuckDB converts by its types (a DECIMAL or HUGEINT
    to float64, a DATE to datetime64), not as Arrow does, so DuckDB converts it here too."""
    con = scratch_connection()
    try:
        table = table.rename_columns(deduplicated(table.column_names))  # as DuckDB's df() names them: 1, 1_1
        con.register("result", table)
        return con.sql(restoring_query("result", table.schema) or "SELECT * FROM result").df()
    finally:
        con.close()


def polars_frame(table: pa.Table) -> Any:
    """``table`` as a polars DataFrame; polars is optional, so its absence is the user's to fix.
    A repeated column name is renamed as DuckDB's ``pl()`` renames it (a, a_1): polars refuses two."""
    try:
        import polars
    except ImportError as e:
        raise InterfaceError("a polars DataFrame needs polars, which is not installed: pip install polars") from e
    return polars.from_arrow(table.rename_columns(deduplicated(table.column_names)))
