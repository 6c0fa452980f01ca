"""Results of fragments whose inputs are all empty, kept by each worker.

The same fragment over the same empty inputs gives the same result, but DuckDB binds, plans and
runs it again for each task: about 2 ms, most of a task whose partition is empty (the no-op
stages of ``bench/scheduler.py``, the reducers of a small query that get no rows). A worker
keeps such results, keyed by everything they depend on: the fragment's SQL, its inputs' names
and schemas, the untyped NULL columns it tags, and for a hash output the partitioning. Not kept:
fragments with no input or that read Parquet (their scans are not inputs), those calling a
function whose value changes from call to call or with the connection (``random()``,
``now()``, ``current_setting()``), and results of more than a few rows.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict

import pyarrow as pa

KEPT = 1024  # results a worker keeps, the least recently used dropped first
MAX_ROWS = 16  # larger results are not kept (a fragment that makes rows of nothing makes few)
# Functions whose value is not the fragment's alone: drawn anew, the clock, or the connection's
# state (``current_setting('threads')`` differs for a task that runs alone)
_VOLATILE = re.compile(
    r"\b(random|uuid|gen_random_uuid|nextval|currval|setseed|now|current_\w+|get_current_\w+|transaction_timestamp|"
    r"localtime|localtimestamp|today|version|getvariable|getenv|txid_current|duckdb_\w+|pragma\w*)\b",
    re.IGNORECASE,
)


class EmptyResults:
    """See the module docstring."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, pa.Table] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(sql: str, inputs: dict[str, pa.Table], output: dict, nulls: tuple[str, ...]) -> tuple | None:
        """What the result of ``sql`` over ``inputs`` depends on, when every input is empty and
        the fragment calls nothing volatile; None otherwise."""
        if not inputs or any(t.num_rows for t in inputs.values()) or _VOLATILE.search(sql):
            return None  # a fragment of constants alone costs nothing to keep, and may read state
        schemas = tuple((name, inputs[name].schema.serialize().to_pybytes()) for name in sorted(inputs))
        partitioning = (output.get("key"), repr(output.get("keys")), output.get("partitions")) if output["kind"] == "hash" else None
        return sql, schemas, partitioning, nulls

    def get(self, key: tuple) -> pa.Table | None:
        with self._lock:
            table = self._kept.get(key)
            if table is not None:
                self._kept.move_to_end(key)
            return table

    def put(self, key: tuple, table: pa.Table) -> None:
        if table.num_rows > MAX_ROWS:
            return
        with self._lock:
            self._kept[key] = table
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
