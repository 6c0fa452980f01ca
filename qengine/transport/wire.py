"""Compact encodings for Arrow schemas and small tables inside JSON control messages, and a
schema's table of no rows."""

from __future__ import annotations

import functools

import pyarrow as pa


def schema_to_hex(schema: pa.Schema) -> str:
    return schema.serialize().to_pybytes().hex()


@functools.lru_cache(maxsize=512)
def schema_from_hex(text: str) -> pa.Schema:
    """Kept by text: every task of a stage carries its inputs' schemas, the same each time, and
    reading one back cost a no-op task's worker more than any other single step (schemas are
    immutable, so one object serves them all)."""
    return pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(text)))


def empty_table(schema: pa.Schema) -> pa.Table:
    """``schema``'s table of no rows, made once: an empty partition is the usual input of a
    reducer of a small query, and making one cost more than looking it up (tables are immutable).
    Kept by the schema's bytes: a schema's ``==`` and hash leave out its fields' metadata, which
    carries the types Arrow lacks (``sandbox.carried_types``). Each column is ``pa.nulls``:
    pyarrow's ``Schema.empty_table`` fails on a UNION column ("sparse_union")."""
    return _empty_of(schema.serialize().to_pybytes())


@functools.lru_cache(maxsize=512)
def _empty_of(serialized: bytes) -> pa.Table:
    schema = pa.ipc.read_schema(pa.py_buffer(serialized))
    return pa.table([pa.nulls(0, f.type) for f in schema], schema=schema)


def table_to_hex(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes().hex()


def table_from_hex(text: str) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(bytes.fromhex(text))).read_all()


def load_converters() -> None:
    """Make pyarrow load its pandas support now, while the process starts.

    pyarrow imports pandas (when it is installed) on its first conversion of Python or NumPy
    objects, and DuckDB's ``register`` does too. That took 1.5 s on a busy 2-core machine; paid
    mid-query, it stalled the coordinator's scheduling loop and each worker's first task.
    """
    pa.array([0])
