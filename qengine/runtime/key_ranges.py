"""Key ranges of small filtered tables, computed on the coordinator before a scan is split.

A stage joining a fact table to a filtered table every task reads whole (``date_dim`` of one
year) leaves DuckDB to skip the fact's row groups outside that table's keys, in each task, while
the splits are cut by rows: one task would get all of a year's rows and the other none. With the
key range known first, the coordinator drops those row groups and cuts even splits of the rest.
"""

from __future__ import annotations

import duckdb

from qengine.catalog import scan
from qengine.planner import logical as lp
from qengine.planner.render import render
from qengine.sandbox.pool import ConnectionPool
from qengine.sandbox.quoting import identifier


class KeyRanges:
    """Evaluates a filtered whole-table read for the min/max of one of its columns."""

    def __init__(self) -> None:
        self._connections = ConnectionPool(threads=1)

    def key_range(self, build: lp.Node, key: str) -> tuple[int, int] | None:
        """Inclusive min/max of integer column ``key`` of ``build``, (1, 0) when it has no rows;
        None when that cannot be known here (not a Parquet table, not integers, or an error the
        stage's own tasks will report)."""
        table = lp.table_read(build)
        split = table.source.whole() if table is not None else None
        source = scan.parquet_sql(split, list(table.column_map.items())) if split is not None else None
        if source is None:
            return None
        column = identifier(key)
        name = identifier(table.table)
        sql = f"WITH {name} AS ({source}) SELECT min({column}), max({column}) FROM ({render(build)}) AS t"
        with self._connections.connection(scan.split_files(split)) as lease:
            try:
                lo, hi = lease.con.sql(sql).fetchone()
            except duckdb.Error:
                return None
        if lo is None:
            return (1, 0)
        return (lo, hi) if isinstance(lo, int) and isinstance(hi, int) else None
