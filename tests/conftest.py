"""Shared fixtures: deterministic generated Parquet data, qengine clusters and a DuckDB oracle.

Every differential test runs the same SQL on qengine (2 workers) and on DuckDB over the same
Parquet files, and compares with :func:`tpcds.compare.compare`.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from tpcds.compare import compare

SALES_ROWS = 40_000
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def subprocess_env() -> dict[str, str]:
    """This process's environment with the repository prepended to PYTHONPATH, for ``python -m qengine...``."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))


def free_port() -> int:
    """A loopback port free at the moment of asking, for a server a test starts as a process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], object], timeout: float, what: str | Callable[[], str], interval: float = 0.05) -> None:
    """Poll ``predicate`` until it is true; raise AssertionError naming ``what`` if it is not within ``timeout`` seconds.

    ``what`` may be a callable, to describe the state at the moment of failure.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def _write(table: pa.Table, directory: str, files: int, row_group_size: int) -> None:
    os.makedirs(directory, exist_ok=True)
    per_file = -(-table.num_rows // files)
    for i in range(files):
        pq.write_table(table.slice(i * per_file, per_file), os.path.join(directory, f"part-{i}.parquet"), row_group_size=row_group_size)


def make_data(root: str) -> dict[str, str]:
    """Tables with nulls, skew, ties, decimals, dates and strings; returns name → path."""
    rng = np.random.default_rng(20261122)
    n = SALES_ROWS
    cust = rng.zipf(1.3, n) % 600  # skewed, and some ids have no customer row
    item = rng.integers(0, 250, n)
    qty = rng.integers(1, 100, n).astype(np.int32)
    price = [decimal.Decimal(int(x)) / 100 for x in rng.integers(100, 50_000, n)]
    amount = np.round(rng.gamma(2.0, 50.0, n), 4)
    base = dt.date(2020, 1, 1)
    days = rng.integers(0, 900, n)
    note_pool = np.array(["promo", "return", "gift", "bulk", None], dtype=object)
    sales = pa.table(
        {
            "sale_id": pa.array(np.arange(n, dtype=np.int64)),
            "cust_id": pa.array(cust.astype(np.int64)),
            "item_id": pa.array(item.astype(np.int32)),
            "store_id": pa.array(np.where(rng.random(n) < 0.03, None, rng.integers(1, 8, n)), pa.int64()),
            "qty": pa.array(qty),
            "price": pa.array(price, pa.decimal128(7, 2)),
            "amount": pa.array(amount),
            "sold_date": pa.array([base + dt.timedelta(days=int(d)) for d in days], pa.date32()),
            "note": pa.array(note_pool[rng.integers(0, len(note_pool), n)], pa.string()),
        }
    )
    m = 500
    customers = pa.table(
        {
            "cust_id": pa.array(np.arange(m, dtype=np.int32)),
            "name": pa.array([f"Customer#{i:04d}" for i in range(m)]),
            "city": pa.array([["Oslo", "Lima", "Pune", "Kyiv", "Baku"][i % 5] for i in range(m)]),
            "segment": pa.array([None if i % 11 == 0 else ["retail", "corp", "gov"][i % 3] for i in range(m)]),
            "joined": pa.array([dt.datetime(2019, 1, 1) + dt.timedelta(hours=int(h)) for h in rng.integers(0, 20_000, m)], pa.timestamp("us")),
        }
    )
    k = 300
    items = pa.table(
        {
            "item_id": pa.array(np.arange(k, dtype=np.int64)),
            "category": pa.array([["Books", "Music", "Home", "Sports", None][i % 5] for i in range(k)]),
            "brand": pa.array([f"brand{i % 17}" for i in range(k)]),
            "list_price": pa.array([decimal.Decimal(int(x)) / 100 for x in rng.integers(100, 9_000, k)], pa.decimal128(9, 2)),
        }
    )
    paths = {}
    for name, table, files, rg in (("sales", sales, 3, 4_000), ("customers", customers, 1, 10_000), ("items", items, 1, 10_000)):
        path = os.path.join(root, name)
        _write(table, path, files, rg)
        paths[name] = path
    return paths


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_under_pytest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Temporary files of the tests' clusters under pytest's own base directory, which pytest
    prunes, not the system's: a local cluster that lost a worker keeps its logs on purpose, and
    every run of the suite left some thirty such directories in /tmp."""
    path = str(tmp_path_factory.mktemp("tmp"))
    before = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"] = tempfile.tempdir = path  # workers inherit TMPDIR
    yield
    if before[0] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before[0]
    tempfile.tempdir = before[1]


@pytest.fixture(scope="session")
def data_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_data(str(tmp_path_factory.mktemp("data")))


def duckdb_over(paths: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """The oracle: DuckDB with a view per table over the same Parquet files (a file, or a
    directory of them)."""
    con = duckdb.connect()
    for name, path in paths.items():
        files = os.path.join(path, "*.parquet") if os.path.isdir(path) else path
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{files}')")
    return con


def engine_over(paths: dict[str, str], split_size: str = "200KB", **options: object):
    """A 2-worker local cluster with ``paths`` registered. Small splits, so even small tables
    scan as several tasks on both workers."""
    con = qengine.connect(workers=2, split_size=split_size, **options)
    try:
        for name, path in paths.items():
            con.register_parquet(name, path)
    except BaseException:
        con.close()
        raise
    return con


@pytest.fixture(scope="session")
def oracle(data_paths: dict[str, str]) -> duckdb.DuckDBPyConnection:
    con = duckdb_over(data_paths)
    yield con
    con.close()


MODES = {
    "default": {},
    # broadcast joins from stages of their own, with no table read whole by every task
    "broadcast": {"replicate_size": 0},
    # every join shuffles
    "shuffle": {"broadcast_threshold": 0},
    # the Spark-like baseline exchange: map output on disk, pulled after the map stage
    "pull": {"broadcast_threshold": 0, "shuffle": "pull"},
    # a shuffle memory budget so small that blocks spill to disk and are read back
    "spill": {"broadcast_threshold": 0, "shuffle": "prefetch", "shuffle_memory": 64 << 10},
}


@pytest.fixture(scope="session", params=list(MODES))
def engine(request: pytest.FixtureRequest, data_paths: dict[str, str]):
    """A 2-worker cluster in each mode of :data:`MODES`."""
    con = engine_over(data_paths, **MODES[request.param])
    yield con
    con.close()


@pytest.fixture(scope="session")
def default_engine(data_paths: dict[str, str]):
    con = engine_over(data_paths)
    yield con
    con.close()


def plan_lines(con, sql: str) -> list[str]:
    """The lines of ``EXPLAIN sql``."""
    return [r[0] for r in con.execute("EXPLAIN " + sql).fetchall()]


def assert_same(con, oracle: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> None:
    """Run ``sql`` on qengine and DuckDB and require the same answer."""
    got = con.execute(sql, params).fetch_arrow_table()
    expected = oracle.execute(sql, params or []).to_arrow_table()
    result = compare(got, expected, sql)
    assert result.ok, f"{result.message}\nSQL: {sql}"
