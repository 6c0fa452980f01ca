"""Pooled DuckDB connections: one task's inputs never reach the next task."""

from __future__ import annotations

import pyarrow as pa
import pytest

from qengine.errors import OperationalError
from qengine.runtime.task import Cancellations
from qengine.sandbox.pool import ConnectionPool
from tests.conftest import wait_until

TABLE = pa.table({"a": list(range(100))})


def test_a_connection_is_reused_once_its_inputs_are_removed() -> None:
    pool = ConnectionPool(threads=1)
    with pool.connection() as lease:
        lease.add_inputs({"s": TABLE})
        first = lease.con
    with pool.connection() as lease:
        assert lease.con is first
        lease.add_inputs({"s": TABLE})
        assert lease.con.sql("SELECT count(*) FROM s").fetchone() == (100,)


def test_an_interrupted_connection_is_not_reused() -> None:
    """An interrupt that reaches ``unregister`` leaves the input behind without an error, and
    one that comes between statements stops the next: a cancelled task's connection is
    dropped rather than lent to the next task."""
    cancellations = Cancellations()
    pool = ConnectionPool(threads=1)
    with pool.connection() as lease, cancellations.running("q1", lease):
        lease.add_inputs({"s": TABLE})
        first = lease.con
        cancellations.cancel("q1")
        wait_until(lambda: lease.interrupted, 5, "the cancelled query's connection to be interrupted")
    with pool.connection() as lease:
        assert lease.con is not first
        lease.add_inputs({"s": TABLE}, copy=True)
        assert lease.con.sql("SELECT count(*) FROM s").fetchone() == (100,)


def test_a_task_of_a_cancelled_query_is_refused() -> None:
    cancellations = Cancellations()
    cancellations.cancel("q1")
    pool = ConnectionPool(threads=1)
    with pytest.raises(OperationalError, match="query q1 was cancelled"), pool.connection() as lease, cancellations.running("q1", lease):
        pass
