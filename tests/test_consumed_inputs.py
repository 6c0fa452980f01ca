"""A reducer's shuffle inputs held on its own worker stay there until its fragment has run, when
they are small (``task.KEEP_LOADED_BYTES``): a speculative copy of a straggling reducer reads
them from there, where often no other copy is left. Large ones go as soon as they are loaded,
so that the fragment holds its input alone. Either way they are gone once the task is done."""

from __future__ import annotations

import pyarrow as pa
import pytest

from qengine.exchange.store import BlockStore
from qengine.runtime import task
from qengine.runtime.task import TaskRunner
from qengine.transport.rpc import ClientPool
from qengine.transport.wire import schema_to_hex, table_from_hex

KEY, HERE = "q1/0", "127.0.0.1:1"
BLOCKS = [[0, 0], [1, 0]]  # (map task, attempt) of the partition's two blocks


@pytest.fixture
def store(tmp_path) -> BlockStore:
    store = BlockStore(spill_dir=str(tmp_path))
    yield store
    store.close()


def reducer_spec(schema: pa.Schema) -> dict:
    return {
        "query": "q1", "stage": 1, "task": 0, "attempt": 0, "direct": None, "readable": (), "build_sides": False,
        "inputs": [{
            "kind": "shuffle", "name": "t", "key": KEY, "partitions": [0], "blocks": {"0": {HERE: BLOCKS}},
            "schema": schema_to_hex(schema), "consume": True,
        }],
        "sql": "SELECT count(*) AS n, sum(k) AS total FROM t",
        "output": {"kind": "result", "key": "q1/result"},
    }


def held(store: BlockStore) -> int:
    return len([b for b in store.blocks(KEY, 0) if not b.backup])


@pytest.mark.parametrize(("keep_bytes", "during"), [(64 << 20, 2), (0, 0)])
def test_small_inputs_stay_until_the_fragment_has_run(
    store: BlockStore, monkeypatch: pytest.MonkeyPatch, keep_bytes: int, during: int
) -> None:
    for map_task, attempt in BLOCKS:
        rows = pa.table({"k": pa.array(range(map_task * 10, map_task * 10 + 10), pa.int64())})
        store.put_parts(KEY, [rows], map_task, attempt)
    monkeypatch.setattr(task, "KEEP_LOADED_BYTES", keep_bytes)
    seen: list[int] = []
    fragment = task._run_fragment

    def observed(*args, **kwargs):
        seen.append(held(store))
        return fragment(*args, **kwargs)

    monkeypatch.setattr(task, "_run_fragment", observed)
    runner = TaskRunner(store, HERE, ClientPool("token"), threads=1)
    answer = table_from_hex(runner.run(reducer_spec(pa.schema([("k", pa.int64())])))["inline"])
    assert answer.to_pylist() == [{"n": 20, "total": sum(range(20))}]
    assert seen == [during]  # both blocks while the fragment ran, or none
    assert held(store) == 0  # read, so gone
