"""Compare a qengine result with a reference result (DuckDB's, on the same data).

Row order is ignored except where the query's top-level ORDER BY defines it: then the ORDER BY
key values must come in the same sequence. Rows tied on the last key of a LIMIT-ed result may
legitimately differ between engines, so those are left out of the row comparison. Numbers are
compared with a relative tolerance.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from dataclasses import dataclass

import pyarrow as pa
import sqlglot
import sqlglot.expressions as exp

REL_TOL = 1e-6
ABS_TOL = 1e-9


@dataclass
class Comparison:
    ok: bool
    message: str = ""


def _value(v: object) -> object:
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def _close(a: object, b: object) -> bool:
    a, b = _value(a), _value(b)
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        try:
            fa, fb = float(a), float(b)
        except (TypeError, ValueError):
            return False
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return math.isclose(fa, fb, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return a == b


def _sort_key(row: tuple) -> tuple:
    out = []
    for v in row:
        v = _value(v)
        if v is None:
            out.append((0, ""))
        elif isinstance(v, float):
            out.append((1, f"{v:.6g}" if math.isfinite(v) else str(v)))
        elif isinstance(v, int | bool):
            out.append((1, f"{float(v):.6g}"))
        elif isinstance(v, dt.date | dt.datetime | dt.time):
            out.append((2, v.isoformat()))
        else:
            out.append((3, str(v)))
    return tuple(out)


def _rows(table: pa.Table) -> list[tuple]:
    columns = [c.to_pylist() for c in table.columns]
    return list(zip(*columns, strict=True)) if columns else [()] * table.num_rows


def order_columns(sql: str, columns: list[str], dialect: str = "duckdb") -> tuple[list[int] | None, bool]:
    """Output positions of the top-level ORDER BY keys (None if one is not an output), and LIMIT."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return None, False
    order = tree.args.get("order")
    has_limit = tree.args.get("limit") is not None
    if order is None:
        return [], has_limit
    selects = tree.selects if isinstance(tree, exp.Query) else []
    positions = []
    lowered = [c.lower() for c in columns]
    for o in order.expressions:
        target = o.this
        if isinstance(target, exp.Literal) and not target.is_string:
            positions.append(int(target.name) - 1)
            continue
        if isinstance(target, exp.Column) and target.name.lower() in lowered and lowered.count(target.name.lower()) == 1:
            positions.append(lowered.index(target.name.lower()))
            continue
        match = next((i for i, s in enumerate(selects) if s.unalias() == target or s == target), None)
        if match is None:
            return None, has_limit
        positions.append(match)
    return positions, has_limit


def compare(got: pa.Table, expected: pa.Table, sql: str | None = None, dialect: str = "duckdb") -> Comparison:
    """Check ``got`` against ``expected``; ``sql`` tells which ORDER BY / LIMIT applies."""
    if got.num_columns != expected.num_columns:
        return Comparison(False, f"{got.num_columns} columns, expected {expected.num_columns}")
    if got.num_rows != expected.num_rows:
        return Comparison(False, f"{got.num_rows} rows, expected {expected.num_rows}")
    a, b = _rows(got), _rows(expected)
    keys, limited = order_columns(sql, expected.column_names, dialect) if sql else ([], False)
    if keys:
        for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
            if not all(_close(ra[k], rb[k]) for k in keys):
                return Comparison(False, f"row {i}: ORDER BY keys {[ra[k] for k in keys]} != expected {[rb[k] for k in keys]}")
        if limited and b:
            last = [b[-1][k] for k in keys]

            def tied(r: tuple) -> bool:
                return all(_close(r[k], v) for k, v in zip(keys, last, strict=True))

            a = [r for r in a if not tied(r)]
            b = [r for r in b if not tied(r)]
    a.sort(key=_sort_key)
    b.sort(key=_sort_key)
    for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
        if not all(_close(x, y) for x, y in zip(ra, rb, strict=True)):
            return Comparison(False, f"row mismatch: {ra} != expected {rb} (sorted position {i})")
    return Comparison(True)
