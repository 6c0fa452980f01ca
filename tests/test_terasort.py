"""TeraSort harness: gensort layout, distributed sort in both shuffle modes, valsort checks."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest

from qengine.catalog import records
from sortbench import sortjob
from sortbench.gensort import generate
from sortbench.sortjob import sort
from sortbench.valsort import validate
from tests.conftest import subprocess_env

N = 200_000


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("terasort")
    made = {}
    for name, options in {"plain": {}, "skew": {"skew": True}, "raw": {"raw": True}}.items():
        made[name] = str(root / name)
        generate(N, made[name], seed=3, per_file=N // 8, **options)
    return made


def test_layout_carries_the_row_number(inputs) -> None:
    table = pq.read_table(os.path.join(inputs["plain"], "part-00001.parquet"))
    rows = records.from_table(table)
    first = bytes(rows[0])
    assert len(first) == records.RECORD
    assert first[10:12] == b"\x00\x11" and first[44:48] == b"\x88\x99\xaa\xbb" and first[96:] == b"\xcc\xdd\xee\xff"
    assert int(first[12:44], 16) == N // 8  # the first record of the second file


def test_generation_is_deterministic(tmp_path) -> None:
    generate(10_000, str(tmp_path / "a"), seed=9, per_file=4_000)
    generate(10_000, str(tmp_path / "b"), seed=9, per_file=4_000)
    for name in sorted(os.listdir(tmp_path / "a")):
        assert pq.read_table(tmp_path / "a" / name).equals(pq.read_table(tmp_path / "b" / name))


@pytest.mark.parametrize("mode", ["pull", "prefetch"])
@pytest.mark.parametrize("kind", ["plain", "skew", "raw"])
def test_sort_validates(inputs, tmp_path, mode: str, kind: str) -> None:
    out = str(tmp_path / "out")
    count, stats = sort(inputs[kind], out, {"workers": 2, "shuffle": mode, "split_size": "2MB"})
    assert count == N
    assert len(_parts(out)) > 1  # each reducer wrote its own file
    verdict = validate(inputs[kind], out)
    assert verdict.ok, verdict.problems
    assert verdict.output.records == N
    range_shuffle = next(s for s in stats.shuffles if s.kind == "range")
    assert range_shuffle.map_tasks > 1


def test_skewed_keys_are_balanced_by_sampled_bounds(inputs, tmp_path) -> None:
    _, stats = sort(inputs["skew"], str(tmp_path / "out"), {"workers": 2, "split_size": "2MB", "samples_per_partition": 32})
    shuffle = next(s for s in stats.shuffles if s.kind == "range")
    sizes = [a for a in shuffle.actual if a]
    assert max(sizes) / (sum(sizes) / len(sizes)) < 1.5


def test_one_reducer_per_reducer_bytes_of_records(inputs, tmp_path, monkeypatch) -> None:
    """Without --partitions the sort sizes its reducers by the records, not by the workers."""
    monkeypatch.setattr(sortjob, "REDUCER_BYTES", -(-N * records.RECORD // 7))  # 20 MB of records → 7 reducers
    out = str(tmp_path / "out")
    _, stats = sort(inputs["plain"], out, {"workers": 2})
    assert next(s for s in stats.shuffles if s.kind == "range").partitions == 7
    assert len(_parts(out)) == 7
    assert validate(inputs["plain"], out).ok


@pytest.fixture()
def sorted_copy(inputs, tmp_path) -> str:
    out = str(tmp_path / "sorted")
    sort(inputs["plain"], out, {"workers": 2, "split_size": "2MB"})
    assert validate(inputs["plain"], out).ok
    return out


def _rewrite(path: str, change) -> None:
    table = pq.read_table(path)
    rows = records.from_table(table).copy()
    rows = change(rows)
    pq.write_table(records.to_table(rows), path)


def _parts(directory: str) -> list[str]:
    """The part files COPY wrote into ``directory`` (beside them is its marker file)."""
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.startswith("part-"))


def _largest_file(directory: str) -> str:
    return max(_parts(directory), key=os.path.getsize)


def test_validation_catches_a_swapped_record(inputs, sorted_copy) -> None:
    def swap(rows: np.ndarray) -> np.ndarray:
        rows[[10, 11]] = rows[[11, 10]]
        return rows

    _rewrite(_largest_file(sorted_copy), swap)
    verdict = validate(inputs["plain"], sorted_copy)
    assert not verdict.ok and "out of order" in verdict.problems[0]
    assert verdict.output.checksum == verdict.input.checksum  # same records, wrong order


def test_validation_catches_a_dropped_record(inputs, sorted_copy) -> None:
    _rewrite(_largest_file(sorted_copy), lambda rows: np.delete(rows, 5, axis=0))
    verdict = validate(inputs["plain"], sorted_copy)
    assert not verdict.ok
    assert any("records" in p for p in verdict.problems) and any("checksum" in p for p in verdict.problems)


def test_validation_catches_a_corrupted_payload(inputs, sorted_copy) -> None:
    def corrupt(rows: np.ndarray) -> np.ndarray:
        rows[7, 50] ^= 0xFF
        return rows

    _rewrite(_largest_file(sorted_copy), corrupt)
    verdict = validate(inputs["plain"], sorted_copy)
    assert not verdict.ok and any("checksum" in p for p in verdict.problems)
    assert verdict.output.records == verdict.input.records


def test_cli_round_trip(tmp_path) -> None:
    env = subprocess_env()
    cli = [sys.executable, "-m", "qengine.cli", "terasort"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *args], capture_output=True, text=True, timeout=300, env=env)

    gen = run("gen", "--records", "50000", "--out", str(tmp_path / "in"), "--per-file", "10000")
    assert gen.returncode == 0, gen.stderr
    again = run("gen", "--records", "10", "--out", str(tmp_path / "in"))
    assert again.returncode != 0 and "not empty" in again.stderr
    # 5 MB would be one split (one task, one part file): small splits make it shuffle
    ran = run("run", "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--shuffle", "pull", "--split-size", "1MB")
    assert ran.returncode == 0, ran.stderr
    ok = run("validate", "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out"))
    assert ok.returncode == 0 and "SUCCESS" in ok.stdout
    os.unlink(_parts(str(tmp_path / "out"))[0])  # lose a part file
    bad = run("validate", "--in", str(tmp_path / "in"), "--out", str(tmp_path / "out"))
    assert bad.returncode != 0 and "FAILURE" in bad.stderr


def test_map_tasks_started_after_the_bounds_partition_their_own_output(tmp_path) -> None:
    """In prefetch, a map task that starts once the bounds are known partitions its output
    itself; the earlier ones are staged and finalized. Either way their blocks are pushed by
    side work, not inside the task."""
    data = str(tmp_path / "in")
    generate(N, data, seed=5, per_file=N // 25)  # 25 map tasks
    out = str(tmp_path / "out")
    # The bounds come from the first finished task; most of the others start after that.
    # One task per worker at a time, so most start well after the first one has finished.
    options = {"workers": 2, "slots": 1, "shuffle": "prefetch", "prefetch_fraction": 0.04, "split_size": "512KB"}
    _, stats = sort(data, out, options)
    shuffle = next(s for s in stats.shuffles if s.kind == "range")
    assert shuffle.map_tasks == 25
    assert 0 < shuffle.self_partitioned_tasks < 25
    assert shuffle.pushed_tasks > shuffle.self_partitioned_tasks
    assert validate(data, out).ok
