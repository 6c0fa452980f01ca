"""The statements a DuckDB user types first, each against DuckDB on the same data.

DESCRIBE, SHOW, information_schema, SUMMARIZE, a file named as a table, read_json(), range()
and generate_series(), SET / RESET / current_setting(), and COPY to one file or to hive
partitions. One 2-worker connection serves the module. The oracle is DuckDB with the same
tables as base tables (``CREATE TABLE AS``) and the same view, since qengine's registered
tables are tables, not views, to DESCRIBE and information_schema.
"""

from __future__ import annotations

import math
import os

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from tests.conftest import assert_same, engine_over
from tpcds.compare import compare

VIEW = "CREATE VIEW big_sales AS SELECT sale_id, amount, note FROM sales WHERE qty > 50"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, data_paths: dict[str, str]) -> dict[str, str]:
    """The items table as one Parquet, CSV, newline-delimited JSON and array JSON file each,
    written by DuckDB, in a directory the connection may read and write."""
    root = tmp_path_factory.mktemp("first")
    con = duckdb.connect()
    out = {}
    source = f"read_parquet('{data_paths['items']}/*.parquet')"
    for key, name, options in (("parquet", "items.parquet", ""), ("csv", "items.csv", ""), ("json", "items.json", ""),
                               ("array", "items_array.json", " (ARRAY true)")):
        out[key] = str(root / name)
        con.execute(f"COPY (SELECT * FROM {source}) TO '{out[key]}'{options}")
    con.close()
    out["root"] = str(root)
    return out


@pytest.fixture(scope="module")
def con(data_paths: dict[str, str], files: dict[str, str]):
    connection = engine_over(data_paths, output_roots=[files["root"]])
    connection.session.allow_root(files["root"])
    connection.execute(VIEW)
    yield connection
    connection.close()


@pytest.fixture(scope="module")
def duck(data_paths: dict[str, str], files: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """DuckDB with the same tables as base tables, and the same view."""
    oracle = duckdb.connect()
    for name, path in data_paths.items():
        oracle.execute(f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{path}/*.parquet')")
    oracle.execute(VIEW)
    yield oracle
    oracle.close()


def _same(con, duck: duckdb.DuckDBPyConnection, sql: str) -> None:
    """The same columns (names and types) and the same rows, in the same order."""
    got = con.execute(sql).fetch_arrow_table()
    expected = duck.execute(sql).to_arrow_table()
    assert got.schema.names == expected.schema.names, sql
    assert got.to_pylist() == expected.to_pylist(), sql


# ---- DESCRIBE, SHOW, information_schema ------------------------------------------------------------


@pytest.mark.parametrize("sql", [
    "DESCRIBE sales",
    "DESCRIBE customers",
    "DESCRIBE big_sales",
    "DESCRIBE SELECT cust_id, sum(price) AS total, count(*), avg(amount) FROM sales GROUP BY 1",
    "DESCRIBE SELECT c.name, s.sold_date + 1 AS next_day FROM sales s JOIN customers c ON s.cust_id = c.cust_id",
    "SHOW items",
    "SHOW TABLES",
    "SHOW ALL TABLES",
])
def test_describe_and_show_match_duckdb(con, duck, sql: str) -> None:
    _same(con, duck, sql)


@pytest.mark.parametrize("sql", [
    "SELECT * FROM information_schema.tables ORDER BY table_name",  # with DuckDB's upper-case TABLE_COMMENT
    "SELECT * FROM information_schema.columns ORDER BY table_name, ordinal_position",
    "SELECT table_name, count(*) AS n, max(ordinal_position) FROM information_schema.columns "
    "WHERE data_type LIKE 'DECIMAL%' OR is_nullable = 'YES' GROUP BY table_name ORDER BY n DESC, table_name",
    "SELECT t.table_name, t.table_type, c.column_name FROM information_schema.tables t "
    "JOIN information_schema.columns c ON c.table_name = t.table_name WHERE c.data_type = 'VARCHAR' ORDER BY 1, 3",
])
def test_information_schema_matches_duckdb(con, duck, sql: str) -> None:
    _same(con, duck, sql)


def test_information_schema_follows_the_catalog(con) -> None:
    sql = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'later'"
    assert con.execute(sql).fetchall() == [(0,)]
    con.execute("CREATE TABLE later AS SELECT 1 AS x")
    try:
        assert con.execute(sql).fetchall() == [(1,)]
    finally:
        con.execute("DROP TABLE later")
    assert con.execute(sql).fetchall() == [(0,)]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM (SELECT DISTINCT strftime(sold_date, '%Y'), upper(note), 1 + 1 FROM sales) ORDER BY 1, 2 NULLS FIRST",
    "WITH c AS (SELECT DISTINCT strftime(sold_date, '%Y') FROM sales) SELECT * FROM c ORDER BY 1",
    "SELECT * FROM (SELECT 1 AS A, 2 AS Bb) t(X)",
    "SELECT column_name, COLUMN_COMMENT, Column_Default AS Column_Default FROM information_schema.columns WHERE table_name = 'items'",
])
def test_result_columns_are_named_as_spelled(con, duck, sql: str) -> None:
    """Names reached through * or a bare column keep the case they were given, as in DuckDB."""
    _same(con, duck, sql)


# ---- SUMMARIZE -----------------------------------------------------------------------------------

# Compared exactly: the column's name and type, min, max, count and null_percentage, which are
# exact in DuckDB too. Within tolerance: avg and std (sums in another order differ in the last
# digits); approx_unique (a HyperLogLog estimate, which DuckDB's and the cluster's runs reach
# by merging sketches in another order) within 1%; and the quantiles (approx_quantile is a
# t-digest whose centroids depend on the order rows arrive in) within 2% of the column's range.
_EXACT = ("column_name", "column_type", "min", "max", "count", "null_percentage")


@pytest.mark.parametrize("sql", [
    "SUMMARIZE sales",
    "SUMMARIZE '{parquet}'",
    "SUMMARIZE customers",
    "SUMMARIZE SELECT qty, price * 2 AS twice, note, sold_date FROM sales WHERE store_id > 2",
])
def test_summarize_matches_duckdb(con, duck, files, sql: str) -> None:
    sql = sql.format(**files)
    got = con.execute(sql).fetch_arrow_table()
    expected = duck.execute(sql).to_arrow_table()
    assert got.schema == expected.schema
    for mine, theirs in zip(got.to_pylist(), expected.to_pylist(), strict=True):
        assert {k: mine[k] for k in _EXACT} == {k: theirs[k] for k in _EXACT}
        assert math.isclose(mine["approx_unique"], theirs["approx_unique"], rel_tol=0.01)
        numeric = theirs["std"] is not None
        for key in ("avg", "std"):
            if numeric:
                assert math.isclose(float(mine[key]), float(theirs[key]), rel_tol=1e-9), (mine["column_name"], key)
            else:
                assert mine[key] == theirs[key], (mine["column_name"], key)
        if numeric:
            span = float(theirs["max"]) - float(theirs["min"])
            for key in ("q25", "q50", "q75"):
                assert abs(float(mine[key]) - float(theirs[key])) <= 0.02 * span, (mine["column_name"], key)


def test_summarize_runs_on_the_cluster(con) -> None:
    cur = con.execute("SUMMARIZE sales")
    assert cur.stats is not None and cur.stats.stages[0].tasks >= 2


# ---- files as tables, read_json, range and generate_series ------------------------------------------


@pytest.mark.parametrize("sql", [
    "SELECT category, count(*) AS n, sum(list_price) AS total FROM '{parquet}' GROUP BY 1 ORDER BY 1 NULLS FIRST",
    "SELECT i.brand, max(i.item_id) FROM '{csv}' i WHERE i.list_price > 20 GROUP BY 1 ORDER BY 1",
    "SELECT * FROM '{json}' ORDER BY item_id",
    "SELECT * FROM read_json('{array}') ORDER BY item_id",
    "SELECT count(*), sum(list_price) FROM read_json_auto('{json}', format = 'newline_delimited')",
    "SELECT j.category, count(*) FROM read_json(['{json}', '{array}']) j GROUP BY 1 ORDER BY 1",
    "SELECT s.note, count(*) FROM sales s JOIN '{parquet}' i ON s.item_id = i.item_id GROUP BY 1 ORDER BY 1",
    "DESCRIBE SELECT * FROM '{json}'",
    "DESCRIBE '{csv}'",
])
def test_files_as_tables_match_duckdb(con, duck, files, sql: str) -> None:
    assert_same(con, duck, sql.format(**files))


@pytest.mark.parametrize("sql", [
    "SELECT * FROM range(5)",
    "SELECT * FROM range(2, 11, 3)",
    "SELECT * FROM range(10, 0, -3)",
    "SELECT * FROM range(0)",
    "SELECT * FROM generate_series(3)",
    "SELECT * FROM generate_series(2, 11, 3)",
    "SELECT * FROM generate_series(5, 1, -2)",
    "SELECT count(*), sum(range), min(range), max(range) FROM range(3000000)",
    "SELECT r.range % 7 AS k, count(*) FROM range(10 * 1000) r GROUP BY 1 ORDER BY 1",
    "SELECT t.y FROM generate_series(1, 4) t(y) ORDER BY y DESC",
    "SELECT count(*) FROM range(40) a JOIN sales s ON s.item_id = a.range",
    "DESCRIBE SELECT * FROM generate_series(1, 2)",
])
def test_series_match_duckdb(con, duck, sql: str) -> None:
    assert_same(con, duck, sql)


def test_files_outside_the_roots_are_refused(con, tmp_path) -> None:
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"a": 1}\n')
    for sql in (f"SELECT * FROM '{outside}'", f"SELECT * FROM read_json('{outside}')"):
        with pytest.raises(qengine.ProgrammingError, match="outside the data roots"):
            con.execute(sql)


# ---- SET, RESET, current_setting ---------------------------------------------------------------


def test_set_changes_the_plan_and_reset_restores_it(con, duck) -> None:
    join = "SELECT c.city, count(*) FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY 1 ORDER BY 1"
    shown = "SELECT current_setting('shuffle'), current_setting('broadcast_threshold'), current_setting('partitions')"
    before = con.execute(shown).fetchall()
    assert "whole, in every task" in " ".join(r[0] for r in con.execute("EXPLAIN " + join).fetchall())
    con.execute("SET shuffle = 'pull'")
    con.execute("SET broadcast_threshold = '0'")
    con.execute("SET partitions TO 3")
    try:
        assert con.execute(shown).fetchall() == [("pull", 0, 3)]
        plan = " ".join(r[0] for r in con.execute("EXPLAIN " + join).fetchall())
        assert "whole, in every task" not in plan and "hash exchange on" in plan and "into 3 partitions" in plan
        assert_same(con, duck, join)
        con.execute("SET broadcast_threshold = 0")  # a number, as well as a string
        assert con.execute("SELECT current_setting('broadcast_threshold') AS b").fetchall() == [(0,)]
    finally:
        con.execute("RESET shuffle")
        con.execute("RESET ALL")
    assert con.execute(shown).fetchall() == before
    assert con.execute(shown).description[0][0] == "current_setting('shuffle')"


@pytest.mark.parametrize(("sql", "message"), [
    ("SET threads = 4", r"unrecognized setting 'threads': qengine's settings are dialect, broadcast_threshold, .*shuffle"),
    ("SET shuffle = 'push'", r"shuffle must be 'prefetch' or 'pull'"),
    ("SET partitions = 0", r"partitions must be a positive integer"),
    # each was accepted, and the next statements failed or ran otherwise
    ("SET partitions = true", r"partitions must be a positive integer, not True"),
    ("SET dialect = NULL", r"dialect must name a SQL dialect, not None"),
    ('CREATE TABLE "" (x INTEGER)', r'an empty name \(""\) is not a name'),
    ('CREATE TABLE empty_named AS SELECT 1 AS ""', r'an empty name \(""\) is not a name'),
    ("RESET memory_limit", r"unrecognized setting 'memory_limit'"),
    ("SELECT current_setting('threads')", r"unrecognized setting 'threads'"),
])
def test_unknown_or_bad_settings_are_refused(con, sql: str, message: str) -> None:
    with pytest.raises(qengine.ProgrammingError, match=message):
        con.execute(sql)


# ---- COPY ---------------------------------------------------------------------------------------

COPIED = "SELECT sale_id, store_id, price, sold_date, note FROM sales WHERE qty > 40"


def _read_back(path: str, kind: str) -> pa.Table:
    reader = {"parquet": "read_parquet", "csv": "read_csv", "json": "read_json"}[kind]
    hive = ", hive_partitioning = true" if os.path.isdir(path) else ""
    files = os.path.join(path, "**", f"*.{kind}") if os.path.isdir(path) else path
    return duckdb.sql(f"SELECT * FROM {reader}('{files}'{hive}) ORDER BY sale_id").to_arrow_table()


@pytest.mark.parametrize("target", ["one.parquet", "one.csv", "one.json", "named (FORMAT parquet)"])
def test_copy_to_one_file_matches_duckdb(con, duck, files, target: str) -> None:
    name, _, options = target.partition(" ")
    kind = options.split()[-1].rstrip(")").lower() if options else name.rsplit(".", 1)[1]
    mine, theirs = (os.path.join(files["root"], f"{who}-{name}") for who in ("qengine", "duckdb"))
    got = con.execute(f"COPY ({COPIED}) TO '{mine}' {options}").fetchall()
    expected = duck.execute(f"COPY ({COPIED}) TO '{theirs}' {options}").fetchall()
    assert got == expected
    assert os.path.isfile(mine)
    result = compare(_read_back(mine, kind), _read_back(theirs, kind), name)
    assert result.ok, result.message
    with pytest.raises(qengine.ProgrammingError, match="already exists"):
        con.execute(f"COPY ({COPIED}) TO '{mine}' {options}")
    replace = f"{options[:-1]}, OVERWRITE true)" if options else "(OVERWRITE true)"
    assert con.execute(f"COPY ({COPIED} LIMIT 5) TO '{mine}' {replace}").fetchall() == [(5,)]


def test_copy_picks_the_format_as_duckdb_does(con, duck, files) -> None:
    # A target with no extension was a directory of Parquet parts where DuckDB writes one CSV
    # file; .csv.gz and .xlsx were Parquet parts too.
    mine, theirs = (os.path.join(files["root"], f"{who}-noext") for who in ("qengine", "duckdb"))
    assert con.execute(f"COPY ({COPIED}) TO '{mine}'").fetchall() == duck.execute(f"COPY ({COPIED}) TO '{theirs}'").fetchall()
    assert os.path.isfile(mine)
    result = compare(_read_back(mine, "csv"), _read_back(theirs, "csv"), "no extension")
    assert result.ok, result.message
    for name, words in (("x.csv.gz", "compressed"), ("x.xlsx", "cannot tell a format from '.xlsx'")):
        with pytest.raises(qengine.NotSupportedError, match=words):
            con.execute(f"COPY ({COPIED}) TO '{os.path.join(files['root'], name)}'")
        assert not os.path.exists(os.path.join(files["root"], name))


NESTED_AND_BINARY = ("SELECT i, [i, NULL] AS l, {'a': i, 'b': 'x'} AS st, MAP {'k': i} AS m, [i, i + 1]::INTEGER[2] AS arr, "
                     "'\\x01\\x02'::BLOB || chr(CAST(i + 65 AS INTEGER))::BLOB AS b, to_days(CAST(i AS INTEGER)) AS iv FROM range(3) t(i)")


@pytest.mark.parametrize("options", ["", "(PER_THREAD_OUTPUT true, FORMAT csv)", "(FORMAT csv, PARTITION_BY (i))"])
def test_copy_to_csv_spells_nested_and_binary_values_as_duckdb(con, duck, files, options: str) -> None:
    # lists, structs, maps, arrays and intervals failed inside Arrow; a BLOB was written as raw bytes
    name = "nested" + "".join(filter(str.isalnum, options))
    mine, theirs = (os.path.join(files["root"], f"{who}-{name}" + ("" if options else ".csv")) for who in ("qengine", "duckdb"))
    assert con.execute(f"COPY ({NESTED_AND_BINARY}) TO '{mine}' {options}").fetchall() == [(3,)]
    duck.execute(f"COPY ({NESTED_AND_BINARY}) TO '{theirs}' {options}")

    def rows(path: str) -> list[tuple]:
        pattern = os.path.join(path, "**", "*.csv") if os.path.isdir(path) else path
        hive = ", hive_partitioning = true" if "PARTITION_BY" in options else ""
        return sorted(duckdb.sql(f"SELECT * FROM read_csv('{pattern}', all_varchar = true{hive})").fetchall())

    assert rows(mine) == rows(theirs)


CARRIED = ("SELECT i, uuid '12345678-1234-5678-1234-567812345678' AS u, [uuid '12345678-1234-5678-1234-56781234567f'] AS lu, "
           "CAST(i AS HUGEINT) * 170141183460469231731 AS h, {'a': CAST(i AS UHUGEINT)} AS sh, "
           "CAST('{\"a\": ' || i || '}' AS JSON) AS j, NULL AS n FROM range(3) t(i)")


@pytest.mark.parametrize(("fmt", "options"), [("parquet", ""), ("parquet", ", PER_THREAD_OUTPUT true"), ("parquet", ", PARTITION_BY (i)"),
                                              ("json", "")])
def test_copy_writes_carried_types_as_duckdb(con, duck, files, fmt: str, options: str) -> None:
    # a UUID was written to Parquet as VARCHAR, a HUGEINT as DECIMAL(38,0) (DuckDB: DOUBLE), JSON
    # as VARCHAR; JSON files held a JSON column as a string instead of nesting it
    name = "carried" + fmt + "".join(filter(str.isalnum, options))
    mine, theirs = (os.path.join(files["root"], f"{who}-{name}") for who in ("qengine", "duckdb"))
    sql = f"COPY ({{}}) TO '{{}}' (FORMAT {fmt}{options})"
    assert con.execute(sql.format(CARRIED, mine)).fetchall() == duck.execute(sql.format(CARRIED, theirs)).fetchall() == [(3,)]

    def typed_rows(path: str) -> list[tuple]:
        pattern = os.path.join(path, "**", f"*.{fmt}") if os.path.isdir(path) else path
        hive = ", hive_partitioning = true" if "PARTITION_BY" in options else ""
        return sorted(duckdb.sql(f"SELECT *, typeof(COLUMNS(*)) FROM read_{fmt}('{pattern}'{hive})").fetchall(), key=str)

    assert typed_rows(mine) == typed_rows(theirs)


CSV_TEXTS = ("SELECT i, TIMESTAMPTZ '2026-11-27 11:15:57.619074+00' AS t, TIMESTAMP '2026-11-27 11:15:57' AS ts, TIME '01:02:03.5' AS tm, "
             "-0.0::DOUBLE AS z, 1.0e-7::DOUBLE AS small, 'a\"b' AS q, 'x,y' AS c, 'a\nb' AS nl, ' lead' AS sp, '' AS empty, NULL AS n, "
             "'NULL' AS word, [i, NULL] AS l, 'x'::ENUM('x', 'y') AS e, CAST(i AS HUGEINT) * 10000000000000000000 AS h, "
             "'2021-01-02 03:04:05.123456789'::TIMESTAMP_NS AS tns, 'é' AS \"a,b\", "
             # Arrow wrote 1.000E-7, 0E-10 and <value out of range: 2147483647> for these
             "0.0000001::DECIMAL(18,10) AS tiny, 0::DECIMAL(18,10) AS nought, -0.00000005::DECIMAL(18,8) AS neg, "
             "DATE 'infinity' AS inf, DATE '-infinity' AS neginf, DATE '0001-12-31 (BC)' AS bc FROM range(3) t(i)")


def test_copy_to_csv_writes_duckdbs_bytes(con, duck, files) -> None:
    # Arrow's writer quoted every string and the header, and spelled timestamps (+0000, .000000),
    # times (.500000) and negative zero (-0) its own way
    mine, theirs = (os.path.join(files["root"], f"{who}-texts.csv") for who in ("qengine", "duckdb"))
    con.execute(f"COPY ({CSV_TEXTS}) TO '{mine}'")
    duck.execute(f"COPY ({CSV_TEXTS}) TO '{theirs}'")
    with open(mine, "rb") as a, open(theirs, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("options", ["PARTITION_BY (store_id)", "PER_THREAD_OUTPUT true"])
def test_copy_to_a_directory_without_a_format_writes_csv_as_duckdb_does(con, duck, files, options: str) -> None:
    """It wrote Parquet; DuckDB's COPY writes CSV unless told otherwise, a directory's too."""
    mine, theirs = (os.path.join(files["root"], f"{who}-plain-{options.split()[0]}") for who in ("qengine", "duckdb"))
    con.execute(f"COPY ({COPIED}) TO '{mine}' ({options})")
    duck.execute(f"COPY ({COPIED}) TO '{theirs}' ({options})")
    def suffixes(root: str) -> set[str]:
        return {os.path.splitext(f)[1] for _, _, fs in os.walk(root) for f in fs if not f.startswith("_")}
    assert suffixes(mine) == suffixes(theirs) == {".csv"}
    result = compare(_read_back(mine, "csv"), _read_back(theirs, "csv"), "PARTITION_BY")
    assert result.ok, result.message


def test_copy_of_an_interval_to_parquet_is_refused_by_name(con, files) -> None:
    with pytest.raises(qengine.NotSupportedError, match="INTERVAL column 'iv' cannot be written to Parquet"):
        con.execute(f"COPY (SELECT to_days(1) AS iv) TO '{os.path.join(files['root'], 'iv.parquet')}'")


@pytest.mark.parametrize(("columns", "kept"), [("(store_id, note)", ("sale_id", "price", "sold_date")),
                                               ("(note)", ("sale_id", "store_id", "price", "sold_date")),
                                               ("store_id", ("sale_id", "price", "sold_date", "note"))])
def test_copy_partition_by_writes_duckdbs_hive_directories(con, duck, files, columns: str, kept: tuple[str, ...]) -> None:
    mine, theirs = (os.path.join(files["root"], f"{who}-hive-{''.join(filter(str.isalnum, columns))}") for who in ("qengine", "duckdb"))
    sql = f"COPY ({{}}) TO '{{}}' (FORMAT parquet, partition_by {columns})"
    assert con.execute(sql.format(COPIED, mine)).fetchall() == duck.execute(sql.format(COPIED, theirs)).fetchall()

    def layout(root: str) -> set[tuple[str, tuple[tuple[str, ...], ...]]]:
        return {(os.path.relpath(d, root), tuple(tuple(pq.read_schema(os.path.join(d, f)).names) for f in fs))
                for d, _, fs in os.walk(root) if fs}

    assert {d for d, _ in layout(mine)} == {d for d, _ in layout(theirs)}
    assert all(names == (kept,) for _, names in layout(mine))  # partition columns left out
    result = compare(_read_back(mine, "parquet"), _read_back(theirs, "parquet"), "PARTITION_BY")
    assert result.ok, result.message
    with pytest.raises(qengine.ProgrammingError, match="not an empty directory"):
        con.execute(sql.format(COPIED, mine))


def test_copy_partition_by_a_timestamptz_names_directories_in_utc_as_duckdb(tmp_path) -> None:
    """DuckDB names a TIMESTAMPTZ partition's directory in UTC whatever its TimeZone setting;
    qengine's cast named it in the process's zone (``t=2024-01-01 00:00:00-05`` in New York). Run
    in a process whose zone is not UTC."""
    import subprocess
    import sys

    script = (
        "import os, sys, duckdb, qengine\n"
        "root = sys.argv[1]\n"
        "sql = (\"COPY (SELECT TIMESTAMPTZ '2024-01-01 05:00:00.5+00' + INTERVAL (i) HOUR AS t, i FROM range(3) r(i) \"\n"
        "       \"UNION ALL SELECT 'infinity'::TIMESTAMPTZ, 9) TO '{}' (FORMAT parquet, PARTITION_BY (t))\")\n"
        "duckdb.connect().execute(sql.format(os.path.join(root, 'duckdb')))\n"
        "with qengine.connect(workers=1, allowed_roots=[root], output_roots=[root]) as con:\n"
        "    con.execute(sql.format(os.path.join(root, 'qengine')))\n"
        "print(sorted(os.listdir(os.path.join(root, 'qengine'))) == sorted(os.listdir(os.path.join(root, 'duckdb'))))\n"
        "print(sorted(os.listdir(os.path.join(root, 'qengine'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env={**os.environ, "TZ": "America/New_York"},
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[0] == "True", done.stdout + done.stderr
    assert "t=2024-01-01%2005%3A00%3A00.5%2B00" in done.stdout


def test_copy_returns_its_count_and_stays_in_the_output_roots(con, files, tmp_path) -> None:
    cur = con.execute(f"COPY (SELECT * FROM range(7)) TO '{os.path.join(files['root'], 'seven.parquet')}'")
    assert [d[0] for d in cur.description] == ["Count"] and cur.rowcount == 7 and cur.fetchall() == [(7,)]
    for target in ("x.parquet", "x.json", "hive"):
        options = " (PARTITION_BY (a))" if target == "hive" else ""
        with pytest.raises(qengine.ProgrammingError, match="outside the output roots"):
            con.execute(f"COPY (SELECT 1 AS a, 2 AS b) TO '{tmp_path / target}'{options}")
        assert not os.path.exists(tmp_path / target)


def test_tables_named_with_their_schema_as_bi_tools_write_them(con, oracle) -> None:
    """``main.t`` and ``memory.main.t`` are the catalog's tables and views, as in DuckDB; any other
    schema or catalog holds nothing, and saying so beats reading a table of the same name."""
    con.execute("CREATE OR REPLACE VIEW few_sales AS SELECT sale_id FROM sales WHERE sale_id < 10")
    oracle.execute("CREATE OR REPLACE VIEW few_sales AS SELECT sale_id FROM sales WHERE sale_id < 10")
    try:
        for sql in ["SELECT count(*) AS n FROM main.sales", "SELECT count(*) AS n FROM memory.main.few_sales",
                    "SELECT count(*) AS n FROM main.few_sales s JOIN memory.main.sales t ON s.sale_id = t.sale_id"]:
            assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall(), sql
        for sql in ["SELECT * FROM other.sales", "SELECT * FROM elsewhere.main.sales"]:
            with pytest.raises(qengine.ProgrammingError, match="memory.main"):
                con.execute(sql)
    finally:
        con.execute("DROP VIEW few_sales")
        oracle.execute("DROP VIEW few_sales")


def test_a_file_named_as_a_table_beside_read_parquet_reads_its_own_files(con, duck, files) -> None:
    """Regression: a file named as a table and a read_parquet() call in one query were each given
    the hidden table name ``__parquet_0`` by two counters, so both sides read the second's files."""
    path = files["parquet"]
    other = os.path.join(files["root"], "other.parquet")
    duck.execute(f"COPY (SELECT 7 AS v UNION ALL SELECT 8) TO '{other}' (FORMAT parquet)")
    sql = (f"SELECT (SELECT count(*) FROM '{path}') AS a, (SELECT sum(v) FROM read_parquet('{other}')) AS b, "
           f"(SELECT count(*) FROM read_csv('{files['csv']}')) AS c")
    assert con.execute(sql).fetchall() == duck.execute(sql).fetchall()


def test_describe_names_the_types_a_session_table_carries(con, duck) -> None:
    """A HUGEINT sum travels between processes as a tagged decimal; DESCRIBE says HUGEINT, as DuckDB does."""
    sql = "CREATE OR REPLACE TABLE sums AS SELECT sum(v) AS s, 1 AS k FROM range(10) t(v)"
    con.execute(sql)
    duck.execute(sql)
    try:
        assert con.execute("DESCRIBE sums").fetchall() == duck.execute("DESCRIBE sums").fetchall()
    finally:
        con.execute("DROP TABLE sums")
        duck.execute("DROP TABLE sums")


def test_a_partitioned_copy_that_fails_part_way_leaves_nothing(tmp_path) -> None:
    """A result read that fails after some batches (its worker lost) left a thousand complete-
    looking partition files holding part of the rows; a directory that was there stays."""
    from qengine.api.copy_to import Target, write_partitions

    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])

    def batches():
        for start in range(0, 300, 100):
            yield pa.record_batch([pa.array(range(start, start + 100)), pa.array(range(100))], schema=schema)
        raise qengine.OperationalError("the result could not be read to its end")

    (tmp_path / "kept").mkdir()
    for path in (tmp_path / "new" / "deeper", tmp_path / "kept"):
        with pytest.raises(qengine.OperationalError, match="read to its end"):
            write_partitions(Target(str(path), "hive", "parquet", False, ["k"]), schema, batches())
    assert sorted(os.listdir(tmp_path)) == ["kept"]
    assert os.listdir(tmp_path / "kept") == []


def test_a_partitioned_copy_whose_writer_refuses_a_column_leaves_nothing(con, files) -> None:
    # the file was opened before its writer refused the INTERVAL, and was left behind
    target = os.path.join(files["root"], "interval-parts")
    with pytest.raises(qengine.NotSupportedError, match="INTERVAL"):
        con.execute(f"COPY (SELECT INTERVAL 1 DAY AS i, 'a' AS k) TO '{target}' (FORMAT parquet, PARTITION_BY (k))")
    assert not os.path.exists(target)


def test_drop_of_two_tables_is_refused_as_in_duckdb(con, duck) -> None:
    """DuckDB drops one object at a time and drops nothing when given two; qengine dropped both."""
    for c in (con, duck):
        c.execute("CREATE OR REPLACE TABLE drop_one AS SELECT 1 AS a")
        c.execute("CREATE OR REPLACE TABLE drop_two AS SELECT 2 AS a")
    with pytest.raises(duckdb.NotImplementedException):
        duck.execute("DROP TABLE drop_one, drop_two")
    with pytest.raises(qengine.NotSupportedError, match="one table or view at a time"):
        con.execute("DROP TABLE drop_one, drop_two")
    assert con.execute("SELECT a FROM drop_one UNION ALL SELECT a FROM drop_two ORDER BY a").fetchall() == [(1,), (2,)]


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_copy_of_two_columns_of_one_name_names_them_as_duckdb(con, duck, files, fmt: str) -> None:
    """The file held two columns named a, which qengine then refused to read; DuckDB writes a and a_1."""
    mine, theirs = (os.path.join(files["root"], f"{who}-twice.{fmt}") for who in ("qengine", "duckdb"))
    sql = "COPY (SELECT 1 AS a, 2 AS a, 3 AS A) TO '{}'"
    con.execute(sql.format(mine))
    duck.execute(sql.format(theirs))
    def names(path: str) -> list[str]:
        return duckdb.sql(f"SELECT * FROM read_{fmt}('{path}')").columns
    assert names(mine) == names(theirs) == ["a", "a_1", "A_2"]
    if fmt == "csv":  # the header as written, which DuckDB's reader would rename on its own
        with open(mine, "rb") as a, open(theirs, "rb") as b:
            assert a.read() == b.read()
    assert con.execute(f"SELECT * FROM '{mine}'").fetchall() == [(1, 2, 3)]


def test_copy_of_two_columns_of_one_name_to_json_is_refused_as_in_duckdb(con, duck, files) -> None:
    sql = f"COPY (SELECT 1 AS a, 2 AS a) TO '{os.path.join(files['root'], 'twice.json')}'"
    with pytest.raises(duckdb.BinderException):
        duck.execute(sql)
    with pytest.raises(qengine.ProgrammingError, match="two columns of one name"):
        con.execute(sql)
