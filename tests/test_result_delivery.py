"""How a result reaches the client: a small result partition comes back with its task's answer
(no fetch from the worker afterwards), a larger one is fetched from the worker that holds it.
Both give DuckDB's answer, and neither leaves a block behind on a worker."""

from __future__ import annotations

import pytest

from qengine.runtime import task
from qengine.transport.rpc import Client
from tests.conftest import assert_same


@pytest.fixture
def result_fetches(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """The result blocks fetched from workers (``Client.get`` tickets for a ``/result`` key)."""
    fetched: list[dict] = []
    real = Client.get

    def counting(self: Client, ticket: dict, timeout: float | None = None):
        if ticket["key"].endswith("/result"):
            fetched.append(ticket)
        return real(self, ticket, timeout)

    monkeypatch.setattr(Client, "get", counting)
    return fetched


def _bytes_held(con) -> int:
    """Bytes of blocks the workers' stores hold."""
    return sum(int(con._cluster.pool.get(a).action("ping", {})["bytes"]) for a in con._cluster.addresses)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT store_id, count(*) AS n, sum(amount) AS total FROM sales GROUP BY store_id ORDER BY store_id",
        "SELECT count(*) FROM sales WHERE amount > 1e9",  # one row, over an empty input
        "SELECT * FROM sales WHERE sale_id < 0",  # no rows
    ],
)
def test_a_small_result_comes_with_its_task_s_answer(default_engine, oracle, result_fetches, sql: str) -> None:
    assert_same(default_engine, oracle, sql)
    assert result_fetches == []


def test_a_result_over_the_inline_size_is_fetched_from_its_worker(default_engine, oracle, result_fetches) -> None:
    sql = "SELECT sale_id, cust_id, amount FROM sales ORDER BY sale_id"
    assert default_engine.execute(sql).fetch_arrow_table().nbytes > task.INLINE_RESULT_BYTES
    result_fetches.clear()
    assert_same(default_engine, oracle, sql)
    assert result_fetches, "a result larger than INLINE_RESULT_BYTES was not fetched from its worker"


def test_no_result_block_is_left_on_the_workers(default_engine) -> None:
    for sql in ("SELECT count(*) FROM sales", "SELECT * FROM sales ORDER BY sale_id"):
        default_engine.execute(sql).fetchall()
        assert _bytes_held(default_engine) == 0, sql
