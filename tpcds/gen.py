"""``qengine tpcds gen``: TPC-DS tables as Parquet directories, from DuckDB's dsdgen."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from qengine.cli.common import prepare_output_dir
from qengine.errors import ProgrammingError
from tpcds.extension import connection

# Rows per Parquet row group: small enough that SF 1 fact tables split into several tasks per worker.
ROW_GROUP_ROWS = 100_000


def generate(
    sf: float,
    out: str,
    force: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    row_group_rows: int = ROW_GROUP_ROWS,
) -> list[str]:
    """Write one Parquet directory per table under ``out``; returns the table names.

    ``row_group_rows`` bounds the rows per row group, the unit a scan splits on: smaller ones
    let a tiny scale factor's tables scan as several tasks, as SF 1's fact tables do.
    """
    if sf <= 0:
        raise ProgrammingError(f"scale factor must be positive, not {sf}")
    if row_group_rows < 1:
        raise ProgrammingError(f"rows per row group must be positive, not {row_group_rows}")
    prepare_output_dir(out, force)
    with tempfile.TemporaryDirectory(prefix="qengine-dsdgen-") as tmp:
        con = connection(os.path.join(tmp, "gen.duckdb"))
        try:
            if progress:
                progress("dsdgen", 0, 1)
            con.execute(f"CALL dsdgen(sf={float(sf)})")
            tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables ORDER BY 1").fetchall()]
            for i, table in enumerate(tables):
                if progress:
                    progress(table, i, len(tables))
                target = os.path.join(out, table)
                os.makedirs(target, exist_ok=True)
                path = os.path.join(target, "part-0.parquet").replace("'", "''")
                con.execute(f"COPY {table} TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE {int(row_group_rows)})")
            if progress:
                progress("done", len(tables), len(tables))
        finally:
            con.close()
    return tables
