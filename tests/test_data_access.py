"""The data-access policy, tried as an attacker would, on a local and on a standalone cluster:
reads and writes outside the roots, symbolic links in and out of them, a link swapped in after
planning, COPY beside files it did not write, and a coordinator started without roots."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import qengine
from qengine.catalog.access import MARKER
from qengine.transport.rpc import Client, remote_error
from tests.conftest import free_port
from tests.test_multihost import HANG_BOUND, cluster

SECRET = "secret-token-0123456789"


@pytest.fixture
def layout(tmp_path):
    """data/ (a root, with a table), out/ (an output root), and outside/ holding a secret, a
    parquet file and a directory of someone else's files."""
    data, out, outside = tmp_path / "data", tmp_path / "out", tmp_path / "outside"
    for d in (data, out, outside, outside / "victim"):
        d.mkdir()
    pq.write_table(pa.table({"k": [1, 2, 3]}), data / "t.parquet")
    pq.write_table(pa.table({"k": [7, 8]}), outside / "other.parquet")
    (outside / "secret.csv").write_text(f"token\n{SECRET}\n")
    (outside / "victim" / "part-important.txt").write_text("keep me")
    (data / "link.csv").symlink_to(outside / "secret.csv")
    (data / "linked_dir").symlink_to(outside)
    return {"root": tmp_path, "data": data, "out": out, "outside": outside}


def _error(con, sql: str) -> qengine.Error:
    with pytest.raises(qengine.Error) as info:
        con.execute(sql).fetchall()
    assert SECRET not in str(info.value)
    return info.value


def _refused(con, sql: str, words: str) -> None:
    e = _error(con, sql)
    assert isinstance(e, qengine.ProgrammingError), f"{type(e).__name__}: {e}"
    assert words in str(e), str(e)


def _intact(layout) -> None:
    assert (layout["outside"] / "victim" / "part-important.txt").read_text() == "keep me"
    assert sorted(os.listdir(layout["outside"])) == ["other.parquet", "secret.csv", "victim"]


# ---- local cluster --------------------------------------------------------------------------------


@pytest.fixture
def local(layout):
    with qengine.connect(workers=2, allowed_roots=[str(layout["data"])], output_roots=[str(layout["out"])]) as con:
        con.register_parquet("t", str(layout["data"] / "t.parquet"))
        yield con


def test_local_reads_stay_inside_the_roots(local, layout) -> None:
    outside = layout["outside"]
    _refused(local, f"SELECT * FROM read_csv('{outside / 'secret.csv'}')", "outside the data roots")
    _refused(local, f"SELECT * FROM read_parquet('{outside / 'other.parquet'}')", "outside the data roots")
    _refused(local, f"SELECT * FROM read_parquet('{layout['data'] / '..' / 'outside' / 'other.parquet'}')", "outside the data roots")
    with pytest.raises(qengine.ProgrammingError, match="outside the data roots"):
        local.register_csv("pw", "/etc/passwd", delimiter=":", header=False)


def test_refusals_tell_nothing_of_what_lies_outside_the_roots(local, layout) -> None:
    # a glob or directory outside was listed first, and the refusal named the first file found
    # there; a missing file and a present one were refused in different words
    outside = layout["outside"]
    refusals = {sql: str(_error(local, sql)) for sql in (
        f"SELECT * FROM read_csv('{outside}/*')", f"SELECT * FROM read_csv('{outside}')", f"SELECT * FROM read_csv('{outside}/*.csv')",
        f"SELECT * FROM read_csv('{outside / 'secret.csv'}')", f"SELECT * FROM read_csv('{outside / 'no-such.csv'}')")}
    for sql, message in refusals.items():
        assert "outside the data roots" in message, (sql, message)
        assert "secret.csv" not in message or "secret.csv" in sql, (sql, message)
    with pytest.raises(qengine.NotSupportedError, match="not URLs"):
        local.execute("SELECT * FROM read_parquet('https://example.com/a.parquet')")


def test_a_link_out_of_the_roots_is_refused(local, layout) -> None:
    data = layout["data"]
    _refused(local, f"SELECT * FROM read_csv('{data / 'link.csv'}')", "which leads to")
    _refused(local, f"SELECT * FROM read_parquet('{data / 'linked_dir' / 'other.parquet'}')", "outside the data roots")
    with pytest.raises(qengine.ProgrammingError, match="which leads to"):
        local.register_csv("s", str(data / "link.csv"))


def test_a_recursive_glob_does_not_follow_links_to_directories(local, layout) -> None:
    # Two links back to the root: Python's glob followed them, and the planner never finished.
    data = layout["data"]
    (data / "deeper").mkdir()
    pq.write_table(pa.table({"k": [10]}), data / "deeper" / "u.parquet")
    for name in ("loop1", "loop2"):
        (data / name).symlink_to(data)
    sql = f"SELECT count(*), sum(k) FROM read_parquet('{data}/**/*.parquet')"
    assert local.execute(sql).fetchall() == duckdb.connect().execute(sql).fetchall() == [(4, 16)]


def test_a_glob_lists_nothing_outside_the_roots(local, layout) -> None:
    """Only the part of a glob before its first wildcard was checked: ``..`` after it climbed
    out, and a wildcard matching a link to a directory outside listed that directory, the
    refusal naming the files found there."""
    data = layout["data"]
    (data / "sub").mkdir()
    for sql in (f"SELECT * FROM read_csv('{data}/s[u]b/../../outside/*')", f"SELECT * FROM read_csv('{data}/*/../../outside/secret.csv')"):
        _refused(local, sql, "'..' after a wildcard")
    for sql in (f"SELECT * FROM read_parquet('{data}/*/*.parquet')", f"SELECT * FROM read_csv('{data}/linked*/*')"):
        message = str(_error(local, sql))
        assert f"{data / 'linked_dir'} (which leads to {layout['outside']}) is outside the data roots" in message, message
        assert "secret" not in message and "other.parquet" not in message, message
    _refused(local, f"SELECT * FROM read_csv('{data}/t\x00.csv')", "NUL character")


def test_a_link_swapped_in_is_refused(local, layout) -> None:
    """A registered file swapped for a link leading outside: the table, read again before the
    next statement, is refused by the coordinator before anything outside is read. A swap after
    planning meets the worker's own check, which refuses a path that is no longer its realpath."""
    from qengine.catalog.access import AccessPolicy, check_opened

    table = layout["data"] / "t.parquet"
    assert local.execute("SELECT sum(k) FROM t").fetchone() == (6,)
    table.unlink()
    table.symlink_to(layout["outside"] / "other.parquet")  # same name, now leading outside
    with pytest.raises(qengine.OperationalError, match="changed on disk and cannot be read again: .* is outside the data roots"):
        local.execute("SELECT sum(k) FROM t")
    with pytest.raises(qengine.ProgrammingError, match="changed after the query was planned"):
        check_opened(str(table), [AccessPolicy.of([str(layout["root"])], [])])


def test_local_writes_stay_inside_the_output_roots(local, layout) -> None:
    outside = layout["outside"]
    _refused(local, f"COPY (SELECT 'pwned' AS x) TO '{outside / 'evil'}' (FORMAT csv)", "outside the output roots")
    _refused(local, f"COPY (SELECT 1 AS x) TO '{outside / 'victim'}' (FORMAT csv, OVERWRITE true)", "outside the output roots")
    _refused(local, f"COPY (SELECT 1 AS x) TO '{layout['data']}' (FORMAT csv)", "outside the output roots")
    (layout["out"] / "escape").symlink_to(outside)
    _refused(local, f"COPY (SELECT 1 AS x) TO '{layout['out'] / 'escape' / 'x'}' (FORMAT csv)", "which leads to")
    _intact(layout)


def test_partition_names_cannot_lead_out_of_the_output_root(local, layout) -> None:
    # A column named "../../x" made the directory <out>/p/../../x=1, outside the output root.
    # Names are percent-encoded as values are, as DuckDB writes them.
    out = layout["out"] / "p"
    sql = f"""COPY (SELECT 1 AS "../../outside/victim", 2 AS "a/b", 3 AS v) TO '{out}' (FORMAT parquet, PARTITION_BY ("../../outside/victim", "a/b"))"""
    assert local.execute(sql).fetchall() == [(1,)]
    assert os.listdir(out) == ["..%2F..%2Foutside%2Fvictim=1"]
    assert os.listdir(out / "..%2F..%2Foutside%2Fvictim=1") == ["a%2Fb=2"]
    assert pq.read_table(out / "..%2F..%2Foutside%2Fvictim=1" / "a%2Fb=2" / "data_0.parquet").to_pydict() == {"v": [3]}
    assert sorted(os.listdir(layout["root"])) == ["data", "out", "outside"]
    _intact(layout)


def test_the_copy_marker_never_writes_through_a_planted_link(local, layout, monkeypatch) -> None:
    # the marker was written to "<marker>.tmp" with open(), which followed a link planted there:
    # the file it led to, outside every root, was overwritten with the marker's JSON
    import secrets

    from qengine.catalog import access

    target = layout["out"] / "claimed"
    target.mkdir()
    victim = layout["outside"] / "victim" / "part-important.txt"
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: "fixed")
    for name in (f"{access.MARKER}.tmp", f"{access.MARKER}.fixed.tmp"):  # planted while COPY ran
        (target / name).symlink_to(victim)
    with contextlib.suppress(OSError):
        access._write_marker(str(target), ["part-00000.csv"])
    assert victim.read_text() == "keep me"
    _intact(layout)


def test_copy_overwrites_only_its_own_files(local, layout) -> None:
    target = layout["out"] / "result"
    assert local.execute(f"COPY (SELECT k FROM t) TO '{target}' (FORMAT csv, PER_THREAD_OUTPUT true)").rowcount == 3
    first = sorted(os.listdir(target))
    assert MARKER in first and any(n.startswith("part-") for n in first)
    _refused(local, f"COPY (SELECT k FROM t) TO '{target}' (FORMAT csv, PER_THREAD_OUTPUT true)", "OVERWRITE")
    assert local.execute(f"COPY (SELECT k FROM t WHERE k > 1) TO '{target}' (FORMAT csv, PER_THREAD_OUTPUT true, OVERWRITE true)").rowcount == 2
    # someone else's file beside COPY's: COPY no longer owns the directory and touches nothing
    (target / "part-00000.notes").write_text("mine")
    before = sorted(os.listdir(target))
    _refused(local, f"COPY (SELECT k FROM t) TO '{target}' (FORMAT csv, PER_THREAD_OUTPUT true, OVERWRITE true)", "did not write")
    assert sorted(os.listdir(target)) == before
    assert (target / "part-00000.notes").read_text() == "mine"
    # a directory COPY did not create, holding a file of the part-* form
    foreign = layout["out"] / "foreign"
    foreign.mkdir()
    (foreign / "part-00000.csv").write_text("precious")
    _refused(local, f"COPY (SELECT k FROM t) TO '{foreign}' (FORMAT csv, PER_THREAD_OUTPUT true, OVERWRITE true)", "did not write")
    assert (foreign / "part-00000.csv").read_text() == "precious"


def test_default_roots_are_the_current_directory_and_registered_data(layout, monkeypatch) -> None:
    work = layout["root"] / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with qengine.connect(workers=1) as con:
        _refused(con, f"SELECT * FROM read_parquet('{layout['data'] / 't.parquet'}')", "outside the data roots")
        con.register_parquet("t", str(layout["data"] / "t.parquet"))  # explicit: that file may be read
        assert con.execute(f"SELECT count(*) FROM read_parquet('{layout['data'] / 't.parquet'}')").fetchone() == (3,)
        (layout["data"] / "beside.csv").write_text("a\n1\n")  # but not a file beside it
        _refused(con, f"SELECT * FROM read_csv('{layout['data'] / 'beside.csv'}')", "outside the data roots")
        more = layout["root"] / "more"  # a directory registered: SQL may read below it
        more.mkdir()
        pq.write_table(pa.table({"k": [5]}), more / "a.parquet")
        con.register_parquet("more", str(more))
        pq.write_table(pa.table({"k": [6, 7]}), more / "b.parquet")
        assert con.execute(f"SELECT count(*) FROM read_parquet('{more / 'b.parquet'}')").fetchone() == (2,)
        _refused(con, f"COPY (SELECT 1 AS x) TO '{layout['out'] / 'x'}' (FORMAT csv)", "outside the output roots")
        assert con.execute("COPY (SELECT k FROM t) TO 'here' (FORMAT parquet)").rowcount == 3  # one file, as in DuckDB
        assert pq.read_table(str(work / "here")).num_rows == 3
    _intact(layout)


# ---- standalone cluster ----------------------------------------------------------------------------


def test_standalone_cluster_confines_reads_and_writes(tmp_path, layout) -> None:
    with cluster(tmp_path / "cluster", 2, data_roots=[str(layout["data"])], output_roots=[str(layout["out"])]) as c:
        with c.connect() as con:
            with pytest.raises(qengine.ProgrammingError, match="outside the data roots"):
                con.register_csv("pw", "/etc/passwd", delimiter=":", header=False)
            with pytest.raises(qengine.ProgrammingError, match="which leads to"):
                con.register_csv("s", str(layout["data"] / "link.csv"))
            # a directory or glob outside was listed before the roots were checked: the refusal
            # named a file found there, and told a missing file from one that exists
            refusals = []
            for path in (layout["outside"], layout["outside"] / "*.csv", layout["outside"] / "secret.csv", layout["outside"] / "none.csv"):
                with pytest.raises(qengine.ProgrammingError, match="outside the data roots") as info:
                    con.register_csv("x", str(path))
                refusals.append(str(info.value).replace(str(path), "PATH"))
            assert "secret.csv" not in refusals[0] + refusals[1] and refusals[2] == refusals[3], refusals
            con.register_parquet("t", str(layout["data"] / "t.parquet"))
            assert con.execute("SELECT sum(k) FROM t").fetchone() == (6,)
            _refused(con, f"SELECT * FROM read_csv('{layout['outside'] / 'secret.csv'}')", "outside the data roots")
            _refused(con, f"COPY (SELECT 'pwned' AS x) TO '{layout['outside'] / 'evil'}' (FORMAT csv)", "outside the output roots")
            _refused(con, f"COPY (SELECT 1 AS x) TO '{layout['outside'] / 'victim'}' (FORMAT csv, OVERWRITE true)", "outside the output roots")
            assert con.execute(f"COPY (SELECT k FROM t) TO '{layout['out'] / 'r'}' (FORMAT csv)").rowcount == 3
            _intact(layout)
        # A task sent to a worker directly, with a policy of its own, still meets the coordinator's roots.
        worker = c.members()[0]["address"]
        spec = {
            "query": "q", "stage": 0, "task": 0, "sql": "SELECT * FROM t", "direct": None,
            "inputs": [{"name": "t", "kind": "scan", "columns": [["token", "c0"]],
                        "split": {"kind": "csv", "path": str(layout["outside"] / "secret.csv")}}],
            "access": {"read": ["/"], "write": ["/"]}, "output": {"kind": "result", "key": "q/result"},
        }
        inside = str(layout["data"] / "t.parquet")
        scan = {"name": "s", "kind": "scan", "columns": [["k", "c0"]],
                "split": {"kind": "parquet", "pieces": [[inside, [0]]], "runs": [[inside, 0, None]], "rows": 3, "schema_path": inside}}
        secret, written = str(layout["outside"] / "secret.csv"), str(layout["outside"] / "written.csv")
        attacks = [
            (spec, "outside the data roots"),
            # the files DuckDB may open came with the task, unchecked: the secret was read
            (dict(spec, sql=f"SELECT * FROM read_csv('{secret}')", inputs=[scan], readable=[inside, secret], build_sides=True),
             "outside the data roots"),
            # several statements ran: the second wrote outside every root
            (dict(spec, sql=f"SELECT 1 AS x; COPY (SELECT 'pwned' AS p) TO '{written}'", inputs=[scan], readable=[inside, written],
                  build_sides=True), "outside the data roots"),
            (dict(spec, sql=f"SELECT 1 AS x; COPY (SELECT 'pwned' AS p) TO '{written}'", inputs=[scan], readable=[inside],
                  build_sides=True), "single SELECT"),
            # the part file's name took the format as it came: "x/../../f" wrote outside the output root
            (dict(spec, sql="SELECT 'pwned' AS c0", inputs=[], readable=[],
                  output={"kind": "files", "key": "files", "dir": str(layout["out"] / "r"), "names": ["p"],
                          "format": f"csv/../../../outside/{os.path.basename(written)}"}), "COPY part"),
        ]
        for attack, refusal in attacks:
            events = [e for message in Client(worker, c.token).stream("run_tasks", {"query": "q", "slots": 1, "tasks": [attack]})
                      for e in message]
            assert [e["event"] for e in events] == ["started", "failed"]
            error = remote_error(events[-1]["error"])
            assert isinstance(error, qengine.ProgrammingError) and refusal in str(error)
            assert SECRET not in str(error)
        assert not os.path.exists(written)


def test_standalone_cluster_without_output_roots_refuses_copy(tmp_path, layout) -> None:
    with cluster(tmp_path / "cluster", 1, data_roots=[str(layout["data"])]) as c, c.connect() as con:
        _refused(con, f"COPY (SELECT 1 AS x) TO '{layout['data'] / 'x'}' (FORMAT csv)", "no output roots")
        assert not (layout["data"] / "x").exists()


def _coordinator(tmp_path, *roots: str) -> subprocess.CompletedProcess | subprocess.Popen:
    token = tmp_path / "token"
    token.write_text("t-" + os.urandom(6).hex())
    command = [sys.executable, "-m", "qengine.cli", "coordinator", "--listen", f"127.0.0.1:{free_port()}",
               "--token-file", str(token), *roots]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_coordinator_refuses_to_start_without_data_roots(tmp_path) -> None:
    proc = _coordinator(tmp_path)
    try:
        _, err = proc.communicate(timeout=HANG_BOUND)
    finally:
        proc.kill()
    assert proc.returncode == 1
    assert "--data-root" in err


def test_coordinator_with_root_slash_warns(tmp_path) -> None:
    proc = _coordinator(tmp_path, "--data-root", "/")
    try:
        assert "listening on" in proc.stdout.readline()  # the warning is logged before this line
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=HANG_BOUND)
    assert "a root is /" in err


def test_files_whose_paths_hold_quotes_are_read(tmp_path) -> None:
    """The files DuckDB may read are written into its sandbox's setting as SQL strings (binding
    them made DuckDB import pandas, 0.7 s of the first statement): a quote in a path must stay
    the file's own."""
    data = tmp_path / "it's \"x\" data"
    data.mkdir()
    pq.write_table(pa.table({"k": list(range(100)), "v": [i * 2 for i in range(100)]}), data / "t.parquet", row_group_size=10)
    (data / "c.csv").write_text("a,b\n1,x\n2,y\n")
    with qengine.connect(workers=2, allowed_roots=[str(data)], split_size="1KB") as con:
        con.register_parquet("t", str(data / "t.parquet"))
        con.register_csv("c", str(data / "c.csv"))
        assert con.execute("SELECT count(*), sum(v) FROM t WHERE k >= 37").fetchall() == [(63, sum(i * 2 for i in range(37, 100)))]
        assert con.execute("SELECT a, b FROM c ORDER BY a").fetchall() == [(1, "x"), (2, "y")]
