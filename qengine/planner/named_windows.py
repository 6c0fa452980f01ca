"""Named windows (``WINDOW w AS (...)``, ``OVER w``, ``OVER (w ORDER BY x)``), written out in
each OVER that names one, as DuckDB reads them, so that the planner sees only plain windows.

DuckDB's rules, which its errors are kept for:
- a reference may add a PARTITION BY, an ORDER BY or a frame to the window it names, but not
  replace the PARTITION BY or ORDER BY that window has;
- a window with a frame may be used as it is, but not copied into another with more clauses;
- a definition may name another, defined before or after it in the same WINDOW clause;
- a subquery sees the windows of the queries around it, its own first.
A definition that names itself, directly or through others, is refused: DuckDB reads it as an
empty window, which no standard gives a meaning to.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.errors import NotSupportedError, ProgrammingError

_CLAUSES = ("partition_by", "order", "spec")


def inline_named_windows(statement: exp.Expression) -> None:
    """Write every named window out where it is used, and drop the WINDOW clauses."""
    if not any(select.args.get("windows") for select in statement.find_all(exp.Select)):
        return
    _inline(statement, {})


def _inline(node: exp.Expression, outer: dict[str, exp.Window]) -> None:
    """Resolve the windows used in ``node``'s own scope with ``outer``'s and its own WINDOW
    clause's definitions, then descend into the queries nested in it."""
    named = dict(outer)
    if isinstance(node, exp.Select) and node.args.get("windows"):
        own: dict[str, exp.Window] = {}
        for definition in node.args["windows"]:
            name = definition.this.name.lower()
            if name in own:
                raise ProgrammingError(f'window "{definition.this.name}" is already defined')
            own[name] = definition
        named.update(_resolved(own, outer))
        node.set("windows", None)
    nested: list[exp.Expression] = []
    for child in _own_scope(node, nested):
        if isinstance(child, exp.Window) and child.args.get("alias") is not None and child.args.get("over"):
            child.replace(_applied(child, named))
    for query in nested:
        _inline(query, named)


def _own_scope(node: exp.Expression, nested: list[exp.Expression]) -> list[exp.Expression]:
    """The nodes under ``node`` outside the queries nested in it; those go in ``nested``."""
    found: list[exp.Expression] = []
    stack = list(node.iter_expressions())
    while stack:
        child = stack.pop()
        if isinstance(child, exp.Select):
            nested.append(child)
            continue
        found.append(child)
        stack.extend(child.iter_expressions())
    return found


def _resolved(own: dict[str, exp.Window], outer: dict[str, exp.Window]) -> dict[str, exp.Window]:
    """Each definition of a WINDOW clause with the window it names (if any) merged in."""
    done: dict[str, exp.Window] = {}

    def resolve(name: str, seen: tuple[str, ...]) -> exp.Window:
        if name in done:
            return done[name]
        if name in seen:
            raise NotSupportedError(f'window "{name}" is defined by itself')
        definition = own[name]
        base = definition.args.get("alias")
        if base is None:
            done[name] = definition
        else:
            base_name = base.name.lower()
            known = resolve(base_name, (*seen, name)) if base_name in own else outer.get(base_name)
            done[name] = _merged(definition, known, base.name)
        return done[name]

    for name in own:
        resolve(name, ())
    return done


def _applied(window: exp.Window, named: dict[str, exp.Window]) -> exp.Window:
    """``window`` (``f() OVER name`` or ``OVER (name ...)``) with the named window written in."""
    reference = window.args["alias"]
    merged = _merged(window, named.get(reference.name.lower()), reference.name)
    merged.set("this", window.this)
    merged.set("over", window.args.get("over"))
    return merged


def _merged(reference: exp.Window, base: exp.Window | None, name: str) -> exp.Window:
    """A window of ``base``'s clauses and those ``reference`` adds, under DuckDB's rules."""
    if base is None:
        raise ProgrammingError(f'window "{name}" does not exist')
    added = {clause: reference.args.get(clause) for clause in _CLAUSES if reference.args.get(clause)}
    if added and base.args.get("spec"):
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
