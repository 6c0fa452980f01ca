"""Queries survive lost, hung and slow workers, and still answer as DuckDB does.

Each test starts a 3-worker local cluster over TPC-DS SF 0.01 with every join shuffled
(``broadcast_threshold=0``) and small splits, in both shuffle modes, and has one worker fail at
a named phase through the deterministic fault hook (``QENGINE_FAULT``, ``runtime.faults``):
exit during a map stage, a prefetch push, a reduce stage or a shared CTE's materialization,
stop (hang), or turn slow. The query must still match DuckDB on the same Parquet; its
``stats.recovery`` must name the lost worker; the cluster must get back to 3 workers; the next
query on the same connection must match DuckDB too; and no spill file may be left behind. A
task failing with a data error is not retried: the query fails at once with DataError.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import duckdb
import pytest

import qengine
from qengine.api.dbapi import Connection
from qengine.runtime import block_copies, query_run
from qengine.runtime.faults import ENV
from qengine.runtime.query_run import QueryRun
from qengine.runtime.stats import QueryStats, RecoveryStats
from tests.conftest import duckdb_over, plan_lines, wait_until
from tpcds.compare import compare
from tpcds.extension import queries
from tpcds.gen import generate

SF = 0.01
WORKERS = 3
VICTIM = 1  # the worker the fault hook (or the test) takes down
MODES = ("pull", "prefetch")
RECOVERY_DEADLINE = 60.0  # seconds allowed for a replacement worker to join, or blocks to be freed
QUERY_DEADLINE = 30.0  # seconds after which a query that is still recovering counts as hung

Progress = Callable[[int, int], None]

pytestmark = pytest.mark.timeout(180)  # a backstop: run_same cancels a hung query well before

# NO_SPECULATION: a test whose fault hook must fire on the victim at a later phase (its second
# map task, a materialization, a push) turns speculation off. With it on, a worker whose tasks a
# busy host happened to delay is found slow and kept off new work, and may never reach that phase.

# A shared CTE computed in a chain of stages (scans → join → aggregate, materialized → its two
# readers → …): nothing else runs beside the stages after it, so once the tasks of every stage
# up to the materialization have finished, only stages that read it are left.
SHARED_CHAIN = """
WITH totals AS (
  SELECT ss_customer_sk AS customer, sum(ss_net_paid) AS paid, count(*) AS n
  FROM store_sales JOIN date_dim ON ss_sold_date_sk = d_date_sk
  WHERE ss_customer_sk IS NOT NULL
  GROUP BY ss_customer_sk)
SELECT a.n, count(*) AS customers, sum(a.paid) AS paid
FROM totals a JOIN totals b ON a.customer = b.customer
WHERE a.paid > 0 AND b.n >= 1
GROUP BY a.n
ORDER BY a.n
"""


# A whole-table sort: a range shuffle, several map tasks at split_size 200KB
SORTED = "SELECT ss_ticket_number, ss_item_sk, ss_quantity FROM store_sales ORDER BY ss_ticket_number, ss_item_sk"


def q(number: int) -> str:
    """TPC-DS query ``number`` as DuckDB's extension ships it (q7 and q78: joins and GROUP BY
    with a non-empty answer at SF 0.01; q2: a WITH read twice, materialized once)."""
    return queries()[number]


@pytest.fixture(scope="module")
def tpcds_root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """TPC-DS SF 0.01 with 2,000-row row groups, so the fact tables scan as several map tasks
    (as in test_benchmark_queries)."""
    root = str(tmp_path_factory.mktemp("tpcds-recovery"))
    generate(SF, root, force=True, row_group_rows=2_000)
    return root


def table_paths(root: str) -> dict[str, str]:
    return {table: os.path.join(root, table) for table in sorted(os.listdir(root))}


@pytest.fixture(scope="module")
def oracle(tpcds_root: str) -> Iterator[duckdb.DuckDBPyConnection]:
    con = duckdb_over(table_paths(tpcds_root))
    yield con
    con.close()


@pytest.fixture
def connect(tpcds_root: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Connection]]:
    """``connect(mode, fault=None, **options)``: a fresh 3-worker cluster, started with the
    fault plan in its workers' environment; every cluster a test opens is closed, even when
    the test fails."""
    opened: list[Connection] = []

    def open_cluster(mode: str, fault: str | None = None, **options: object) -> Connection:
        if fault is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, fault)
        con = qengine.connect(workers=WORKERS, split_size="200KB", broadcast_threshold=0, shuffle=mode, **options)
        opened.append(con)
        for table, path in table_paths(tpcds_root).items():
            con.register_parquet(table, path)
        return con

    yield open_cluster
    for con in opened:
        con.close()


def run_same(con: Connection, oracle: duckdb.DuckDBPyConnection, sql: str, progress: Progress | None = None) -> QueryStats:
    """Run ``sql`` on qengine, require DuckDB's answer, and return the run's statistics.

    A recovery that never ends would hang the suite: past ``QUERY_DEADLINE`` the query is
    cancelled and the test fails saying so.
    """
    cur = con.cursor()
    gave_up = threading.Event()

    def give_up() -> None:
        gave_up.set()
        con.session.cancel()

    timer = threading.Timer(QUERY_DEADLINE, give_up)
    timer.start()
    try:
        got = cur.execute(sql, progress=progress).fetch_arrow_table()
    except qengine.OperationalError as e:
        if gave_up.is_set():
            raise AssertionError(f"the query had not finished after {QUERY_DEADLINE:.0f} s; cancelled it") from e
        raise
    finally:
        timer.cancel()
    expected = oracle.execute(sql).to_arrow_table()
    result = compare(got, expected, sql)
    assert result.ok, f"{result.message}\nrecovery: {cur.stats.recovery.summary()}"
    return cur.stats


def victim_address(con: Connection) -> str:
    handle = next(w for w in con._cluster.workers if w.id == VICTIM)
    return handle.address


def assert_lost_victim(recovery: RecoveryStats, address: str) -> None:
    """The run lost exactly the victim, and says so by its id and address."""
    assert len(recovery.lost_workers) == 1, f"expected worker {VICTIM} lost, got {recovery.summary()}"
    assert recovery.lost_workers[0].startswith(f"worker {VICTIM} at {address} "), recovery.summary()


def spill_files(directory: str) -> list[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(directory) for f in files]


def assert_cluster_recovered(con: Connection, oracle: duckdb.DuckDBPyConnection, lost: str | None, next_sql: str) -> None:
    """Back to 3 live workers (the lost one replaced, its spill directory gone), the next query
    answers as DuckDB does, and once it is done the live workers hold no spill files."""
    cluster = con._cluster

    def workers() -> str:
        return ", ".join(f"{w.id}@{w.address} alive={w.alive()}" for w in cluster.workers)

    wait_until(lambda: len(cluster.workers) == WORKERS and all(w.alive() for w in cluster.workers), RECOVERY_DEADLINE,
               lambda: f"{WORKERS} live workers (have {workers()})")
    if lost is not None:
        assert lost not in cluster.addresses
        assert VICTIM not in {w.id for w in cluster.workers}
    live_dirs = {w.spill_dir for w in cluster.workers}
    gone = [d for d in cluster.spill_dirs if d not in live_dirs and os.path.exists(d)]
    assert not gone, f"spill directories of lost workers left behind: {gone}"
    stats = run_same(con, oracle, next_sql)
    assert not stats.recovery.lost_workers, stats.recovery.summary()
    wait_until(lambda: not any(spill_files(d) for d in live_dirs), RECOVERY_DEADLINE,
               lambda: f"empty spill directories, have {[f for d in live_dirs for f in spill_files(d)]}")


# ---- the plans the faults aim at ---------------------------------------------------------


def test_shared_ctes_are_materialized(connect) -> None:
    """The CTE tests below aim at a materialize stage: q2's WITH and SHARED_CHAIN's, each read
    twice, must plan as one."""
    con = connect("pull", coalesce_size=0)
    for sql in (q(2), SHARED_CHAIN):
        lines = plan_lines(con, sql)
        assert sum("materialized for its readers" in line for line in lines) == 1, "\n".join(lines)
        assert sum("(materialized)" in line for line in lines) >= 2, "\n".join(lines)


# ---- workers that exit -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", ["phase=map;after=2", "phase=reduce"], ids=["map", "reduce"])
def test_worker_exits_during_map_or_reduce(connect, oracle: duckdb.DuckDBPyConnection, mode: str, fault: str) -> None:
    """A worker gone after its second map task stored its output, or once a reducer of its has
    loaded its inputs: the task is run again elsewhere, and the map output the worker held is
    recomputed from its lineage, or, in prefetch, read from the copies their senders kept of
    blocks pushed to it. Which of the two depends on where the lost reducer's inputs were made,
    which varies from run to run; reading the copies is checked exactly in
    ``test_slow_workers.py``. (Speculation is off so that reducers stay where MinHeap put them:
    with it on, a worker that a busy host makes look slow has its waiting reducers placed
    elsewhere.)"""
    con = connect(mode, f"worker={VICTIM};{fault};action=exit", speculation=False)
    address = victim_address(con)
    stats = run_same(con, oracle, q(78))
    assert_lost_victim(stats.recovery, address)
    assert stats.recovery.retried >= 1, stats.recovery.summary()
    if mode == "prefetch" and "reduce" in fault:
        # The reducer's blocks were on the lost host (pushed there, or made there): made
        # again, or read from their senders' copies.
        assert stats.recovery.recomputed + stats.recovery.from_backups >= 1, stats.recovery.summary()
    assert_cluster_recovered(con, oracle, address, q(7))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("after", [1, 2])
def test_worker_exits_during_a_range_map_stage(connect, oracle: duckdb.DuckDBPyConnection, mode: str, after: int) -> None:
    """A sort's range shuffle loses a worker before or after its bounds are chosen: the map
    tasks run again are partitioned by the same bounds (or staged until they are chosen), and
    the stage finishes."""
    con = connect(mode, f"worker={VICTIM};phase=map;after={after};action=exit", speculation=False)  # see NO_SPECULATION
    plan = "\n".join(r[0] for r in con.execute(f"EXPLAIN {SORTED}").fetchall())
    assert "range" in plan.lower(), plan
    address = victim_address(con)
    stats = run_same(con, oracle, SORTED)
    assert_lost_victim(stats.recovery, address)
    assert_cluster_recovered(con, oracle, address, q(7))


def test_worker_exits_during_push(connect, oracle: duckdb.DuckDBPyConnection) -> None:
    """Prefetch only: a worker gone as it pushes map blocks to their reducers' hosts. The hook
    must fire (a push phase was reached), and the unpushed blocks are recomputed. Reducers are
    placed once a tenth of the map tasks are done: a shuffle whose map tasks have all ended by
    then is fetched rather than pushed (``push_decision``), and would reach no push at all.
    Speculation is off: a worker whose first, cold task makes it look slow is kept off the scan
    splits, and would have no map output to push. Whether a push pays is decided from the
    measured pace of the map tasks and the links: on a fast run it may not, and the query is
    run again (each answer checked) until one reaches a push, three times at most."""
    con = connect("prefetch", f"worker={VICTIM};phase=push;action=exit", prefetch_fraction=0.1, speculation=False)
    address = victim_address(con)
    for _ in range(3):
        stats = run_same(con, oracle, q(7))
        if stats.recovery.lost_workers:
            break
    assert_lost_victim(stats.recovery, address)
    assert stats.recovery.recomputed + stats.recovery.retried >= 1, stats.recovery.summary()
    assert_cluster_recovered(con, oracle, address, q(78))


@pytest.mark.parametrize("mode", MODES)
def test_worker_exits_while_materializing(connect, oracle: duckdb.DuckDBPyConnection, mode: str) -> None:
    """A worker gone right after it stored a partition of a shared CTE, before it replied:
    the partition is made again on a survivor, and both readers of the CTE read it there."""
    con = connect(mode, f"worker={VICTIM};phase=materialize;action=exit", speculation=False)  # see NO_SPECULATION
    address = victim_address(con)
    stats = run_same(con, oracle, q(2))
    assert_lost_victim(stats.recovery, address)
    assert stats.recovery.retried >= 1, stats.recovery.summary()
    assert_cluster_recovered(con, oracle, address, SHARED_CHAIN)


@pytest.mark.parametrize("mode", MODES)
def test_worker_killed_after_materialization(
    connect, oracle: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A worker killed once the shared CTE's stage (and every stage before it) has finished:
    the partitions it held are still to be read, so they are recomputed from their lineage.

    The kill comes from the query's progress callback: SHARED_CHAIN's stages run one after the
    other, so once as many tasks have finished as there are in the stages up to the
    materialization, exactly those have. ``coalesce_size=0`` keeps a task per partition, so
    every worker holds some of the CTE.
    """
    monkeypatch.setattr(block_copies, "COPY_TASK_BYTES", -1)  # no copies: see the test below
    # nor speculation: on a busy machine a speculative copy of a CTE task left its partition on
    # another worker too, and nothing was left to recompute
    con = connect(mode, coalesce_size=0, speculation=False)
    clean = run_same(con, oracle, SHARED_CHAIN)  # the stage shapes, from a run without faults
    kinds = [s.kind for s in clean.stages]
    assert kinds.count("materialize") == 1, kinds
    materialize = kinds.index("materialize")
    upto = sum(s.tasks for s in clean.stages[: materialize + 1])
    handle = next(w for w in con._cluster.workers if w.id == VICTIM)
    killed: list[int] = []

    def kill_after_materialization(done: int, total: int) -> None:
        if done >= upto and not killed:
            killed.append(done)
            os.kill(handle.process.pid, signal.SIGKILL)

    stats = run_same(con, oracle, SHARED_CHAIN, kill_after_materialization)
    assert killed == [upto], f"killed after {killed} tasks, expected after {upto}"
    assert [s.tasks for s in stats.stages[: materialize + 1]] == [s.tasks for s in clean.stages[: materialize + 1]]
    assert_lost_victim(stats.recovery, handle.address)
    assert stats.recovery.recomputed >= 1, stats.recovery.summary()
    assert_cluster_recovered(con, oracle, handle.address, q(2))


# ---- when a replacement starts --------------------------------------------------------


def test_replacement_starts_once_the_query_has_ended(connect, oracle: duckdb.DuckDBPyConnection, caplog: pytest.LogCaptureFixture) -> None:
    """The workers of a local cluster share one host's cores: a replacement started while the
    query that lost a worker still runs would take CPU from it. It starts after the query's
    last task (the last progress report), not at the loss."""
    con = connect("pull", f"worker={VICTIM};phase=map;after=2;action=exit", speculation=False)  # see NO_SPECULATION
    address = victim_address(con)
    reports: list[float] = []
    with caplog.at_level(logging.INFO, logger="qengine.runtime.local_cluster"):
        stats = run_same(con, oracle, q(78), lambda done, total: reports.append(time.time()))
        assert_lost_victim(stats.recovery, address)
        wait_until(lambda: len(con._cluster.workers) == WORKERS, RECOVERY_DEADLINE, "the replacement")
    starts = [r.created for r in caplog.records if r.getMessage() == f"starting a worker in place of worker {VICTIM}"]
    assert len(starts) == 1, caplog.text
    assert starts[0] >= reports[-1], f"replacement started {reports[-1] - starts[0]:.2f} s before the query's last task ended"


def test_query_waits_for_a_replacement_when_no_worker_is_left(tpcds_root: str, oracle: duckdb.DuckDBPyConnection) -> None:
    """A one-worker cluster whose worker was killed between queries: the next query waits for
    the replacement instead of failing for want of a worker."""
    with qengine.connect(workers=1) as con:
        for table, path in table_paths(tpcds_root).items():
            con.register_parquet(table, path)
        cluster = con._cluster
        handle = cluster.workers[0]
        os.kill(handle.process.pid, signal.SIGKILL)
        wait_until(lambda: cluster.lost([handle.address]), RECOVERY_DEADLINE, "the loss to be noticed")
        stats = run_same(con, oracle, q(7))
        assert not stats.recovery.lost_workers, stats.recovery.summary()
        assert handle.address not in cluster.addresses


# ---- a hung worker, a slow one -----------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_hung_worker_is_replaced(connect, oracle: duckdb.DuckDBPyConnection, mode: str) -> None:
    """A worker that stops (SIGSTOP) after its first map output answers no ping: after the hang
    timeout the watchdog kills and replaces it, and the query recovers as from an exit."""
    con = connect(mode, f"worker={VICTIM};phase=map;action=stop", hang_timeout=2)
    address = victim_address(con)
    stats = run_same(con, oracle, q(7))
    assert_lost_victim(stats.recovery, address)
    assert "hung" in stats.recovery.lost_workers[0], stats.recovery.summary()
    assert_cluster_recovered(con, oracle, address, q(78))


@pytest.mark.parametrize("mode", MODES)
def test_slow_worker_is_speculated(connect, oracle: duckdb.DuckDBPyConnection, mode: str) -> None:
    """A worker whose every task first sleeps 2 s is a straggler, not a lost worker: LATE
    copies at least one of its tasks to a faster worker (each task once at most), and the
    answer is unchanged."""
    con = connect(mode, f"worker={VICTIM};phase=task;action=slow;seconds=2")
    stats = run_same(con, oracle, q(7))
    assert not stats.recovery.lost_workers, stats.recovery.summary()
    assert stats.recovery.speculated >= 1, stats.recovery.summary()
    # One copy per task at most, however the copies fare.
    assert stats.recovery.speculated <= sum(s.tasks for s in stats.stages), stats.recovery.summary()
    assert_cluster_recovered(con, oracle, None, q(42))


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_known_to_be_slow_gets_no_work_in_the_next_query(
    connect, oracle: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The first query finds the slow worker and names it. The next starts from what the first
    saw: it places no reducer and no single-task stage there; a scan split it gives the worker
    (in case it has become fast again) shows it has not, and is copied to a fast worker, whose
    answer is the one taken. So no output of the second query comes from the slow worker."""
    con = connect(mode, f"worker={VICTIM};phase=task;action=slow;seconds=2")
    address = victim_address(con)
    first = run_same(con, oracle, q(7))
    assert address in first.recovery.slow_workers, first.recovery.summary()
    assert "kept off new work" in first.recovery.summary()
    ran: list[str] = []
    commit = QueryRun._commit

    def recording(self, run, index, attempt, worker, *rest):
        ran.append(self.state.addresses[worker])
        return commit(self, run, index, attempt, worker, *rest)

    monkeypatch.setattr(QueryRun, "_commit", recording)
    second = run_same(con, oracle, q(42))
    assert address in second.recovery.slow_workers, second.recovery.summary()
    assert ran and address not in ran, ran


def test_slow_worker_without_speculation(connect, oracle: duckdb.DuckDBPyConnection) -> None:
    """``speculation=False`` turns LATE off: the same slow worker as above gets no copies,
    its tasks are waited for, and the answer is unchanged."""
    con = connect("prefetch", f"worker={VICTIM};phase=task;action=slow;seconds=2", speculation=False)
    stats = run_same(con, oracle, q(7))
    assert stats.recovery.speculated == 0, stats.recovery.summary()
    assert not stats.recovery.any(), stats.recovery.summary()


# ---- errors that are the query's own -----------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_data_error_is_not_retried(connect, oracle: duckdb.DuckDBPyConnection, mode: str) -> None:
    """A task that fails on a value (a CAST of a non-numeric item id, in a plan with shuffles)
    fails the query with DataError rather than being retried: no worker is lost or replaced,
    and the next query runs."""
    con = connect(mode)
    before = list(con._cluster.addresses)
    sql = """
        SELECT i_category, sum(CAST(i_item_id AS INTEGER)) AS s
        FROM store_sales JOIN item ON ss_item_sk = i_item_sk
        GROUP BY i_category
    """
    with pytest.raises(qengine.DataError):
        con.execute(sql).fetchall()
    assert con._cluster.addresses == before
    assert_cluster_recovered(con, oracle, None, q(7))
    assert con._cluster.addresses == before


# ---- copies of small map output ----------------------------------------------------------


def test_a_shared_cte_held_by_a_killed_worker_is_read_from_its_copies(
    connect, oracle: duckdb.DuckDBPyConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pull mode, where nothing is pushed and so no sender keeps a copy. The victim is killed as
    soon as copies of the shared CTE's partitions are on record on a second worker
    (``runtime.block_copies``), while its readers still run: the partitions it held are read
    from the copies instead of being made again from their lineage, as
    ``test_worker_killed_after_materialization`` has them made without copies."""
    con = connect("pull", coalesce_size=0, speculation=False)
    handle = next(w for w in con._cluster.workers if w.id == VICTIM)
    killed: list[int] = []
    record = block_copies.record_copies

    def record_then_kill(state, run, body, result) -> int:
        count = record(state, run, body, result)
        held = any(host == VICTIM for per_task in run.blocks.values() for host, *_ in per_task.values())
        if run.stats.kind == "materialize" and count and not killed and held:
            killed.append(count)
            os.kill(handle.process.pid, signal.SIGKILL)
        return count

    monkeypatch.setattr(query_run, "record_copies", record_then_kill)
    stats = run_same(con, oracle, SHARED_CHAIN)
    assert killed, f"no copy of the shared CTE held by worker {VICTIM} was on record before the query ended"
    assert_lost_victim(stats.recovery, handle.address)
    assert stats.recovery.from_backups >= 1, stats.recovery.summary()
    assert_cluster_recovered(con, oracle, handle.address, q(7))
