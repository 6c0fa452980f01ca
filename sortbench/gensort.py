"""``qengine terasort gen``: records in the Sort Benchmark's gensort layout.

Each record is 100 bytes (gensort's binary format):

| bytes  | content                                                        |
|--------|----------------------------------------------------------------|
| 0–9    | key: 10 random bytes (skewed with ``--skew``)                  |
| 10–11  | 0x00 0x11                                                      |
| 12–43  | the record's row number as 32 upper-case hex digits            |
| 44–47  | 0x88 0x99 0xAA 0xBB                                            |
| 48–95  | filler: 12 random hex digits, each repeated 4 times            |
| 96–99  | 0xCC 0xDD 0xEE 0xFF                                            |

Keys come from a NumPy generator seeded per file (``--seed``), so output is deterministic, but
not bit-identical to gensort's own generator. Generation is streamed file by file, so memory
does not grow with the record count. Parquet output has two fixed-size binary columns, ``key``
(10 bytes) and ``payload`` (the other 90); ``--raw`` writes flat binary files instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pyarrow.parquet as pq

from qengine.catalog.sources import records
from qengine.cli.common import prepare_output_dir
from qengine.errors import ProgrammingError

HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)
ROW_GROUP = 250_000


def make_records(start: int, count: int, rng: np.random.Generator, skew: bool) -> np.ndarray:
    """``count`` records numbered from ``start`` as an (n, 100) uint8 array."""
    out = np.empty((count, records.RECORD), dtype=np.uint8)
    keys = rng.integers(0, 256, (count, records.KEY), dtype=np.uint8)
    if skew:
        # A Zipf-distributed 16-bit prefix: a few key ranges are far denser than the rest.
        prefix = (rng.zipf(1.2, count) - 1) % 65536
        keys[:, 0] = prefix >> 8
        keys[:, 1] = prefix & 0xFF
    out[:, : records.KEY] = keys
    out[:, 10:12] = (0x00, 0x11)
    numbers = np.arange(start, start + count, dtype=np.uint64)
    shifts = np.arange(60, -4, -4, dtype=np.uint64)  # 16 hex digits of the 64-bit row number
    out[:, 12:28] = ord("0")
    out[:, 28:44] = HEX[(numbers[:, None] >> shifts) & np.uint64(0xF)]
    out[:, 44:48] = (0x88, 0x99, 0xAA, 0xBB)
    filler = HEX[rng.integers(0, 16, (count, 12))]
    out[:, 48:96] = np.repeat(filler, 4, axis=1)
    out[:, 96:100] = (0xCC, 0xDD, 0xEE, 0xFF)
    return out


def generate(
    count: int,
    out: str,
    seed: int = 0,
    skew: bool = False,
    raw: bool = False,
    per_file: int = 1_000_000,
    force: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> list[str]:
    """Write ``count`` records into files of ``per_file`` records; returns their paths."""
    if count < 1:
        raise ProgrammingError("the record count must be positive")
    prepare_output_dir(out, force)
    paths = []
    for index, start in enumerate(range(0, count, per_file)):
        n = min(per_file, count - start)
        rng = np.random.default_rng([seed, index])
        data = make_records(start, n, rng, skew)
        path = os.path.join(out, f"part-{index:05d}.{'dat' if raw else 'parquet'}")
        if raw:
            data.tofile(path)
        else:
            pq.write_table(records.to_table(data), path, row_group_size=ROW_GROUP, compression="none")
        paths.append(path)
        if progress:
            progress(start + n, count)
    return paths
