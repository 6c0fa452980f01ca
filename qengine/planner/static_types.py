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

import sqlglot.expressions as exp

from qengine.catalog.types import type_code
from qengine.planner import logical as lp


def same_type_in_every_input(node: lp.SetOp, position: int) -> bool:
    """Whether the set operation's column at ``position`` has one type in every input. A filter
    on a column whose inputs differ in type must stay above the operation: DuckDB casts each
    input to the operation's type first, and the filter pushed into a BIGINT input compared
    ``k < '5'`` as numbers where the VARCHAR union compares strings."""
    return signature(node, node.columns[position]) is not None


def signature(node: lp.Node, column: str, depth: int = 0) -> str | None:
    """What fixes the type of ``column`` of ``node`` (see the module docstring): a table
    column's type name (``DATE``, ``DECIMAL(7,2)``), a cast's type, VARCHAR for a string
    literal, else the shape of the expression making it over its inputs' signatures."""
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
        return signature(side, column, depth + 1)
    if isinstance(node, lp.SharedScan):
        producer = {internal: source for source, internal in node.column_map.items()}.get(column)
        return None if producer is None else signature(node.producer, producer, depth + 1)
    if isinstance(node, lp.SetOp):
        types = [signature(child, child.columns[node.columns.index(column)], depth + 1) for child in node.inputs]
        return types[0] if types[0] is not None and all(t == types[0] for t in types[1:]) else None
    if isinstance(node, lp.Project | lp.Window | lp.Aggregate):
        made = dict(node.keys + node.aggs if isinstance(node, lp.Aggregate) else node.exprs).get(column)
        return None if made is None else expression_signature(made, node.child, depth)
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
