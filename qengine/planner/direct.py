"""Fragments that run on Arrow directly, without DuckDB.

A fragment that only picks and renames columns, or that sorts them, costs more through DuckDB
than in Arrow. DuckDB copies every column into its own vectors and back (about 0.4 s per
100 MB of fixed-size binary here), and a single DuckDB thread sorts about half as fast as a
NumPy argsort of the keys followed by one Arrow ``take``. Bulk stages such as TeraSort's scan and its reducers'
sort consist of exactly these fragments.

:func:`plan` runs on the coordinator and recognises such a fragment. :func:`execute` runs in
the worker. It returns None when a sort key's type is one whose Arrow order might differ
from DuckDB's (floating point with NaN, say). The task then runs the fragment's SQL instead,
so both paths always give the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import sqlglot.expressions as exp

from qengine.exchange.partitioner import byte_keys
from qengine.planner import logical as lp
from qengine.sandbox.carried_types import carried_type, unsupported


def plan(root: lp.Node) -> dict[str, Any] | None:
    """The direct form of a fragment built only from column projections and sorts over one
    input, or None.

    The form is ``{"input": table name, "ops": [...]}``. Ops apply bottom-up. Each op is
    ``["select", [[source, name], ...]]`` or ``["sort", [[column, desc, nulls_first], ...]]``.
    """
    ops: list[list[Any]] = []
    node = root
    while True:
        if isinstance(node, lp.Project) and not node.passthrough:
            pairs = [[e.name, name] for name, e in node.exprs if isinstance(e, exp.Column) and not e.table]
            if len(pairs) != len(node.exprs):
                return None
            ops.append(["select", pairs])
        elif isinstance(node, lp.Sort) and not any(op == "sort" for op, _ in ops):  # one sort: see execute
            keys = [[o.this.name, bool(o.args.get("desc")), bool(o.args.get("nulls_first"))] for o in node.order
                    if isinstance(o.this, exp.Column) and not o.this.table]
            if len(keys) != len(node.order):
                return None
            ops.append(["sort", keys])
        else:
            break
        node = node.child
    if isinstance(node, lp.Scan):
        name = node.table
        fields = node.read_source.schema
        if any(fields.get_field_index(c) >= 0 and unsupported(carried_type(fields.field(c))) for c in node.column_map):
            return None  # a type Arrow cannot carry (a TIME WITH TIME ZONE): DuckDB's fragment reads and refuses it
        if node.read_source.misread.intersection(node.column_map):
            return None  # only DuckDB's reader reads these columns' values as DuckDB does
        ops.append(["select", [[c, c] for c in node.columns]])
    elif isinstance(node, lp.ExchangeRead):
        name = node.table
        ops.append(["select", [[n, a] for n, a in zip(node.names, node.columns, strict=True)]])
    else:
        return None
    return {"input": name, "ops": ops[::-1]}


# A sorted output is gathered this many bytes at a time, so a reducer writing its file holds its
# input and one batch, not a sorted copy besides. With 8 MB batches, gathering and writing 64 MB
# of TeraSort records took 1.5x as long as in one piece (many small Parquet row groups); with
# 32 MB batches about the same.
BATCH_BYTES = 32 << 20


def execute(form: dict[str, Any], inputs: dict[str, pa.Table]) -> pa.Table | pa.RecordBatchReader | None:
    """Run a :func:`plan` form on the task's inputs, or return None to say "use the SQL".

    A sort's rows come out as a stream: the batches are gathered one at a time while the caller
    consumes them. The sort takes its input out of ``inputs`` before combining its chunks (the
    map tasks' blocks), so the combined copy replaces them instead of adding to them. Gathering
    from the chunks directly would not save that copy: Arrow's ``take`` on chunked columns
    concatenates them on every call.
    """
    table = inputs[form["input"]]
    order = None
    for op, arg in form["ops"]:
        if op == "select":  # a projection commutes with the permutation, so it applies unsorted
            table = table.select([source for source, _ in arg]).rename_columns([name for _, name in arg])
        else:
            if not all(_same_order(table.schema.field(k).type) for k, _, _ in arg):
                return None
            inputs.pop(form["input"], None)
            table = table.combine_chunks()
            order = sort_indices(table, arg)
    if order is None:
        return table
    return pa.RecordBatchReader.from_batches(table.schema, _gather(table, order))


def _gather(table: pa.Table, order: np.ndarray | pa.Array) -> Iterator[pa.RecordBatch]:
    rows = max(1, BATCH_BYTES * table.num_rows // max(1, table.nbytes))
    for start in range(0, table.num_rows, rows):
        yield from table.take(order[start:start + rows]).to_batches()


def sort_indices(table: pa.Table, keys: list[list[Any]]) -> np.ndarray | pa.Array:
    """Row order for ORDER BY ``keys``, whose types :func:`_same_order` accepted."""
    if len(keys) == 1:
        column = table.column(keys[0][0])
        search = byte_keys(column)
        if search is not None and column.null_count == 0:
            # NumPy's argsort of S<n> bytes is memcmp order, 1.6x faster than Arrow's stable sort.
            order = np.argsort(search)
            return order[::-1] if keys[0][1] else order
    import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import
    return pc.sort_indices(table, sort_keys=[
        (k, "descending" if desc else "ascending", "at_start" if first else "at_end") for k, desc, first in keys
    ])


# Types Arrow orders exactly as DuckDB does: integers, booleans, decimals, dates, times,
# timestamps, and strings and binaries compared byte-wise. Not floats (NaN) nor intervals.
_SAME_ORDER = (
    pa.types.is_integer, pa.types.is_boolean, pa.types.is_decimal, pa.types.is_date, pa.types.is_time,
    pa.types.is_timestamp, pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
    pa.types.is_large_binary, pa.types.is_fixed_size_binary,
)


def _same_order(t: pa.DataType) -> bool:
    return any(test(t) for test in _SAME_ORDER)
