"""Rows as JSON objects, written as DuckDB writes them (``COPY ... (FORMAT json)``, ``to_json``).

DuckDB itself renders each row, so decimals are numbers (not strings), dates and timestamps
are DuckDB's text for them, and lists and structs nest: the same JSON whether COPY writes it
or the CLI prints it.
"""

from __future__ import annotations

import pyarrow as pa

from qengine.sandbox.carried_types import restoring_query
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import string_literal


def json_rows(data: pa.Table | pa.RecordBatch) -> list[str]:
    """One JSON object (text) per row of ``data``, its keys the column names."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    if table.num_columns == 0:
        return ["{}"] * table.num_rows
    # read by position, named as given: a result may repeat a column name (SELECT 1 AS a, 2 AS a)
    table = table.rename_columns([f"c{i}" for i in range(table.num_columns)])
    pairs = ", ".join(f"{string_literal(name)}, c{i}" for i, name in enumerate(data.schema.names))
    # a JSON column nests as JSON, not as the string Arrow carries it in (``carried_types``)
    rows = restoring_query("__qengine_rows", table.schema) or "SELECT * FROM __qengine_rows"
    con = scratch_connection()
    try:
        con.register("__qengine_rows", table)
        return [line for (line,) in con.execute(f"SELECT CAST(json_object({pairs}) AS VARCHAR) FROM ({rows})").fetchall()]
    finally:
        con.close()
