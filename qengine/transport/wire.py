"""Compact encodings for Arrow schemas and small tables inside JSON control messages."""

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
