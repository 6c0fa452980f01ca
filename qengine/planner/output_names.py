"""Result column names in the case the user (or the table) gave them.

sqlglot's optimizer lower-cases every identifier, quoted or not (DuckDB compares names without
case), so a column that reaches the result through ``*`` or a bare column name comes out of the
planner lower-cased: ``SELECT * FROM v`` over a view of ``strftime(d, '%Y')`` was headed
``strftime(d, '%y')``, a Parquet column ``TABLE_COMMENT`` ``table_comment``. DuckDB keeps the
name as it was given; so does qengine, from the names the statement and its tables spell.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog


def spelled_names(statement: exp.Expression, catalog: Catalog) -> dict[str, str]:
    """Lower-cased name → as spelled, from the statement's aliases (those the frontend gave
    unaliased expressions too) and column aliases, and the columns of the tables it reads. A
    name spelled two ways (``a`` and ``A``) is left out: which one a column took is unknown."""
    spellings: dict[str, set[str]] = {}

    def add(name: str) -> None:
        spellings.setdefault(name.lower(), set()).add(name)

    for node in statement.walk():
        if isinstance(node, exp.Alias) and node.args.get("alias") is not None:
            add(node.alias)
        elif isinstance(node, exp.TableAlias):
            for column in node.columns:
                add(column.name)
        elif isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
            source = catalog.tables.get(node.name.lower())
            for name in source.schema.names if source is not None else ():
                add(name)
    return {low: next(iter(names)) for low, names in spellings.items() if len(names) == 1}


def spelled(names: list[str], spellings: dict[str, str]) -> list[str]:
    """Each lower-case name of ``names`` as spelled, where ``spellings`` knows one."""
    return [spellings.get(name, name) if name == name.lower() else name for name in names]
