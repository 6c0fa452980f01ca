"""``qengine terasort run``: sort records through the engine itself.

The job is ``SELECT key, payload FROM records ORDER BY key``: a range exchange with sampled
bounds, then a local sort on each reducer, and each reducer writes its own output file
(``COPY … TO``), so no process ever holds all the data and the file names give the order.
Unless ``--partitions`` says otherwise, there is one reducer per 32 MB of records (never fewer
than the engine's default), and map tasks read 16 MB splits.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq

import qengine
from qengine.api.options import DEFAULT_WORKERS, default_partitions
from qengine.catalog.sources import records
from qengine.cli.common import announce_ui
from qengine.runtime.stats import QueryStats


def copy_sql(output_dir: str, force: bool) -> str:
    """The TeraSort statement, one place for ``sort`` and bench/netcluster.py to build it from."""
    target = os.path.abspath(output_dir).replace("'", "''")
    overwrite = " , OVERWRITE true" if force else ""
    return f"COPY (SELECT key, payload FROM records ORDER BY key) TO '{target}' (FORMAT parquet, PER_THREAD_OUTPUT true{overwrite})"


# Each reducer sorts about this much, so a worker's peak memory stays near its share of the data
# (a reducer holds its combined input and one batch of sorted output, two reducers at a time)
# rather than growing with records per worker. At 32 MB rather than 64 MB, a prefetch worker's
# peak at 10M records fell by about 50 MB, with reducer load max/mean about 1.10 instead of 1.06.
REDUCER_BYTES = 32 << 20
# Each map task reads about this much. A map task holds its input and the partitioned copy, and
# two run at once per worker. At 16 MB rather than the 64 MB default, a worker's peak at 10M
# records fell from about 1.55 GiB to 1.1 GiB, and the sort took no longer.
MAP_SPLIT_BYTES = "16MB"


def _record_bytes(input_dir: str, names: list[str]) -> int:
    paths = [os.path.join(input_dir, n) for n in names]
    parquet = [p for p in paths if p.endswith(".parquet")]
    if parquet:
        return sum(pq.read_metadata(p).num_rows for p in parquet) * records.RECORD
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def sort(
    input_dir: str,
    output_dir: str,
    options: dict[str, Any],
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, QueryStats]:
    """Sort ``input_dir`` (Parquet or raw .dat records) into ``output_dir``; returns (records, stats)."""
    if not os.path.isdir(input_dir):
        raise qengine.ProgrammingError(f"{input_dir} is not a directory of records")
    names = os.listdir(input_dir)
    options = {"split_size": MAP_SPLIT_BYTES, **options}
    if not options.get("partitions"):
        workers = options.get("workers") or DEFAULT_WORKERS
        options["partitions"] = max(default_partitions(workers), math.ceil(_record_bytes(input_dir, names) / REDUCER_BYTES))
    # One reducer per range partition, so each writes its own file (TeraSort's layout).
    # The output directory was named on the command line: COPY may write there.
    output_roots = [os.path.dirname(os.path.abspath(output_dir))]
    with qengine.connect(**{"coalesce_size": 0, "output_roots": output_roots, **options}) as con:
        announce_ui(con)  # --ui: watch the sort run
        if any(n.endswith(".parquet") for n in names):
            con.register_parquet("records", input_dir)
        else:
            con.register_records("records", input_dir)
        cur = con.cursor().execute(copy_sql(output_dir, force), progress=progress)
        return cur.rowcount, cur.stats
