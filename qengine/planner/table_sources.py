"""Tables named in FROM by something other than a catalog name, as DuckDB reads them.

* A file name as the table (``FROM 'sales.parquet'``, ``FROM 'x.csv'``, ``FROM 'events.json'``,
  globs too), which DuckDB reads by the file's suffix: a hidden catalog table over the files.
* ``read_json(path)`` / ``read_json_auto(path)`` (and ``read_ndjson``): a JSON source
  (``catalog.sources.JsonSource``).
* ``range(n)``, ``range(a, b[, step])`` and ``generate_series(...)``: the integers as a table
  (``catalog.sources.RangeSource``), ``range`` without its end and ``generate_series`` with it,
  in a column named after the function.

Every file goes through ``Catalog.resolve_paths`` with ``from_sql``, the same read-root checks
read_parquet() and read_csv() go through; the workers check each file again before opening it.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import duckdb
import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import CsvSource, JsonSource, ParquetSource, RangeSource, Source
from qengine.errors import Error, NotSupportedError, ProgrammingError
from qengine.sandbox.connection import scratch_connection

# A file's suffix → how DuckDB reads it when it is named as a table.
FILE_SUFFIXES = {
    ".parquet": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
}
SUFFIXES = {kind: tuple(s for s, k in FILE_SUFFIXES.items() if k == kind) for kind in set(FILE_SUFFIXES.values())}
JSON_FUNCTIONS = {"read_json": "auto", "read_json_auto": "auto", "read_ndjson": "newline_delimited"}
_JSON_FORMATS = ("auto", "newline_delimited", "array")
_counter = itertools.count()


def file_kind(name: str) -> str | None:
    """How a table named ``name`` is read as a file, by its suffix; None if it names no file."""
    lowered = name.lower()
    return next((kind for suffix, kind in FILE_SUFFIXES.items() if lowered.endswith(suffix)), None)


def expand_file(table: exp.Table, catalog: Catalog) -> bool:
    """Replace a table whose name is a file name (and no catalog table's) by a hidden table over
    the files; whether it was one."""
    if table.args.get("db") or not isinstance(table.this, exp.Identifier) or table.name.lower() in catalog.tables:
        return False
    kind = file_kind(table.name)
    if kind is None:
        return False
    paths = catalog.resolve_paths(table.name, SUFFIXES[kind], from_sql=True)
    make = {"parquet": ParquetSource, "csv": CsvSource, "json": JsonSource}[kind]
    _replace(table, catalog, lambda name: make(name, paths), kind, table.name, os.path.splitext(os.path.basename(table.name))[0])
    return True


def expand_call(table: exp.Table, fname: str, catalog: Catalog) -> bool:
    """Replace a table function this module reads (JSON, range, generate_series) by a hidden
    table; whether it was one."""
    func = table.this
    if fname in JSON_FUNCTIONS:
        path, json_format = _json_arguments(func, fname)
        paths = [p for spec in path for p in catalog.resolve_paths(spec, SUFFIXES["json"], from_sql=True)]
        _replace(table, catalog, lambda name: JsonSource(name, paths, json_format), "json", f"{fname}()", fname)
        return True
    if fname in ("range", "generate_series") and isinstance(func, exp.GenerateSeries):
        start, stop, step = _series_arguments(func, fname)
        if step == 0:
            raise ProgrammingError(f"{fname}() step must not be zero")
        if fname == "generate_series":  # its end is included: stop one step past it
            stop += 1 if step > 0 else -1
        _replace(table, catalog, lambda name: RangeSource(name, fname, start, stop, step), "range", f"{fname}()", fname)
        return True
    return False


def _replace(table: exp.Table, catalog: Catalog, make: Callable[[str], Source], kind: str, shown: str, alias: str) -> None:
    """Put the source ``make(name)`` in the catalog as a hidden table and read it instead,
    under the alias written, else ``alias`` (DuckDB's: the function's name, or the file's
    without its directory and suffix)."""
    name = f"__{kind}_{next(_counter)}"
    try:
        source = make(name)
    except Error as e:  # it names the table, which the user knows only as the call or file
        e.args = (str(e).replace(f"table {name!r}", shown),)
        raise
    catalog.add_table(source)
    written = table.args.get("alias")
    if written is not None and written.columns:  # t(a, b) renames columns: the planner does so for a subquery
        columns = [exp.column(c, quoted=True) for c in source.schema.names]
        table.replace(exp.Subquery(this=exp.select(*columns).from_(exp.Table(this=exp.to_identifier(name))), alias=written.copy()))
        return
    table.replace(exp.Table(this=exp.to_identifier(name), alias=written.copy() if written else exp.TableAlias(this=exp.to_identifier(alias))))


def _json_arguments(func: exp.Expression, fname: str) -> tuple[list[str], str]:
    """read_json()'s paths (a string or a list of them) and its ``format``."""
    args = list(func.expressions) if func.expressions else [func.this]
    first, options = (args[0] if args else None), args[1:]
    specs = first.expressions if isinstance(first, exp.Array) else [first]
    if not specs or not all(isinstance(a, exp.Literal) and a.is_string for a in specs):
        raise ProgrammingError(f"{fname}() takes a path or a list of paths as a string literal")
    json_format = JSON_FUNCTIONS[fname]
    for option in options:
        key = option.this.name.lower() if isinstance(option, exp.EQ | exp.PropertyEQ | exp.Kwarg) else None
        value = option.expression if key is not None else None
        if key != "format" or not (isinstance(value, exp.Literal) and value.is_string) or value.name.lower() not in _JSON_FORMATS:
            raise NotSupportedError(
                f"{fname}() option {option.sql(dialect='duckdb')} is not supported (format = 'auto', 'newline_delimited' or 'array' is)"
            )
        json_format = value.name.lower()
    return [s.name for s in specs], json_format


def _series_arguments(func: exp.GenerateSeries, fname: str) -> tuple[int, int, int]:
    """range()'s or generate_series()'s start, stop and step as integers, worked out by DuckDB
    (constant expressions such as ``10 * 1000`` are allowed); dates and timestamps are refused."""
    parts = [func.args.get("start"), func.args.get("end"), func.args.get("step") or exp.Literal.number(1)]
    if any(p is None or p.find(exp.Column) for p in parts):
        raise ProgrammingError(f"{fname}() takes constant arguments")
    con = scratch_connection()
    try:
        row = con.execute("SELECT " + ", ".join(f"typeof({p.sql(dialect='duckdb')}), {p.sql(dialect='duckdb')}" for p in parts)).fetchone()
    except duckdb.Error as e:
        raise ProgrammingError(f"{fname}(): {str(e).splitlines()[0]}") from e
    finally:
        con.close()
    kinds, values = row[0::2], row[1::2]
    integers = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "INTEGER_LITERAL")
    if not all(k in integers or k.startswith("INTEGER_LITERAL") for k in kinds):
        raise NotSupportedError(f"{fname}() over {', '.join(sorted(set(kinds)))} is not supported (integers are)")
    if any(v is None for v in values):
        raise ProgrammingError(f"{fname}() arguments must not be NULL")
    return int(values[0]), int(values[1]), int(values[2])
