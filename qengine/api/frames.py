"""Arrow tables to and from the dataframes users hold: pandas (a dependency) and polars (used
when installed, never required)."""

from __future__ import annotations

import sys
from typing import Any

import pyarrow as pa

from qengine.errors import InterfaceError


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
    polars = sys.modules.get("polars")  # a polars DataFrame exists only once polars is imported
    if polars is not None and isinstance(data, polars.DataFrame):
        return data.to_arrow()
    return None


def polars_frame(table: pa.Table) -> Any:
    """``table`` as a polars DataFrame; polars is optional, so its absence is the user's to fix."""
    try:
        import polars
    except ImportError as e:
        raise InterfaceError("a polars DataFrame needs polars, which is not installed: pip install polars") from e
    return polars.from_arrow(table)
