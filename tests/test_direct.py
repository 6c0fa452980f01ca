"""Fragments run on Arrow without DuckDB (qengine.planner.direct), and the NumPy range
partitioner for fixed-width byte keys: both must order rows exactly as DuckDB does."""

from __future__ import annotations

import datetime as dt
import decimal
import os

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import sqlglot.expressions as exp

import qengine
from qengine.catalog.access import claim_output
from qengine.exchange import partitioner
from qengine.planner import direct
from qengine.planner import logical as lp
from qengine.planner.logical import col
from qengine.runtime.task import _write_file
from qengine.sandbox.connection import safe_connection
from tpcds.compare import compare

ROWS = 6_000


def _table() -> pa.Table:
    rng = np.random.default_rng(7)
    n = ROWS
    nulls = rng.random(n) < 0.05
    raw = rng.integers(0, 4, (n, 4), dtype=np.uint8)  # few byte values: many ties and prefixes
    keys = [bytes(r) for r in raw]
    return pa.table({
        "i": pa.array(np.where(nulls, None, rng.integers(-50, 50, n)), pa.int64()),
        "s": pa.array([None if x else f"v{v}" for x, v in zip(nulls[::-1], rng.integers(0, 300, n), strict=True)]),
        "d": pa.array([decimal.Decimal(int(v)) / 100 for v in rng.integers(-9999, 9999, n)], pa.decimal128(7, 2)),
        "day": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=int(v)) for v in rng.integers(0, 90, n)], pa.date32()),
        "ts": pa.array([dt.datetime(2021, 1, 1) + dt.timedelta(minutes=int(v)) for v in rng.integers(0, 900, n)], pa.timestamp("us")),
        "b": pa.array(keys, pa.binary(4)),
        "bn": pa.array([None if x else k for x, k in zip(nulls, keys, strict=True)], pa.binary(4)),
        "f": pa.array(np.where(rng.random(n) < 0.02, np.nan, rng.normal(size=n))),
        "row": pa.array(np.arange(n, dtype=np.int64)),
    })


@pytest.fixture(scope="module")
def t() -> pa.Table:
    return _table()


@pytest.fixture(scope="module")
def table_dir(tmp_path_factory: pytest.TempPathFactory, t: pa.Table) -> str:
    root = str(tmp_path_factory.mktemp("direct"))
    for i in range(3):
        pq.write_table(t.slice(i * ROWS // 3, ROWS // 3), os.path.join(root, f"part-{i}.parquet"), row_group_size=500)
    return root


ORDERS = [
    "i NULLS FIRST, row",
    "i DESC NULLS LAST, row",
    "s DESC, row",
    "d, row",
    "day DESC, ts, row",
    "b, row",  # NumPy argsort path is only taken for a lone key; with row Arrow sorts
    "b",
    "b DESC",
    "bn NULLS FIRST, row",
    "f, row",  # floating point: the SQL path
]


@pytest.fixture(scope="module")
def engine(table_dir: str):
    with qengine.connect(workers=2, split_size="20KB") as con:
        con.register_parquet("t", table_dir)
        yield con


@pytest.mark.parametrize("order", ORDERS)
def test_sorted_results_match_duckdb(engine, table_dir: str, order: str) -> None:
    sql = f"SELECT * FROM t ORDER BY {order}"
    expected = duckdb.sql(sql.replace("FROM t", f"FROM read_parquet('{table_dir}/*.parquet')")).to_arrow_table()
    got = engine.cursor().execute(sql).fetch_arrow_table()
    verdict = compare(got, expected, sql)
    assert verdict.ok, verdict.message


def _read(names: list[str]) -> lp.ExchangeRead:
    return lp.ExchangeRead(shuffle_id=0, kind="range", names=names, table="x0")


def test_plan_recognises_only_column_picks_and_sorts() -> None:
    sort = lp.Sort(_read(["a", "b"]), [exp.Ordered(this=col("a"), desc=True, nulls_first=False)])
    form = direct.plan(lp.Project(sort, [("k", col("a")), ("v", col("b"))]))
    assert form == {"input": "x0", "ops": [["select", [["a", "a"], ["b", "b"]]], ["sort", [["a", True, False]]],
                                           ["select", [["a", "k"], ["b", "v"]]]]}
    computed = lp.Project(_read(["a"]), [("k", exp.Add(this=col("a"), expression=exp.Literal.number(1)))])
    assert direct.plan(computed) is None
    assert direct.plan(lp.Filter(_read(["a"]), exp.GT(this=col("a"), expression=exp.Literal.number(1)))) is None
    twice = lp.Sort(sort, [exp.Ordered(this=col("b"), desc=False, nulls_first=False)])
    assert direct.plan(twice) is None


@pytest.mark.parametrize("values", [
    pa.array([1.0, float("nan"), -1.0]),
    pa.array([(1, 0, 0), (0, 2, 0)], pa.month_day_nano_interval()),  # Arrow cannot sort these at all
], ids=["double", "interval"])
def test_execute_declines_keys_whose_order_could_differ(values: pa.Array) -> None:
    form = direct.plan(lp.Sort(_read(["f"]), [exp.Ordered(this=col("f"), desc=False, nulls_first=False)]))
    inputs = {"x0": pa.table({"f": values})}
    assert direct.execute(form, inputs) is None
    assert "x0" in inputs  # still there for the SQL path


@pytest.mark.parametrize("desc", [False, True])
@pytest.mark.parametrize("nulls_first", [False, True])
def test_numpy_range_ids_match_the_duckdb_join(t: pa.Table, desc: bool, nulls_first: bool) -> None:
    keys = t.column("bn")
    bounds = pa.array(sorted({bytes(v) for v in np.random.default_rng(3).integers(0, 4, (7, 4), dtype=np.uint8)}))
    con = safe_connection(1)
    fast = partitioner.range_ids(con, t, "bn", bounds, desc, nulls_first)
    # The same rows as variable-width BLOBs take the DuckDB ASOF-join path.
    slow = partitioner.range_ids(con, pa.table({"bn": keys.cast(pa.binary())}), "bn", bounds, desc, nulls_first)
    assert np.array_equal(fast, slow)
    assert len(set(fast.tolist())) > 3


@pytest.mark.parametrize("partitions", [3, 40])  # rows found partition by partition, or by a sort
def test_split_gives_each_partition_its_own_buffers(t: pa.Table, partitions: int) -> None:
    ids = np.arange(t.num_rows) * 7 % partitions
    parts = partitioner.split(t, ids, partitions)
    assert [p.column("row").to_pylist() for p in parts] == [
        [r for r in range(ROWS) if r * 7 % partitions == p] for p in range(partitions)
    ]
    # A partition gathered on its own holds only its rows' bytes, not a slice of a full copy.
    assert all(p.get_total_buffer_size() < t.get_total_buffer_size() / 2 for p in parts)


def test_split_into_mostly_empty_partitions_keeps_rows_and_schema(t: pa.Table) -> None:
    # Many reducers over few rows: the empty partitions share a table of no rows and hold no
    # buffer of the output; the others are gathered as usual.
    small = t.slice(0, 5).replace_schema_metadata({b"tag": b"kept"})
    ids = np.array([9_000, 3, 9_000, 42, 3])
    parts = partitioner.split(small, ids, 10_000)
    assert len(parts) == 10_000
    assert {p: parts[p].column("row").to_pylist() for p in (3, 42, 9_000)} == {3: [1, 4], 42: [3], 9_000: [0, 2]}
    assert sum(p.num_rows for p in parts) == 5
    assert all(p.schema.equals(small.schema, check_metadata=True) for p in (parts[0], parts[3], parts[9_999]))
    assert parts[0].get_total_buffer_size() == small.schema.empty_table().get_total_buffer_size()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("order", [[["b", False, False]], [["i", True, True], ["row", False, False]]], ids=["bytes", "int-desc"])
def test_sorted_output_is_written_batch_by_batch(t: pa.Table, tmp_path, monkeypatch, fmt: str, order: list) -> None:
    """A sort hands its rows to the file writer in batches of about BATCH_BYTES, in order."""
    monkeypatch.setattr(direct, "BATCH_BYTES", 20_000)
    blocks = pa.concat_tables([t.slice(i, 1000) for i in range(0, ROWS, 1000)])  # a reducer's blocks
    form = {"input": "x0", "ops": [["select", [[c, c] for c in ("i", "b", "row")]], ["sort", order]]}
    stream = direct.execute(form, {"x0": blocks.select(["i", "b", "row"])})
    assert isinstance(stream, pa.RecordBatchReader)
    claim_output(str(tmp_path), overwrite=False)  # what COPY does before its tasks write
    stats = _write_file(stream, ["i", "key", "row"], str(tmp_path), 4, 0, fmt)
    path = tmp_path / f"part-00004.{fmt}"
    assert stats["rows"] == ROWS
    if fmt == "parquet":
        assert pq.ParquetFile(path).num_row_groups > 5  # one per batch
        written = pq.read_table(path)
    else:  # a BLOB in CSV is DuckDB's text of it, \x01\x02
        written = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types={"key": pa.string()}))
    keys = ", ".join(f"{k} {'DESC' if desc else 'ASC'} NULLS {'FIRST' if first else 'LAST'}" for k, desc, first in order)
    key = "b" if fmt == "parquet" else "CAST(b::BLOB AS VARCHAR)"
    expected = duckdb.sql(f"SELECT i, {key} AS key, row FROM t ORDER BY {keys}").to_arrow_table()
    for name in ("key", "i", "row") if len(order) > 1 else ("key",):  # a lone key has ties
        assert written.column(name).cast(expected.column(name).type).equals(expected.column(name)), name
