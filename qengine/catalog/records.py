"""Fixed-width sort-benchmark records (100 bytes: a 10-byte key, a 90-byte payload) ↔ Arrow.

The engine reads raw gensort files through this, and the TeraSort harness writes and checks
records with it, so both agree on one layout: columns ``key`` fixed_size_binary(10) and
``payload`` fixed_size_binary(90).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

RECORD = 100
KEY = 10
SCHEMA = pa.schema([("key", pa.binary(KEY)), ("payload", pa.binary(RECORD - KEY))])


def _fixed(column: np.ndarray, width: int) -> pa.Array:
    data = np.ascontiguousarray(column)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(data), [None, pa.py_buffer(data)])


def to_table(records: np.ndarray) -> pa.Table:
    """An (n, 100) uint8 array of records as a (key, payload) table."""
    return pa.Table.from_arrays([_fixed(records[:, :KEY], KEY), _fixed(records[:, KEY:], RECORD - KEY)], schema=SCHEMA)


def _bytes(column: pa.ChunkedArray | pa.Array, width: int) -> np.ndarray:
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_fixed_size_binary(arr.type):  # e.g. BLOB coming back from DuckDB
        arr = arr.cast(pa.binary(width))
    if arr.null_count:
        raise ValueError("records must not be NULL")
    data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    start = arr.offset * width
    return data[start : start + len(arr) * width].reshape(len(arr), width)


def from_table(table: pa.Table) -> np.ndarray:
    """A (key, payload) table back as an (n, 100) uint8 array of records."""
    if not table.num_rows:
        return np.zeros((0, RECORD), dtype=np.uint8)
    return np.hstack([_bytes(table.column("key"), KEY), _bytes(table.column("payload"), RECORD - KEY)])
