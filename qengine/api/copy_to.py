"""COPY (query) TO target: what the target names, and writing one file or hive directories.

As in DuckDB, the target names one file unless ``PER_THREAD_OUTPUT`` is true (or it is an
existing directory), and its format is the FORMAT given, else the file's suffix
(``out.parquet``, ``x.json``), else CSV; a suffix that names no format qengine writes
(``.xlsx``, ``.gz``) is refused rather than guessed. Otherwise it is a directory of part files
(Parquet unless a FORMAT says otherwise),
one written by each result task on its worker (``api.session``'s ``_copy`` and
``catalog.access.claim_output``). With ``PARTITION_BY (col,
…)`` it is a directory of hive partitions ``dir/col=value/data_0.parquet`` (or .csv, .json), the partition
columns left out of the files, as DuckDB writes them.

One file, and the partitions, are written here, in the session, from the result as it streams
in from the workers (``ResultStream`` holds a few megabytes of it ahead at most): one process
writes them, but none ever holds the whole result. Having each result task write a part and
concatenating them after would read every byte twice and cannot make one Parquet file without
rewriting it. A file is written under a hidden name beside the target and renamed into place
once complete, so a failed COPY leaves no half-written file.
"""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import duckdb
import pyarrow as pa
import sqlglot.expressions as exp

from qengine.api.json_rows import json_rows
from qengine.catalog.access import AccessPolicy
from qengine.errors import NotSupportedError, OperationalError, ProgrammingError
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.file_writers import CsvWriter, ParquetWriter, Writer
from qengine.sandbox.quoting import identifier

FORMATS = ("parquet", "csv", "json")
PART_FORMATS = ("parquet", "csv")  # what a result task writes as a part file
_SUFFIXES = {".parquet": "parquet", ".parq": "parquet", ".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json",
             ".ndjson": "json"}
_COMPRESSIONS = (".gz", ".gzip", ".zst", ".bz2", ".lz4", ".xz", ".zip", ".snappy")
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # DuckDB's directory name for a NULL value


@dataclass
class Target:
    """Where COPY writes: ``kind`` is "file", "parts" (a directory of part files) or "hive"."""

    path: str
    kind: str
    format: str
    overwrite: bool
    partition_by: list[str] = field(default_factory=list)


def target(st: exp.Copy, policy: AccessPolicy) -> Target:
    """Read COPY's target and options; the path is resolved and checked against the output roots."""
    files = st.args.get("files") or []
    if len(files) != 1 or not isinstance(files[0], exp.Literal) or not files[0].is_string:
        raise ProgrammingError("COPY ... TO takes one output file or directory as a string literal")
    params = {p.this.name.upper(): p for p in st.args.get("params") or []}
    partition = params.pop("PARTITION_BY", None)
    options = {name: _option(p.expression) for name, p in params.items()}
    given = options.pop("FORMAT", None)
    overwrite = _true(options.pop("OVERWRITE", options.pop("OVERWRITE_OR_IGNORE", "false")))
    per_thread = _true(options.pop("PER_THREAD_OUTPUT", "false"))
    if options:
        raise NotSupportedError(f"COPY option {next(iter(options))} is not supported")
    path = files[0].name
    one_file = not per_thread and partition is None and not os.path.isdir(path)
    extension = os.path.splitext(path)[1].lower()
    suffix = _SUFFIXES.get(extension)
    if given is None and one_file and extension in _COMPRESSIONS:
        raise NotSupportedError(f"COPY to a compressed file ({extension}) is not supported: write it uncompressed, or as Parquet")
    if given is None and one_file and extension and suffix is None:
        raise NotSupportedError(f"COPY cannot tell a format from {extension!r}: add (FORMAT parquet), csv or json")
    # DuckDB writes CSV where neither a FORMAT nor the file's extension names one: one file, parts or hive directories
    fmt = (given or suffix or "csv").lower()
    if fmt not in FORMATS:
        raise NotSupportedError(f"COPY format {fmt!r} is not supported ({', '.join(FORMATS)})")
    resolved = policy.check_write(path)
    if partition is not None:
        given_columns = partition.expression.unnest() if isinstance(partition.expression, exp.Paren) else partition.expression  # (col)
        columns = given_columns.expressions if isinstance(given_columns, exp.Tuple) else [given_columns]
        names = [c.name for c in columns if isinstance(c, exp.Column | exp.Identifier | exp.Var)]
        if not names or len(names) != len(columns):
            raise ProgrammingError("PARTITION_BY takes column names: PARTITION_BY (col, ...)")
        if os.path.lexists(resolved) and (not os.path.isdir(resolved) or os.listdir(resolved)):
            raise ProgrammingError(f"{resolved} is not an empty directory: COPY ... PARTITION_BY writes into a new or empty one")
        return Target(resolved, "hive", fmt, overwrite, names)
    if not one_file:
        if fmt not in PART_FORMATS:
            raise NotSupportedError(f"COPY writes {fmt} to one file, not to a directory of parts ({', '.join(PART_FORMATS)})")
        return Target(resolved, "parts", fmt, overwrite)
    if os.path.lexists(resolved) and not overwrite:
        raise ProgrammingError(f"{resolved} already exists (add OVERWRITE true to replace it)")
    if not os.path.isdir(os.path.dirname(resolved)):
        raise ProgrammingError(f"cannot write {resolved}: directory {os.path.dirname(resolved)} does not exist")
    return Target(resolved, "file", fmt, overwrite)


def partition_keys(out: Target, names: list[str]) -> list[str]:
    """The result's columns PARTITION_BY names (checked before the query runs)."""
    lookup = {name.lower(): name for name in names}
    missing = [c for c in out.partition_by if c.lower() not in lookup]
    if missing:
        raise ProgrammingError(f"PARTITION_BY column {missing[0]!r} is not a column of the query ({', '.join(names)})")
    keys = [lookup[c.lower()] for c in out.partition_by]
    if not [n for n in names if n not in keys]:
        raise ProgrammingError("PARTITION_BY names every column of the query: no column would be left to write")
    return keys


def _option(value: exp.Expression | None) -> str:
    """A COPY option's value as text; a bare option (OVERWRITE) means true."""
    if value is None:
        return "true"
    if isinstance(value, exp.Boolean):
        return "true" if value.this else "false"
    return value.name


def _true(text: str) -> bool:
    return text.lower() in ("true", "1")


def write_file(out: Target, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """Stream the result into one file under a hidden name beside it, renamed into place once
    complete; its row count."""
    partial = os.path.join(os.path.dirname(out.path), f".{os.path.basename(out.path)}.qengine-copy.tmp")
    try:
        sink = open(partial, "xb")  # noqa: SIM115 - closed below; "x": never another COPY's file
    except FileExistsError as e:
        raise OperationalError(f"cannot write {out.path}: another COPY is writing it ({partial} exists)") from e
    except OSError as e:
        raise OperationalError(f"cannot write {out.path}: {e}") from e
    rows = 0
    try:
        with sink, _writer(sink, out.format, schema) as writer:
            for batch in batches:
                writer.write(batch)
                rows += batch.num_rows
        os.replace(partial, out.path)
    except OSError as e:
        raise OperationalError(f"cannot write {out.path}: {e}") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return rows


def write_partitions(out: Target, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> int:
    """Write the result as hive partitions, one file (data_0.parquet, .csv or .json) a partition; its row count.

    The directory is new or empty (``target``): COPY deletes nothing it cannot tell it wrote. Each
    partition's writer stays open while the result streams past, so a partition's rows, from
    whatever batch, go to its one file. A COPY that fails part way (its result could not be read
    to its end) removes the files and directories it made: they looked like a whole output."""
    keys = out.partition_by  # as the result names them (``partition_keys``)
    kept = [n for n in schema.names if n not in keys]
    made: list[str] = []  # directories this COPY created, parents first
    files: list[BinaryIO] = []  # files it created ("xb"), each as soon as it exists
    file_schema = pa.schema([schema.field(n) for n in kept])
    writers: dict[tuple[str, ...], tuple[BinaryIO, Any]] = {}
    rows = 0
    try:
        _make_dirs(out.path, made)
        for batch in batches:
            for values, indices in _groups(batch, keys).items():
                if values not in writers:
                    # names and values alike percent-encoded, as DuckDB writes them: a column
                    # named "../x" made a directory outside the output root
                    directory = os.path.join(out.path, *(f"{_escaped(k)}={_escaped(v)}" for k, v in zip(keys, values, strict=True)))
                    if os.path.commonpath([os.path.realpath(directory), os.path.realpath(out.path)]) != os.path.realpath(out.path):
                        raise ProgrammingError(f"partition directory {directory} is outside {out.path}")
                    _make_dirs(directory, made)
                    sink = open(os.path.join(directory, f"data_0.{out.format}"), "xb")  # noqa: SIM115 - closed with its writer
                    files.append(sink)
                    writers[values] = (sink, _writer(sink, out.format, file_schema))
                writers[values][1].write(batch.select(kept).take(pa.array(indices)))
                rows += len(indices)
        for sink, writer in writers.values():
            writer.close()
            sink.close()
    except BaseException as e:
        _close_quietly(writers.values())
        for sink in files:  # created by this COPY ("xb"): nobody else's
            sink.close()
            with contextlib.suppress(OSError):
                os.unlink(sink.name)
        for directory in reversed(made):
            with contextlib.suppress(OSError):  # one another process wrote into stays
                os.rmdir(directory)
        if isinstance(e, OSError):
            raise OperationalError(f"cannot write into {out.path}: {e}") from e
        raise
    return rows


def _close_quietly(writers: Iterable[tuple[BinaryIO, Any]]) -> None:
    """Close a failed COPY's writers: closing one must not hide why it failed."""
    for sink, writer in writers:
        with contextlib.suppress(Exception):
            writer.close()
        sink.close()


def _make_dirs(path: str, made: list[str]) -> None:
    """``os.makedirs(path, exist_ok=True)``, noting in ``made`` each directory it created."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another: not ours to remove
            os.mkdir(directory)
            made.append(directory)


def _writer(sink: BinaryIO, fmt: str, schema: pa.Schema) -> Any:
    """A writer of ``fmt`` into ``sink``: ``write(batch)``, ``close()``, and a context manager."""
    if fmt == "csv":
        return CsvWriter(sink, schema)
    if fmt == "json":
        return _JsonWriter(sink)
    return ParquetWriter(sink, schema)


class _JsonWriter(Writer):
    """Newline-delimited JSON, each row an object as DuckDB's COPY ... (FORMAT json) writes it,
    batch by batch (``api.json_rows``)."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink

    def write(self, batch: pa.RecordBatch) -> None:
        self.sink.write("".join(line + "\n" for line in json_rows(batch)).encode())

    def close(self) -> None:
        self.sink.flush()


def _groups(batch: pa.RecordBatch, keys: list[str]) -> dict[tuple[str, ...], list[int]]:
    """Row numbers of ``batch`` by their partition values, as DuckDB writes them in a directory
    name: the value cast to VARCHAR by DuckDB itself (dates, decimals, timestamps alike). DuckDB
    names a TIMESTAMPTZ's directory in UTC whatever its TimeZone setting; the scratch database's
    setting is locked, so such a value is spelled in UTC by the cast itself."""
    con = scratch_connection()
    try:
        con.register("__qengine_batch", pa.Table.from_batches([batch.select(keys)]))
        casts = ", ".join(_text(identifier(k), pa.types.is_timestamp(t := batch.schema.field(k).type) and t.tz is not None)
                          for k in keys)
        texts = con.execute(f"SELECT {casts} FROM __qengine_batch").fetchall()
    except duckdb.Error as e:
        raise OperationalError(f"cannot name the partitions: {e}") from e
    finally:
        con.close()
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, values in enumerate(texts):
        groups.setdefault(tuple(NULL_PARTITION if v is None else v for v in values), []).append(i)
    return groups


def _text(column: str, zoned: bool) -> str:
    """DuckDB's directory-name text of ``column``: a TIMESTAMPTZ's in UTC, as ``2024-01-01 05:00:00+00``."""
    if not zoned:
        return f"CAST({column} AS VARCHAR)"
    return f"CASE WHEN isinf({column}) THEN CAST({column} AS VARCHAR) ELSE CAST(timezone('UTC', {column}) AS VARCHAR) || '+00' END"


def _escaped(value: str) -> str:
    """A partition value in a directory name, percent-encoded as DuckDB encodes it."""
    return value if value == NULL_PARTITION else urllib.parse.quote(value, safe="")
