"""A worker runs a fragment over empty inputs once and keeps the result (``runtime.empty_results``):
answers over stages of many empty partitions still equal DuckDB's, including fragments that
make a row of nothing, and nothing volatile or Parquet-reading is kept."""

from __future__ import annotations

import pyarrow as pa
import pytest

from qengine.runtime.empty_results import EmptyResults
from tests.conftest import assert_same, engine_over

EMPTY = {"x0": pa.table({"a": pa.array([], pa.int64())})}


def test_the_key_names_everything_the_result_depends_on() -> None:
    hash_out = {"kind": "hash", "key": "q/3", "keys": ["a"], "partitions": 4}
    key = EmptyResults.key("SELECT a FROM x0", EMPTY, hash_out, ())
    assert key is not None
    assert key != EmptyResults.key("SELECT a FROM x0", EMPTY, dict(hash_out, partitions=8), ())
    assert key != EmptyResults.key("SELECT a FROM x0", {"x0": pa.table({"a": pa.array([], pa.int32())})}, hash_out, ())
    assert key != EmptyResults.key("SELECT a FROM x0", EMPTY, hash_out, ("a",))
    assert EmptyResults.key("SELECT a FROM x0", {"x0": pa.table({"a": [1]})}, hash_out, ()) is None
    assert EmptyResults.key("SELECT a, random() FROM x0", EMPTY, {"kind": "single"}, ()) is None
    assert EmptyResults.key("SELECT max(a), now() FROM x0", EMPTY, {"kind": "single"}, ()) is None
    assert EmptyResults.key("SELECT count(*), current_setting('threads') FROM x0", EMPTY, {"kind": "single"}, ()) is None
    assert EmptyResults.key("SELECT 1", {}, {"kind": "single"}, ()) is None  # no input: nothing to keep


def test_results_are_kept_least_recently_used_and_small() -> None:
    kept = EmptyResults()
    key = EmptyResults.key("SELECT count(*) FROM x0", EMPTY, {"kind": "single"}, ())
    kept.put(key, pa.table({"n": [0]}))
    assert kept.get(key).to_pylist() == [{"n": 0}]
    big = EmptyResults.key("SELECT 1 FROM x0", EMPTY, {"kind": "single"}, ())
    kept.put(big, pa.table({"n": list(range(100))}))
    assert kept.get(big) is None


@pytest.fixture(scope="module")
def many_partitions(data_paths):
    con = engine_over(data_paths, partitions=32, broadcast_threshold=0)
    yield con
    con.close()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT store_id, count(*), sum(qty) FROM sales GROUP BY store_id ORDER BY 1 NULLS FIRST",
        "SELECT s.store_id, count(*) FROM sales s JOIN customers c ON s.cust_id = c.cust_id WHERE c.segment = 'gov' GROUP BY 1 ORDER BY 1",
        "SELECT count(*), max(amount), min(note) FROM sales WHERE qty > 1000",
        "SELECT store_id, count(*) FROM sales WHERE qty > 1000 GROUP BY ROLLUP (store_id) ORDER BY 1",
        "SELECT c.city, count(s.sale_id) FROM customers c LEFT JOIN sales s ON s.cust_id = c.cust_id AND s.qty > 98 GROUP BY 1 ORDER BY 1",
    ],
)
def test_stages_of_mostly_empty_partitions_answer_as_duckdb(many_partitions, oracle, sql) -> None:
    for _ in range(2):  # the second run finds its empty fragments kept on the workers
        assert_same(many_partitions, oracle, sql)
