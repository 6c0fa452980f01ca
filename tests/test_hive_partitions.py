"""Hive-partitioned Parquet datasets (``y=2024/region=x/part.parquet``), written by pyarrow and by
DuckDB's COPY ... PARTITION_BY: read with their partition columns as DuckDB reads them, and
filters on those columns skip whole files before the scan is split. Answers are DuckDB's over
the same files (``read_parquet(..., hive_partitioning=true)``)."""

from __future__ import annotations

import datetime as dt
import os
import re

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.catalog import scan
from qengine.cli.common import register_directory
from qengine.sandbox.connection import safe_connection
from tests.conftest import assert_same

ROWS = 6_000
REGIONS = ["north east", "a/b", "west", None]  # URL-encoded on disk; None is __HIVE_DEFAULT_PARTITION__


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A data root with: ``sales`` by pyarrow, partitioned by year and region (two levels, NULL
    and URL-encoded regions, two files per partition, several row groups each); ``events`` by
    DuckDB, partitioned by a date and a string (NULL too); ``tagged`` by DuckDB with its
    partition column also kept in the files; ``plain``, not partitioned, to join to; ``days``, a
    dataset of one level by pyarrow; ``clash``, whose files have a column of its partition's name;
    ``ragged``, partitioned unevenly."""
    base = str(tmp_path_factory.mktemp("hive"))
    rng = np.random.default_rng(28)
    sales = pa.table({
        "id": pa.array(np.arange(ROWS, dtype=np.int64)),
        "qty": pa.array(rng.integers(1, 50, ROWS).astype(np.int32)),
        "amount": pa.array(np.round(rng.gamma(2.0, 20.0, ROWS), 3)),
        "shop": pa.array(rng.integers(0, 20, ROWS)),
        "year": pa.array(2021 + np.arange(ROWS) % 4),
        "region": pa.array([REGIONS[i] for i in rng.integers(0, len(REGIONS), ROWS)]),
    })
    for half in (sales.slice(0, ROWS // 2), sales.slice(ROWS // 2)):  # two files per partition
        pq.write_to_dataset(half, os.path.join(base, "sales"), partition_cols=["year", "region"], row_group_size=200)
    con = duckdb.connect()
    con.execute(f"""
        COPY (SELECT i AS id, DATE '2024-01-01' + (i % 5)::INTEGER AS day,
                     CASE i % 3 WHEN 0 THEN 'b c' WHEN 1 THEN 'xy' END AS kind, i * 0.5 AS weight
              FROM range(3000) t(i))
        TO '{base}/events' (FORMAT parquet, PARTITION_BY (day, kind))""")
    con.execute(f"""
        COPY (SELECT i AS id, i % 3 AS grp FROM range(900) t(i))
        TO '{base}/tagged' (FORMAT parquet, PARTITION_BY (grp), WRITE_PARTITION_COLUMNS true)""")
    for day in (1, 2):
        os.makedirs(os.path.join(base, "days", f"day={day}"))
        pq.write_table(pa.table({"v": [day, day * 10]}), os.path.join(base, "days", f"day={day}", "f.parquet"))
        # a file column named like the partition, holding other values (and of another type)
        os.makedirs(os.path.join(base, "clash", f"k={day}"))
        clash = pa.table({"k": pa.array([90 + day, 80 + day], pa.int32()), "v": [day, -day]})
        pq.write_table(clash, os.path.join(base, "clash", f"k={day}", "f.parquet"))
    for ragged in ("y=1", "y=2/m=3"):  # partitions of unequal depth: DuckDB does not detect them
        os.makedirs(os.path.join(base, "ragged", ragged))
        pq.write_table(pa.table({"v": [len(ragged)]}), os.path.join(base, "ragged", ragged, "f.parquet"))
    con.execute(f"COPY (SELECT i AS shop, 'shop' || i AS name, i % 2 = 0 AS big FROM range(20) t(i)) TO '{base}/plain.parquet'")
    con.close()
    return base


def _glob(root: str, name: str) -> str:
    return os.path.join(root, name, "**", "*.parquet")


@pytest.fixture(scope="module")
def con(root: str):
    """One cluster for the module, reading only under ``root``."""
    c = qengine.connect(workers=2, split_size="16KB", allowed_roots=[root])
    for name in ("sales", "events", "tagged", "clash"):
        c.register_parquet(name, os.path.join(root, name))
    c.register_parquet("plain", os.path.join(root, "plain.parquet"))
    yield c
    c.close()


@pytest.fixture(scope="module")
def oracle(root: str):
    o = duckdb.connect()
    for name in ("sales", "events", "tagged", "clash"):
        o.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet('{_glob(root, name)}', hive_partitioning = true)")
    o.execute(f"CREATE VIEW plain AS SELECT * FROM read_parquet('{root}/plain.parquet')")
    yield o
    o.close()


def _files(con, sql: str) -> list[tuple[int, int, int]]:
    """(kept, of, skipped) for every scan EXPLAIN ANALYZE shows a partition filter on."""
    text = "\n".join(r[0] for r in con.execute("EXPLAIN ANALYZE " + sql).fetchall())
    return [tuple(map(int, m)) for m in re.findall(r"files: (\d+) of (\d+) \((\d+) skipped by partition filter\)", text)]


def _partitions(oracle, table: str, where: str) -> int:
    """How many files of ``table`` hold rows passing ``where``, by DuckDB."""
    return oracle.execute(f"SELECT count(DISTINCT filename) FROM {table}_files WHERE {where}").fetchone()[0]


@pytest.fixture(scope="module")
def files_oracle(root: str, oracle):
    for name in ("sales", "events"):
        oracle.execute(
            f"CREATE VIEW {name}_files AS SELECT * FROM read_parquet('{_glob(root, name)}', hive_partitioning = true, filename = true)"
        )
    return oracle


def test_schema_has_the_partition_columns_typed_as_duckdb_types_them(con, oracle) -> None:
    for table in ("sales", "events", "tagged", "clash"):
        got = con.execute(f"SELECT * FROM {table} LIMIT 0").fetch_arrow_table().schema
        expected = oracle.execute(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema
        assert [(f.name, f.type) for f in got] == [(f.name, f.type) for f in expected], table


@pytest.mark.parametrize("sql", [
    "SELECT year, region, count(*) AS n, sum(qty) AS q, sum(amount) AS a FROM sales GROUP BY year, region",
    "SELECT region, count(*) AS n FROM sales WHERE region IS NULL OR region = 'a/b' GROUP BY region",
    "SELECT day, kind, count(*) AS n, sum(weight) AS w FROM events GROUP BY day, kind",
    "SELECT grp, count(*) AS n, sum(id) AS s FROM tagged GROUP BY grp",
    "SELECT * FROM sales WHERE id % 997 = 0",
    "SELECT count(*) AS n, sum(qty) AS q FROM sales WHERE year = (SELECT max(year) FROM sales WHERE region = 'west')",
    "SELECT region, count(*) AS n FROM sales WHERE year IN (SELECT grp + 2021 FROM tagged WHERE id < 2) GROUP BY region",
    "SELECT year, count(*) AS n FROM sales WHERE (year = 2022 AND qty > 25) OR (year = 2024 AND region IS NULL) GROUP BY year",
    "SELECT k, count(*) AS n, sum(qty) AS q FROM (SELECT 'a' AS k, qty FROM sales WHERE year = 2021 "
    "UNION ALL SELECT 'b' AS k, qty FROM sales WHERE year = 2024 AND region = 'west') u GROUP BY k",
    "WITH w AS (SELECT * FROM sales WHERE region = 'west') "
    "SELECT a.year, count(*) AS n FROM w a JOIN w b ON a.id = b.id + 1 WHERE a.year > 2022 GROUP BY a.year",
    "SELECT region, year, id FROM sales ORDER BY id",  # read as Arrow by the task, not by DuckDB
    "SELECT grp, id FROM tagged ORDER BY id DESC",
    "SELECT * FROM clash ORDER BY v",  # the partition's value, not the file's
    "SELECT k, sum(v) AS s FROM clash WHERE k = 2 GROUP BY k",
    "SELECT * FROM events WHERE id % 101 = 0",
])
def test_group_bys_and_scans_match_duckdb(con, oracle, sql: str) -> None:
    assert_same(con, oracle, sql)


PRUNED = [
    ("sales", "year = 2023"),
    ("sales", "year >= 2023 AND region = 'north east'"),
    ("sales", "year IN (2021, 2024) AND qty > 10"),
    ("sales", "region IS NULL"),
    ("sales", "coalesce(region, 'none') = 'none' AND year < 2023"),
    ("sales", "region <> 'west'"),  # NULL regions are not <> 'west': skipped too
    ("sales", "region LIKE '%/%'"),
    ("sales", "region IS DISTINCT FROM 'west' AND year = 2022"),  # keeps the NULL regions
    ("sales", "CAST(year AS VARCHAR) = '2023'"),
    ("sales", "year = '2022'"),  # a string compared with a BIGINT partition, cast as DuckDB casts it
    ("events", "day = DATE '2024-01-03'"),
    ("events", "day = '2024-01-02'"),
    ("events", "day >= '2024-01-04' AND kind = 'b c'"),
    ("events", "kind IS NULL AND day BETWEEN DATE '2024-01-02' AND DATE '2024-01-03'"),
]


@pytest.mark.parametrize("table,where", PRUNED)
def test_filters_on_partition_columns_skip_files(con, files_oracle, table: str, where: str) -> None:
    sql = f"SELECT count(*) AS n, sum(id) AS s, min(id) AS lo FROM {table} WHERE {where}"
    assert_same(con, files_oracle, sql)
    kept, total, skipped = _files(con, sql)[0]
    assert kept + skipped == total == files_oracle.execute(f"SELECT count(DISTINCT filename) FROM {table}_files").fetchone()[0]
    assert skipped > 0
    # every file that holds a matching row was kept, and no other: the filter is on partitions alone
    assert kept == _partitions(files_oracle, table, " AND ".join(c for c in where.split(" AND ") if "qty" not in c))


def test_explain_shows_the_files_skipped_before_the_run(con) -> None:
    text = "\n".join(r[0] for r in con.execute("EXPLAIN SELECT count(*) FROM sales WHERE year = 2024 AND region = 'west'").fetchall())
    assert re.search(r"Scan sales .* files: 2 of 32 \(30 skipped by partition filter\)", text), text


def test_the_run_stats_count_the_files_skipped(con) -> None:
    cur = con.cursor()
    cur.execute("SELECT region, count(*) AS n FROM sales WHERE year = 2023 GROUP BY region")
    scans = [s for s in cur.stats.stages if s.files]
    assert [(s.files, s.files_skipped) for s in scans] == [(32, 24)]


def test_filters_on_other_columns_skip_nothing(con, oracle) -> None:
    sql = "SELECT year, count(*) AS n FROM sales WHERE qty > 40 OR year = 2022 GROUP BY year"
    assert_same(con, oracle, sql)
    assert all(skipped == 0 for _, _, skipped in _files(con, sql))


def test_a_filter_ruling_out_every_file_gives_no_rows(con, oracle) -> None:
    for sql in (
        "SELECT count(*) AS n, sum(qty) AS q FROM sales WHERE year = 1999",
        "SELECT region, count(*) AS n FROM sales WHERE year = 1999 GROUP BY region",
        "SELECT * FROM events WHERE day < DATE '2000-01-01'",
    ):
        assert_same(con, oracle, sql)
    assert _files(con, "SELECT count(*) FROM sales WHERE year = 1999")[0][0] == 0


@pytest.mark.parametrize("sql", [
    "SELECT p.name, s.year, sum(s.qty) AS q FROM sales s JOIN plain p ON s.shop = p.shop "
    "WHERE s.year = 2022 AND p.big GROUP BY p.name, s.year",
    "SELECT s.region, e.kind, count(*) AS n FROM sales s JOIN events e ON s.id = e.id "
    "WHERE s.year = 2024 AND e.day = DATE '2024-01-02' GROUP BY s.region, e.kind",
    "SELECT t.grp, count(*) AS n FROM tagged t JOIN sales s ON t.id = s.id AND t.grp = s.year - 2021 "
    "WHERE t.grp = 1 GROUP BY t.grp",
    "SELECT s.region, count(*) AS n, sum(s.qty) AS q FROM sales s JOIN plain p ON s.year = p.shop + 2020 "
    "WHERE p.big AND s.year > 2021 GROUP BY s.region",
])
def test_joins_prune_through_pushed_down_filters(con, oracle, sql: str) -> None:
    assert_same(con, oracle, sql)
    found = _files(con, sql)
    assert found and all(skipped > 0 for _, _, skipped in found)


def test_a_split_reads_the_same_as_arrow_and_as_duckdb_sql(con) -> None:
    """Both readers of a split (the task's Arrow read, the fragment's SQL) give each file's
    rows its partition values, a file column of a partition's name included."""
    for table, columns in (("sales", ["region", "id", "year"]), ("tagged", ["grp", "id"]), ("clash", ["v", "k"])):
        source = con.session.catalog.table(table)
        pairs = [(c, f"c{i}") for i, c in enumerate(columns)]
        for split in source.splits(2, 4_000):
            arrow = scan.read_split(split, pairs, lambda _: None)
            sql = scan.parquet_sql(split, pairs)
            db = safe_connection(1, scan.split_files(split))
            try:
                duck = db.execute(sql).to_arrow_table()
            finally:
                db.close()
            assert arrow.schema == duck.schema
            assert sorted(arrow.to_pylist(), key=str) == sorted(duck.to_pylist(), key=str)


def test_parameters_prune_each_run_by_its_own_values(con, oracle) -> None:
    sql = "SELECT year, count(*) AS n, sum(qty) AS q FROM sales WHERE year = ? GROUP BY year"
    for year in (2021, 2024, 2022, 1999):
        assert_same(con, oracle, sql, [year])


def test_read_parquet_in_sql_matches_duckdb(con, root: str) -> None:
    """The same SQL on both: read_parquet with DuckDB's detection, and with each hive option."""
    oracle = duckdb.connect()
    sales, events = _glob(root, "sales"), _glob(root, "events")
    for sql in (
        f"SELECT year, region, count(*) AS n FROM read_parquet('{sales}') GROUP BY year, region",
        f"SELECT year, count(*) AS n FROM read_parquet('{sales}', hive_partitioning = true) WHERE year > 2022 GROUP BY year",
        f"SELECT * FROM read_parquet('{sales}', hive_partitioning = false) WHERE id < 50",
        f"SELECT year, region, sum(qty) AS q FROM read_parquet('{sales}', hive_types = {{'year': 'INTEGER'}}) GROUP BY year, region",
        f"SELECT day, kind, count(*) AS n FROM read_parquet('{events}', hive_types_autocast = false) "
        "WHERE day = '2024-01-02' GROUP BY day, kind",
        f"SELECT day, count(*) AS n FROM read_parquet('{events}', hive_types = {{'day': 'VARCHAR'}}) GROUP BY day",
        f"SELECT * FROM read_parquet('{_glob(root, 'ragged')}')",
        f"SELECT year, region FROM read_parquet(['{root}/sales/year=2022/*/*.parquet', '{root}/sales/year=2023/*/*.parquet']) "
        "WHERE region = 'west' AND id < 300",
    ):
        assert_same(con, oracle, sql)
        got = con.execute(sql).fetch_arrow_table().schema
        assert got.types == oracle.execute(sql).to_arrow_table().schema.types, sql
    oracle.close()


def test_read_parquet_refuses_what_it_does_not_model(con, root: str, tmp_path) -> None:
    sales = _glob(root, "sales")
    with pytest.raises(qengine.NotSupportedError, match="union_by_name"):
        con.execute(f"SELECT count(*) FROM read_parquet('{sales}', union_by_name = true)")
    with pytest.raises(qengine.ProgrammingError, match="hive_partitioning"):  # as DuckDB refuses it
        con.execute(f"SELECT count(*) FROM read_parquet('{sales}', hive_partitioning = false, hive_types = {{'year': 'INTEGER'}})")
    with pytest.raises(qengine.ProgrammingError, match="true or false"):
        con.execute(f"SELECT count(*) FROM read_parquet('{sales}', hive_partitioning = 'yes')")
    for files in (f"'{sales}', '{root}/plain.parquet'", f"'{root}/plain.parquet', '{sales}'"):
        with pytest.raises(qengine.ProgrammingError, match="mismatch"):  # explicit partitioning over files that disagree
            con.execute(f"SELECT count(*) FROM read_parquet([{files}], hive_partitioning = true)")
    oracle = duckdb.connect()  # partitioned by nothing: the file's own columns, as in DuckDB
    assert_same(con, oracle, f"SELECT * FROM read_parquet('{root}/plain.parquet', hive_partitioning = true)")
    oracle.close()
    outside = tmp_path / "elsewhere" / "y=1"
    outside.mkdir(parents=True)
    pq.write_table(pa.table({"v": [1]}), outside / "f.parquet")
    with pytest.raises(qengine.ProgrammingError, match="outside the data roots"):
        con.execute(f"SELECT * FROM read_parquet('{tmp_path}/elsewhere/*/*.parquet', hive_partitioning = true)")


def test_cli_data_directory_registers_a_hive_dataset_as_one_table(con, root: str) -> None:
    """``qengine sql -d DIR``: a dataset directory under DIR is one table, and so is DIR when its
    own subdirectories are partitions."""
    assert set(register_directory(con, root)) == {"sales", "events", "tagged", "plain", "days", "clash", "ragged"}
    assert register_directory(con, os.path.join(root, "days")) == ["days"]
    rows = con.execute("SELECT day, sum(v) AS s FROM days GROUP BY day ORDER BY day").fetchall()
    assert rows == [(1, 11), (2, 22)]


def test_dates_and_strings_decode_as_in_duckdb(con) -> None:
    got = con.execute("SELECT DISTINCT region FROM sales WHERE region IS NOT NULL ORDER BY region").fetchall()
    assert got == [("a/b",), ("north east",), ("west",)]
    days = con.execute("SELECT DISTINCT day FROM events ORDER BY day").fetchall()
    assert days == [(dt.date(2024, 1, 1) + dt.timedelta(days=i),) for i in range(5)]
