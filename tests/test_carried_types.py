"""DuckDB types Arrow does not carry, across exchanges.

HUGEINT: every integer ``sum`` is one, and Arrow carries it as decimal128(38, 0). Read back as
DECIMAL, ``//`` divides exactly and bitwise operators refuse it. The untyped NULL of
``VALUES (1, NULL)`` arrives as INTEGER, and comparing it with a string failed. qengine must
answer as DuckDB does, which holds only if the type is restored after the exchange."""

from __future__ import annotations

import pyarrow as pa
import pytest

import qengine
from qengine.sandbox.carried_types import TAG, restoring_query, tag_types, untagged
from tests.conftest import assert_same

QUERIES = [
    "SELECT store_id, sum(qty) // 7 AS d FROM sales GROUP BY store_id",
    "SELECT sum(qty) // 7, sum(qty) % 7, sum(qty) | 1 FROM sales",
    "SELECT store_id, typeof(sum(qty)) FROM sales GROUP BY store_id",
    "SELECT s FROM (SELECT cust_id, sum(qty) AS s FROM sales GROUP BY cust_id) WHERE s // 100 > 2",
    "SELECT a.store_id, a.s // 3 FROM (SELECT store_id, sum(qty) s FROM sales GROUP BY 1) a "
    "JOIN (SELECT store_id, sum(qty) t FROM sales GROUP BY 1) b ON a.s = b.t",
    "SELECT sale_id, sum(qty) OVER (PARTITION BY store_id) // 5 FROM sales",
]


UNTYPED_NULLS = [
    "SELECT count(*) FROM (VALUES (1, NULL)) AS t(c0, c1) LEFT JOIN customers c ON t.c1 = c.city",
    "SELECT count(*) FROM (SELECT 1 AS c0, NULL AS c1) AS t LEFT JOIN customers c ON t.c1 = c.city",
    "SELECT count(*) FROM sales WHERE note NOT IN (SELECT c1 FROM (VALUES (NULL, NULL)) AS t(c0, c1))",
    "SELECT count(*) FROM (VALUES (1, NULL), (2, NULL)) AS t(c0, c1) FULL JOIN customers c "
    "ON t.c0 = c.cust_id AND t.c1 ILIKE 'a%'",
    "SELECT t.c1 || 'x', typeof(t.c1), s.qty FROM (VALUES (1, NULL), (2, NULL)) AS t(c0, c1) JOIN sales s ON s.sale_id = t.c0",
    # an input a task copies into a table (here: empty, read beside a scan) made its NULL column an INTEGER
    "SELECT c.name FROM sales s JOIN (VALUES (3, NULL)) AS t(c0, c1) ON s.note <= t.c1, customers c",
    "SELECT count(*) FROM sales s JOIN (SELECT * FROM (VALUES (3, NULL)) AS v(c0, c1), customers c WHERE c.cust_id < 0) t "
    "ON s.note <= t.c1",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_hugeint_sums_behave_as_in_duckdb(engine, oracle, sql: str) -> None:
    assert_same(engine, oracle, sql)


@pytest.mark.parametrize("sql", UNTYPED_NULLS)
def test_untyped_null_columns_behave_as_in_duckdb(engine, oracle, sql: str) -> None:
    assert_same(engine, oracle, sql)


def test_fetched_rows_and_arrow_match_duckdb(default_engine, oracle) -> None:
    sql = "SELECT store_id, sum(qty) AS s FROM sales GROUP BY store_id ORDER BY store_id"
    cur = default_engine.execute(sql)
    rows = cur.fetchall()
    assert rows == oracle.execute(sql).fetchall()
    assert all(type(s) is int for _, s in rows)
    expected = oracle.execute(sql).to_arrow_table()
    for table in (default_engine.execute(sql).fetch_arrow_table(), default_engine.execute(sql).fetch_record_batch(3).read_all()):
        assert table.schema == expected.schema and table.equals(expected)
        assert not any(f.metadata and TAG in f.metadata for f in table.schema)


def test_only_tagged_columns_are_cast_back() -> None:
    table = pa.table({"h": pa.array([1], pa.decimal128(38, 0)), "d": pa.array([2], pa.decimal128(38, 0))})
    tagged = tag_types(table, ["HUGEINT", "DECIMAL(38,0)"])
    assert restoring_query("t", table.schema) is None
    assert restoring_query("t", tagged.schema) == 'SELECT * REPLACE (CAST("h" AS HUGEINT) AS "h") FROM "t"'
    assert untagged(tagged).schema == table.schema


UHUGEINT_AT_2_127 = {
    "alone": "SELECT 170141183460469231731687303715884105728::UHUGEINT AS h",
    "the largest": "SELECT 340282366920938463463374607431768211455::UHUGEINT AS h",
    "grouped": "SELECT h, count(*) FROM (SELECT (i % 2)::UHUGEINT + 340282366920938463463374607431768211454::UHUGEINT AS h "
    "FROM range(10) t(i)) GROUP BY h",
    "in a list": "SELECT [1::UHUGEINT, 340282366920938463463374607431768211455::UHUGEINT] AS l",
}


@pytest.mark.parametrize("sql", UHUGEINT_AT_2_127.values(), ids=UHUGEINT_AT_2_127.keys())
def test_uhugeint_of_2_127_or_more_is_refused(engine, sql: str) -> None:
    """Arrow's decimal128 holds a UHUGEINT's 128 bits, so that from 2^127 on a value reads back
    negative: 2^128 - 1 was fetched as -1, and compared below 1."""
    with pytest.raises(qengine.NotSupportedError, match="UHUGEINT values of 2\\^127"):
        engine.execute(sql).fetchall()


def test_uhugeint_below_2_127_is_answered(engine, oracle) -> None:
    assert_same(engine, oracle, "SELECT max(h), min(h), count(DISTINCT h) FROM (SELECT (i * 3)::UHUGEINT "
                "+ 170141183460469231731687303715884105700::UHUGEINT AS h FROM range(9) t(i))")


@pytest.mark.parametrize("tag", ["INTEGER) AS x FROM t; ATTACH '/tmp/x' AS z; SELECT CAST(1 AS INTEGER", "INTEGER), (SELECT 42",
                                 "INTEGER) FROM read_csv('/etc/passwd') --"])
def test_a_tag_that_is_not_one_type_is_refused(tag: str) -> None:
    # a tag is spliced into SQL as a type, and blocks may be pushed to a worker from outside
    field = pa.field("c", pa.string()).with_metadata({TAG: tag.encode()})
    with pytest.raises(qengine.DataError, match="is not a DuckDB type"):
        restoring_query("t", pa.schema([field]))
    fine = pa.field("c", pa.string()).with_metadata({TAG: b"ENUM('x FROM y', 'b''c')[]"})
    assert "ENUM('x FROM y', 'b''c')[]" in restoring_query("t", pa.schema([fine]))
