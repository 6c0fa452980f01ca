"""A worker's calls to a peer that hangs end once the query's coordinator declares the peer lost."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from qengine.errors import InputLostError, lost_input
from qengine.runtime.local_cluster import LocalCluster
from qengine.runtime.peers import Peers
from qengine.transport.rpc import ClientPool

GIVE_UP_WITHIN = 2.0  # seconds from the declaration to the call's failure (the check runs every 0.1 s)


@pytest.fixture
def stopped_peer():
    """A worker process that is stopped (SIGSTOP): it accepts connections and never answers."""
    cluster = LocalCluster(1, hang_timeout=120)  # its own watchdog must not kill it meanwhile
    worker = cluster.workers[0]
    try:
        os.kill(worker.process.pid, signal.SIGSTOP)
        yield cluster, worker.address
    finally:
        os.kill(worker.process.pid, signal.SIGCONT)
        cluster.close()


def test_a_call_waiting_on_a_stopped_peer_fails_once_it_is_declared_lost(stopped_peer) -> None:
    cluster, address = stopped_peer
    pool = ClientPool(cluster.token)
    peers = Peers(pool)
    outcomes: dict[str, BaseException | None] = {}

    def fetch(query: str) -> None:
        key = f"{query}/0"
        try:
            peers.call(key, address, lambda: pool.get(address).get({"key": key, "partition": 0, "want": [[0, 0]]}))
            outcomes[query] = None
        except BaseException as e:  # noqa: BLE001 - inspected below
            outcomes[query] = e

    calls = {q: threading.Thread(target=fetch, args=(q,), daemon=True) for q in ("q1", "q2")}
    for thread in calls.values():
        thread.start()
    time.sleep(0.5)
    assert not outcomes, f"a stopped peer answered: {outcomes}"
    declared = time.monotonic()
    peers.lost("q1", address)
    calls["q1"].join(GIVE_UP_WITHIN)
    assert time.monotonic() - declared < GIVE_UP_WITHIN
    error = outcomes.get("q1")
    assert isinstance(error, InputLostError), error
    info = lost_input(str(error))
    assert info == {"address": address, "key": "q1/0", "missing": None}
    assert "q2" not in outcomes, "another query's call was given up too"
    with pytest.raises(InputLostError):  # later calls of the query fail at once
        peers.call("q1/1", address, lambda: pytest.fail("a call to a lost peer was made"))
    pool.close()
