"""The field names DuckDB gives ``struct_pack(x)`` and ``struct_insert(s, x)``: the column's
own name where it is made, written out in the query (``x := x``), since the planner renames
columns (``c1``) and the field would take that name."""

from __future__ import annotations

import sqlglot.errors
import sqlglot.expressions as exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import Scope, traverse_scope

from qengine.errors import ProgrammingError
from qengine.planner.column_aliases import schema_name


def name_struct_fields(query: exp.Expression, schema: dict[str, dict[str, str]], dialect: str) -> None:
    """Give ``struct_pack(x)`` and ``struct_insert(s, x)`` the field name DuckDB gives them,
    written out (``x := x``): the planner renames columns (``c1``), and the field took that
    name. DuckDB's is the column's own name where it is made: a table's column as the table
    spells it, a derived table's or WITH query's as its select list or column aliases write it.
    That is looked up on a qualified copy of the query, whose identifiers remember how they
    were written; where it cannot be told there (a USING column, an alias of the same select
    list), the name as the argument writes it. Only a column or a lambda's variable may go
    unnamed, as in DuckDB."""
    args = [(node, arg) for node in query.find_all(exp.Struct, exp.Anonymous) for arg in _struct_arguments(node)]
    if not args:
        return
    for node, arg in args:
        if not isinstance(arg, exp.Column | exp.Identifier):
            function = "struct pack" if isinstance(node, exp.Struct) else "struct insert"
            raise ProgrammingError(f"Need named argument for {function}, e.g. STRUCT_PACK(a := b)")
    for number, (_, arg) in enumerate(args):
        arg.meta[_STRUCT_ARGUMENT] = number
    spelled = _spellings_where_made(query, schema, dialect)
    tables = {}  # a name one spelling of which the query's tables have (a USING column's, say)
    for columns in schema.values():
        for column in map(schema_name, columns):
            tables.setdefault(column.lower(), set()).add(column)
    for number, (_, arg) in enumerate(args):
        del arg.meta[_STRUCT_ARGUMENT]
        written = arg.name if isinstance(arg, exp.Identifier) else arg.this.name
        alike = tables.get(written.lower(), set()) if isinstance(arg, exp.Column) else set()
        name = spelled.get(number) or (next(iter(alike)) if len(alike) == 1 else written)
        field = exp.to_identifier(name, quoted=True)
        field.meta["case_sensitive"] = True  # DuckDB's normalization lowercases quoted names too
        arg.replace(exp.PropertyEQ(this=field, expression=arg.copy()))


_STRUCT_ARGUMENT = "qengine_struct_argument"


def _spellings_where_made(query: exp.Expression, schema: dict[str, dict[str, str]], dialect: str) -> dict[int, str]:
    """For each struct argument column (numbered in its meta), its name where it is made, found
    on a qualified copy of ``query``; those it cannot tell are left out."""
    copy = query.copy()
    for identifier in copy.find_all(exp.Identifier):
        identifier.meta["written"] = identifier.this
    for holder in copy.find_all(exp.Subquery, exp.CTE, exp.Values):  # the qualifier moves AS x(a, b) into select lists
        renamed = holder.args.get("alias")
        if renamed is not None and renamed.columns:
            (holder if isinstance(holder, exp.Values) else holder.this).meta["renamed"] = [c.this for c in renamed.columns]
    try:
        qualify(copy, schema=schema, dialect=dialect, isolate_tables=False)
    except sqlglot.errors.SqlglotError:
        return {}  # the query itself fails as it would have
    every = traverse_scope(copy)
    scopes = {id(column): scope for scope in every for column in scope.columns}
    by_query = {id(scope.expression): scope for scope in every}
    spelled: dict[int, str] = {}
    for node in copy.walk():
        number = node.meta.get(_STRUCT_ARGUMENT) if node.meta else None
        if number is None or number in spelled or not isinstance(node, exp.Column):
            continue  # an alias reference the qualifier copied in is the first one's again
        name = _source_name(node, scopes.get(id(node)), schema, by_query)
        if name is not None:
            spelled[number] = name
    return spelled


def _struct_arguments(node: exp.Expression, named: bool = False) -> list[exp.Expression]:
    """The fields given to a ``struct_pack`` (a Struct) or a ``struct_insert`` call; the
    unnamed ones only unless ``named``."""
    if isinstance(node, exp.Anonymous) and node.name.lower() != "struct_insert":
        return []
    given = node.expressions if isinstance(node, exp.Struct) else node.expressions[1:]
    return list(given) if named else [arg for arg in given if not isinstance(arg, exp.PropertyEQ)]


def _source_name(column: exp.Column, scope: Scope | None, schema: dict[str, dict[str, str]], scopes: dict[int, Scope]) -> str | None:
    """A qualified column's name where it is made (see :func:`name_struct_fields`), or None;
    ``scopes`` are the query's scopes by their expressions' ids."""
    if scope is None or not column.table:
        return None
    source = scope.sources.get(column.table)
    if isinstance(source, exp.Table):
        names = [n for n in map(schema_name, schema.get(source.name.lower(), schema.get(source.name, {}))) if n.lower() == column.name.lower()]
        return names[0] if len(names) == 1 else None
    if not isinstance(source, Scope):
        return None
    given = source.expression.meta.get("renamed", [])
    for written in given:  # AS x(a, b): the first columns' names are these
        if written.lower() == column.name.lower():
            return written
    query = source.expression
    while isinstance(query, exp.SetOperation):  # a set operation's columns are its first branch's
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    branch = source if query is source.expression else scopes.get(id(query))
    for item in query.selects[len(given):]:
        if item.alias_or_name.lower() != column.name.lower():
            continue
        if isinstance(item, exp.Alias) and "written" in item.args["alias"].meta:
            return item.args["alias"].meta["written"]
        inner = item.this if isinstance(item, exp.Alias) else item  # a star's column, aliased by the qualifier
        if isinstance(inner, exp.Coalesce) and all(isinstance(p, exp.Column) for p in [inner.this, *inner.expressions]):
            inner = inner.this  # a USING column: its first table's
        return _source_name(inner, branch, schema, scopes) if isinstance(inner, exp.Column) else None
    return None
