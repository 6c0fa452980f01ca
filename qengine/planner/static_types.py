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

import re

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


# The exact DECIMAL each integer type fits in, as DuckDB widens it to compare with a DECIMAL
_INTEGER_DIGITS = {"TINYINT": 3, "SMALLINT": 5, "INTEGER": 10, "BIGINT": 19, "HUGEINT": 38,
                   "UTINYINT": 3, "USMALLINT": 5, "UINTEGER": 10, "UBIGINT": 20}
_DECIMAL = re.compile(r"DECIMAL\((\d+),\s*(\d+)\)")


def compared_exactly(a: str | None, b: str | None) -> bool:
    """Whether DuckDB compares values of the two signatures without rounding either: the same
    type, or integers and decimals whose common DECIMAL holds both. Two such values that are
    equal are then the same number, and any comparison with a constant holds for both or for
    neither; an INTEGER compared with a FLOAT, or a DECIMAL with a DOUBLE, is rounded first
    (16777217 = 16777216.0 as FLOATs), and one may be ``> 16777216`` while its partner is not."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    digits = [_digits(t) for t in (a, b)]
    if None in digits:
        return False
    (whole_a, scale_a), (whole_b, scale_b) = digits
    return max(whole_a, whole_b) + max(scale_a, scale_b) <= 38


def exact_number(t: str) -> bool:
    """Whether ``t`` is an integer or DECIMAL type."""
    return _digits(t) is not None


def _digits(t: str) -> tuple[int, int] | None:
    """(digits before the point, digits after it) of an integer or DECIMAL type, else None."""
    if t in _INTEGER_DIGITS:
        return _INTEGER_DIGITS[t], 0
    match = _DECIMAL.fullmatch(t)
    return (int(match.group(1)) - int(match.group(2)), int(match.group(2))) if match else None
