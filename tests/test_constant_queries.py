"""Statements that read no data (``SELECT 1``, VALUES) run in the coordinator, with no worker:
they answer as DuckDB does, fail as a worker's fragment would, and neither wait for a local
cluster's workers to start nor need them to start at all.
"""

from __future__ import annotations

import shutil
import sys

import duckdb
import pytest

import qengine
from qengine.planner.frontend import parse
from qengine.planner.stages import reads_no_data
from qengine.runtime.coordinator import Coordinator

CONSTANT_QUERIES = [
    "SELECT 1",
    "SELECT 41 + 1 AS x, 'a' || 'b' AS y, NULL AS z",
    "SELECT 1 / 0 AS inf, 7 // 2 AS q, -7 % 3 AS r",
    "SELECT 2::HUGEINT AS h, 1.5::DECIMAL(10, 2) AS d, DATE '2020-02-29' + 1 AS day",
    "SELECT [1, 2, NULL] AS l, {'a': 1, 'b': 'x'} AS s, 'x'::BLOB AS b",
    "VALUES (1, 'x'), (2, 'y'), (NULL, 'z')",
    "SELECT x, count(*) AS n FROM (VALUES (1), (2), (2), (NULL)) t(x) GROUP BY x ORDER BY x NULLS FIRST",
    "SELECT 1 AS a UNION ALL SELECT 2 UNION ALL SELECT 2 ORDER BY a",
    "SELECT 1 AS a WHERE 1 IN (SELECT 2 UNION ALL SELECT NULL)",
    "SELECT 'nan'::DOUBLE = 'nan'::DOUBLE AS nan_eq, greatest(1, NULL, 3) AS g",
]


@pytest.fixture(scope="module")
def con():
    with qengine.connect(workers=1) as connection:
        yield connection


@pytest.mark.parametrize("sql", CONSTANT_QUERIES)
def test_constant_statements_answer_as_duckdb_does(con, sql: str) -> None:
    expected = duckdb.connect().execute(sql)
    got = con.execute(sql)
    assert got.fetchall() == expected.fetchall()
    assert [d[0] for d in got.description] == [d[0] for d in expected.description]


def test_they_run_without_a_stage_on_the_workers(con, monkeypatch) -> None:
    plan = con._session.plan(qengine_parse("SELECT 1 + 1 AS two"))
    assert reads_no_data(plan)

    def refuse(*args, **kwargs):
        raise AssertionError("a statement that reads no data was sent to the workers")

    monkeypatch.setattr(Coordinator, "run", refuse)
    assert con.execute("SELECT 1 + 1 AS two").fetchall() == [(2,)]
    lines = [r[0] for r in con.execute("EXPLAIN ANALYZE SELECT 1 + 1 AS two").fetchall()]
    assert lines[0].startswith("Stage 0: 1 task(s) → result")


def test_a_statement_reading_a_table_is_not_run_in_the_coordinator(con, data_paths) -> None:
    con.register_parquet("customers_c", data_paths["customers"])
    assert not reads_no_data(con._session.plan(qengine_parse("SELECT 1 FROM customers_c LIMIT 1")))
    assert not reads_no_data(con._session.plan(qengine_parse("SELECT (SELECT count(*) FROM customers_c) AS n")))


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("SELECT 'a'::INTEGER", qengine.DataError),
        ("SELECT no_such_function(1)", qengine.ProgrammingError),
        ("SELECT 2147483647::INTEGER + 1", qengine.DataError),
    ],
)
def test_errors_are_qengine_classes_with_duckdb_s_cause(con, sql: str, error: type) -> None:
    with pytest.raises(error) as caught:
        con.execute(sql)
    assert isinstance(caught.value.__cause__, duckdb.Error)
    assert "\n" not in str(caught.value)  # DuckDB's excerpt of the rendered SQL is cut off


def test_a_constant_statement_needs_no_worker_to_start(monkeypatch, data_paths) -> None:
    """Workers that cannot start fail only the statements that need them, with the reason."""
    monkeypatch.setattr(sys, "executable", "/bin/false")  # every worker exits at once
    connection = qengine.connect(workers=2)
    monkeypatch.undo()
    cluster = connection._cluster
    try:
        assert connection.execute("SELECT 6 * 7 AS answer").fetchall() == [(42,)]
        connection.register_parquet("customers", data_paths["customers"])
        with pytest.raises(qengine.OperationalError, match="did not start"):
            connection.execute("SELECT count(*) FROM customers")
    finally:
        connection.close()
        shutil.rmtree(cluster.log_dir, ignore_errors=True)
    assert all(p.poll() is not None for p in cluster._procs)


def test_closing_while_the_workers_start_stops_them() -> None:
    connection = qengine.connect(workers=2)
    cluster = connection._cluster
    assert connection.execute("SELECT 1").fetchall() == [(1,)]
    connection.close()
    assert len(cluster._procs) == 2
    assert all(p.poll() is not None for p in cluster._procs)


def qengine_parse(sql: str):
    return parse(sql, "duckdb")[0]
