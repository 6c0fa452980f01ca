"""Partition pruning: the files of a hive-partitioned scan that its filters rule out, dropped
before the scan is split into tasks.

A partition column is constant over each file, so a filter conjunct that reads partition
columns alone is either true for all of a file's rows or for none. Each such conjunct is
evaluated by DuckDB, as the query itself would evaluate it, on a small table of one row per
file holding that file's partition values; a file no row of which passes is skipped. Nothing
here re-implements SQL comparisons, casts or NULL rules. Where the evaluation fails (a slot not
filled in, an expression the scratch connection cannot run) nothing is skipped: the tasks then
read every file and the query reports its own error, if any.
"""

from __future__ import annotations

import duckdb
import sqlglot.expressions as exp

from qengine.catalog.hive import constant_sql
from qengine.catalog.sources import ParquetSource
from qengine.planner import logical as lp
from qengine.planner.expressions import conjuncts
from qengine.planner.pushdown import movable
from qengine.planner.stages import StagePlan
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import identifier

_INDEX = "__qengine_file_index"


def prune_plan(plan: StagePlan) -> None:
    """Prune every stage's scans (:func:`prune_scans`): before the plan's splits are made."""
    for stage in plan.stages:
        prune_scans(stage.root)


def prune_scans(fragment: lp.Node) -> None:
    """Set ``pruned`` on every scan of a hive-partitioned table in ``fragment``: the files its
    filters keep (and clear it on the other scans: a plan run again is pruned afresh)."""
    scans = [node for node in lp.walk(fragment) if isinstance(node, lp.Scan)]
    hive = [s for s in scans if isinstance(s.source, ParquetSource) and s.source.hive is not None]
    for scan in scans:
        scan.pruned = None
    if hive:
        filters = _scan_filters(fragment)
        for scan in hive:
            scan.pruned = _pruned(scan, scan.source, filters.get(id(scan), []))  # type: ignore[arg-type]


def _scan_filters(fragment: lp.Node) -> dict[int, list[tuple[exp.Expression, dict[str, str]]]]:
    """Per scan (by id): the conjuncts of the filters over it with only filters and projections
    between, each with its column names → the scan's internal names they pass on unchanged."""
    found: dict[int, list[tuple[exp.Expression, dict[str, str]]]] = {}
    for node in lp.walk(fragment):
        if not isinstance(node, lp.Filter):
            continue
        names = {c: c for c in node.child.columns}
        below = node.child
        while isinstance(below, lp.Filter | lp.Project):
            if isinstance(below, lp.Project):
                sources = below.sources
                names = {c: sources[s] for c, s in names.items() if s in sources}
            below = below.child
        if isinstance(below, lp.Scan):
            found.setdefault(id(below), []).extend((c, names) for c in conjuncts(node.condition))
    return found


def _pruned(scan: lp.Scan, source: ParquetSource, filters: list[tuple[exp.Expression, dict[str, str]]]) -> lp.PrunedScan:
    """The files of ``source`` that ``filters``' conjuncts on partition columns may keep rows of."""
    hive = source.hive
    assert hive is not None
    position = {name.lower(): i for i, name in enumerate(hive.names)}
    partition_of = {internal: position[s.lower()] for s, internal in scan.column_map.items() if s.lower() in position}
    tests = []
    for conjunct, names in filters:
        columns = {c.name for c in conjunct.find_all(exp.Column)}
        if columns and movable(conjunct) and all(names.get(c) in partition_of for c in columns):
            tests.append((conjunct, {c: partition_of[names[c]] for c in columns}))
    if not tests:
        return lp.PrunedScan(source, len(source.paths), 0, False)
    keep = _matching(source, tests)
    if keep is None:
        return lp.PrunedScan(source, len(source.paths), 0, False)
    kept = [p for i, p in enumerate(source.paths) if i in keep]
    return lp.PrunedScan(source.restricted(set(kept)), len(source.paths), len(source.paths) - len(kept), True)


def _matching(source: ParquetSource, tests: list[tuple[exp.Expression, dict[str, int]]]) -> set[int] | None:
    """Indexes of the files whose partition values pass every test; None if DuckDB cannot say."""
    hive = source.hive
    assert hive is not None
    names = sorted({name for _, columns in tests for name in columns.items()})
    rows = []
    for i, path in enumerate(source.paths):
        values = hive.values[path]
        rows.append(f"({i}, " + ", ".join(constant_sql(values[p], hive.types[p]) for _, p in names) + ")")
    header = ", ".join([_INDEX, *(identifier(n) for n, _ in names)])
    where = " AND ".join(f"({conjunct.sql(dialect='duckdb')})" for conjunct, _ in tests)
    sql = f"SELECT {_INDEX} FROM (VALUES {', '.join(rows)}) AS p({header}) WHERE {where}"
    con = scratch_connection()
    try:
        return {row[0] for row in con.sql(sql).fetchall()}
    except duckdb.Error:
        return None
    finally:
        con.close()
