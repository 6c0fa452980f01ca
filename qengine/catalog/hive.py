"""Hive-style partitioned datasets: ``data/y=2023/m=1/part.parquet`` read with columns ``m``
and ``y`` taken from the directories.

DuckDB is the reference for what such a dataset means (which paths count as partitioned, the
columns' types, NULL and URL-decoded values), so rather than re-implement its rules this module
asks a sandboxed DuckDB connection, over the very files the table reads, for each file's values
(:func:`detect`). Those values travel in each scan split as DuckDB's own text for them with their
type, and the worker turns them back into constant columns (:func:`constant_sql`,
:func:`constant_values`) with a DuckDB cast, so every path reads the same values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

import duckdb
import pyarrow as pa

from qengine.errors import NotSupportedError, ProgrammingError
from qengine.sandbox.connection import safe_connection, scratch_connection
from qengine.sandbox.quoting import identifier, string_literal
from qengine.transport.wire import schema_from_hex, schema_to_hex

FILE_COLUMN = "__qengine_hive_file"


@dataclass(frozen=True)
class HiveOptions:
    """``read_parquet``'s hive options: ``partitioning`` None detects as DuckDB does (every file
    below ``key=value`` directories of the same keys, at any depth)."""

    partitioning: bool | None = None
    types: dict[str, str] = field(default_factory=dict)
    autocast: bool = True

    def sql(self) -> str:
        """The options as ``read_parquet`` arguments."""
        out = [f"hive_types_autocast = {str(self.autocast).lower()}"]
        if self.partitioning is not None:
            out.append(f"hive_partitioning = {str(self.partitioning).lower()}")
        if self.types:
            pairs = ", ".join(f"{string_literal(k)}: {string_literal(v)}" for k, v in self.types.items())
            out.append(f"hive_types = {{{pairs}}}")
        return ", ".join(out)


@dataclass
class HivePartitions:
    """A dataset's partition columns (named as DuckDB orders them), their DuckDB types and
    Arrow schema, and per file (by resolved path) each column's value as DuckDB's text for it,
    None for NULL."""

    schema: pa.Schema
    types: list[str]
    values: dict[str, list[str | None]]

    @property
    def names(self) -> list[str]:
        return self.schema.names

    def for_split(self, paths: list[str]) -> dict:
        """What a split of these files carries about their partitions (JSON-serializable)."""
        return {"names": self.names, "types": self.types, "schema": schema_to_hex(self.schema),
                "values": {p: self.values[p] for p in paths}}


def _keys(path: str) -> list[str]:
    """The keys of the ``key=value`` directories of ``path``, as DuckDB 1.5 reads them: one
    ``=`` after a key that is not empty, the value possibly empty (``k=`` is ``k`` = ''; ``=v``,
    ``k=a=b`` and ``k==x`` are no partition)."""
    pieces = (seg.split("=") for seg in path.split(os.sep)[:-1])
    return [p[0] for p in pieces if len(p) == 2 and p[0]]


def detect(spelled: list[str], resolved: list[str], options: HiveOptions) -> HivePartitions | None:
    """The partitions of the files ``spelled`` as the user's path or glob named them (DuckDB
    reads partitions from the path as written), ``resolved`` their real paths in the same
    order; None when the dataset is not read as partitioned."""
    if not spelled or (options.partitioning is False and not options.types):
        return None
    keys = [set(_keys(p)) for p in spelled]
    first = keys[0]
    # DuckDB's detection: the first file has ``key=value`` directories, and every file the same
    # keys, at whatever depth (``k=1/f`` beside ``k=2/sub/f`` is partitioned; beside ``nokey/f``
    # it is not).
    if options.partitioning is None and not options.types and (not first or any(k != first for k in keys)):
        return None
    if not any(keys) and not options.types:  # partitioned, but by nothing: DuckDB reads the files alone
        return None
    files = ", ".join(string_literal(p) for p in spelled)
    # hive_types without hive_partitioning means partitioned; with it false, DuckDB says why not.
    on = replace(options, partitioning=options.partitioning is not False)
    source = f"read_parquet([{files}], {on.sql()}, filename = {string_literal(FILE_COLUMN)}, file_row_number = true)"
    con = safe_connection(readable=tuple(sorted(set(resolved) | set(spelled))))
    try:
        # DuckDB's order: a partition column named like a file column takes its place.
        names = [n for n in con.sql(f"SELECT * FROM {source} LIMIT 0").columns if n.lower() in {k.lower() for k in first}]
        if not names:
            return None
        typed = con.sql(f"SELECT {', '.join(identifier(n) for n in names)} FROM {source} LIMIT 0")
        schema, types = typed.arrow().schema, [str(t) for t in typed.types]
        texts = ", ".join(f"CAST({identifier(n)} AS VARCHAR)" for n in names)
        rows = con.sql(f"SELECT {identifier(FILE_COLUMN)}, {texts} FROM {source} WHERE file_row_number = 0").fetchall()
    except duckdb.Error as e:
        raise ProgrammingError(f"cannot read the hive partitions of {spelled[0]}: {e}") from e
    finally:
        con.close()
    real = dict(zip(spelled, resolved, strict=True))
    values: dict[str, list[str | None]] = {p: [None] * len(names) for p in resolved}  # a file of no rows: none read
    named: dict[str, str] = {}  # resolved path → the name its values were read under
    for row in rows:
        path = real[row[0]]
        if path in named and values[path] != list(row[1:]):
            # A split names a file by its real path: one file in two partitions (a link) has
            # one set of values there.
            raise NotSupportedError(f"{row[0]} and {named[path]} are one file in two hive partitions: "
                                    "copy the file instead of linking it")
        named[path], values[path] = row[0], list(row[1:])
    return HivePartitions(schema, types, values)


def constant_sql(value: str | None, kind: str) -> str:
    """A partition value as a DuckDB expression of its type."""
    return f"CAST({'NULL' if value is None else string_literal(value)} AS {kind})"


def constant_values(hive: dict, path: str, names: list[str]) -> list[pa.Scalar]:
    """The named partition values of file ``path`` of a split's ``hive`` entry, cast by DuckDB
    from the text the split carries (a reader repeats them over the file's rows)."""
    schema = schema_from_hex(hive["schema"])
    index = {n.lower(): i for i, n in enumerate(hive["names"])}
    values = hive["values"][path]
    wanted = [index[n.lower()] for n in names]
    sql = "SELECT " + ", ".join(f"{constant_sql(values[i], hive['types'][i])} AS {identifier(n)}" for i, n in zip(wanted, names, strict=True))
    con = scratch_connection()
    try:
        one = con.sql(sql).arrow().read_all()
    finally:
        con.close()
    return [one.column(k)[0].cast(schema.field(i).type) for k, i in enumerate(wanted)]
