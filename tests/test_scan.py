"""qengine's Parquet scan as DuckDB runs it inside fragments: the splits' row runs, the
fragment connection that may read only the registered tables' files, and scan failures that say so."""

from __future__ import annotations

import decimal
import json
import os
import shutil

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.catalog import scan
from qengine.catalog.scan import parquet_sql, split_files
from qengine.catalog.sources import ParquetSource
from qengine.planner import logical as lp
from qengine.planner.frontend import parse
from qengine.runtime import task_specs
from qengine.sandbox.connection import safe_connection
from tests.conftest import assert_same


def _files(root, files: int = 3, rows: int = 1000, row_group: int = 100) -> list[str]:
    os.makedirs(root, exist_ok=True)
    paths = []
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        path = os.path.join(root, f"part-{f}.parquet")
        pq.write_table(pa.table({"id": ids, "v": ids * 2}), path, row_group_size=row_group)
        paths.append(path)
    return paths


def _read(split: dict) -> list[int]:
    """The ids a split covers, read by DuckDB through the split's SQL."""
    sql = parquet_sql(split, [("id", "c0")])
    if sql is None:
        return []
    con = safe_connection(1, split_files(split))
    try:
        return sorted(r[0] for r in con.execute(sql).fetchall())
    finally:
        con.close()


@pytest.mark.parametrize("split_bytes", [1, 2_000, 5_000, 1 << 30])
def test_splits_cover_every_row_once(tmp_path, split_bytes: int) -> None:
    source = ParquetSource("t", _files(tmp_path))
    splits = source.splits(workers=2, split_bytes=split_bytes)
    covered = [i for split in splits for i in _read(split)]
    assert sorted(covered) == list(range(3000))
    assert sum(s["rows"] for s in splits) == 3000
    for split in splits:  # runs merge adjacent row groups; a whole file has no row range
        runs = split["runs"]
        assert all(stop is None or first < stop for _, first, stop in runs)
        assert len({path for path, _, _ in runs}) == len(runs)


def test_pruned_splits_read_only_the_matching_row_groups(tmp_path) -> None:
    source = ParquetSource("t", _files(tmp_path))
    # row groups are 100 ids each: keep the ones holding ids 250..449 and 2950..2999
    kept = [i for split in source.splits(2, 1, {"id": (250, 449)}) for i in _read(split)]
    assert kept == list(range(200, 500))
    tail = [i for split in source.splits(2, 1 << 30, {"id": (2950, 5000)}) for i in _read(split)]
    assert tail == list(range(2900, 3000))
    assert [_read(s) for s in source.splits(2, 1, {"id": (9000, 9999)})] == [[]]


def test_fragment_connection_reads_only_its_files(tmp_path) -> None:
    mine, other = _files(tmp_path / "mine", files=1), _files(tmp_path / "other", files=1)
    con = safe_connection(1, tuple(mine))
    try:
        assert con.execute(f"SELECT count(*) FROM read_parquet('{mine[0]}')").fetchone() == (1000,)
        for sql in (
            f"SELECT count(*) FROM read_parquet('{other[0]}')",
            "SELECT * FROM read_text('/etc/passwd')",
            f"COPY (SELECT 1) TO '{mine[0]}.csv'",
            "SET enable_external_access = true",
            f"SET allowed_paths = ['{other[0]}']",
        ):
            with pytest.raises(duckdb.Error):
                con.execute(sql)
    finally:
        con.close()


def test_a_file_removed_after_registration_fails_the_scan_by_name(tmp_path, oracle, data_paths) -> None:
    root = tmp_path / "t"
    paths = _files(root)
    with qengine.connect(workers=2, split_size="4KB") as con:
        con.register_parquet("t", paths[1])  # one file: gone, the table cannot be read
        con.register_parquet("d", str(root))  # a directory: listed again, its other files read, as DuckDB reads them
        con.register_parquet("items", data_paths["items"])
        assert con.execute("SELECT count(*), sum(v) FROM d WHERE id % 3 = 0").fetchone() == (1000, sum(2 * i for i in range(0, 3000, 3)))
        assert_same(con, oracle, "SELECT category, count(*) FROM items GROUP BY category")  # the cluster is fine
        os.remove(paths[1])
        with pytest.raises(qengine.OperationalError, match="changed on disk and cannot be read again") as info:
            con.execute("SELECT sum(v) FROM t")
        assert paths[1] in str(info.value)
        assert con.execute("SELECT count(*), min(id) FROM d WHERE id BETWEEN 500 AND 1500").fetchone() == (500, 500)
        shutil.copy(paths[0], paths[1])  # a different file where it was: read, not refused
        assert con.execute("SELECT count(*) FROM t").fetchone() == (1000,)
        assert con.execute("SELECT count(*) FROM d").fetchone() == (3000,)
        assert_same(con, oracle, "SELECT category, count(*) FROM items GROUP BY category")


@pytest.mark.parametrize("build_sides", [False, True])
def test_duckdb_picks_hash_join_build_sides_only_when_asked(tmp_path, build_sides: bool) -> None:
    """The rendered join builds on its right input; DuckDB may swap the sides, by the Parquet
    sizes it reads, only on a ``build_sides`` connection."""
    big, small = str(tmp_path / "big.parquet"), str(tmp_path / "small.parquet")
    pq.write_table(pa.table({"k": np.arange(50_000), "v": np.arange(50_000)}), big)
    pq.write_table(pa.table({"k": np.arange(100), "w": np.arange(100)}), small)
    sql = (f"SELECT * FROM (SELECT * FROM read_parquet('{small}')) AS l "
           f"JOIN (SELECT * FROM read_parquet('{big}')) AS r ON l.k = r.k")
    con = safe_connection(1, (big, small), build_sides=build_sides)
    try:
        nodes = [json.loads(con.sql("EXPLAIN (FORMAT JSON) " + sql).fetchall()[0][1])[0]]
        while nodes[-1]["name"].strip() != "HASH_JOIN":
            nodes.append(nodes[-1]["children"][0])
        probe, build = (int(c["extra_info"]["Estimated Cardinality"]) for c in nodes[-1]["children"])
        assert (probe, build) == ((50_000, 100) if build_sides else (100, 50_000))
        assert len(con.sql(sql).fetchall()) == 100
    finally:
        con.close()


@pytest.mark.parametrize(("options", "reads", "duckdb_builds"), [
    # the sales scan joins the customers broadcast: DuckDB builds, knowing the scan's size
    ({"replicate_size": 0}, ["broadcast"], True),
    # the join reads both sides hashed, Arrow inputs DuckDB takes for one row: the renderer builds
    ({"broadcast_threshold": 0}, ["hash"], False),
])
def test_duckdb_builds_where_every_exchange_read_is_a_broadcast(data_paths, options, reads, duckdb_builds) -> None:
    sql = "SELECT c.city, sum(s.amount) AS total FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"
    with qengine.connect(workers=2, split_size="200KB", **options) as con:
        for name, path in data_paths.items():
            con.register_parquet(name, path)
        plan = con.session.plan(parse(sql, "duckdb")[0])
    [join] = [s for s in plan.stages if any(isinstance(n, lp.Join) for n in lp.walk(s.root))]
    assert sorted({r.kind for r in join.reads}) == reads
    assert task_specs.duckdb_builds(join) is duckdb_builds


def test_a_stage_without_a_join_has_no_build_sides_to_pick(data_paths) -> None:
    with qengine.connect(workers=2, split_size="200KB", replicate_size=0) as con:
        for name, path in data_paths.items():
            con.register_parquet(name, path)
        plan = con.session.plan(parse("SELECT store_id, sum(amount) FROM sales WHERE qty > 5 GROUP BY store_id", "duckdb")[0])
    scans = [s for s in plan.stages if s.scans]
    assert scans and not any(task_specs.duckdb_builds(s) for s in scans)


def _typed_file(path: str, rows: int, **extra: pa.Array) -> None:
    ids = np.arange(rows, dtype=np.int64)
    columns = {
        "id": pa.array(ids), "x": pa.array(ids * 0.5), "s": pa.array([f"s{i % 7}" for i in range(rows)]),
        "d": pa.array(ids.astype("datetime64[D]").astype(object), pa.date32()),
        "m": pa.array([decimal.Decimal(i) / 100 for i in range(rows)], pa.decimal128(9, 2)),
        "t": pa.array(ids.astype("datetime64[us]")), **extra,
    }
    pq.write_table(pa.table(columns), path, row_group_size=10)


@pytest.mark.parametrize(("column", "array", "exact"), [
    ("id", None, True),
    ("ns", pa.array(np.arange(40).astype("datetime64[ns]")), False),  # DuckDB reads TIMESTAMP, Arrow gives ns
    ("u", pa.array(np.arange(40, dtype=np.uint32)), False),
    ("l", pa.array([[i] for i in range(40)]), False),
    ("tz", pa.array(np.arange(40).astype("datetime64[us]"), pa.timestamp("us", "UTC")), False),
])
def test_small_splits_go_to_duckdb_as_arrow_only_where_both_readers_type_them_alike(tmp_path, column, array, exact) -> None:
    path = str(tmp_path / "f.parquet")
    _typed_file(path, 40, **({column: array} if array is not None else {}))
    split = ParquetSource("t", [path]).splits(1, 1)[0]
    columns = [("id", "c0"), ("x", "c1"), ("s", "c2"), ("d", "c3"), ("m", "c4"), ("t", "c5"), (column, "c6")]
    assert scan.reads_best_as_arrow(split, columns) is exact
    big = dict(split, rows=scan.SMALL_SPLIT_ROWS + 1)
    assert not scan.reads_best_as_arrow(big, columns[:1])
    assert not scan.reads_best_as_arrow(split, [("missing", "c0")])


def test_a_parquet_file_rewritten_in_place_is_read_afresh(tmp_path) -> None:
    [path] = _files(tmp_path, files=1, rows=100, row_group=10)
    [split] = ParquetSource("t", [path]).splits(1, 1 << 30)
    assert scan.read_split(split, [("id", "c0")], None).column(0).to_pylist() == list(range(100))
    pq.write_table(pa.table({"id": np.arange(500, 600, dtype=np.int64), "v": np.zeros(100, dtype=np.int64)}), path, row_group_size=10)
    os.utime(path, ns=(1, 1))  # another modification time, even where the clock is coarse
    assert scan.read_split(split, [("id", "c0")], None).column(0).to_pylist() == list(range(500, 600))


def test_tiny_row_groups_of_every_type_answer_as_duckdb_does(tmp_path) -> None:
    """Splits of one row group, read here as Arrow where the types allow and by DuckDB where
    they do not, in fragments with and without joins."""
    root = tmp_path / "t"
    root.mkdir()
    for f in range(2):
        _typed_file(str(root / f"part-{f}.parquet"), 200, ns=pa.array(np.arange(200).astype("datetime64[ns]")),
                    u=pa.array(np.arange(200, dtype=np.uint32)))
    oracle = duckdb.connect()
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{root}/*.parquet')")
    queries = [
        "SELECT count(*), sum(id), sum(x), min(s), max(d), sum(m), max(t) FROM t WHERE id % 3 = 1",
        "SELECT s, count(*), sum(m), min(ns), max(u) FROM t GROUP BY s ORDER BY s",
        "SELECT d, t, m FROM t WHERE s = 's3' ORDER BY id LIMIT 20",
        "SELECT a.s, count(*) FROM t a JOIN t b ON a.id = b.id + 1 WHERE a.x > 10 GROUP BY a.s ORDER BY a.s",
    ]
    with qengine.connect(workers=2, split_size="1B", allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", str(root))
        for sql in queries:
            assert_same(con, oracle, sql)


@pytest.mark.parametrize("names", [["A", "a", "b"], ["x", "x"]])
def test_a_file_with_two_columns_of_one_name_is_refused(tmp_path, names: list[str]) -> None:
    # DuckDB renames the second (a_1); qengine dropped one silently, or failed with a KeyError
    path = str(tmp_path / "repeated.parquet")
    pq.write_table(pa.table([pa.array([1, 2]) for _ in names], names=names), path)
    with qengine.connect(workers=1, allowed_roots=[str(tmp_path)], lazy_start=True) as con:
        with pytest.raises(qengine.NotSupportedError, match=f"two columns named '{names[0]}' and '{names[1]}'"):
            con.register_parquet("t", path)
        with pytest.raises(qengine.NotSupportedError, match="rename one in the file"):
            con.execute(f"SELECT * FROM '{path}'")


def test_a_registered_file_rewritten_in_place_is_read_again(tmp_path) -> None:
    # Its row groups were those seen at registration: 1,000 rows rewritten over 3 read as 100
    # (the first row group), and a repeated plan went on reading the old layout.
    path = str(tmp_path / "grows.parquet")
    pq.write_table(pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]}), path)
    csv = tmp_path / "grows.csv"
    csv.write_text("k,v\n1,a\n")
    with qengine.connect(workers=2, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("g", path)
        con.register_csv("c", str(csv))
        assert con.execute("SELECT count(*), sum(k) FROM g WHERE k > ?", [0]).fetchall() == [(3, 6)]
        pq.write_table(pa.table({"v": [str(i) for i in range(1000)], "k": list(range(1000))}), path, row_group_size=100)
        csv.write_text("k,v\n1,a\n2,b\n")
        for _ in range(2):  # the second through the plan the first left
            assert con.execute("SELECT count(*), sum(k) FROM g WHERE k > ?", [0]).fetchall() == [(999, 499500)]
        assert [d[0] for d in con.execute("SELECT * FROM g").description] == ["v", "k"]
        assert con.execute("SELECT count(*) FROM c").fetchall() == [(2,)]
        (tmp_path / "grows.parquet").write_bytes(b"not parquet")
        with pytest.raises(qengine.OperationalError, match="changed on disk and cannot be read again"):
            con.execute("SELECT count(*) FROM g")
        assert con.execute("SELECT count(*) FROM c").fetchall() == [(2,)]  # other tables unaffected
        pq.write_table(pa.table({"k": [7]}), path)
        assert con.execute("SELECT count(*), sum(k) FROM g").fetchall() == [(1, 7)]


def test_a_file_added_to_a_registered_directory_or_glob_is_read(tmp_path) -> None:
    """The files of a registered directory or glob were those listed at registration, where
    DuckDB lists them at each query: a file added later was never read, nor one in a new
    partition directory, and a removed one failed the table."""
    data, logs = tmp_path / "data", tmp_path / "logs"
    (data / "y=2024").mkdir(parents=True)
    logs.mkdir()
    pq.write_table(pa.table({"k": [1, 2]}), data / "y=2024" / "a.parquet")
    (logs / "a.csv").write_text("k\n1\n")
    with qengine.connect(workers=2, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", str(data))
        con.register_csv("l", str(logs / "*.csv"))
        sql = "SELECT count(*), sum(k), count(DISTINCT y) FROM t WHERE k > ?"
        assert con.execute(sql, [0]).fetchall() == [(2, 3, 1)]
        pq.write_table(pa.table({"k": [10]}), data / "y=2024" / "b.parquet")
        assert con.execute(sql, [0]).fetchall() == [(3, 13, 1)]
        (data / "y=2025").mkdir()
        pq.write_table(pa.table({"k": [100]}), data / "y=2025" / "c.parquet")
        assert con.execute(sql, [0]).fetchall() == [(4, 113, 2)]
        (data / "y=2024" / "a.parquet").unlink()
        assert con.execute(sql, [0]).fetchall() == [(2, 110, 2)]
        (logs / "b.csv").write_text("k\n5\n")
        (logs / "notes.txt").write_text("k\n1000\n")  # not matched by the glob
        assert con.execute("SELECT sum(k) FROM l").fetchall() == [(6,)]


def test_files_of_one_table_with_a_column_of_two_types_are_refused(tmp_path) -> None:
    # read apart, each task's rows had its own file's type: "Schema at index 1 was different"
    pq.write_table(pa.table({"a": pa.array([1, 2], pa.int64()), "s": ["x", "y"]}), tmp_path / "f1.parquet")
    pq.write_table(pa.table({"a": pa.array([3], pa.int32()), "s": pa.array(["z"], pa.large_string())}), tmp_path / "f2.parquet")
    with (qengine.connect(workers=1, allowed_roots=[str(tmp_path)], lazy_start=True) as con,
          pytest.raises(qengine.NotSupportedError, match="column 'a' of .*f2.parquet is INTEGER, of .*f1.parquet BIGINT")):
        con.register_parquet("t", str(tmp_path))


def test_times_finer_than_duckdb_keeps_and_zoned_timestamps_read_as_duckdb_reads_them(tmp_path) -> None:
    """DuckDB reads a zoned timestamp of any unit as TIMESTAMPTZ (microseconds, in its own
    zone) and a time of day of any unit as TIME (microseconds), cutting finer values toward
    zero, also inside lists and structs. Scans qengine answers in Arrow, without DuckDB (a sort,
    a projection), returned the file's nanoseconds and zones: rows tied to the microsecond
    sorted apart, and a table made from them held TIME_NS."""
    rows = 4000
    ids = np.arange(rows, dtype=np.int64)
    ns = (ids // 2) * 1_000_000_000 + (ids % 2) * 500 - 10_000_000_000  # pairs a nanosecond apart, some before 1970
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({
        "id": pa.array(ids),
        "z": pa.array(ns, pa.timestamp("ns", "America/New_York")),
        "zms": pa.array(ids, pa.timestamp("ms", "UTC")),
        "t32": pa.array(ids.astype(np.int32), pa.time32("ms")),
        "t64": pa.array(ids * 1_000_123, pa.time64("ns")),
        "nested": pa.array([{"t": i * 1_000_123, "z": [int(v)]} for i, v in zip(ids, ns, strict=True)],
                           pa.struct([("t", pa.time64("ns")), ("z", pa.list_(pa.timestamp("ns", "UTC")))])),
    }), path, row_group_size=500)
    oracle = duckdb.connect()
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    queries = [
        "SELECT id FROM t ORDER BY z, id DESC",
        "SELECT * FROM t ORDER BY id DESC LIMIT 50",
        "SELECT * FROM t WHERE id % 9 = 2 ORDER BY t64 DESC, id",
        "SELECT typeof(z), typeof(zms), typeof(t32), typeof(t64), typeof(nested) FROM t LIMIT 1",
    ]
    with qengine.connect(workers=2, split_size="16KB", allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", path)
        for sql in queries:
            ours, theirs = con.execute(sql).to_arrow_table(), oracle.execute(sql).to_arrow_table()
            assert ours.schema.types == theirs.schema.types, sql
            assert ours.to_pylist() == theirs.to_pylist(), sql
        assert con.execute("DESCRIBE t").fetchall() == oracle.execute("DESCRIBE t").fetchall()
        con.execute("CREATE TABLE kept AS SELECT * FROM t ORDER BY id")
        con.execute("INSERT INTO kept SELECT * FROM t WHERE id < 3")
        assert con.execute("SELECT typeof(t64), count(*) FROM kept GROUP BY 1").fetchall() == [("TIME", rows + 3)]


def test_a_parquet_time_with_time_zone_is_described_as_one_and_refused_when_read(tmp_path) -> None:
    """pyarrow reads DuckDB's TIME WITH TIME ZONE (a Parquet TIME adjusted to UTC) as a plain
    time: the column was DESCRIBEd as TIME and its values came back without their offset."""
    path = str(tmp_path / "t.parquet")
    oracle = duckdb.connect()
    oracle.execute(f"COPY (SELECT i AS id, TIMETZ '10:00:00+02' AS ttz, [TIMETZ '12:00:00+05'] AS l, "
                   f"{{'t': TIMETZ '01:02:03-02'}} AS s FROM range(3) r(i)) TO '{path}'")
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    with qengine.connect(workers=1, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", path)
        assert con.execute("DESCRIBE t").fetchall() == oracle.execute("DESCRIBE t").fetchall()
        for sql in ("SELECT ttz, id FROM t", "SELECT * FROM t ORDER BY id", "SELECT ttz FROM t WHERE id = 0",
                    "SELECT l, id FROM t", "SELECT s FROM t ORDER BY id"):
            with pytest.raises(qengine.NotSupportedError, match="TIME WITH TIME ZONE"):
                con.execute(sql)
        for sql in ("SELECT id, CAST(ttz AS VARCHAR) AS v, CAST(l[1] AS VARCHAR) AS w FROM t ORDER BY id", "SELECT id FROM t ORDER BY id DESC",
                    "SELECT count(*) FROM t WHERE ttz = TIMETZ '08:00:00+00'"):
            assert_same(con, oracle, sql)


def test_a_parquet_json_column_is_json_as_duckdb_reads_it(tmp_path) -> None:
    """pyarrow reads a Parquet JSON column (also in a list or struct) as text: it was typed
    VARCHAR wherever qengine scanned it without DuckDB."""
    path = str(tmp_path / "j.parquet")
    oracle = duckdb.connect()
    oracle.execute(f"""COPY (SELECT i AS id, ('{{"a": ' || (i % 5) || '}}')::JSON AS j, [('{{"b": ' || i || '}}')::JSON] AS lj,
                            {{'u': uuid(), 'k': '[1, 2]'::JSON}} AS s FROM range(2000) r(i)) TO '{path}' (ROW_GROUP_SIZE 200)""")
    oracle.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    with qengine.connect(workers=2, split_size="16KB", allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", path)
        assert con.execute("DESCRIBE t").fetchall() == oracle.execute("DESCRIBE t").fetchall()
        for sql in ("SELECT id, j, lj, s.k FROM t ORDER BY id DESC LIMIT 30", "SELECT j, lj FROM t WHERE id = 7",
                    "SELECT j ->> 'a' AS a, count(*) AS n FROM t GROUP BY 1 ORDER BY 1"):
            got = con.execute(sql)
            expected = oracle.execute(sql)
            assert [d[1] for d in got.description] == [str(d[1]) for d in expected.description], sql
            assert got.fetchall() == expected.fetchall(), sql
