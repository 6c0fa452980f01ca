"""What the plan itself shows of a column's type, before any fragment runs.

The planner works on sqlglot trees without DuckDB's types (annotating them took a sixth of
planning time, and DuckDB types every fragment itself). A few rewrites are right only where two
columns share a type, or a column has one kind of type: a filter pushed into the inputs of a
set operation, an average split into a sum and a count. For those, a column's *signature* says
what fixes its type: a table column's own type, or the expression that makes it with each
column it reads replaced by that column's signature. Equal signatures mean equal DuckDB types;
None means the plan does not show it, and the rewrite is not made.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
import sqlglot.expressions as exp

from qengine.catalog.types import type_code
from qengine.planner import logical as lp


def same_type_in_every_input(node: lp.SetOp, position: int) -> bool:
    """Whether the set operation's column at ``position`` has one type in every input. A filter
    on a column whose inputs differ in type must stay above the operation: DuckDB casts each
    input to the operation's type first, and the filter pushed into a BIGINT input compared
    ``k < '5'`` as numbers where the VARCHAR union compares strings."""
    return signature(node, node.columns[position]) is not None


def signature(node: lp.Node, column: str, depth: int = 0, of: Callable[..., str | None] | None = None) -> str | None:
    """What fixes the type of ``column`` of ``node`` (see the module docstring): a table
    column's type name (``DATE``, ``DECIMAL(7,2)``), a cast's type, VARCHAR for a string
    literal, else the shape of the expression making it over its inputs' signatures. ``of``
    says what an expression making a column gives, :func:`expression_signature` unless told."""
    of = of or expression_signature
    if depth > 64:
        return None
    while isinstance(node, lp.Filter | lp.Sort | lp.Distinct | lp.Limit) or (
        isinstance(node, lp.Window | lp.Project) and column not in dict(node.exprs) and column in node.child.columns
    ):
        node = node.child
    if isinstance(node, lp.Scan):
        names = {internal: source for source, internal in node.column_map.items()}
        index = node.source.schema.get_field_index(names[column]) if column in names else -1
        return type_code(node.source.schema.field(index).type) if index >= 0 else None
    if isinstance(node, lp.Join):
        side = node.left if column in node.left.columns else node.right
        return signature(side, column, depth + 1, of)
    if isinstance(node, lp.SharedScan):
        producer = {internal: source for source, internal in node.column_map.items()}.get(column)
        return None if producer is None else signature(node.producer, producer, depth + 1, of)
    if isinstance(node, lp.SetOp):
        types = [signature(child, child.columns[node.columns.index(column)], depth + 1, of) for child in node.inputs]
        return types[0] if types[0] is not None and all(t == types[0] for t in types[1:]) else None
    if isinstance(node, lp.Project | lp.Window | lp.Aggregate):
        made = dict(node.keys + node.aggs if isinstance(node, lp.Aggregate) else node.exprs).get(column)
        return None if made is None else of(made, node.child, depth)
    return None


def expression_signature(e: exp.Expression, child: lp.Node, depth: int = 0) -> str | None:
    """The signature of ``e``, an expression over the columns of ``child``."""
    if isinstance(e, exp.Cast):  # TRY_CAST too: the type is the cast's whatever it reads
        return e.to.sql(dialect="duckdb")
    if isinstance(e, exp.Literal) and e.is_string:
        return "VARCHAR"
    if isinstance(e, exp.Column):
        return None if e.table else signature(child, e.name, depth + 1)
    shape = e.copy()
    for node in list(shape.find_all(exp.Column)):
        if node.table:
            return None
        inner = signature(child, node.name, depth + 1)
        if inner is None:
            return None
        node.replace(exp.var(f"<{inner}>"))
    for literal in list(shape.find_all(exp.Literal)):
        if literal.is_string:
            literal.replace(exp.var("<VARCHAR>"))
    # the tree, not its SQL: parentheses the user wrote change no type, and are left out
    for paren in list(shape.find_all(exp.Paren)):
        paren.replace(paren.this)
    return repr(shape.this if isinstance(shape, exp.Paren) else shape)


# DuckDB's DECIMAL width of each integer type, as its decimal arithmetic takes them.
_INTEGER_WIDTHS = {"TINYINT": 3, "SMALLINT": 5, "INT": 10, "BIGINT": 19, "INT128": 38, "UTINYINT": 3, "USMALLINT": 5, "UINT": 10, "UBIGINT": 20}
# Signed integer types by width, as sqlglot and DuckDB name them.
_SIGNED_INTEGERS = ("TINYINT", "SMALLINT", "INT", "BIGINT", "INT128")
_SIGNED_NAMES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT")


def expression_type(e: exp.Expression, child: lp.Node, depth: int = 0) -> str | None:
    """DuckDB's type of ``e`` over ``child``'s columns, where the plan shows it: a column's type
    or cast, and ``sum``, ``+``, ``-`` and ``*`` of numbers as DuckDB types them. None where it
    does not."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.Cast):
        return e.to.sql(dialect="duckdb")
    if isinstance(e, exp.Column):
        return None if e.table else signature(child, e.name, depth + 1, expression_type)
    if isinstance(e, exp.Sum) and not isinstance(e.this, exp.Distinct | exp.Order):
        inner = built_type(expression_type(e.this, child, depth + 1))
        if inner is None:
            return None
        if inner.is_type(*exp.DataType.FLOAT_TYPES):
            return "DOUBLE"
        if inner.is_type(*exp.DataType.INTEGER_TYPES):
            return "HUGEINT"
        return f"DECIMAL(38,{decimal_parts(inner)[1]})" if inner.is_type(exp.DataType.Type.DECIMAL) else None
    if isinstance(e, exp.Add | exp.Sub | exp.Mul):
        operands = [built_type(expression_type(o, child, depth + 1)) for o in (e.this, e.expression)]
        if any(o is None or not o.is_type(*exp.DataType.FLOAT_TYPES, *exp.DataType.INTEGER_TYPES, exp.DataType.Type.DECIMAL) for o in operands):
            return None
        if any(o.is_type(*exp.DataType.FLOAT_TYPES) for o in operands):
            return "DOUBLE"
        if all(o.is_type(*exp.DataType.INTEGER_TYPES) for o in operands):
            # the wider of two signed types; DuckDB widens a signed and an unsigned one further
            ranks = [_SIGNED_INTEGERS.index(o.this.name) if o.this.name in _SIGNED_INTEGERS else -1 for o in operands]
            return None if min(ranks) < 0 else _SIGNED_NAMES[max(ranks)]
        (p1, s1), (p2, s2) = (decimal_parts(o) for o in operands)
        if isinstance(e, exp.Mul):
            return f"DECIMAL({min(p1 + p2, 38)},{s1 + s2})" if s1 + s2 <= 38 else None
        return f"DECIMAL({min(max(max(s1, s2) + max(p1 - s1, p2 - s2), p1, p2) + 1, 38)},{max(s1, s2)})"
    return None


def built_type(name: str | None) -> exp.DataType | None:
    """The type named ``name``, None for no name or a signature that names no type."""
    if name is None:
        return None
    try:
        return exp.DataType.build(name, dialect="duckdb")
    except (sqlglot.errors.ParseError, ValueError):
        return None


def decimal_parts(t: exp.DataType) -> tuple[int, int]:
    """The precision and scale of a DECIMAL or integer type, as DuckDB's decimal arithmetic takes it."""
    if t.this.name in _INTEGER_WIDTHS:
        return _INTEGER_WIDTHS[t.this.name], 0
    params = [int(p.this.this) for p in t.expressions]
    return params[0], params[1] if len(params) > 1 else 0
