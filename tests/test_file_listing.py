"""Which files a path, directory or glob names, and how their columns read, against DuckDB on the
same files: dotfiles, links, directories named in SQL, compressed CSV, hive partitions of unequal
depth, string types that differ between files, and column types pyarrow reads otherwise than
DuckDB. Each was a silent difference (rows lost or read twice, another type) or a failed scan."""

from __future__ import annotations

import decimal
import gzip
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine


def _write(path: str, table: pa.Table, **options: object) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(table, path, **options)


def _named(path: str, v: int) -> pa.Table:
    return pa.table({"v": [v], "f": [path]})


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> str:
    base = str(tmp_path_factory.mktemp("listing"))
    lay = os.path.join(base, "lay")
    for i, name in enumerate(["a.parquet", ".hidden.parquet", "_meta.parquet", "sub/b.parquet", ".hdir/c.parquet",
                              "_udir/e.parquet", "y.parq", "X.PARQUET"]):
        _write(os.path.join(lay, name), _named(name, i + 1))
    os.symlink("a.parquet", os.path.join(lay, "link.parquet"))  # a file read under two names
    os.symlink("sub", os.path.join(lay, "sublink"))  # a directory under two names
    csv = os.path.join(base, "csv")
    os.makedirs(os.path.join(csv, "deep"))
    for name, text in [("1.csv", "a,b\n1,x\n"), (".2.csv", "a,b\n2,y\n"), ("deep/3.csv", "a,b\n3,z\n"), ("4.tsv", "a\tb\n4\tw\n")]:
        with open(os.path.join(csv, name), "w") as f:
            f.write(text)
    with gzip.open(os.path.join(base, "packed.csv.gz"), "wt") as f:
        f.write("a,b\n5,v\n6,u\n")
    for key, rest in (("k=1", "f.parquet"), ("k=2", "sub/f.parquet")):  # one key at two depths: partitioned
        _write(os.path.join(base, "depth", key, rest), pa.table({"v": [int(key[-1])]}))
    for d in ("k=1", "nokey"):  # a file without the key: not partitioned
        _write(os.path.join(base, "mixed", d, "f.parquet"), pa.table({"v": [len(d)]}))
    for d in ("k=", "k=2"):  # an empty value is a partition value ''
        _write(os.path.join(base, "blank", d, "f.parquet"), pa.table({"v": [len(d)]}))
    for d in ("k=a=b", "k=c"):  # two '=' make no partition
        _write(os.path.join(base, "twice_eq", d, "f.parquet"), pa.table({"v": [len(d)]}))
    for name, column in (("1", pa.array(["x"], pa.string())), ("2", pa.array(["y", "z"], pa.large_string())),
                         ("3", pa.array(["x", "w"]).dictionary_encode())):
        _write(os.path.join(base, "strings", f"{name}.parquet"), pa.table({"s": column}))
    odd = os.path.join(base, "odd")
    _write(os.path.join(odd, "int96.parquet"), pa.table({"t": pa.array([None, 1704164645123456789], pa.timestamp("ns"))}),
           use_deprecated_int96_timestamps=True)
    _write(os.path.join(odd, "nulls.parquet"), pa.table({"a": pa.nulls(2), "n": [1, 2]}))
    _write(os.path.join(odd, "fixed.parquet"), pa.table({"fl": pa.array([[1, 2], None], pa.list_(pa.int16(), 2))}))
    _write(os.path.join(odd, "wide.parquet"), pa.table({"c": pa.array([decimal.Decimal("1.25")], pa.decimal256(40, 2))}))
    duckdb.execute(f"COPY (SELECT [1, 2, 3]::INTEGER[3] AS c, 1 AS n UNION ALL SELECT NULL, 2) TO '{odd}/array.parquet'")
    for directory, name, text in (("headless", "1.csv", "a,b\n1,x\n"), ("headless", "2.csv", "3,z\n4,w\n"),  # no header
                                  ("cased", "1.csv", "a,b\n1,x\n"), ("cased", "2.csv", "B,A\ny,2\n"),  # A is not a
                                  ("blank", "1.csv", "a,b\n1,x\n"), ("blank", "2.csv", "")):  # an empty file: no rows
        os.makedirs(os.path.join(base, "csvs", directory), exist_ok=True)
        with open(os.path.join(base, "csvs", directory, name), "w") as f:
            f.write(text)
    return base


@pytest.fixture(scope="module")
def con(root: str):
    c = qengine.connect(workers=2, split_size="1KB", allowed_roots=[root])
    yield c
    c.close()


def _both(con, sql: str) -> tuple[tuple[list, list], tuple[list, list]]:
    """(column types, sorted rows) from qengine and from DuckDB."""
    cur = con.cursor()
    cur.execute(sql)
    ours = ([d[1] for d in cur.description], sorted(cur.fetchall(), key=repr))
    relation = duckdb.sql(sql)
    return ours, ([str(t) for t in relation.types], sorted(relation.fetchall(), key=repr))


def _same(con, sql: str) -> list:
    ours, theirs = _both(con, sql)
    assert ours == theirs, sql
    return ours[1]


@pytest.mark.parametrize("pattern, expected", [
    ("*.parquet", 4),  # a.parquet, .hidden.parquet, _meta.parquet and the link to a.parquet
    ("**/*.parquet", 7),  # and sub/, .hdir/ and _udir/: not through the link to sub/
    ("*/*.parquet", 4),  # sub/, sublink/ (a single wildcard follows the link), .hdir/, _udir/
    (".*", 1),  # .hidden.parquet (.hdir matches too, and is no file)
    ("*.PARQUET", 1),
    ("", 7),  # the directory, as DuckDB reads one: **/*.parquet
])
def test_a_glob_or_directory_names_the_files_duckdb_reads(con, root, pattern, expected) -> None:
    path = os.path.join(root, "lay", pattern) if pattern else os.path.join(root, "lay")
    rows = _same(con, f"SELECT f, v FROM read_parquet('{path}')")
    assert len(rows) == expected


def test_a_file_linked_under_another_name_is_read_under_each(con, root) -> None:
    rows = _same(con, f"SELECT count(*), sum(v) FROM '{root}/lay/*.parquet'")
    assert rows == [(4, 1 + 2 + 3 + 1)]


def test_csv_directories_globs_and_compressed_files_read_as_duckdb_reads_them(con, root) -> None:
    assert len(_same(con, f"SELECT * FROM read_csv('{root}/csv')")) == 3  # **/*.csv: not the .tsv
    assert len(_same(con, f"SELECT * FROM read_csv('{root}/csv/*.csv')")) == 2
    assert _same(con, f"SELECT * FROM read_csv('{root}/packed.csv.gz')") == [(5, "v"), (6, "u")]
    assert _same(con, f"SELECT sum(a) FROM '{root}/packed.csv.gz'") == [(11,)]


def test_a_registered_directory_leaves_out_hidden_and_underscore_files(con, root) -> None:
    """A registered directory is listed as Spark lists a table's directory: its data files,
    recursively, not in or under names starting with a dot or an underscore (``_SUCCESS``,
    ``_temporary/``). SQL naming the directory reads it as DuckDB does (above)."""
    con.register_parquet("lay", os.path.join(root, "lay"))
    names = sorted(r[0] for r in con.execute("SELECT f FROM lay").fetchall())
    assert names == ["X.PARQUET", "a.parquet", "a.parquet", "sub/b.parquet", "y.parq"]  # a.parquet and the link to it


def test_hive_partitions_at_unequal_depths_are_detected_as_duckdb_detects_them(con, root) -> None:
    rows = _same(con, f"SELECT * FROM read_parquet('{root}/depth/**/*.parquet')")
    assert rows == [(1, 1), (2, 2)]  # v and k
    rows = _same(con, f"SELECT * FROM read_parquet('{root}/mixed/**/*.parquet')")
    assert rows == [(3,), (5,)]  # a file without the key: no partition column at all
    assert _same(con, f"SELECT * FROM read_parquet('{root}/blank/*/*.parquet')") == [(2, ""), (3, "2")]
    assert _same(con, f"SELECT * FROM read_parquet('{root}/twice_eq/*/*.parquet')") == [(3,), (5,)]


def test_one_file_linked_into_two_partitions_is_refused(con, root, tmp_path_factory) -> None:
    base = os.path.join(root, "twice")
    _write(os.path.join(base, "k=1", "f.parquet"), pa.table({"v": [1]}))
    os.makedirs(os.path.join(base, "k=2"))
    os.symlink(os.path.join(base, "k=1", "f.parquet"), os.path.join(base, "k=2", "f.parquet"))
    assert duckdb.sql(f"SELECT k, v FROM read_parquet('{base}/*/*.parquet') ORDER BY k").fetchall() == [(1, 1), (2, 1)]
    with pytest.raises(qengine.NotSupportedError, match="one file in two hive partitions"):
        con.execute(f"SELECT k, v FROM read_parquet('{base}/*/*.parquet')")


def test_string_types_that_differ_between_files_read_as_one(con, root) -> None:
    rows = _same(con, f"SELECT * FROM read_parquet('{root}/strings/*.parquet')")
    assert len(rows) == 5
    _same(con, f"SELECT s, count(*) FROM read_parquet('{root}/strings/*.parquet') GROUP BY s")


@pytest.mark.parametrize("name", ["int96", "nulls", "fixed", "wide", "array"])
def test_columns_pyarrow_reads_otherwise_read_as_duckdb_reads_them(con, root, name) -> None:
    """An INT96 timestamp was a TIMESTAMP_NS, a column of no type NULL, a fixed-size list an
    ARRAY and a 40-digit DECIMAL a DECIMAL, where DuckDB reads a TIMESTAMP, an INTEGER, a list
    and a DOUBLE; a DuckDB ARRAY holding a NULL failed the scan (pyarrow cannot read it)."""
    _same(con, f"SELECT * FROM read_parquet('{root}/odd/{name}.parquet')")


def test_a_csv_file_whose_header_differs_is_refused(con, root) -> None:
    """The second file has no header: read with the first one's options, its first row was
    taken for a header and lost. DuckDB refuses the files as a mismatch."""
    for directory, names in (("headless", "3, z"), ("cased", "B, A")):
        with pytest.raises(duckdb.Error, match="(?i)mismatch"):
            duckdb.sql(f"SELECT * FROM read_csv('{root}/csvs/{directory}/*.csv')").fetchall()
        with pytest.raises(qengine.DataError, match=f"has the columns {names} where .* has a, b"):
            con.execute(f"SELECT * FROM read_csv('{root}/csvs/{directory}/*.csv')")
    assert _same(con, f"SELECT * FROM read_csv('{root}/csvs/blank/*.csv')") == [(1, "x")]


def test_a_column_named_with_a_dot_keeps_its_own_statistics(con, root) -> None:
    """A file with columns ``a`` and ``a.b``: the statistics of ``a.b`` (path ``a.b``) were filed
    under ``a``, and a join pruning ``a``'s row groups by the other side's key range dropped them
    all: 0 rows where DuckDB counts 50. A struct's field is no column's statistics either."""
    for j in range(3):
        ids = range(j * 100, j * 100 + 100)
        _write(os.path.join(root, "dot", f"p{j}.parquet"),
               pa.table({"a": pa.array([i // 10 for i in ids], pa.int64()), "a.b": pa.array([1000 + i for i in ids], pa.int64()),
                         "s": pa.array([{"x": 5000 + i} for i in ids])}), row_group_size=20)
    _write(os.path.join(root, "dim.parquet"), pa.table({"k": pa.array(range(40), pa.int64()), "flag": [i % 7 == 0 for i in range(40)]}))
    sql = (f"SELECT count(*), sum(\"a.b\") FROM read_parquet('{root}/dot/*.parquet') d "
           f"JOIN read_parquet('{root}/dim.parquet') m ON d.a = m.k WHERE m.flag")
    assert _same(con, sql) == [(50, 50 * 1000 + sum(i for i in range(300) if (i // 10) % 7 == 0))]
