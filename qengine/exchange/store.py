"""A worker's in-memory block store: shuffle blocks, query results and session-table pieces.

Blocks are keyed by a string (``<query>/<shuffle>`` or ``table/<id>``) and a partition number;
several map tasks append to the same partition. Everything under a query's prefix is dropped
when the coordinator releases the query.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import pyarrow as pa


class BlockStore:
    def __init__(self) -> None:
        self._blocks: dict[tuple[str, int], list[pa.Table]] = defaultdict(list)
        self._schemas: dict[str, pa.Schema] = {}
        self._staged: dict[str, list[pa.Table]] = defaultdict(list)
        self._lock = threading.Lock()

    def put(self, key: str, partition: int, table: pa.Table) -> None:
        with self._lock:
            self._schemas.setdefault(key, table.schema)
            if table.num_rows or not self._blocks.get((key, partition)):
                self._blocks[(key, partition)].append(table)

    def put_parts(self, key: str, parts: list[pa.Table]) -> None:
        with self._lock:
            if parts:
                self._schemas.setdefault(key, parts[0].schema)
            for p, table in enumerate(parts):
                if table.num_rows:
                    self._blocks[(key, p)].append(table)

    def stage(self, key: str, table: pa.Table) -> None:
        """Hold unpartitioned map output until the range bounds are known."""
        with self._lock:
            self._schemas.setdefault(key, table.schema)
            self._staged[key].append(table)

    def take_staged(self, key: str) -> list[pa.Table]:
        with self._lock:
            return self._staged.pop(key, [])

    def schema(self, key: str) -> pa.Schema | None:
        return self._schemas.get(key)

    def get(self, key: str, partition: int) -> pa.Table | None:
        """All blocks of a partition as one table; None if this store never saw ``key``."""
        with self._lock:
            blocks = list(self._blocks.get((key, partition), ()))
            schema = self._schemas.get(key)
        if schema is None:
            return None
        if not blocks:
            return schema.empty_table()
        return blocks[0] if len(blocks) == 1 else pa.concat_tables(blocks)

    def release(self, prefix: str) -> None:
        with self._lock:
            for k in [k for k in self._blocks if k[0].startswith(prefix)]:
                del self._blocks[k]
            for k in [k for k in self._schemas if k.startswith(prefix)]:
                del self._schemas[k]
            for k in [k for k in self._staged if k.startswith(prefix)]:
                del self._staged[k]

    def nbytes(self) -> int:
        with self._lock:
            return sum(t.nbytes for blocks in self._blocks.values() for t in blocks)
