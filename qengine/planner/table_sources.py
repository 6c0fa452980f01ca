"""Tables named in FROM by something other than a catalog name, as DuckDB reads them.

* ``read_parquet(path, [hive options])`` / ``parquet_scan`` and ``read_csv`` / ``read_csv_auto``:
  a hidden catalog table over the files (Parquet read as hive partitions where DuckDB would).
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
from typing import Any

import duckdb
import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog, uncompressed
from qengine.catalog.sources import CsvSource, JsonSource, RangeSource, Source, hive_parquet
from qengine.errors import Error, NotSupportedError, ProgrammingError
from qengine.planner.parquet_options import hive_options
from qengine.sandbox.connection import scratch_connection

# A file's suffix → how DuckDB reads it when it is named as a table.
FILE_SUFFIXES = {
    ".parquet": "parquet", ".parq": "parquet",
    ".csv": "csv", ".tsv": "csv",
    ".json": "json", ".jsonl": "json", ".ndjson": "json",
}
SUFFIXES = {kind: tuple(s for s, k in FILE_SUFFIXES.items() if k == kind) for kind in set(FILE_SUFFIXES.values())}
# What read_csv() also reads beside the suffixes a file named as a table needs.
READ_SUFFIXES = {**SUFFIXES, "csv": (*SUFFIXES["csv"], ".txt")}
READERS = {"read_parquet": "parquet", "parquet_scan": "parquet", "read_csv": "csv", "read_csv_auto": "csv"}
JSON_FUNCTIONS = {"read_json": "auto", "read_json_auto": "auto", "read_ndjson": "newline_delimited"}
_JSON_FORMATS = ("auto", "newline_delimited", "array")
_counter = itertools.count()


def file_kind(name: str) -> str | None:
    """How a table named ``name`` is read as a file, by its suffix; None if it names no file."""
    lowered = uncompressed(name).lower()
    return next((kind for suffix, kind in FILE_SUFFIXES.items() if lowered.endswith(suffix)), None)


def expand_file(table: exp.Table, catalog: Catalog) -> bool:
    """Replace a table whose name is a file name (and no catalog table's) by a hidden table over
    the files; whether it was one."""
    kind = file_kind(table.name)
    if kind is None:
        return False
    files = catalog.resolve_files(table.name, SUFFIXES[kind], from_sql=True)
    stem = os.path.splitext(os.path.basename(table.name))[0]
    _replace(table, catalog, _maker(kind, files, []), kind, table.name, stem, f"'{table.name}'")
    return True


def expand_call(table: exp.Table, fname: str, catalog: Catalog, dialect: str) -> bool:
    """Replace a table function this module reads (the file readers, range, generate_series)
    by a hidden table; whether it was one."""
    func = table.this
    written = func.sql(dialect=dialect, normalize_functions="lower")
    kind = READERS.get(fname) or ("json" if fname in JSON_FUNCTIONS else None)
    if kind is not None:
        # read_csv() is read as ReadCSV(this=path, expressions=options); others as Anonymous(args)
        args = [func.this, *func.expressions] if isinstance(func.this, exp.Expression) else list(func.expressions)
        specs = args[0].expressions if args and isinstance(args[0], exp.Array) else args[:1]
        if not specs or not all(isinstance(a, exp.Literal) and a.is_string for a in specs):
            raise ProgrammingError(f"{fname}() takes a path or a list of paths as a string literal")
        files = [f for spec in specs for f in catalog.resolve_files(spec.name, READ_SUFFIXES[kind], from_sql=True)]
        options = _json_format(fname, args[1:]) if kind == "json" else args[1:]
        _replace(table, catalog, _maker(kind, files, options, fname), kind, f"{fname}()", fname, written)
        return True
    if fname in ("range", "generate_series") and isinstance(func, exp.GenerateSeries):
        start, stop, step = _series_arguments(func, fname)
        if step == 0:
            raise ProgrammingError(f"{fname}() step must not be zero")
        if fname == "generate_series":  # its end is included: stop one step past it
            stop += 1 if step > 0 else -1
        _replace(table, catalog, lambda name: RangeSource(name, fname, start, stop, step), "range", f"{fname}()", fname, written)
        return True
    return False


def _maker(kind: str, files: list[tuple[str, str]], options: Any, fname: str = "") -> Callable[[str], Source]:
    """How a hidden table of ``kind`` over ``files`` (resolved, as spelled) is made, given its
    name: ``options`` are read_parquet()'s hive options, read_json()'s format, or read_csv()'s
    (refused: a delimiter or header option would change every row, so it is never ignored)."""
    paths = [path for path, _ in files]
    if kind == "parquet":
        hive = hive_options(fname, options)
        return lambda name: hive_parquet(name, files, hive)
    if kind == "json":
        return lambda name: JsonSource(name, paths, options or "auto")
    if options:
        raise NotSupportedError(f"{fname}() options are not supported: register_csv(name, path, delimiter, header) takes them")
    return lambda name: CsvSource(name, paths)


SOURCE_ALIASES = "qengine_source_aliases"  # meta of a table function or file renamed by its alias

def _replace(
    table: exp.Table, catalog: Catalog, make: Callable[[str], Source], kind: str, shown: str, alias: str, written: str
) -> None:
    """Put the source ``make(name)`` in the catalog as a hidden table and read it instead,
    under the alias written, else ``alias`` (DuckDB's: the function's name, or the file's
    without its directory and suffix); EXPLAIN shows it as ``written``."""
    name = f"__{kind}_{next(_counter)}"
    try:
        source = make(name)
    except Error as e:  # it names the table, which the user knows only as the call or file
        e.args = (str(e).replace(f"table {name!r}", shown),)
        raise
    source.written = written
    catalog.add_table(source)
    written = table.args.get("alias")
    if written is not None and written.columns:  # t(a, b) renames columns: the planner does so for a subquery
        columns = [exp.column(c, quoted=True) for c in source.schema.names]
        renamed = exp.Subquery(this=exp.select(*columns).from_(exp.Table(this=exp.to_identifier(name))), alias=written.copy())
        renamed.meta[SOURCE_ALIASES] = True  # DuckDB takes more names than a table function has columns
        table.replace(renamed)
        return
    table.replace(exp.Table(this=exp.to_identifier(name), alias=written.copy() if written else exp.TableAlias(this=exp.to_identifier(alias))))


def _json_format(fname: str, options: list[exp.Expression]) -> str:
    """read_json()'s ``format`` option, the one it takes."""
    json_format = JSON_FUNCTIONS[fname]
    for option in options:
        key = option.this.name.lower() if isinstance(option, exp.EQ | exp.PropertyEQ | exp.Kwarg) else None
        value = option.expression if key is not None else None
        if key != "format" or not (isinstance(value, exp.Literal) and value.is_string) or value.name.lower() not in _JSON_FORMATS:
            raise NotSupportedError(
                f"{fname}() option {option.sql(dialect='duckdb')} is not supported (format = 'auto', 'newline_delimited' or 'array' is)"
            )
        json_format = value.name.lower()
    return json_format


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
    integers = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")
    if not all(k in integers or k.startswith("INTEGER_LITERAL") for k in kinds):
        raise NotSupportedError(f"{fname}() over {', '.join(sorted(set(kinds)))} is not supported (integers are)")
    if any(v is None for v in values):
        raise ProgrammingError(f"{fname}() arguments must not be NULL")
    return int(values[0]), int(values[1]), int(values[2])
