"""Replacement scans: a DataFrame, Arrow table or relation held in a Python variable is found
by its name in FROM, as DuckDB finds it (``df = pd.DataFrame(...); con.sql("FROM df")``).

The variables are taken from the caller's frame (its locals, then its globals) when the
statement is made: by ``execute`` or ``sql``, so a relation keeps what its text named when it
was made, as DuckDB binds a relation then. Only names the catalog lacks are looked up (a
registered table, a view or a CTE always wins). Data is spread over the workers as a session
table under an internal name for the one statement and dropped after it; a relation is
inlined as a subquery, read with the variables of its own making.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import sqlglot.expressions as exp

from qengine.api.frames import arrow_table, is_data
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.frontend import expand_sources, parse
from qengine.planner.parameters import bind

_WORDS = re.compile(r"[^\W\d]\w*")  # Python identifiers, Unicode ones too
_scan_ids = itertools.count(1)
MAX_NESTING = 32  # relations read in relations, as views nest


class ScopedQuery:
    """A query's text on a connection, with the Python variables its FROM may name."""

    def __init__(self, connection: Any, sql: str, scope: Mapping[str, Any]) -> None:
        self.connection = connection
        self.sql = sql
        self.scope = scope


def caller_scope(sql: object) -> dict[str, Any]:
    """The variables of the nearest caller outside qengine (its locals, else its globals)
    whose names ``sql`` has as words: all a FROM in it could name. Holding only those keeps a
    relation from holding on to every other object of its maker."""
    if not isinstance(sql, str):
        return {}
    words = set(_WORDS.findall(sql))
    frame = sys._getframe(1)
    try:
        while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "qengine":
            frame = frame.f_back
        if frame is None:
            return {}
        local, module = frame.f_locals, frame.f_globals
        return {name: local[name] if name in local else module[name] for name in words if name in local or name in module}
    finally:
        del frame


class ReplacementScans:
    """The tables one statement reads from its maker's variables (see the module docstring)."""

    def __init__(self, session: Any, connection: Any, scope: Mapping[str, Any], registered: dict[int, tuple[str, Any]] | None = None,
                 depth: int = 0) -> None:
        self._session = session
        self._connection = connection
        self._scope = scope
        # id of each object registered → its internal table name, and the object, kept so that
        # its id is not reused for another while the statement runs
        self._registered = {} if registered is None else registered
        self._depth = depth

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Find the variables while the block runs the statement; drop their tables after it."""
        try:
            with self._session.catalog.finding(self.find):
                yield
        finally:
            for name, _ in self._registered.values():
                self._session.forget_table(name)
            self._registered.clear()

    def find(self, name: str) -> exp.Query | None:
        """The query FROM reads for ``name``, a table the catalog lacks; None if no variable
        of that name was in scope."""
        if name not in self._scope:
            return None
        value = self._scope[name]
        if isinstance(value, ScopedQuery):
            return self._inlined(name, value)
        key = id(value)
        if key not in self._registered:
            table = arrow_table(value)
            if table is None:
                raise ProgrammingError(
                    f"{name!r} is a Python {type(value).__name__}, not a table: FROM reads a pandas or polars DataFrame, "
                    "an Arrow table or record batch reader, or a relation held in a variable"
                )
            internal = f"__scan_{next(_scan_ids)}"
            self._session.register_arrow(internal, table)
            self._registered[key] = (internal, value)
        return exp.select("*").from_(exp.table_(self._registered[key][0]))

    def _inlined(self, name: str, relation: ScopedQuery) -> exp.Query:
        """A relation's query, its own variable names found in its own scope."""
        if relation.connection is not self._connection:
            raise ProgrammingError(f"relation {name!r} belongs to another connection: a relation is read on the connection that made it")
        if self._depth >= MAX_NESTING:
            raise ProgrammingError(f"relations nest more than {MAX_NESTING} deep (one that reads itself?)")
        statements = parse(relation.sql, self._session.dialect)
        if len(statements) != 1 or not isinstance(statements[0], exp.Query | exp.Values):
            raise ProgrammingError(f"relation {name!r} is not a query SQL can read from (an EXPLAIN?)")
        # Its plan depends on what the variable holds now: plans made now must not be reused.
        self._session.catalog.changed()
        inner = ReplacementScans(self._session, self._connection, relation.scope, self._registered, self._depth + 1)
        with self._session.catalog.finding(inner.find):
            return expand_sources(bind(statements[0], None), self._session.catalog, self._session.dialect)


def reads_variables(connection: Any) -> bool:
    """Whether ``connection``'s statements can read Python variables: not a standalone
    cluster's, whose coordinator resolves every name alone."""
    return hasattr(connection.session, "catalog")


def scans_for(connection: Any, sql: str, scope: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
    """The replacement scans of statement ``sql``, which ``connection`` runs with the
    variables ``scope``. A standalone cluster's coordinator cannot read them: a statement
    there that names one in FROM is refused rather than told the table does not exist."""
    if not scope:
        return contextlib.nullcontext()
    if reads_variables(connection):
        return ReplacementScans(connection.session, connection, scope).active()
    held = {name for name, value in scope.items() if is_data(value) or isinstance(value, ScopedQuery)}
    if held:
        named = {t.name for statement in parse(sql, connection.session.dialect) for t in statement.find_all(exp.Table)}
        tables = {t.lower() for t in connection.tables()}
        read = sorted(name for name in held & named if name.lower() not in tables)
        if read:
            raise NotSupportedError(
                f"a standalone cluster cannot read the Python variable {read[0]!r}: write it to Parquet on a shared path "
                "and register_parquet it"
            )
    return contextlib.nullcontext()
