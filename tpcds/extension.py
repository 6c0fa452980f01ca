"""DuckDB with the TPC-DS extension loaded from the ``duckdb-extension-tpcds`` wheel (no network)."""

from __future__ import annotations

import functools
import glob
import os

import duckdb

from qengine.errors import OperationalError


@functools.cache
def extension_path() -> str:
    try:
        import duckdb_extension_tpcds
    except ImportError as e:
        raise OperationalError("the duckdb-extension-tpcds package is not installed") from e
    base = os.path.dirname(duckdb_extension_tpcds.__file__)
    found = glob.glob(os.path.join(base, "extensions", f"v{duckdb.__version__}", "*.duckdb_extension"))
    if not found:
        raise OperationalError(f"duckdb-extension-tpcds has no build for duckdb {duckdb.__version__} under {base}")
    return found[0]


def connection(database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with tpcds loaded from the wheel's file; autoinstall stays off."""
    con = duckdb.connect(database, config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    con.execute(f"LOAD '{extension_path()}'")
    return con


@functools.cache
def queries() -> dict[int, str]:
    """The 99 TPC-DS query texts as the extension ships them."""
    con = connection()
    try:
        return {int(n): q for n, q in con.execute("SELECT query_nr, query FROM tpcds_queries() ORDER BY 1").fetchall()}
    finally:
        con.close()
