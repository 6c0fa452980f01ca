"""CSV files are read as DuckDB's read_csv() reads them: its sniffer's dialect, header and types.

Arrow's CSV reader, which qengine used before, answered differently on each of these files: an
empty field was '' instead of NULL, '007' the number 7, 'nan' NULL, a file without a header lost
its first row to the column names, a day-first date stayed a string, and a .tsv file or a file
using ';' came back as one column (or failed with an internal error).
"""

from __future__ import annotations

import pathlib

import duckdb
import pytest

import qengine
from tests.conftest import assert_same
from tpcds.compare import compare

FILES = {
    "empty_fields.csv": 'id,name,amount,day\n1,alice,1.5,2020-01-01\n2,"bob, jr",,2020-02-30\n3,,3,2020-03-01\n',
    "leading_zeros.csv": "id,flag,code\n1,true,007\n2,false,010\n3,,\n",
    "semicolons.csv": "x;y\n1;2\n3;4\n",
    "timestamps.csv": "id,ts\n1,2020-01-01 10:00:00\n2,2020-01-01T11:00:00\n3,\n",
    "null_spellings.csv": "a,b\n1,NULL\n2,null\n3,\\N\n4,NA\n",
    "special_floats.csv": "v\n1e3\n-0.0\nnan\ninf\n",
    "quoted_newline.csv": 's\n"line1\nline2"\nplain\n',
    "tabs.tsv": "a\tb\n1\tx\n2\ty\n",
    "no_header.csv": "1,2\n3,4\n",
    "day_first_dates.csv": "d\n13/02/2020\n03/04/2020\n",
    "times.csv": "t\n10:00:00\n23:59:59\n",
    "decimals.csv": "dec\n1.10\n2.25\n3.333\n",
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    directory = tmp_path_factory.mktemp("csv_dialects")
    for name, body in FILES.items():
        (directory / name).write_text(body)
    parts = directory / "parts"
    parts.mkdir()
    for i in range(3):
        (parts / f"part{i}.csv").write_text("k;v\n" + "".join(f"{i * 10 + j};{'' if j % 3 == 0 else j * 0.5}\n" for j in range(5)))
    return str(directory)


@pytest.fixture(scope="module")
def con(root: str):
    with qengine.connect(workers=2, allowed_roots=[root]) as con:
        yield con


@pytest.fixture(scope="module")
def oracle():
    con = duckdb.connect()
    yield con
    con.close()


def _same_types(con, oracle: duckdb.DuckDBPyConnection, sql: str) -> None:
    got = con.execute(sql).fetch_arrow_table().schema
    expected = oracle.execute(sql).to_arrow_table().schema
    assert [(f.name, f.type) for f in got] == [(f.name, f.type) for f in expected], sql


@pytest.mark.parametrize("name", sorted(FILES))
def test_read_csv_answers_as_duckdb(con, oracle, root: str, name: str) -> None:
    sql = f"SELECT * FROM read_csv('{root}/{name}')"
    assert_same(con, oracle, sql)
    _same_types(con, oracle, sql)


@pytest.mark.parametrize("name", sorted(FILES))
def test_registered_csv_answers_as_duckdb(con, oracle, root: str, name: str) -> None:
    table = "t_" + name.replace(".", "_")
    con.register_csv(table, f"{root}/{name}")
    try:
        got = con.execute(f"SELECT * FROM {table}").fetch_arrow_table()
        expected = oracle.execute(f"SELECT * FROM read_csv('{root}/{name}')").to_arrow_table()
        assert got.schema == expected.schema
        result = compare(got, expected, name)
        assert result.ok, result.message
    finally:
        con.execute(f"DROP TABLE {table}")


def test_a_directory_of_files_reads_with_the_first_files_dialect(con, oracle, root: str) -> None:
    """Each file is one split, read by its own task with the dialect and types found once."""
    sql = f"SELECT k, v FROM read_csv('{root}/parts/*.csv') ORDER BY k"
    assert_same(con, oracle, sql)
    _same_types(con, oracle, sql)


def test_files_naming_their_columns_in_another_order_are_read_by_name(con, oracle, root: str) -> None:
    # The second file's values went to the first file's columns by position: ('y', '2') for (id, v)
    directory = pathlib.Path(root) / "reordered"
    directory.mkdir()
    (directory / "a.csv").write_text("id,v,d\n1,x,2024-01-02\n4,w,\n")
    (directory / "b.csv").write_text("v,d,id\ny,2024-03-04,2\n,2025-05-06,5\n")
    (directory / "c.csv").write_text("id,v,d\n3,z,2024-07-08\n")
    sql = f"SELECT id, v, d, typeof(id), typeof(d) FROM read_csv('{directory}/*.csv') ORDER BY id"
    assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall()
    con.register_csv("reordered", str(directory))
    try:
        assert con.execute("SELECT id, v, d FROM reordered ORDER BY id").fetchall() == oracle.execute(
            f"SELECT id, v, d FROM read_csv('{directory}/*.csv') ORDER BY id").fetchall()
    finally:
        con.execute("DROP TABLE reordered")


@pytest.mark.parametrize("endings", [("\n", "\r\n"), ("\r\n", "\n"), ("\n", "\r"), ("\r", "\r\n", "\n")])
def test_files_ending_their_lines_otherwise_are_all_read(con, oracle, root: str, endings: tuple[str, ...]) -> None:
    """Every file was read with the line break sniffed from the first: a later file written with
    another one read as no rows, silently."""
    directory = pathlib.Path(root) / f"endings{len(endings)}{''.join('n' if e == chr(10) else 'r' if e == chr(13) else 'rn' for e in endings)}"
    directory.mkdir()
    for i, end in enumerate(endings):
        (directory / f"f{i}.csv").write_bytes(end.join(["a,b", f"{2 * i},x", f'{2 * i + 1},"y{end}z"', ""]).encode())
    sql = f"SELECT a, b FROM read_csv('{directory}/*.csv') ORDER BY a"
    assert len(oracle.execute(sql).fetchall()) == 2 * len(endings)
    assert con.execute(sql).fetchall() == oracle.execute(sql).fetchall()


@pytest.mark.parametrize(("files", "message"), [
    ({"u.csv": "é,É\n1,2\n"}, "two columns named 'é' and 'É'"),
    ({"u.json": '{"é":1,"É":2}\n'}, "the JSON keys 'é' and 'É' differ only in case"),
    ({"a.json": '{"A":1,"a":2}\n'}, "the JSON keys 'A' and 'a' differ only in case"),
    ({"a.json": '{"A":1}\n', "b.json": '{"a":2}\n'}, "the JSON keys 'A' and 'a' differ only in case"),
    ({"e.json": '{"":1,"b":2}\n'}, "an object key that is the empty string"),
    # DuckDB detects the offset's format and gives the instant in UTC (08:00); cast, the string kept 10:00
    ({"t.json": '{"t":"2020-01-02T09:00:00+01:00"}\n{"t":"2020-01-02T10:00:00+02:00"}\n'}, r"writes dates or times \(t\)"),
    ({"s.json": '{"s":{"u":"2020-01-02T10:00:00-07:00"}}\n'}, r"writes dates or times \(s\)"),
])
def test_columns_the_reads_by_name_cannot_tell_apart_are_refused(con, root: str, files: dict[str, str], message: str) -> None:
    """Read back by name, each file's columns went astray: é and É (which DuckDB tells apart,
    and qengine's names do not) both gave é's values; JSON keys A and a gave a's as NULL, or
    another file's a_1 key took its place, and the empty key (DuckDB's column C0) was NULL.
    Times with a UTC offset were read as their local time."""
    directory = pathlib.Path(root) / ("alike-" + "-".join(files))
    directory.mkdir()
    for name, text in files.items():
        (directory / name).write_text(text)
    suffix = next(iter(files)).rsplit(".", 1)[1]
    with pytest.raises(qengine.NotSupportedError, match=message):
        con.execute(f"SELECT * FROM '{directory}/*.{suffix}'")


def test_given_header_and_delimiter_override_the_sniffer(con, oracle, root: str) -> None:
    con.register_csv("forced_header", f"{root}/no_header.csv", header=True)
    con.register_csv("forced_comma", f"{root}/semicolons.csv", delimiter=",")
    try:
        assert con.execute("SELECT * FROM forced_header").fetchall() == oracle.execute(
            f"SELECT * FROM read_csv('{root}/no_header.csv', header = true)").fetchall()
        assert con.execute("SELECT * FROM forced_comma").fetchall() == oracle.execute(
            f"SELECT * FROM read_csv('{root}/semicolons.csv', delim = ',')").fetchall()
    finally:
        con.execute("DROP TABLE forced_header")
        con.execute("DROP TABLE forced_comma")


def test_columns_named_with_spaces_and_punctuation(oracle, tmp_path) -> None:
    """sqlglot parses the catalog's column names as SQL: ``a b`` or ``x;y`` failed every query
    over the table with an internal error."""
    path = str(tmp_path / "odd_names.parquet")
    oracle.execute(
        'COPY (SELECT 1 AS "x;y", 2 AS "a b", 3 AS "c.d", 4 AS "e""f", 5 AS "Mixed Case", 6 AS "select") '
        f"TO '{path}' (FORMAT parquet)"
    )
    oracle.execute(f"CREATE VIEW odd_names AS SELECT * FROM '{path}'")
    with qengine.connect(workers=1, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("odd_names", path)
        for sql in (
            "SELECT * FROM odd_names",
            'SELECT "a b" + 1, "c.d", "x;y", "e""f", "mixed case", "select" FROM odd_names',
            'SELECT count(*) FROM odd_names WHERE "a b" = 2 GROUP BY "c.d"',
        ):
            assert_same(con, oracle, sql)


def test_json_times_in_utc_read_as_duckdb(con, oracle, root: str) -> None:
    """The check that refuses times with an offset passes those DuckDB reads alike."""
    directory = pathlib.Path(root) / "utc_times"
    directory.mkdir()
    (directory / "a.json").write_text('{"t":"2020-01-02T09:00:00Z","d":"2020-01-02"}\n{"t":"2020-01-02 10:00:00","d":"2021-12-31"}\n')
    (directory / "b.json").write_text('{"t":"2020-01-03T10:00:00.25+00:00","d":null}\n')
    assert_same(con, oracle, f"SELECT t, d, typeof(t) AS tt, typeof(d) AS td FROM '{directory}/*.json' ORDER BY t")
