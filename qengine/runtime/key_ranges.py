"""Key ranges of small filtered tables, computed on the coordinator before a scan is split.

A stage joining a fact table to a filtered table every task reads whole (``date_dim`` of one
year) leaves DuckDB to skip the fact's row groups outside that table's keys, in each task, while
the splits are cut by rows: one task would get all of a year's rows and the other none. With the
key range known first, the coordinator drops those row groups and cuts even splits of the rest
(:func:`prune_scan`); a shuffle's build side reports its key range with its tasks' results.
"""

from __future__ import annotations

import duckdb

from qengine.catalog import scan
from qengine.planner import logical as lp
from qengine.planner.render import render
from qengine.planner.stages import RuntimeFilter
from qengine.runtime.query_state import QueryState, StageRun
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
        split = table.read_source.whole() if table is not None else None
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


def prune_scan(state: QueryState, run: StageRun, key_ranges: KeyRanges) -> None:
    """Re-split ``run``'s scan without data outside its build sides' key ranges."""
    if not run.stage.runtime_filters or run.stage.scan is None:
        return
    ranges: dict[str, tuple[int, int]] = {}
    for f in run.stage.runtime_filters:
        span = _build_range(state, f, key_ranges)
        if span is None:
            continue
        lo, hi = span
        old = ranges.get(f.column)
        ranges[f.column] = (lo, hi) if old is None else (max(old[0], lo), min(old[1], hi))
    if not ranges:
        return
    before = scan.row_groups(run.splits or [])
    run.splits = run.stage.scan.read_source.splits(state.workers, state.options.split_bytes, ranges)
    run.stats.row_groups_pruned += before - scan.row_groups(run.splits)
    state.set_tasks(run, len(run.splits))


def _build_range(state: QueryState, f: RuntimeFilter, key_ranges: KeyRanges) -> tuple[int, int] | None:
    """A runtime filter's key range, (1, 0) for an empty build side; None if unknown."""
    if f.build is not None:
        return key_ranges.key_range(f.build, f.key)
    span = state.runs[f.shuffle_id].ranges.get(f.key, "unknown")
    if span == "unknown":
        return None
    return (span[0], span[1]) if span is not None else (1, 0)
