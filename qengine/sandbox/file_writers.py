"""The files COPY writes, Parquet and CSV, as DuckDB's COPY writes them where Arrow's writers
would not.

Arrow's CSV writer refuses lists, structs, maps, fixed-size arrays and intervals, and writes a
BLOB's raw bytes where DuckDB writes ``\\x01\\x02``. Such columns are turned into DuckDB's own
text of them (its cast to VARCHAR, which its CSV writer uses) before they reach the writer;
every other column goes through as it is.

Arrow's Parquet writer has no INTERVAL: such a column is refused by name rather than failing
inside Arrow. Columns whose DuckDB type Arrow holds as another (``carried_types``) are written
as DuckDB writes them: a UUID as Parquet's UUID, not its text; JSON as JSON; a HUGEINT or
UHUGEINT as DOUBLE, at any depth of nesting.
"""

from __future__ import annotations

import re
from typing import BinaryIO

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from qengine.errors import DataError, NotSupportedError
from qengine.sandbox.carried_types import carried_type, restoring_query
from qengine.sandbox.connection import scratch_connection
from qengine.sandbox.quoting import identifier


def _as_text(field: pa.Field) -> bool:
    """Whether DuckDB's CSV writer spells this column otherwise than Arrow's writes it, if at all."""
    t = field.type
    return (pa.types.is_nested(t) or pa.types.is_interval(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
            or pa.types.is_fixed_size_binary(t))


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
    """Arrow's CSV writer over ``sink`` for batches of ``schema``, with the columns DuckDB spells
    otherwise written as DuckDB's text of them."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        texts = {f.name for f in schema if _as_text(f)}
        self._schema = pa.schema([pa.field(f.name, pa.string()) if f.name in texts else f for f in schema])
        self._writer = pacsv.CSVWriter(sink, self._schema)
        # DuckDB's text of those columns, the same query for every batch (None: none to spell)
        inner = restoring_query("__qengine_csv", schema) or "SELECT * FROM __qengine_csv"
        items = ", ".join(f"CAST({identifier(n)} AS VARCHAR) AS {identifier(n)}" if n in texts else identifier(n) for n in schema.names)
        self._spelling = f"SELECT {items} FROM ({inner})" if texts else None

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        self._writer.write(batch if self._spelling is None else self._spelled(batch))

    def _spelled(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        con = scratch_connection()
        try:
            con.register("__qengine_csv", batch)
            return con.execute(self._spelling).to_arrow_table().cast(self._schema)
        except duckdb.Error as e:
            raise DataError(f"cannot write CSV: {str(e).splitlines()[0]}") from e
        finally:
            con.close()

    def close(self) -> None:
        self._writer.close()


class ParquetWriter(Writer):
    """Arrow's Parquet writer over ``sink`` for batches of ``schema``, with the columns of a carried
    DuckDB type retyped as DuckDB's COPY writes them; NotSupportedError names a column that
    Parquet cannot hold."""

    def __init__(self, sink: BinaryIO, schema: pa.Schema) -> None:
        interval = next((f.name for f in schema if pa.types.is_interval(f.type)), None)
        if interval is not None:
            raise NotSupportedError(f"the INTERVAL column {interval!r} cannot be written to Parquet: cast it to VARCHAR, or write CSV")
        retyped = {f.name: _HUGE.sub("DOUBLE", carried_type(f)) for f in schema if carried_type(f) not in ("", "NULL")}
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
        con = scratch_connection(lossless_arrow=True)
        try:
            con.register("__qengine_parquet", table)
            return con.execute(self._retyping).to_arrow_table()
        except duckdb.Error as e:
            raise DataError(f"cannot write Parquet: {str(e).splitlines()[0]}") from e
        finally:
            con.close()

    def close(self) -> None:
        self._writer.close()


# DuckDB's COPY writes HUGEINT and UHUGEINT to Parquet as DOUBLE.
_HUGE = re.compile(r"\bU?HUGEINT\b")
