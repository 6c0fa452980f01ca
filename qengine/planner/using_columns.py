"""The column a ``JOIN ... USING (k)`` (or a NATURAL join) gives ``k`` as, as DuckDB gives it,
and the USING joins sqlglot's qualifier would read otherwise than DuckDB, refused.

sqlglot's qualifier writes every reference to a USING column, and each one a star selects, as
``COALESCE(a.k, b.k, ...)``: the keys' common type. DuckDB gives the left side's column for an
inner, left, semi or anti join (a DATE key joined to a TIMESTAMP one stays a DATE), the right
table's for a right join, and only a full join coalesces: the columns of every table merged
into the key so far. Down a chain of joins each one takes what the one before it made. That
chain is worked out for each query before it is qualified, and the coalesce the qualifier wrote
replaced by it. A COALESCE the user wrote stays.

The qualifier also expands a star over a USING join without the later tables' columns of a
key's name (``a JOIN b USING (x) JOIN c ON ...`` lost ``c.x``), and takes a key that two
tables before a USING join hold for one of them, where DuckDB refuses it as ambiguous. Both
are refused here, and so is a NATURAL join with no column in common, as DuckDB refuses it.
"""

from __future__ import annotations

import inspect
from typing import Any

import sqlglot.expressions as exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import Schema, ensure_schema

from qengine.errors import NotSupportedError, ProgrammingError

_WRITTEN = "qengine_written_coalesce"

# How a merged key is made: the COALESCE of these tables' columns (by the tables' aliases), or
# the one table's column.
Made = tuple[str, ...]


def qualify_with_using_sides(expression: exp.Expression, **kwargs: Any) -> exp.Expression:
    """sqlglot's ``qualify``, then each query's USING columns as DuckDB's chain of joins makes them."""
    every = list(expression.find_all(exp.Select))
    for select in every:
        _refuse_comma_before_outer_join(select.args.get("joins") or [])
    selects = [s for s in every if any(_merging(j) for j in s.args.get("joins") or [])]
    if not selects:
        return qualify(expression, **kwargs)
    schema = ensure_schema(kwargs.get("schema"), dialect=kwargs.get("dialect"))
    chains = {id(s): _chain(s, schema) for s in selects}
    for written in expression.find_all(exp.Coalesce):
        written.meta[_WRITTEN] = True
    qualified = qualify(expression, **kwargs)
    for select in qualified.find_all(exp.Select):
        if id(select) not in chains:
            continue
        made, before, merges = chains[id(select)]
        aliases = {name for name, _ in merges} | {select.args['from_'].this.alias_or_name.lower()}
        nodes = _own_nodes(select)
        parts: dict[str, dict[str, exp.Column]] = {}  # key → table alias → a column of that key
        for node in nodes:
            if isinstance(node, exp.Column) and node.table:
                parts.setdefault(node.name.lower(), {}).setdefault(node.table.lower(), node)
        for columns in parts.values():  # a table's key the query never names is named here
            template = next(iter(columns.values()))
            for name in aliases:
                columns.setdefault(name, exp.column(template.args["this"].copy(), table=exp.to_identifier(name)))
        # A join's condition sees the key as the joins before it made it (``JOIN c ON c.k = k``
        # after a full join is the coalesce of the two tables before it, not of every table);
        # the rest of the query sees what the last join made.
        seen: set[int] = set()
        for join, state, (right, keys) in zip(select.args.get("joins") or [], before, merges, strict=True):
            on = join.args.get("on")
            if on is None:
                continue
            inside = list(on.walk(prune=lambda n: isinstance(n, exp.Query)))
            seen.update(id(n) for n in inside)
            _merge_keys(inside, state, parts)
            # A USING join compares its right table's key with that too: the qualifier compared
            # the first table's (a row the left table of a full join did not have missed its
            # match) or a coalesce of every table's.
            for condition in on.flatten() if isinstance(on, exp.And) else [on]:
                if not isinstance(condition, exp.EQ) or not isinstance(condition.expression, exp.Column):
                    continue
                key = condition.expression.name.lower()
                if key in keys and condition.expression.table.lower() == right and (
                        replacement := _expression(state.get(key), parts.get(key, {}))) is not None:
                    condition.set("this", replacement)
        _merge_keys([n for n in nodes if id(n) not in seen], made, parts)
    return qualified


def _merge_keys(nodes: list[exp.Expression], made: dict[str, Made], parts: dict[str, dict[str, exp.Column]]) -> None:
    """Replace each coalesce the qualifier wrote for a merged key among ``nodes`` by what ``made`` says."""
    for node in nodes:
        if isinstance(node, exp.Coalesce) and not node.meta.get(_WRITTEN) and _same_named_columns(node):
            key = node.this.name.lower()
            if (replacement := _expression(made.get(key), parts.get(key, {}))) is not None:
                node.replace(replacement)


def _comma(join: exp.Join) -> bool:
    """Whether ``join`` is a comma in FROM (``FROM a, b``)."""
    return not (join.args.get("on") or join.args.get("using") or join.method or join.side or join.kind)


def _refuse_comma_before_outer_join(joins: list[exp.Join]) -> None:
    """A comma binds looser than JOIN: DuckDB reads ``FROM c, a FULL JOIN b ON ...`` as ``c``
    crossed with ``(a FULL JOIN b)``, where the parser's flat list of joins made it ``(c, a) FULL
    JOIN b``, and ``b``'s unmatched rows came once, with NULL for ``c``, instead of once per row
    of ``c``. For an inner, left, semi or anti join the two readings agree."""
    after_comma = False
    for join in joins:
        if after_comma and (join.side or "").upper() in ("RIGHT", "FULL"):
            raise NotSupportedError(f"a comma in FROM followed by a {join.side.upper()} JOIN (of {join.this.alias_or_name}): "
                                    "DuckDB joins the tables after the comma first; list the comma's tables after the "
                                    "joins (FROM a FULL JOIN b ON ..., c), or join them in a subquery")
        after_comma = after_comma or _comma(join)


def _merging(join: exp.Join) -> bool:
    return bool(join.args.get("using")) or join.method.upper() == "NATURAL"


def _chain(
    select: exp.Select, schema: Schema
) -> tuple[dict[str, Made], list[dict[str, Made]], list[tuple[str, set[str]]]]:
    """How each key the query's USING and NATURAL joins merge is made (key → :data:`Made`),
    the joins taken left to right; per join what the joins before it made of each key (what its
    condition sees), and its table (its alias, lower case, as the qualifier writes it for DuckDB)
    with the keys it merges. Raises where DuckDB reads the joins otherwise than the qualifier would."""
    joins = select.args.get("joins") or []
    sources = [select.args["from_"].this, *(j.this for j in joins)]
    names = [s.alias_or_name.lower() for s in sources]
    columns = [_columns(s, schema) for s in sources]
    star = any(isinstance(e, exp.Star) for e in select.expressions)
    made: dict[str, Made] = {}
    merged: dict[str, list[str]] = {}  # the tables merged into each key so far
    before: list[dict[str, Made]] = []  # per join, what the joins before it made of each key
    merges: list[tuple[str, set[str]]] = []  # per join, its table and the keys it merges
    start = 0  # where the left side of the join begins: after the last comma
    for i, join in enumerate(joins, 1):
        right, kind = columns[i], (join.side or join.kind or "INNER").upper()
        if _comma(join):
            start = i
        keys = _keys(join, columns[start:i], right)
        if star and start and keys:
            raise NotSupportedError("SELECT * over a USING or NATURAL join after a comma in FROM: name the columns to select")
        hidden = (join.kind or "").upper() in ("SEMI", "ANTI")  # the right table's columns are not the join's
        lefts: dict[str, list[str] | None] = {}
        for key in keys:
            # the join's left side: the tables since the last comma, which binds looser than JOIN
            holders = [n for n, c in zip(names[start:i], columns[start:i], strict=True) if c is not None and key in c]
            if key not in made and len(holders) > 1:
                raise ProgrammingError(f'column "{key}" of the USING join with {names[i]} is ambiguous: '
                                       f"{' and '.join(holders)} both hold it")
            unknown = any(c is None for c in columns[start:i])
            lefts[key] = merged[key] if key in made else holders[:1] if holders and not unknown else None
        if star and made and not hidden and (right is None or (right & set(made)) - set(keys)):
            raise NotSupportedError(
                f"SELECT * over a USING or NATURAL join followed by a join of {names[i]}, which holds a column "
                f"named like a merged key ({', '.join(sorted(made))}), or whose columns the plan cannot see: "
                "name the columns to select")
        before.append({**made, **{key: (left[0],) for key, left in lefts.items() if left is not None and key not in made}})
        merges.append((names[i], set(keys)))
        for key, left in lefts.items():
            if left is None:
                made.pop(key, None)
                merged.pop(key, None)
                continue
            first = made.get(key, (left[0],))
            merged[key] = left if hidden else [*left, names[i]]  # a semi join's table is not the join's
            made[key] = first if kind in ("INNER", "LEFT", "SEMI", "ANTI") else (names[i],) if kind == "RIGHT" else tuple(merged[key])
    return made, before, merges


def _keys(join: exp.Join, left: list[set[str] | None], right: set[str] | None) -> list[str]:
    """The keys a join merges: its USING columns, or a NATURAL join's columns in common."""
    if join.args.get("using"):
        return [k.name.lower() for k in join.args["using"]]
    if join.method.upper() != "NATURAL" or right is None or any(c is None for c in left):
        return []
    common = sorted(right & set().union(*left))
    if not common:
        raise ProgrammingError(f"NATURAL JOIN with {join.this.alias_or_name}: the two sides have no column in common")
    return common


def _columns(source: exp.Expression, schema: Schema) -> set[str] | None:
    """The column names (lower case) a FROM or JOIN source gives; None where the query does not
    show them (a star inside a derived table, an unknown table)."""
    alias = source.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        return {c.name.lower() for c in alias.columns}
    if isinstance(source, exp.Subquery):
        return _selected(source.this)
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        return None
    cte = _visible_cte(source) if not source.args.get("db") else None
    if cte is not None:
        listed = cte.args.get("alias")
        return {c.name.lower() for c in listed.columns} if isinstance(listed, exp.TableAlias) and listed.columns else _selected(cte.this)
    try:
        found = schema.column_names(source)
    except Exception:  # noqa: BLE001 - sqlglot raises its own kinds for a table it does not know
        return None
    return {n.lower() for n in found} or None


def _visible_cte(table: exp.Table) -> exp.CTE | None:
    """The CTE ``table`` names in its scope: the nearest WITH around it that defines the name,
    where a CTE sees the ones listed before it (and itself, in a WITH RECURSIVE), not later ones;
    None for a table of the catalog. A name two scopes define is not one CTE."""
    name, inside, node = table.name.lower(), None, table
    while node.parent is not None:
        node = node.parent
        if isinstance(node, exp.CTE):
            inside = node
            continue
        if not isinstance(node, exp.Query) or not isinstance(with_ := node.args.get("with_"), exp.With):
            continue
        listed = with_.expressions
        at = next((i for i, c in enumerate(listed) if c is inside), None)
        if at is not None:
            listed = listed[: at + (1 if with_.args.get("recursive") else 0)]
        found = [c for c in listed if c.alias_or_name.lower() == name]
        if found:
            return found[-1]
        inside = None
    return None


def _selected(query: exp.Expression) -> set[str] | None:
    while isinstance(query, exp.SetOperation):
        query = query.this
    if not isinstance(query, exp.Select):
        return None
    names = [e.alias_or_name for e in query.expressions]
    if any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)) for e in query.expressions) or not all(names):
        return None
    return {n.lower() for n in names}


def _expression(made: Made | None, parts: dict[str, exp.Column]) -> exp.Expression | None:
    """The merged key ``made`` describes, out of the qualifier's columns; None if one is missing."""
    if made is None or any(name not in parts for name in made):
        return None
    columns = [parts[name].copy() for name in made]
    return columns[0] if len(columns) == 1 else exp.Coalesce(this=columns[0], expressions=columns[1:])


# the optimizer passes a rule the arguments its signature names: qualify's, not **kwargs
qualify_with_using_sides.__signature__ = inspect.signature(qualify)  # type: ignore[attr-defined]


def _own_nodes(select: exp.Select) -> list[exp.Expression]:
    """The nodes of ``select`` outside the queries nested in it."""
    return list(select.walk(prune=lambda n: n is not select and isinstance(n, exp.Query)))


def _same_named_columns(node: exp.Coalesce) -> bool:
    """Whether ``node`` coalesces one column name of several tables, as USING does."""
    parts = [node.this, *node.expressions]
    return (
        len(parts) > 1
        and all(isinstance(p, exp.Column) and p.table for p in parts)
        and len({p.name.lower() for p in parts}) == 1
        and len({p.table for p in parts}) == len(parts)
    )
