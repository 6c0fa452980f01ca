"""information_schema.tables and information_schema.columns, queryable like any table.

Each is made when a query names it, from the catalog at that moment: DuckDB lists an empty
mirror of the catalog (:mod:`qengine.api.catalog_mirror`) in its own information_schema, so
the columns, types and values (catalog ``memory``, schema ``main``, ``BASE TABLE`` or
``VIEW``) are DuckDB's for its default database. The rows become an inline table that the
query reads like any other, so filters, joins and aggregates over it plan as usual.
"""

from __future__ import annotations

import itertools

import sqlglot.expressions as exp

from qengine.api import catalog_mirror
from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import InlineSource
from qengine.errors import NotSupportedError

SCHEMA = "information_schema"
TABLES = {"tables": "table_name", "columns": "table_name"}  # each table → the column naming a catalog table
_counter = itertools.count()


def inline(statement: exp.Expression, catalog: Catalog, dialect: str) -> exp.Expression:
    """``statement`` with every information_schema table it names replaced by a hidden inline
    table of its rows now (one per name, however often the query reads it)."""
    made: dict[str, str] = {}
    for table in list(statement.find_all(exp.Table)):
        if table.text("db").lower() != SCHEMA or table.text("catalog") or not isinstance(table.this, exp.Identifier):
            continue
        name = table.name.lower()
        if name not in TABLES:
            raise NotSupportedError(f"{SCHEMA}.{table.name} is not supported ({', '.join(f'{SCHEMA}.{t}' for t in TABLES)} are)")
        if name not in made:
            rows = catalog_mirror.ask(
                catalog, dialect, f"SELECT * FROM {SCHEMA}.{name} WHERE {catalog_mirror.visible(TABLES[name])}"
            )
            made[name] = f"__{SCHEMA}_{name}_{next(_counter)}"
            catalog.add_table(InlineSource(made[name], rows))
        alias = table.alias or table.name
        table.replace(exp.Table(this=exp.to_identifier(made[name]), alias=exp.TableAlias(this=exp.to_identifier(alias))))
    return statement
