"""A statement's result as its reader takes it: record batches, in order, read from where they
are held as they are asked for, so that a large result is never all in one place. 20 million
rows through ``fetchall`` had taken the client to 3.4 GB, holding every row before the first
was read.

Up to :data:`AHEAD_BYTES` of a result is read before ``execute`` returns (:meth:`ResultStream.fill`):
all of a small result, which a worker lost meanwhile makes the session run the query again,
as before. What is left streams as the reader asks; a worker lost after some of the rows were
handed out fails the read with a clear error, because running the query again could not
promise the same rows in the same order for the rest.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

import pyarrow as pa

from qengine.errors import InputLostError, OperationalError, WorkerUnreachableError

# Bytes of a result read ahead before the statement returns (see the module docstring).
AHEAD_BYTES = 64 << 20


class ResultStream:
    """The record batches of one result, each handed out once; see the module docstring."""

    def __init__(
        self,
        schema: pa.Schema,
        batches: Iterator[pa.RecordBatch],
        rows: int,
        done: Callable[[], None] | None = None,
    ) -> None:
        """``rows`` is the result's row count, known before it is read; ``done`` runs once, when
        the last batch has been read or the stream is closed (it frees what holds the rest)."""
        self.schema = schema
        self.rows = rows
        self._batches = batches
        self._done = done
        self._ahead: collections.deque[pa.RecordBatch] = collections.deque()
        self.ahead_bytes = 0  # read from where the result is held, not yet handed out
        self.handed_out = 0  # rows handed out
        self._exhausted = False

    @classmethod
    def of_table(cls, table: pa.Table) -> ResultStream:
        """A result that is all here already."""
        stream = cls(table.schema, iter(table.to_batches()), table.num_rows)
        stream.fill(None)
        return stream

    @property
    def all_read(self) -> bool:
        """Whether every batch has been read from where the result is held."""
        return self._exhausted

    def fill(self, limit: int | None) -> None:
        """Read ahead until more than ``limit`` bytes wait here (None: all of it). Errors come
        as they are: nothing has been handed out, so the caller may run the query again."""
        while not self._exhausted and (limit is None or self.ahead_bytes <= limit):
            self._pull()

    def _pull(self) -> None:
        batch = next(self._batches, None)
        if batch is None:
            self._finish()
            return
        if batch.num_rows:
            self._ahead.append(batch)
            self.ahead_bytes += batch.nbytes

    def _finish(self) -> None:
        self._exhausted = True
        if self._done is not None:
            done, self._done = self._done, None
            done()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while (batch := self.next_batch()) is not None:
            yield batch

    def next_batch(self) -> pa.RecordBatch | None:
        """The next batch, or None at the end."""
        while not self._ahead and not self._exhausted:
            try:
                self._pull()
            except (WorkerUnreachableError, InputLostError) as e:
                self.close()
                raise OperationalError(
                    f"the result could not be read to its end after {self.handed_out} of its {self.rows} rows: {e}; "
                    "run the query again"
                ) from e
        if not self._ahead:
            return None
        batch = self._ahead.popleft()
        self.ahead_bytes -= batch.nbytes
        self.handed_out += batch.num_rows
        return batch

    def close(self) -> None:
        """Drop what is left; frees it where it is held. Safe to call twice."""
        self._ahead.clear()
        self.ahead_bytes = 0
        if not self._exhausted:
            stop = getattr(self._batches, "close", None)  # a generator reading from a worker
            if stop is not None:
                stop()
            self._finish()
