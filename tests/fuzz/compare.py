"""Compare a qengine result with DuckDB's as multisets, and in order as far as ORDER BY fixes it.

Unlike ``tpcds.compare`` this is exact where random queries need it: NaN equals NaN, -0.0 equals
0.0, integers and decimals are compared exactly (int64 extremes do not survive a trip through float), dates
are compared as day numbers (so dates outside Python's range still compare), and rows are paired
by a canonical sort with a fallback that matches float columns within tolerance. Where ORDER BY
keys are output columns, the sequence of key values must be the same; rows tied on the first or
last key of a LIMIT- or OFFSET-ed result may differ legitimately, so they are left out of the row comparison.
"""

from __future__ import annotations

import decimal
import math
from collections import defaultdict

import pyarrow as pa
import sqlglot

from tpcds.compare import order_columns

REL_TOL = 1e-6
ABS_TOL = 1e-9
SHOWN = 3  # differing rows quoted in a mismatch message


def _inexact(t: pa.DataType) -> bool:
    """Floating point only: a DECIMAL is exact, and matching decimals within a tolerance pairs
    near neighbours (2451436 with 2451437) so that a right answer showed as a mismatch."""
    return pa.types.is_floating(t)


def _values(column: pa.ChunkedArray) -> list:
    """Python values of a column, temporal types as integers and -0.0 as 0.0."""
    t = column.type
    if pa.types.is_date(t):
        column = column.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_timestamp(t):
        column = column.cast(pa.timestamp("us", t.tz)).cast(pa.int64())
    elif pa.types.is_time(t) or pa.types.is_duration(t):
        column = column.cast(pa.int64())
    values = column.to_pylist()
    if pa.types.is_floating(t):
        values = [v + 0.0 if v is not None else None for v in values]  # -0.0 + 0.0 == 0.0
    return values


def _rows(table: pa.Table) -> list[tuple]:
    columns = [_values(c) for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else [()] * table.num_rows


def _number(v: object) -> float:
    return float(v) if isinstance(v, decimal.Decimal | int | float) else math.nan


def _same(a: object, b: object, inexact: bool) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if inexact:
        fa, fb = _number(a), _number(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def _rows_same(a: tuple, b: tuple, inexact: list[bool]) -> bool:
    return all(_same(x, y, f) for x, y, f in zip(a, b, inexact, strict=True))


def _exact_key(v: object) -> tuple:
    if v is None:
        return (0,)
    if isinstance(v, bool | int):
        return (1, int(v))
    if isinstance(v, str):
        return (2, v)
    return (3, repr(v))


def _inexact_key(v: object) -> tuple:
    if v is None:
        return (0,)
    f = _number(v)
    if math.isnan(f):
        return (2,)
    return (1, float(f"{f:.5g}"))


def _sort_key(inexact: list[bool]):
    """Exact columns first, then floats rounded: equal rows sort together whatever their float noise."""

    def key(row: tuple) -> tuple:
        exact = tuple(_exact_key(v) for v, f in zip(row, inexact, strict=True) if not f)
        return exact + tuple(_inexact_key(v) for v, f in zip(row, inexact, strict=True) if f)

    return key


def _unmatched(got: list[tuple], expected: list[tuple], inexact: list[bool]) -> tuple[list[tuple], list[tuple]]:
    """Rows of each side with no partner on the other: greedy matching within groups of equal exact columns."""
    groups: dict[tuple, list[tuple]] = defaultdict(list)
    for row in expected:
        groups[tuple(_exact_key(v) for v, f in zip(row, inexact, strict=True) if not f)].append(row)
    extra = []
    for row in got:
        candidates = groups.get(tuple(_exact_key(v) for v, f in zip(row, inexact, strict=True) if not f), [])
        match = next((i for i, other in enumerate(candidates) if _rows_same(row, other, inexact)), None)
        if match is None:
            extra.append(row)
        else:
            candidates.pop(match)
    return extra, [row for rows in groups.values() for row in rows]


def _multiset(got: list[tuple], expected: list[tuple], inexact: list[bool]) -> str | None:
    key = _sort_key(inexact)
    got, expected = sorted(got, key=key), sorted(expected, key=key)
    if all(_rows_same(a, b, inexact) for a, b in zip(got, expected, strict=True)):
        return None
    extra, missing = _unmatched(got, expected, inexact)
    if not extra and not missing:
        return None
    return f"{len(extra)} rows only in qengine, e.g. {extra[:SHOWN]}; {len(missing)} only in DuckDB, e.g. {missing[:SHOWN]}"


def _offset(sql: str) -> bool:
    """Whether the statement's top level has an OFFSET: like LIMIT, it cuts through ties of a partial order."""
    try:
        return sqlglot.parse_one(sql, read="duckdb").args.get("offset") is not None
    except sqlglot.errors.ParseError:
        return False


def compare(got: pa.Table, expected: pa.Table, sql: str) -> str | None:
    """None if ``got`` (qengine's) answers ``sql`` as ``expected`` (DuckDB's) does, else what differs."""
    if got.num_columns != expected.num_columns:
        return f"{got.num_columns} columns, DuckDB has {expected.num_columns}"
    if got.num_rows != expected.num_rows:
        return f"{got.num_rows} rows, DuckDB has {expected.num_rows}"
    inexact = [_inexact(a.type) or _inexact(b.type) for a, b in zip(got.schema, expected.schema, strict=True)]
    a, b = _rows(got), _rows(expected)
    keys, limited = order_columns(sql, expected.column_names)
    limited = limited or _offset(sql)
    if keys is None:
        # ORDER BY a value that is not an output column: only a LIMIT-free result is comparable as a multiset
        return None if limited else _multiset(a, b, inexact)
    if keys:
        for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
            if not all(_same(ra[k], rb[k], inexact[k]) for k in keys):
                return f"row {i}: ORDER BY keys {[ra[k] for k in keys]}, DuckDB has {[rb[k] for k in keys]}"
        if limited and b and len(set(keys)) < got.num_columns:
            edges = [[b[0][k] for k in keys], [b[-1][k] for k in keys]]

            def tied(row: tuple) -> bool:
                return any(all(_same(row[k], v, inexact[k]) for k, v in zip(keys, edge, strict=True)) for edge in edges)

            a = [r for r in a if not tied(r)]
            b = [r for r in b if not tied(r)]
            if len(a) != len(b):
                return f"{len(a)} rows not tied with the first or last ORDER BY key, DuckDB has {len(b)}"
    return _multiset(a, b, inexact)
