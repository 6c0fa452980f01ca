"""PEP 249 connections and cursors, plus the DuckDB-style extras (Arrow, pandas, register)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from qengine.api.session import Result, Session
from qengine.catalog.types import type_code
from qengine.errors import Error, InterfaceError, InternalError, NotSupportedError
from qengine.sandbox.carried_types import python_values, untagged


def _user_errors(fn: Callable) -> Callable:
    """Let qengine errors through; wrap anything else as an InternalError with the cause kept."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Error:
            raise
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            raise InternalError(f"{type(e).__name__}: {e}") from e

    return wrapper


class Cursor:
    """Executes statements and holds one result set."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._result: Result | None = None
        self._pos = 0
        self._rows: list[tuple] | None = None
        self._closed = False

    # ---- PEP 249 attributes ------------------------------------------------------------

    @property
    def description(self) -> list[tuple] | None:
        if self._result is None or self._result.table is None:
            return None
        out = []
        for f in self._result.table.schema:
            precision = f.type.precision if pa.types.is_decimal(f.type) else None
            scale = f.type.scale if pa.types.is_decimal(f.type) else None
            out.append((f.name, type_code(f.type), None, None, precision, scale, f.nullable))
        return out

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None else self._result.rowcount

    @property
    def stats(self):
        """Per-stage statistics of the last query (rows, bytes, times)."""
        return None if self._result is None else self._result.stats

    # ---- execution ---------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("cursor is closed")
        self.connection._check()

    @_user_errors
    def execute(self, operation: str, parameters: Sequence[Any] | None = None, progress: Callable[[int, int], None] | None = None) -> Cursor:
        self._check()
        if parameters is not None and (isinstance(parameters, str | bytes) or not isinstance(parameters, Sequence)):
            raise InterfaceError("parameters must be a sequence (qmark style), e.g. [5] or (5, 'x')")
        self._result = None
        self._result = self.connection._session.execute(operation, parameters, progress)
        self._pos = 0
        self._rows = None
        return self

    @_user_errors
    def executemany(self, operation: str, seq_of_parameters: Sequence[Sequence[Any]]) -> Cursor:
        self._check()
        total = 0
        for params in seq_of_parameters:
            self.execute(operation, params)
            total += max(0, self.rowcount)
        if self._result is not None:
            self._result = Result(None, total)
        return self

    def _materialized(self) -> list[tuple]:
        if self._result is None or self._result.table is None:
            raise InterfaceError("no result set: execute a query first")
        if self._rows is None:
            table = self._result.table
            columns = [python_values(c, f) for c, f in zip(table.columns, table.schema, strict=True)]
            self._rows = list(zip(*columns, strict=True)) if columns else [()] * table.num_rows
        return self._rows

    def fetchone(self) -> tuple | None:
        self._check()
        rows = self._materialized()
        if self._pos >= len(rows):
            return None
        self._pos += 1
        return rows[self._pos - 1]

    def fetchmany(self, size: int | None = None) -> list[tuple]:
        self._check()
        rows = self._materialized()
        n = self.arraysize if size is None else size
        out = rows[self._pos: self._pos + n]
        self._pos += len(out)
        return out

    def fetchall(self) -> list[tuple]:
        self._check()
        rows = self._materialized()
        out = rows[self._pos:]
        self._pos = len(rows)
        return out

    def fetch_arrow_table(self) -> pa.Table:
        """The whole result as an Arrow table (all of it, whatever was fetched before)."""
        self._check()
        if self._result is None or self._result.table is None:
            raise InterfaceError("no result set: execute a query first")
        return untagged(self._result.table)

    def fetchdf(self):
        """The result as a pandas DataFrame."""
        return self.fetch_arrow_table().to_pandas()

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def setinputsizes(self, sizes: Any) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """Accepted and ignored, as PEP 249 allows."""

    def close(self) -> None:
        self._closed = True
        self._result = None
        self._rows = None

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Connection:
    """A connection to a qengine cluster; closing it stops a local cluster it started."""

    def __init__(self, session: Session, cluster: Any = None) -> None:
        """``cluster`` is the local cluster this connection started (stopped on close); with
        none, the session lives in a remote coordinator and closing ends it there."""
        self._cluster = cluster
        self._session = session
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("connection is closed")

    @property
    def session(self) -> Session:
        return self._session

    def cursor(self) -> Cursor:
        self._check()
        return Cursor(self)

    def execute(self, operation: str, parameters: Sequence[Any] | None = None) -> Cursor:
        """Shortcut: a new cursor with the statement executed (as in DuckDB and sqlite3)."""
        return self.cursor().execute(operation, parameters)

    def sql(self, operation: str) -> pa.Table:
        """Run a query and return its Arrow table."""
        return self.execute(operation).fetch_arrow_table()

    def commit(self) -> None:
        """Statements take effect at once; there is nothing to commit."""
        self._check()

    def rollback(self) -> None:
        self._check()
        raise NotSupportedError("qengine has no transactions; statements take effect at once")

    @_user_errors
    def register_parquet(self, name: str, path: str) -> None:
        """Make a Parquet file, directory or glob queryable as ``name``."""
        self._check()
        self._session.register_parquet(name, path)

    @_user_errors
    def register_records(self, name: str, path: str) -> None:
        """Make flat files of 100-byte gensort records queryable as (key, payload)."""
        self._check()
        self._session.register_records(name, path)

    @_user_errors
    def register_csv(self, name: str, path: str, delimiter: str = ",", header: bool = True) -> None:
        self._check()
        self._session.register_csv(name, path, delimiter, header)

    @_user_errors
    def register(self, name: str, data: Any) -> None:
        """Register an Arrow table, record batch reader or pandas DataFrame as a session table."""
        self._check()
        if isinstance(data, pa.RecordBatchReader):
            data = data.read_all()
        elif isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            try:
                import pandas as pd
            except ImportError:  # pragma: no cover - pandas is a dependency
                pd = None
            if pd is None or not isinstance(data, pd.DataFrame):
                raise InterfaceError(f"cannot register a {type(data).__name__}: pass an Arrow table or a pandas DataFrame")
            data = pa.Table.from_pandas(data, preserve_index=False)
        self._session.register_arrow(name, data)

    def tables(self) -> list[str]:
        """Names of the registered tables and views."""
        self._check()
        return self._session.table_names()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._cluster is not None:  # its workers go with it: nothing of theirs to release
            self._session.coordinator.close()
            self._cluster.close()
        else:
            self._session.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()
