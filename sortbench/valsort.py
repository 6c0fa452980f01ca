"""``qengine terasort validate``: check a sort the way valsort does.

The output must be in global order within and across its files (taken in name order), hold as
many records as the input, and have the same checksum: the sum of every record's CRC32, which
does not depend on order. Duplicate keys are counted and reported.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from qengine.catalog.sources import records
from qengine.errors import ProgrammingError


@dataclass
class Summary:
    records: int = 0
    checksum: int = 0
    duplicates: int = 0
    files: int = 0


@dataclass
class Verdict:
    input: Summary
    output: Summary
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def files_of(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        raise ProgrammingError(f"{directory} is not a directory")
    names = sorted(n for n in os.listdir(directory) if n.endswith((".parquet", ".dat")) and not n.startswith("."))
    if not names:
        raise ProgrammingError(f"{directory} holds no .parquet or .dat record files")
    return [os.path.join(directory, n) for n in names]


def batches(path: str, size: int = 500_000) -> Iterator[np.ndarray]:
    """A file's records as (n, 100) uint8 arrays, a bounded number at a time."""
    if path.endswith(".dat"):
        data = np.memmap(path, dtype=np.uint8, mode="r")
        if len(data) % records.RECORD:
            raise ProgrammingError(f"{path} is not a whole number of {records.RECORD}-byte records")
        rows = data.reshape(-1, records.RECORD)
        for start in range(0, len(rows), size):
            yield np.asarray(rows[start : start + size])
        return
    for batch in pq.ParquetFile(path).iter_batches(batch_size=size, columns=["key", "payload"]):
        yield records.from_table(batch)


def _checksum(rows: np.ndarray) -> int:
    flat = np.ascontiguousarray(rows).tobytes()
    step = records.RECORD
    return sum(zlib.crc32(flat[i : i + step]) for i in range(0, len(flat), step))


def _sort_keys(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keys as (first 8 bytes, last 2 bytes) big-endian integers: compares like memcmp."""
    keys = np.ascontiguousarray(rows[:, : records.KEY])
    high = keys[:, :8].copy().view(">u8").ravel()
    low = keys[:, 8:10].copy().view(">u2").ravel()
    return high, low


def summarize(directory: str) -> Summary:
    summary = Summary()
    for path in files_of(directory):
        summary.files += 1
        for rows in batches(path):
            summary.records += len(rows)
            summary.checksum += _checksum(rows)
    return summary


def validate(input_dir: str, output_dir: str, input_summary: Summary | None = None) -> Verdict:
    """Check ``output_dir`` against ``input_dir``; pass ``input_summary`` (from ``summarize``) to
    skip re-reading an unchanged input when validating several sorts of it."""
    verdict = Verdict(input_summary if input_summary is not None else summarize(input_dir), Summary())
    out = verdict.output
    previous: tuple[int, int] | None = None  # key of the last record seen
    for path in files_of(output_dir):
        out.files += 1
        for rows in batches(path):
            if not len(rows):
                continue
            high, low = _sort_keys(rows)
            if previous is not None:
                high = np.concatenate([[previous[0]], high])
                low = np.concatenate([[previous[1]], low])
            descending = (high[1:] < high[:-1]) | ((high[1:] == high[:-1]) & (low[1:] < low[:-1]))
            equal = (high[1:] == high[:-1]) & (low[1:] == low[:-1])
            out.duplicates += int(equal.sum())
            if descending.any() and not any("out of order" in p for p in verdict.problems):
                row = int(np.argmax(descending)) + 1 - (1 if previous is not None else 0)
                key = bytes(rows[row, : records.KEY]).hex()
                verdict.problems.append(
                    f"record {out.records + row + 1} (key {key}, in {os.path.basename(path)}) is out of order: "
                    f"it sorts before the record just before it"
                )
            previous = (int(high[-1]), int(low[-1]))
            out.records += len(rows)
            out.checksum += _checksum(rows)
    if out.records != verdict.input.records:
        verdict.problems.append(f"the output has {out.records} records, the input {verdict.input.records}")
    if out.checksum != verdict.input.checksum:
        verdict.problems.append(
            f"checksum mismatch: output {out.checksum:x}, input {verdict.input.checksum:x} (a record was changed, lost or added)"
        )
    return verdict
