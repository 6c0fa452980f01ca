"""The simulated multi-host cluster: 2 network-namespace hosts with shaped links run one query.

Needs root (namespaces, tc); skips with the reason otherwise. The namespaces and links must be
gone afterwards, whatever happens.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, assert_same

# bench/ holds scripts run from a checkout, importing each other as siblings; it is not a package.
sys.path.insert(0, os.path.join(REPO, "bench"))
from netcluster import NetCluster, missing_requirement  # noqa: E402

REASON = missing_requirement()


@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_two_namespace_hosts_run_a_query_and_are_torn_down(tmp_path, data_paths, oracle):
    cluster = NetCluster(2, "300mbit", str(tmp_path), data_roots=[os.path.dirname(data_paths["sales"])])
    try:
        with cluster:
            namespaces = list(cluster.namespaces)
            assert len(namespaces) == 3  # coordinator + 2 hosts
            with cluster.connect(broadcast_threshold=0, split_size="200KB") as con:
                for name, path in data_paths.items():
                    con.register_parquet(name, path)
                assert_same(con, oracle, "SELECT c.city, count(*), sum(s.qty) FROM sales s JOIN customers c ON s.cust_id = c.cust_id GROUP BY 1")
                stats = con.execute("SELECT cust_id, count(*) FROM sales GROUP BY 1").stats
                assert sum(s.remote_bytes for s in stats.shuffles) > 0, "no bytes crossed between the hosts"
    finally:
        cluster.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert cluster.prefix not in links
