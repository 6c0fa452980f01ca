"""The web UI's JSON API (``qengine.ui``): what it serves of a statement is checked against
EXPLAIN ANALYZE of the same run and against DuckDB's answer, a running statement is seen while
it runs, and no request gets anything without the token."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import shutil
import ssl
import subprocess
import sys
import threading
import types
import urllib.parse

import pytest

import qengine
from qengine.planner.explain import shuffle_summary
from qengine.runtime.query_history import QueryHistory
from qengine.ui.server import UiServer
from tests.conftest import assert_same, engine_over, free_port, subprocess_env, wait_until
from tests.test_cancellation import BOUND, ENDLESS, run_endless
from tests.test_multihost import cluster, data_root, register

JOIN = "SELECT c.city, count(*) AS n, sum(s.amount) AS total FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY c.city"


@pytest.fixture(scope="module")
def ui_engine(data_paths):
    """A 2-worker cluster whose joins shuffle, serving its web UI."""
    con = engine_over(data_paths, broadcast_threshold=0, ui=True)
    yield con
    con.close()


def request(con, path: str, token: str | None = "own", cookie: str | None = None, method: str = "GET", body: str | None = None):
    """(status, headers, body) of a request to ``con``'s web UI; ``token`` "own" sends the UI's
    token as a bearer token, None sends none."""
    url = urllib.parse.urlsplit(con.ui_url)
    token = urllib.parse.parse_qs(url.query)["token"][0] if token == "own" else token
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if cookie is not None:
        headers["Cookie"] = cookie
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def get_json(con, path: str):
    status, _, body = request(con, path)
    assert status == 200, body
    return json.loads(body)


def test_every_request_needs_the_token(ui_engine) -> None:
    assert ui_engine.ui_url.startswith("http://127.0.0.1:")  # loopback by default
    for path in ("/api/queries", "/api/workers", "/", "/workers", "/static/ui.js"):
        status, headers, _ = request(ui_engine, path, token=None)
        assert status == 401, path
        assert request(ui_engine, path, token="not-the-token")[0] == 401, path
    assert request(ui_engine, "/api/queries", token=None)[1]["WWW-Authenticate"].startswith("Bearer")
    token = urllib.parse.parse_qs(urllib.parse.urlsplit(ui_engine.ui_url).query)["token"][0]
    # ?token= sets an HttpOnly cookie holding no token, and sends the browser on without it in the address
    status, headers, _ = request(ui_engine, f"/?token={token}", token=None)
    assert status == 303 and headers["Location"] == "/"
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and token not in cookie
    jar = cookie.split(";")[0]
    assert request(ui_engine, f"//elsewhere.example/?token={token}", token=None)[1]["Location"] == "/elsewhere.example/"
    assert request(ui_engine, "/api/queries", token=None, cookie=jar)[0] == 200
    assert request(ui_engine, "/", token=None, cookie=jar)[0] == 200
    assert request(ui_engine, "/api/queries", token=None, cookie=jar.split("=")[0] + "=forged")[0] == 401
    # the login form
    assert request(ui_engine, "/login", token=None, method="POST", body="token=wrong")[0] == 401
    status, headers, _ = request(ui_engine, "/login", token=None, method="POST", body=urllib.parse.urlencode({"token": token}))
    assert status == 303 and headers["Set-Cookie"].split(";")[0] == jar


def test_a_statement_is_served_as_explain_analyze_reports_it(ui_engine, oracle) -> None:
    cur = ui_engine.execute(f"EXPLAIN ANALYZE {JOIN}")
    lines = [row[0] for row in cur.fetchall()]
    listed = get_json(ui_engine, "/api/queries")
    entry = next(q for q in listed if q["sql"] == f"EXPLAIN ANALYZE {JOIN}")
    assert entry["status"] == "finished" and entry["user"] and entry["error"] is None
    assert {"id", "sql", "status", "stages", "seconds", "rows", "shuffle_bytes"} <= entry.keys()
    query = get_json(ui_engine, f"/api/queries/{entry['id']}")
    stages = {s["stage"]: s for s in query["stages"]}
    shuffles = {s["stage"]: s for s in query["shuffles"]}

    heads = [re.match(r"Stage (\d+): (\d+) task\(s\) → (.*?)(?: reads stages \[([\d, ]*)\])?$", line) for line in lines]
    heads = [(i, m) for i, m in enumerate(heads) if m]
    assert len(heads) == len(stages) >= 3  # two scans shuffled into a join, and more
    for i, head in heads:
        stage = stages[int(head[1])]
        assert stage["target"] == head[3]
        assert stage["parents"] == ([int(p) for p in head[4].split(",")] if head[4] else [])
        actual = dict(re.findall(r"(\w+)=([\d.]+)s?", lines[i + 1].split("[actual]")[1]))
        assert (stage["tasks"], stage["rows"], stage["bytes"], stage["shuffle_bytes"]) == tuple(
            int(actual[k]) for k in ("tasks", "rows", "bytes", "shuffled"))
        assert stage["tasks_done"] == stage["tasks"] and stage["operators"]
        shuffle_lines = [line for line in lines[i + 2: i + 4] if line.startswith("  [shuffle] ")]  # after [actual] and [tasks]
        if shuffle_lines:
            assert shuffle_lines == ["  [shuffle] " + shuffle_summary(shuffles[stage["stage"]])]
        else:
            assert stage["stage"] not in shuffles
    assert shuffles, "the join shuffles"
    total = next(m for m in (re.match(r"Total: [\d.]+s, (\d+) tasks, (\d+) bytes shuffled", line) for line in lines) if m)
    assert entry["tasks"] == int(total[1]) and entry["shuffle_bytes"] == int(total[2])

    # edges: one per stage read, labelled with the reading's exchange and the bytes sent
    assert sorted((e["from"], e["to"]) for e in query["edges"]) == sorted((p, s["stage"]) for s in query["stages"] for p in s["parents"])
    for edge in query["edges"]:
        assert edge["kind"] == stages[edge["from"]]["exchange"]["kind"]
        assert edge["bytes"] == (stages[edge["from"]]["shuffle_bytes"] or stages[edge["from"]]["bytes"])
    # every task done once, no two spans on one worker slot overlapping
    done = {(s["stage"], s["task"]) for s in query["spans"] if s["outcome"] == "done"}
    assert len(done) == sum(s["tasks"] for s in query["stages"])
    by_slot: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in query["spans"]:
        assert 0 <= s["start"] <= s["end"] and s["read_seconds"] >= 0
        by_slot.setdefault((s["worker"], s["slot"]), []).append((s["start"], s["end"]))
    for spans in by_slot.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    # pushes (prefetch): each from the worker its map task ran on, of shuffles that pushed
    ran_on = {(s["stage"], s["task"]): s["worker"] for s in query["spans"] if s["outcome"] == "done"}
    for push in query["pushes"]:
        assert push["outcome"] == "pushed" and 0 <= push["start"] <= push["end"]
        assert push["worker"] == ran_on[(push["stage"], push["task"])]
    assert {p["stage"] for p in query["pushes"]} <= {stage for stage, shuffle in shuffles.items() if shuffle["pushed_map_tasks"]}
    # per shuffle: reducer sizes, and the bytes per host adding up to what was shuffled
    for stage, shuffle in shuffles.items():
        assert len(shuffle["actual_bytes"]) == shuffle["partitions"] == stages[stage]["exchange"]["partitions"]
        assert sum(shuffle["actual_bytes"]) == stages[stage]["shuffle_bytes"]
        assert {h["address"] for h in shuffle["hosts"]} <= {w["address"] for w in get_json(ui_engine, "/api/workers")}
        assert sum(h["bytes"] for h in shuffle["hosts"]) == sum(shuffle["actual_bytes"])
        assert shuffle["local_bytes"] + shuffle["remote_bytes"] == sum(shuffle["actual_bytes"])

    # the query itself, against DuckDB: the rows the UI says it returned are DuckDB's
    assert_same(ui_engine, oracle, JOIN)
    again = next(q for q in get_json(ui_engine, "/api/queries") if q["sql"] == JOIN)
    assert again["status"] == "finished" and again["rows"] == len(oracle.execute(JOIN).fetchall())


def test_a_running_statement_is_seen_while_it_runs(ui_engine) -> None:
    cur = ui_engine.cursor()
    thread, errors = run_endless(cur)

    def running_tasks() -> list[dict]:
        query = get_json(ui_engine, f"/api/queries/{cur.query_id}")
        return [s for s in query["spans"] if s["outcome"] == "running"]

    wait_until(running_tasks, BOUND, "its tasks to be seen running")
    listed = next(q for q in get_json(ui_engine, "/api/queries") if q["id"] == cur.query_id)
    assert listed["status"] == "running" and listed["sql"] == ENDLESS
    assert get_json(ui_engine, "/api/queries")[0]["id"] == cur.query_id  # running ones first
    query = get_json(ui_engine, f"/api/queries/{cur.query_id}")
    assert query["stages"] and all(s["operators"] for s in query["stages"])
    assert sum(s["tasks_running"] for s in query["stages"]) >= 1
    workers = get_json(ui_engine, "/api/workers")
    assert len(workers) == 2 and all(w["alive"] and w["memory_bytes"] > 0 for w in workers)
    assert sum(w["slots_busy"] for w in workers) >= 1
    assert ui_engine.cancel(cur.query_id)
    thread.join(BOUND)
    assert not thread.is_alive() and errors and "cancelled" in str(errors[0])
    ended = get_json(ui_engine, f"/api/queries/{cur.query_id}")
    assert ended["status"] == "failed" and "cancelled" in ended["error"]
    assert not [s for s in ended["spans"] if s["outcome"] == "running"]
    # what it did until it was cancelled is kept: its stages, none of them done
    assert [s["stage"] for s in ended["stages"]] == [s["stage"] for s in query["stages"]]
    assert ended["stages"][-1]["tasks_done"] == 0 and ended["tasks"] == query["tasks"]
    assert request(ui_engine, "/api/queries/no-such-statement")[0] == 404


def test_ui_is_refused_where_it_does_not_apply() -> None:
    with pytest.raises(qengine.ProgrammingError, match="local cluster"):
        qengine.connect("qengine://127.0.0.1:1", token="x", ui=True)
    with pytest.raises(qengine.ProgrammingError, match="HOST:PORT"):
        qengine.connect(ui="nonsense")


def test_a_standalone_coordinator_serves_its_ui_with_its_queue(tmp_path, data_paths, oracle) -> None:
    port = free_port()
    args = ["--ui", f"127.0.0.1:{port}", "--max-queries-per-user", "1"]
    with cluster(tmp_path, 1, data_roots=data_root(data_paths), coordinator_args=args) as c:
        line = c.coordinator.stdout.readline()
        assert line.startswith(f"qengine web UI on http://127.0.0.1:{port}/") and c.token not in line, line

        def api(path: str, token: str | None = c.token):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
                response = conn.getresponse()
                return response.status, json.loads(response.read())
            finally:
                conn.close()

        assert api("/api/queries", None)[0] == 401 and api("/api/workers", "wrong")[0] == 401
        with c.connect(user="alice", broadcast_threshold=0) as con:
            register(con, data_paths)
            assert_same(con, oracle, JOIN)
            status, listed = api("/api/queries")
            assert status == 200
            [entry] = [q for q in listed if q["sql"] == JOIN]
            assert entry["user"] == "alice" and entry["status"] == "finished" and entry["stages"]
            # alice's second statement waits for her first: listed as queued, its SQL not known yet
            endless, waiting = con.cursor(), c.connect(user="alice")
            try:
                register(waiting, data_paths)
                threads = [threading.Thread(target=lambda cur=cur: _run_quietly(cur), daemon=True)
                           for cur in (endless, waiting.cursor())]
                threads[0].start()
                wait_until(lambda: any(q["status"] == "running" and q["sql"] == ENDLESS for q in api("/api/queries")[1]), BOUND,
                           "the endless statement to run")
                threads[1].start()
                wait_until(lambda: any(q["status"] == "queued" for q in api("/api/queries")[1]), BOUND, "the second to queue")
                [queued] = [q for q in api("/api/queries")[1] if q["status"] == "queued"]
                assert queued["user"] == "alice" and queued["sql"] is None and queued["queue"] == {"waits_for": "turn", "position": 1}
                assert api(f"/api/queries/{queued['id']}")[1]["status"] == "queued"
                for q in api("/api/queries")[1]:
                    if q["status"] in ("running", "queued"):
                        c.client().action("cancel_query", {"query": q["id"]}, timeout=10)
                for thread in threads:
                    thread.join(BOUND)
            finally:
                waiting.close()
        status, workers = api("/api/workers")
        assert status == 200 and len(workers) == 1 and workers[0]["alive"] and workers[0]["tasks_run"] > 0


def _run_quietly(cur) -> None:
    """Run the endless statement; its cancellation is expected."""
    with contextlib.suppress(qengine.Error):
        cur.execute(ENDLESS).fetchall()


def test_cli_sql_prints_the_ui_address(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "qengine.cli", "sql", "--ui", "-c", "SELECT 42 AS answer"],
                          capture_output=True, text=True, env=subprocess_env(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^qengine web UI: http://127\.0\.0\.1:\d+/\?token=\S+$", proc.stderr, re.MULTILINE), proc.stderr
    assert "42" in proc.stdout and "web UI" not in proc.stdout
    refused = subprocess.run([sys.executable, "-m", "qengine.cli", "sql", "--ui", "--cluster", "127.0.0.1:1", "-c", "SELECT 1"],
                             capture_output=True, text=True, env=subprocess_env(), cwd=tmp_path, timeout=120)
    assert refused.returncode == 1 and "coordinator --ui" in refused.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_the_ui_serves_https_with_the_clusters_certificate(tmp_path) -> None:
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, capture_output=True, timeout=60,
    )
    ui = UiServer(types.SimpleNamespace(history=QueryHistory()), "secret", tls_files=(cert, key))
    try:
        assert ui.url.startswith("https://127.0.0.1:")
        port = urllib.parse.urlsplit(ui.url).port
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ssl.create_default_context(cafile=cert))
        conn.request("GET", "/?token=secret")
        response = conn.getresponse()
        response.read()
        assert response.status == 303 and "Secure" in response.getheader("Set-Cookie")
        conn.request("GET", "/api/queries", headers={"Authorization": "Bearer secret"})
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read()) == []
        conn.close()
    finally:
        ui.stop()


def test_a_base64_token_typed_into_the_address_logs_in() -> None:
    # the "+" of a base64 token arrives as a space unless the user encodes it: the login failed
    from qengine.ui.server import create_app

    token = "ab+cd/ef=="
    app = create_app(None, token)
    assert app.test_client().get("/?token=ab+cd/ef==").status_code == 303
    assert app.test_client().get("/?token=ab%2Bcd/ef==").status_code == 303
    assert app.test_client().get("/?token=ab+cd/ef=x").status_code == 401
