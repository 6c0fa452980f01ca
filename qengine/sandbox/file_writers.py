"""The files COPY writes, Parquet and CSV, as DuckDB's COPY writes them where Arrow's writers
would not.

CSV is written as DuckDB's writer writes it: each value DuckDB's text of it (its cast to
VARCHAR, which its CSV writer uses: lists and structs as ``[1, 2]``, a BLOB as ``\\x01\\x02``),
quoted only where needed. Arrow's CSV writer refuses lists, structs, maps and intervals,
writes a BLOB's raw bytes and quotes every string.

Arrow's Parquet writer has no INTERVAL: such a column is refused by name rather than failing
inside Arrow. Columns whose DuckDB type Arrow holds as another (``carried_types``) are written
as DuckDB writes them: a UUID as Parquet's UUID, not its text; JSON as JSON; a HUGEINT or
UHUGEINT as DOUBLE, at any depth of nesting.
"""

from __future__ import annotations

from typing import BinaryIO

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from qengine.errors import DataError, NotSupportedError
from qengine.sandbox.carried_types import HUGEINT, carried_type, restoring_query
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import identifier


class Writer:
    """A file writer of batches: ``write(batch)``, ``close()``, and a context manager closing it."""

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CsvWriter(Writer):
    """CSV over ``sink`` for batches of ``schema``, as DuckDB's COPY writes it by default: each
    value DuckDB's own text of it (its cast to VARCHAR: ``2020-01-01 10:00:00+00``, ``-0.0``,
    ``01:02:03.5``), quoted only where it holds a comma, a quote or a line break, or is empty,
    NULL as nothing, and a header of the names quoted alike. Arrow's writer quotes every string
    and spells timestamps, times and negative zero its own way."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        self._sink = sink
        # The columns whose text Arrow spells as DuckDB does are cast by Arrow; DuckDB spells the
        # others (floats, timestamps, times, nested values…), read by position: a result may
        # repeat a name.
        self._by_duckdb = [i for i, f in enumerate(schema) if not _spelled_alike(f)]
        inner = restoring_query("__qengine_csv", schema) or "SELECT * FROM __qengine_csv"
        items = ", ".join(f"CAST(#{i + 1} AS VARCHAR)" for i in self._by_duckdb)
        self._spelling = f"SELECT {items} FROM ({inner})" if self._by_duckdb else None
        if schema.names:
            _write_lines(sink, _csv_fields([pa.array([name], pa.string()) for name in schema.names]))

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if not batch.num_rows or not batch.num_columns:
            return
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        duckdbs = set(self._by_duckdb)
        texts = [None if i in duckdbs else column.combine_chunks().cast(pa.string()) for i, column in enumerate(table.columns)]
        if self._spelling is not None:
            spelled = _over(table, "__qengine_csv", self._spelling, "CSV")
            for i, column in zip(self._by_duckdb, spelled.columns, strict=True):
                texts[i] = column.combine_chunks()
        _write_lines(self._sink, _csv_fields(texts))

    def close(self) -> None:
        self._sink.flush()


def _over(table: pa.Table, name: str, sql: str, what: str, lossless_arrow: bool = False) -> pa.Table:
    """``sql``'s answer over ``table`` registered as ``name``, on a scratch connection; a value
    DuckDB cannot turn is the file's error (``what`` it is)."""
    con = scratch_connection(lossless_arrow)
    try:
        con.register(name, table)
        return con.execute(sql).to_arrow_table()
    except duckdb.Error as e:
        raise DataError(f"cannot write {what}: {str(e).splitlines()[0]}") from e
    finally:
        con.close()


def _spelled_alike(field: pa.Field) -> bool:
    """Whether Arrow's text of this column's values is DuckDB's: integers, booleans and strings.
    Not a float (Arrow writes 1e-7 and -0 where DuckDB writes 1e-07 and -0.0), a decimal
    (Arrow writes 1.000E-7 and 0E-10 for DuckDB's 0.0000001000 and 0.0000000000), nor a date
    (Arrow wrote ``<value out of range: 2147483647>`` for DuckDB's ``infinity``, and 0000-12-31
    for ``0001-12-31 (BC)``)."""
    t = field.type
    return not carried_type(field) and (
        pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
    )


def _write_lines(sink: BinaryIO, lines: pa.Array) -> None:
    """The text of ``lines``, one after another, as the string array holds it."""
    _, offsets, data = lines.buffers()
    first, last = np.frombuffer(offsets, dtype=np.int32)[[lines.offset, lines.offset + len(lines)]]
    sink.write(memoryview(data)[first:last])


def _csv_fields(columns: list[pa.Array]) -> pa.Array:
    """One line of CSV text (ending in a line break) per row of ``columns``, strings all."""
    import pyarrow.compute as pc  # here, not at the top: it costs a one-statement CLI run ~30 ms to import

    fields = []
    for column in columns:
        needs_quotes = pc.or_(pc.match_substring_regex(column, '[,"\n\r]'), pc.equal(column, ""))
        quoted = pc.binary_join_element_wise('"', pc.replace_substring(column, '"', '""'), '"', "")
        fields.append(pc.fill_null(pc.if_else(needs_quotes, quoted, column), ""))
    return pc.binary_join_element_wise(pc.binary_join_element_wise(*fields, ","), "\n", "")


class ParquetWriter(Writer):
    """Arrow's Parquet writer over ``sink`` for batches of ``schema``, with the columns of a carried
    DuckDB type retyped as DuckDB's COPY writes them; NotSupportedError names a column that
    Parquet cannot hold."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        interval = next((f.name for f in schema if pa.types.is_interval(f.type)), None)
        if interval is not None:
            raise NotSupportedError(f"the INTERVAL column {interval!r} cannot be written to Parquet: cast it to VARCHAR, or write CSV")
        # DuckDB's COPY writes a HUGEINT or UHUGEINT to Parquet as DOUBLE
        retyped = {f.name: HUGEINT.sub("DOUBLE", carried_type(f)) for f in schema if carried_type(f) not in ("", "NULL")}
        items = ", ".join(f"CAST({identifier(n)} AS {t}) AS {identifier(n)}" for n, t in retyped.items())
        self._retyping = f"SELECT {items} FROM __qengine_parquet" if retyped else None
        if self._retyping is not None:
            written = self._retyped(schema.empty_table())
            schema = pa.schema([written.field(f.name) if f.name in retyped else f for f in schema], schema.metadata)
        self._schema = schema
        self._writer = pq.ParquetWriter(sink, schema)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        if self._retyping is None:
            self._writer.write(batch)
            return
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        retyped = self._retyped(table)
        columns = [retyped.column(f.name) if f.name in retyped.column_names else table.column(f.name) for f in self._schema]
        self._writer.write_table(pa.Table.from_arrays(columns, schema=self._schema))

    def _retyped(self, table: pa.Table) -> pa.Table:
        return _over(table, "__qengine_parquet", self._retyping, "Parquet", lossless_arrow=True)

    def close(self) -> None:
        self._writer.close()


