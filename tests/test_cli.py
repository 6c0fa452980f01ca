"""The ``qengine`` command line, run as ``python -m qengine.cli`` in a subprocess.

Answers are compared with DuckDB on the same Parquet files. The REPL is driven in-process
through :func:`qengine.cli.repl.repl` with a scripted ``input`` (a piped stdin makes the CLI read SQL
from it instead of starting the REPL).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import re
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
import qengine.cli.repl
from tests.conftest import subprocess_env
from tpcds.compare import compare

JOIN_AGG_SORT = (
    "SELECT c.city, count(s.sale_id) AS n, sum(s.amount) AS total FROM sales s JOIN customers c ON s.cust_id = c.cust_id "
    "GROUP BY c.city ORDER BY total DESC"
)

# Splits small enough that sales scans as several tasks: a table of one split is read by one
# task, and what is computed from it alone needs no exchange to show.
SMALL_SPLITS = ("--split-size", "200KB")


@pytest.fixture(scope="module")
def data_dir(data_paths: dict[str, str]) -> str:
    parents = {os.path.dirname(p) for p in data_paths.values()}
    assert len(parents) == 1
    return parents.pop()


def run_cli(*args: str, stdin: str | None = None, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qengine.cli", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        cwd=cwd,
    )


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Traceback" not in result.stderr
    return result.stdout


def cell_matches(cell: str, value: object) -> bool:
    """A CSV cell against a DuckDB value."""
    if value is None:
        return cell == ""
    if isinstance(value, float):
        return math.isclose(float(cell), value, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(value, bool):
        return cell.lower() == str(value).lower()
    return cell == str(value)


def assert_csv_matches(text: str, oracle, sql: str) -> None:
    rows = list(csv.reader(io.StringIO(text)))
    cur = oracle.execute(sql)
    expected = cur.fetchall()
    assert rows[0] == [d[0] for d in cur.description]
    body = rows[1:]
    assert len(body) == len(expected)
    for got, want in zip(body, expected, strict=True):
        assert len(got) == len(want)
        assert all(cell_matches(c, v) for c, v in zip(got, want, strict=True)), (got, want)


# ---- output formats -----------------------------------------------------------------------------


def test_help() -> None:
    result = run_cli("--help")
    out = ok(result)
    assert "sql" in out and "usage" in out.lower()
    out = ok(run_cli("sql", "--help"))
    for option in ("--format", "--data", "--output", "--workers"):
        assert option in out


def test_csv_output_matches_duckdb(data_dir, oracle) -> None:
    sql = "SELECT sale_id, price, sold_date, note, amount FROM sales WHERE sale_id % 101 = 3 ORDER BY sale_id"
    out = ok(run_cli("sql", "-d", data_dir, "--format", "csv", "-c", sql))
    assert_csv_matches(out, oracle, sql)


def test_csv_output_of_a_distributed_join_matches_duckdb(data_dir, oracle) -> None:
    out = ok(run_cli("sql", "-d", data_dir, "--format", "csv", "-c", JOIN_AGG_SORT))
    assert_csv_matches(out, oracle, JOIN_AGG_SORT)


def test_json_output(data_dir, oracle) -> None:
    sql = "SELECT cust_id, name, segment, city FROM customers WHERE cust_id < 30 ORDER BY cust_id"
    out = ok(run_cli("sql", "-d", data_dir, "--format", "json", "-c", sql))
    rows = json.loads(out)
    cur = oracle.execute(sql)
    names = [d[0] for d in cur.description]
    assert rows == [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    assert any(r["segment"] is None for r in rows)  # NULL is JSON null


def test_json_output_writes_values_as_duckdb_does(data_dir, oracle) -> None:
    """Decimals are JSON numbers, dates DuckDB's text, as DuckDB's to_json writes each row."""
    sql = "SELECT cust_id, sum(price) AS spent, min(sold_date) AS first, strftime(max(sold_date), '%Y') FROM sales GROUP BY 1 ORDER BY 1 LIMIT 20"
    rows = json.loads(ok(run_cli("sql", "-d", data_dir, "--format", "json", "-c", sql)))
    expected = json.loads("[" + ", ".join(r[0] for r in oracle.execute(f"SELECT CAST(to_json(t) AS VARCHAR) FROM ({sql}) t").fetchall()) + "]")
    assert rows == expected
    assert isinstance(rows[0]["spent"], float) and list(rows[0])[-1] == "strftime(max(sold_date), '%Y')"


def test_parquet_output(data_dir, oracle, tmp_path) -> None:
    target = tmp_path / "out.parquet"
    out = ok(run_cli("sql", "-d", data_dir, "--format", "parquet", "-o", str(target), "-c", JOIN_AGG_SORT))
    assert "city" not in out  # the result went to the file
    table = pq.read_table(target)
    assert table.column_names == ["city", "n", "total"]
    result = compare(table, oracle.execute(JOIN_AGG_SORT).to_arrow_table(), JOIN_AGG_SORT)
    assert result.ok, result.message


def test_parquet_output_needs_a_file(data_dir) -> None:
    result = run_cli("sql", "-d", data_dir, "--format", "parquet", "-c", "SELECT 1 AS a")
    assert result.returncode != 0
    assert result.stderr.startswith("Error:") and "Traceback" not in result.stderr


def test_csv_output_to_a_file(data_dir, oracle, tmp_path) -> None:
    target = tmp_path / "out.csv"
    sql = "SELECT store_id, count(sale_id) AS n FROM sales GROUP BY store_id ORDER BY store_id NULLS FIRST"
    ok(run_cli("sql", "-d", data_dir, "--format", "csv", "-o", str(target), "-c", sql))
    assert_csv_matches(target.read_text(), oracle, sql)


def test_default_table_output(data_dir, oracle) -> None:
    sql = "SELECT city, count(cust_id) AS n FROM customers GROUP BY city ORDER BY city"
    out = ok(run_cli("sql", "-d", data_dir, "-c", sql))
    expected = oracle.execute(sql).fetchall()
    for city, n in expected:
        assert re.search(rf"\b{city}\b.*\b{n}\b", out), (city, n, out)
    assert f"{len(expected)} row(s)" in out


def test_table_output_shows_brackets_verbatim() -> None:
    out = ok(run_cli("sql", "--workers", "1", "-c", "SELECT '[red]hello[/red]' AS s, '[c1 AS c2]' AS t"))
    assert "[red]hello[/red]" in out
    assert "[c1 AS c2]" in out


# ---- where the SQL comes from ------------------------------------------------------------------------


def test_sql_as_positional_argument(data_dir, oracle) -> None:
    sql = "SELECT item_id, brand FROM items WHERE item_id < 5 ORDER BY item_id"
    out = ok(run_cli("sql", "-d", data_dir, "--format", "csv", sql))
    assert_csv_matches(out, oracle, sql)


def test_sql_on_stdin(data_dir, oracle) -> None:
    sql = "SELECT category, count(item_id) AS n\nFROM items\nGROUP BY category\nORDER BY category NULLS LAST\n"
    out = ok(run_cli("sql", "-d", data_dir, "--format", "csv", stdin=sql))
    assert_csv_matches(out, oracle, sql)


def test_statement_without_result_reports_nothing_to_fetch(tmp_path) -> None:
    result = run_cli("sql", "--workers", "1", "-c", "CREATE VIEW v AS SELECT 1 AS a", cwd=str(tmp_path))
    out = ok(result)
    assert "Error" not in out
    assert result.stderr == ""


# ---- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "words"),
    [
        ("SELEC 1", ["line", "column"]),
        ("SELECT no_such_column FROM sales", ["no_such_column"]),
        ("SELECT * FROM no_such_table", ["no_such_table"]),
        ("PRAGMA x", ["PRAGMA"]),
        # fails inside a worker
        ("SELECT CAST(note AS INTEGER) FROM sales WHERE note IS NOT NULL", ["convert"]),
    ],
)
def test_bad_query_prints_one_error_line(data_dir, sql: str, words: list[str]) -> None:
    result = run_cli("sql", "-d", data_dir, "-c", sql)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    for word in words:
        assert word.lower() in lines[0].lower()
    assert result.stdout.strip() == ""


def test_missing_data_dir(tmp_path) -> None:
    result = run_cli("sql", "-d", str(tmp_path / "nope"), "-c", "SELECT 1 AS a")
    assert result.returncode != 0
    assert result.stderr.startswith("Error:") and "Traceback" not in result.stderr
    assert "nope" in result.stderr


def test_data_dir_skips_a_link_out_of_it(tmp_path) -> None:
    """A file in ``-d DIR`` linking outside DIR was read as a table, its target taken into the
    data roots; it is skipped, and said so, and the directory's other tables still serve."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.csv").write_text("word\nhidden-value\n")
    data = tmp_path / "data"
    data.mkdir()
    (data / "t1.csv").write_text("a\n1\n2\n")
    (data / "host.csv").symlink_to(outside / "secret.csv")
    result = run_cli("sql", "-d", str(data), "--format", "csv", "-c", "SELECT * FROM host")
    assert result.returncode != 0 and "hidden-value" not in result.stdout
    assert "Table 'host' does not exist" in result.stderr
    assert f"skipped {data / 'host.csv'}" in result.stderr and "outside" in result.stderr
    assert ok(run_cli("sql", "-d", str(data), "--format", "csv", "-c", "SELECT sum(a) AS s FROM t1")).split() == ["s", "3"]


def test_data_dir_skips_a_directory_holding_a_link_out_of_it(tmp_path) -> None:
    """A directory table holding one file that links outside DIR was registered, and every
    statement of the session then failed on it, ``SELECT 1`` included."""
    outside = tmp_path / "outside"
    outside.mkdir()
    pq.write_table(pa.table({"a": [100]}), outside / "secret.parquet")
    data = tmp_path / "data"
    (data / "sales").mkdir(parents=True)
    (data / "ok").mkdir()
    pq.write_table(pa.table({"a": [1]}), data / "sales" / "a.parquet")
    (data / "sales" / "b.parquet").symlink_to(outside / "secret.parquet")
    pq.write_table(pa.table({"a": [2, 3]}), data / "ok" / "a.parquet")
    for never_read in (".cache", "_meta.parquet", "notes.txt"):  # links the table does not read: it stays
        (data / "ok" / never_read).symlink_to(outside / "secret.parquet")
    result = run_cli("sql", "-d", str(data), "--format", "csv", "-c", "SELECT sum(a) AS s FROM ok")
    assert result.returncode == 0 and result.stdout.split() == ["s", "5"], result.stderr
    assert f"skipped {data / 'sales'}: {data / 'sales' / 'b.parquet'} leads to" in result.stderr


def test_csv_output_writes_values_as_duckdb_does(tmp_path) -> None:
    """pyarrow's CSV writer failed on lists, structs, maps and intervals with a traceback, and
    wrote other values in its own way (1 for 1.0, quoted names)."""
    sql = ("SELECT [1, 2] AS l, {'a': 1} AS s, MAP([1], [2]) AS m, INTERVAL 1 DAY AS i, 1.0::DOUBLE AS d, "
           "TIMESTAMP '2020-01-01 01:02:03.5' AS ts, 'a,b' AS c, NULL AS n")
    expected = tmp_path / "duckdb.csv"
    duckdb.connect().execute(f"COPY ({sql}) TO '{expected}' (FORMAT csv, HEADER)")
    assert ok(run_cli("sql", "--format", "csv", "-c", sql)) == expected.read_text()


@pytest.mark.parametrize("fmt", ["csv", "json", "parquet"])
def test_an_output_file_that_cannot_be_written_is_one_error_line(tmp_path, fmt: str) -> None:
    result = run_cli("sql", "--format", fmt, "-o", str(tmp_path / "missing" / f"x.{fmt}"), "-c", "SELECT 1 AS a")
    assert result.returncode != 0
    assert result.stderr.startswith("Error: cannot write") and "Traceback" not in result.stderr


def test_each_statement_shows_its_result_and_a_failure_stops_the_rest() -> None:
    """Only the last statement's result was shown; DuckDB's shell shows each."""
    assert ok(run_cli("sql", "--format", "csv", "-c", "SELECT 1 AS a; SELECT ';' AS b; -- c;\nSELECT 3 AS c")).split() == [
        "a", "1", "b", ";", "c", "3"]
    failed = run_cli("sql", "--format", "csv", "-c", "SELECT 1 AS a; SELEC; SELECT 3 AS c")
    assert failed.returncode != 0 and failed.stdout.split() == ["a", "1"]
    assert failed.stderr.startswith("Error:") and "SELEC" in failed.stderr


def test_csv_on_standard_output_appends_to_a_redirected_file(tmp_path) -> None:
    """DuckDB's COPY to /dev/stdout opened it anew: a file the shell appended to (>>) was
    truncated, and each statement's result overwrote the last."""
    target = tmp_path / "out.csv"
    target.write_text("previous line\n")
    with open(target, "a") as out:
        subprocess.run([sys.executable, "-m", "qengine.cli", "sql", "--format", "csv", "-c", "SELECT 1 AS a; SELECT 2 AS b"],
                       stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120, env=subprocess_env(), check=True)
    assert target.read_text() == "previous line\na\n1\nb\n2\n"


def test_csv_of_repeated_column_names_as_duckdb_writes_it() -> None:
    assert ok(run_cli("sql", "--format", "csv", "-c", "SELECT 1 AS k, 2 AS k, 3 AS K")).split() == ["k,k_1,K_2", "1,2,3"]


def test_bad_usage_exits_non_zero() -> None:
    result = run_cli("sql", "--format", "xml", "-c", "SELECT 1 AS a")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr


# ---- EXPLAIN -------------------------------------------------------------------------------------------


def _plan_lines(out: str) -> list[str]:
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["plan"]
    return [r[0] for r in rows[1:]]


def test_explain_shows_stages_and_exchanges(data_dir) -> None:
    out = ok(run_cli("sql", "-d", data_dir, *SMALL_SPLITS, "--format", "csv", "-c", f"EXPLAIN {JOIN_AGG_SORT}"))
    lines = _plan_lines(out)
    stages = [line for line in lines if re.match(r"Stage \d+:", line)]
    assert len(stages) >= 3, lines
    text = "\n".join(lines)
    assert "hash exchange" in text
    assert "range exchange" in text
    assert "Scan sales" in text and "Scan customers" in text
    assert "[actual]" not in text  # EXPLAIN does not run the query


def test_explain_in_the_default_table_format(data_dir) -> None:
    out = ok(run_cli("sql", "-d", data_dir, *SMALL_SPLITS, "-c", f"EXPLAIN {JOIN_AGG_SORT}"))
    assert len(re.findall(r"Stage \d+:", out)) >= 3
    assert "hash exchange" in out and "range exchange" in out


def test_explain_analyze_reports_rows_bytes_and_time_per_stage(data_dir, oracle) -> None:
    # customers is broadcast from a stage of its own, which reads all of it (not read whole by each task)
    out = ok(run_cli("sql", "-d", data_dir, *SMALL_SPLITS, "--replicate-size", "0", "--format", "csv", "-c", f"EXPLAIN ANALYZE {JOIN_AGG_SORT}"))
    lines = _plan_lines(out)
    stage_at = [i for i, line in enumerate(lines) if re.match(r"Stage \d+:", line)]
    assert len(stage_at) >= 3
    actual = re.compile(r"\[actual\] tasks=(\d+) rows=(\d+) bytes=(\d+) .*time=([\d.]+)s")
    stats = []
    for i in stage_at:
        match = actual.search(lines[i + 1])
        assert match, lines[i + 1]
        stats.append(tuple(float(g) for g in match.groups()))
    assert all(tasks >= 1 and rows >= 0 and nbytes >= 0 and seconds >= 0 for tasks, rows, nbytes, seconds in stats)
    # the first stage listed is the result stage: its rows are the query's rows
    assert int(stats[0][1]) == len(oracle.execute(JOIN_AGG_SORT).fetchall())
    # the scans read every row of their tables
    scan_rows = {int(s[1]) for s in stats}
    assert oracle.execute("SELECT count(*) FROM customers").fetchone()[0] in scan_rows
    assert any(line.startswith("Total:") for line in lines)


# ---- the REPL, driven in-process ---------------------------------------------------------------------


def _repl(con, lines: list[str], monkeypatch, tmp_path) -> int:
    feed = iter(lines)

    def fake_input(prompt: str = "") -> str:
        try:
            line = next(feed)
        except StopIteration:
            raise EOFError from None
        if line == "<Ctrl-C>":
            raise KeyboardInterrupt
        return line

    monkeypatch.setattr("builtins.input", fake_input)
    monkeypatch.setattr(qengine.cli.repl, "HISTORY", str(tmp_path / "history"))
    args = argparse.Namespace(format="table", output=None, no_progress=True, trace=None)
    return qengine.cli.repl.repl(con, args)


def test_repl_dot_commands_and_queries(default_engine, oracle, monkeypatch, tmp_path, capsys) -> None:
    lines = [
        ".tables",
        ".schema sales",
        "SELECT city, count(cust_id) AS n",
        "FROM customers GROUP BY city ORDER BY city;",
        "SELEC 1;",
        ".schema no_such_table",
        ".nonsense",
        "SELECT 'after errors' AS still_running;",
        ".quit",
        "SELECT 'not reached' AS x;",
    ]
    assert _repl(default_engine, lines, monkeypatch, tmp_path) == 0
    out, err = capsys.readouterr()
    for name in ("sales", "customers", "items"):
        assert re.search(rf"^{name}$", out, re.MULTILINE), out
    assert "CREATE TABLE sales" in out
    for column, code in (("sale_id", "BIGINT"), ("price", "DECIMAL(7,2)"), ("sold_date", "DATE"), ("note", "VARCHAR")):
        assert f"{column} {code}" in out
    for city, n in oracle.execute("SELECT city, count(cust_id) FROM customers GROUP BY city ORDER BY city").fetchall():
        assert re.search(rf"\b{city}\b.*\b{n}\b", out)
    assert "after errors" in out
    assert "not reached" not in out
    assert "Error: syntax error" in err
    assert "no_such_table" in err
    assert "unknown command" in err


def test_repl_ends_on_eof(default_engine, monkeypatch, tmp_path, capsys) -> None:
    assert _repl(default_engine, ["SELECT 7 AS seven;"], monkeypatch, tmp_path) == 0
    out, _ = capsys.readouterr()
    assert "seven" in out and "1 row(s)" in out


def test_ctrl_c_at_the_prompt_clears_the_line_and_the_shell_goes_on(default_engine, monkeypatch, tmp_path, capsys) -> None:
    lines = ["SELECT 'half typed' AS x", "<Ctrl-C>", "<Ctrl-C>", "SELECT 'after ctrl-c' AS y;"]
    assert _repl(default_engine, lines, monkeypatch, tmp_path) == 0
    out, err = capsys.readouterr()
    assert "after ctrl-c" in out
    assert "half typed" not in out and "Error" not in err



def test_values_arrow_lacks_are_written_as_duckdb_writes_them(tmp_path) -> None:
    """The CLI wrote its output from the result with its DuckDB types dropped to Arrow's: a JSON
    column came out as quoted strings, a UUID and JSON column went to Parquet as VARCHAR, and
    the table printed TIME '24:00:00' as 00:00:00 and failed on an infinite date."""
    table = ok(run_cli("sql", "-c", "SELECT TIME '24:00:00' AS t, 'infinity'::DATE AS d, INTERVAL 1 MONTH AS i, "
                                    "'00000000-0000-0000-0000-000000000001'::UUID AS u"))
    assert "24:00:00" in table and "infinity" in table and "1 month" in table and "uuid" in table, table
    sql = "SELECT * FROM (VALUES ('{\"a\": [1, 2.50]}'::JSON, 1), ('123'::JSON, 2)) t(x, k)"
    got = json.loads(ok(run_cli("sql", "--format", "json", "-c", sql)))
    theirs = tmp_path / "duck.json"
    duckdb.execute(f"COPY ({sql}) TO '{theirs}' (FORMAT json)")
    assert got == [json.loads(line) for line in theirs.read_text().splitlines()]
    out = tmp_path / "typed.parquet"
    typed = "SELECT '00000000-0000-0000-0000-000000000001'::UUID AS u, '{\"a\": 1}'::JSON AS j, 10::HUGEINT AS h"
    ok(run_cli("sql", "--format", "parquet", "-o", str(out), "-c", typed))
    duckdb.execute(f"COPY ({typed}) TO '{tmp_path / 'duck.parquet'}' (FORMAT parquet)")
    described = "SELECT typeof(u), typeof(j), typeof(h), u, j, h FROM '{}'"
    assert duckdb.sql(described.format(out)).fetchall() == duckdb.sql(described.format(tmp_path / "duck.parquet")).fetchall()
