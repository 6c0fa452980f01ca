"""Pooled DuckDB connections: one task's inputs never reach the next task."""

from __future__ import annotations

import pyarrow as pa

from qengine.sandbox.pool import ConnectionPool

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


def test_a_connection_left_holding_an_input_is_not_reused() -> None:
    """An interrupt that reaches ``unregister`` leaves the view behind without an error; the
    connection must be dropped rather than refuse the next task's input of the same name."""
    pool = ConnectionPool(threads=1)
    with pool.connection() as lease:
        lease.con.register("__raw_s", TABLE)  # as if its unregister had been interrupted
        first = lease.con
    with pool.connection() as lease:
        assert lease.con is not first
        lease.add_inputs({"s": TABLE}, copy=True)
        assert lease.con.sql("SELECT count(*) FROM s").fetchone() == (100,)

