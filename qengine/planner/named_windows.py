"""Named windows (``WINDOW w AS (...)``, ``OVER w``, ``OVER (w ORDER BY x)``), written out in
each OVER that names one, as DuckDB reads them, so that the planner sees only plain windows.

DuckDB's rules, which its errors are kept for:
- a window name is defined once in a WINDOW clause, and once over the branches of a set
  operation (a WITH query or a derived table may define it again);
- a reference may add a PARTITION BY, an ORDER BY or a frame to the window it names, but not
  replace the PARTITION BY or ORDER BY that window has;
- a window with a frame may be used as it is (``OVER w``), but not copied: not into another
  definition, nor in parentheses (``OVER (w)``, ``OVER (w ORDER BY x)``);
- a definition may name another of the same WINDOW clause, before or after it; one that is
  never used is never looked at.
Refused: a window used in a query other than the one whose WINDOW clause defines it (DuckDB
lets a scalar subquery see the windows around it, but not a derived table, and a later UNION
branch see an earlier one's), a definition that names itself, directly or through others
(DuckDB reads it as an empty window), and a copy of a window whose definition names another
(``w2 AS (w ORDER BY x)`` copied as ``OVER (w2 ROWS 2 PRECEDING)`` or ``w3 AS (w2 ...)``): DuckDB
1.5 copies only ``w2``'s own clauses, dropping the PARTITION BY of ``w``, where the standard
keeps it, and the two answered differently.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.errors import NotSupportedError, ProgrammingError

_CLAUSES = ("partition_by", "order", "spec")


def inline_named_windows(statement: exp.Expression) -> None:
    """Write every named window out where it is used, and drop the WINDOW clauses."""
    selects = [select for select in statement.find_all(exp.Select) if select.args.get("windows")]
    if not selects:
        return
    everywhere = {definition.this.name.lower() for select in selects for definition in select.args["windows"]}
    for group in _definition_groups(statement, selects):
        seen: set[str] = set()
        for definition in group:
            name = definition.this.name.lower()
            if name in seen:
                raise ProgrammingError(f'window "{definition.this.name}" is already defined')
            seen.add(name)
    for select in statement.find_all(exp.Select):
        own = {definition.this.name.lower(): definition for definition in select.args.get("windows") or []}
        for window in _own_windows(select):
            window.replace(_applied(window, own, everywhere))
    for select in selects:
        select.set("windows", None)


def _definition_groups(statement: exp.Expression, selects: list[exp.Select]) -> list[list[exp.Window]]:
    """The definitions a name may be given once in: one WINDOW clause, or those of the
    branches of one set operation."""
    groups: list[list[exp.Window]] = []
    grouped: set[int] = set()
    for operation in statement.find_all(exp.SetOperation):
        if isinstance(operation.parent, exp.SetOperation):
            continue
        branches = [b for b in _branches(operation) if b.args.get("windows")]
        grouped.update(id(b) for b in branches)
        groups.append([d for b in branches for d in b.args["windows"]])
    groups += [list(s.args["windows"]) for s in selects if id(s) not in grouped]
    return groups


def _branches(node: exp.Expression) -> list[exp.Select]:
    """The selects a chain of set operations combines."""
    while isinstance(node, exp.Subquery):
        node = node.this
    if isinstance(node, exp.SetOperation):
        return _branches(node.this) + _branches(node.expression)
    return [node] if isinstance(node, exp.Select) else []


def _own_windows(select: exp.Select) -> list[exp.Window]:
    """The windows that name a window, in ``select`` outside the queries nested in it."""
    found: list[exp.Window] = []
    stack = [child for child in select.iter_expressions() if child.arg_key != "windows"]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.Query):
            continue
        if isinstance(node, exp.Window) and node.args.get("alias") is not None and node.args.get("over"):
            found.append(node)
        stack.extend(node.iter_expressions())
    return found


def _applied(window: exp.Window, own: dict[str, exp.Window], everywhere: set[str]) -> exp.Window:
    """``window`` (``f() OVER name`` or ``OVER (name ...)``) with the named window written in."""
    reference = window.args["alias"]
    if _copies(window):
        _refuse_copy_of_a_copy(reference.name, own)
    merged = _merged(window, _resolved(reference.name, own, everywhere, ()), reference.name)
    merged.set("this", window.this)
    merged.set("over", window.args.get("over"))
    return merged


def _resolved(name: str, own: dict[str, exp.Window], everywhere: set[str], seen: tuple[str, ...]) -> exp.Window:
    """The definition of ``name`` in ``own`` with the window it names (if any) merged in."""
    key = name.lower()
    if key not in own:
        if key in everywhere:
            raise NotSupportedError(f'window "{name}" used outside the query whose WINDOW clause defines it '
                                    "(define it where it is used)")
        raise ProgrammingError(f'window "{name}" does not exist')
    if key in seen:
        raise NotSupportedError(f'window "{name}" is defined by itself')
    definition = own[key]
    base = definition.args.get("alias")
    if base is None:
        return definition
    known = _resolved(base.name, own, everywhere, (*seen, key))  # a window defined by itself is refused first
    _refuse_copy_of_a_copy(base.name, own)
    if known.args.get("spec"):
        raise ProgrammingError(f'cannot copy window "{base.name}" because it has a frame clause')
    return _merged(definition, known, base.name)


def _copies(reference: exp.Window) -> bool:
    """Whether a window naming another copies it: in parentheses, sqlglot gives it the clauses'
    keys, empty or not."""
    return any(clause in reference.args for clause in _CLAUSES)


def _refuse_copy_of_a_copy(name: str, own: dict[str, exp.Window]) -> None:
    """Refuse copying window ``name`` when its definition names another (module docstring)."""
    definition = own.get(name.lower())
    if definition is not None and definition.args.get("alias") is not None:
        raise NotSupportedError(f'copying window "{name}", which is defined from window "{definition.args["alias"].name}": '
                                "DuckDB drops the clauses of the window it names; write them out")


def _merged(reference: exp.Window, base: exp.Window, name: str) -> exp.Window:
    """A window of ``base``'s clauses and those ``reference`` adds, under DuckDB's rules. In
    parentheses a reference copies the window: sqlglot gives it the clauses' keys, empty."""
    added = {clause: reference.args.get(clause) for clause in _CLAUSES if reference.args.get(clause)}
    copied = added or _copies(reference)
    if copied and base.args.get("spec"):
        raise ProgrammingError(f'cannot copy window "{name}" because it has a frame clause')
    for clause, words in (("partition_by", "PARTITION BY"), ("order", "ORDER BY")):
        if clause in added and base.args.get(clause):
            raise ProgrammingError(f'Cannot override {words} clause of window "{name}"')
    merged = exp.Window()
    for clause in _CLAUSES:
        value = added.get(clause) or base.args.get(clause)
        if value:
            merged.set(clause, value.copy() if isinstance(value, exp.Expression) else [v.copy() for v in value])
    return merged
