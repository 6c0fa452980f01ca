"""The fragment engine's sandbox: DuckDB connections that see only the inputs registered on them.

Fragments are rendered from user SQL, so the connection they run on must not reach files, the
network, extensions or its own configuration. Every DuckDB connection that evaluates plan
expressions (tasks, range partitioning, size prediction) comes from here.
"""

from __future__ import annotations

import duckdb


def safe_connection(threads: int = 1) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection that cannot reach files, the network or extensions."""
    return duckdb.connect(
        config={
            "threads": threads,
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
            "allow_unsigned_extensions": False,
            "disabled_optimizers": "join_order,build_side_probe_side",
            "lock_configuration": True,
        }
    )
