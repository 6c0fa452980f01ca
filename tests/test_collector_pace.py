"""The coordinator's process collects cyclic garbage rarely while queries run, and gets back
the pace it had once none runs."""

from __future__ import annotations

import gc

import pytest

from qengine.runtime.collector_pace import RARE, rare_collections


@pytest.fixture
def own_pace():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*saved)


def test_overlapping_queries_keep_the_rare_pace_until_the_last_ends(own_pace) -> None:
    first, second = rare_collections(), rare_collections()
    first.__enter__()
    assert gc.get_threshold() == RARE
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold() == RARE  # one query still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == own_pace


def test_a_failing_query_gives_the_pace_back(own_pace) -> None:
    with pytest.raises(RuntimeError), rare_collections():
        raise RuntimeError("task failed")
    assert gc.get_threshold() == own_pace


def test_a_query_on_a_cluster_runs_at_the_rare_pace(own_pace, tmp_path, monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    import qengine

    pq.write_table(pa.table({"a": list(range(100))}), tmp_path / "t.parquet")
    paces = []
    set_threshold = gc.set_threshold

    def recorded(*pace: int) -> None:
        paces.append(pace)
        set_threshold(*pace)

    with qengine.connect(workers=1, allowed_roots=[str(tmp_path)]) as con:
        con.register_parquet("t", str(tmp_path / "t.parquet"))
        monkeypatch.setattr(gc, "set_threshold", recorded)
        assert con.execute("SELECT sum(a) FROM t").fetchall() == [(4950,)]
        monkeypatch.undo()
    assert paces == [RARE, own_pace]
    assert gc.get_threshold() == own_pace
