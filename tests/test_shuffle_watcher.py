"""ShuffleWatcher on a shared cluster: the network's load from the exchange's own byte counts
(NetSat, ``runtime.network_load``), SAMP's choice of hosts for a shuffle-heavy query
(``runtime.shares``) with its reducers placed there (SARP), and NASS holding reducers back while
the network is saturated (``runtime.dispatch``)."""

from __future__ import annotations

import pytest

import qengine
from qengine.runtime import dispatch, query_run
from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.shares import Shares
from qengine.runtime.slots import Slots
from tests.conftest import wait_until
from tests.test_admission import JOIN
from tests.test_cancellation import run_endless

BOUND = 60.0  # seconds; only guards against hangs


def test_the_network_load_counts_bytes_under_way_in_seconds_of_each_link() -> None:
    network = NetworkLoad()
    handle = network.begin([("a", "b", 30), ("a", "a", 10**9), ("c", "b", 0)])  # same host and empty: not counted
    assert not network.saturated(["a", "b"])  # no rate known: never saturated
    network.rates.learn("a", 100.0)
    network.rates.learn("b", 10.0)
    assert network.seconds("a") == pytest.approx(0.3)
    assert network.seconds("b") == pytest.approx(3.0)
    assert network.saturated(["a", "b"]) and not network.saturated(["a"])
    network.end(handle)
    assert network.seconds("b") == 0.0 and not network.saturated(["a", "b"])
    assert network.begin([("a", "a", 5)]) is None
    network.end(None)


def test_samp_keeps_shuffle_heavy_queries_that_share_the_cluster_to_their_share_of_hosts() -> None:
    hosts = ["h0", "h1", "h2", "h3"]
    shares = Shares("fair", {"alice": 3.0}, samp=True)
    with shares.claim("a", "alice"):
        assert shares.samp_hosts("a", True, hosts) is None  # alone: every host
        with shares.claim("b", "bob"):
            assert shares.samp_hosts("b", False, hosts) is None  # not shuffle-heavy
            mine = shares.samp_hosts("a", True, hosts)
            theirs = shares.samp_hosts("b", True, hosts)
            assert mine is not None and theirs is not None
            assert (len(mine), len(theirs)) == (3, 1)  # alice weighs 3, bob 1
            assert not set(mine) & set(theirs)  # spread over the hosts others use least
    off = Shares("fair", samp=False)
    with off.claim("a"), off.claim("b"):
        assert off.samp_hosts("a", True, hosts) is None


def test_samp_hosts_take_free_tasks_and_another_host_only_when_nothing_runs_there() -> None:
    from qengine.runtime.cluster_load import ClusterLoad

    load = ClusterLoad()
    addresses = ["w0", "w1", "w2"]
    slots = Slots(3, 1, load=load, addresses=addresses)
    slots.prefer({0})
    assert slots.take(None) == 0
    load.started("w1")  # another query runs a task on w1
    assert slots.take(None) == 2  # w0 is full: w2, which nothing uses, is not left idle
    assert slots.take(None) is None  # w1 is busy with another query's task


@pytest.fixture
def shared(data_paths, monkeypatch):
    """A 4-worker local cluster with ShuffleWatcher on, links measured at a byte a second (so
    any fetch saturates the network), and every shuffle counted as heavy."""
    monkeypatch.setattr(dispatch, "NASS_MIN_BYTES", 1)
    monkeypatch.setattr(query_run, "SHUFFLE_HEAVY_BYTES", 1)
    con = qengine.connect(workers=4, slots=1, shuffle="pull", broadcast_threshold=0, split_size="64KB")
    try:
        for name, path in data_paths.items():
            con.register_parquet(name, path)
        cluster = con._cluster
        cluster.shares = Shares("fair", nass=True, samp=True)
        con.execute("SELECT 1").fetchall()  # the workers are up
        for address in cluster.addresses:
            cluster.network.rates.learn(address, 1.0)
        yield con
    finally:
        con.close()


def test_a_query_sharing_the_cluster_keeps_to_its_hosts_and_waits_for_the_network(shared, oracle) -> None:
    """While another query runs and a transfer of its loads the links, a shuffle-heavy join
    keeps its map tasks and reducers to half of the hosts (SAMP, SARP), has its reducers held
    back while the network is saturated (NASS), says so in EXPLAIN ANALYZE, and answers as
    DuckDB does. Alone, it uses every host and nothing holds it back."""
    con = shared
    network = con._cluster.network
    addresses = con._cluster.addresses
    loading = network.begin([(addresses[0], address, 10) for address in addresses[1:]])
    endless = con.cursor()
    thread, errors = run_endless(endless)
    wait_until(lambda: con._cluster.shares.running() == 1, BOUND, "the endless query to run")
    try:
        cur = con.cursor()
        got = cur.execute(JOIN).fetchall()
        assert sorted(got, key=repr) == sorted(oracle.execute(JOIN).fetchall(), key=repr)
        sharing = cur.stats.sharing
        assert len(sharing.samp_hosts) == 2
        kept = {con._cluster.addresses.index(a) for a in sharing.samp_hosts}
        for shuffle in cur.stats.shuffles:
            assert {w for w, load in enumerate(shuffle.host_loads) if load} <= kept
        assert sharing.nass_delays >= 1
        plan = "\n".join(r[0] for r in con.execute("EXPLAIN ANALYZE " + JOIN).fetchall())
        assert "(SAMP)" in plan and "(NASS)" in plan
    finally:
        network.end(loading)
        assert con.cancel(endless.query_id) is True
        thread.join(BOUND)
    assert len(errors) == 1 and "query cancelled" in str(errors[0])
    assert con._cluster.shares.running() == 0
    cur = con.cursor()
    cur.execute(JOIN).fetchall()
    assert cur.stats.sharing.samp_hosts == [] and cur.stats.sharing.nass_delays == 0
    for address in con._cluster.addresses:  # nothing is left counted as under way
        assert con._cluster.network.seconds(address) == 0.0
