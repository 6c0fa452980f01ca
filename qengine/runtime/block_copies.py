"""Copies of a stage's small map output on a second worker.

A lost worker takes the map output it held with it. Recomputing it from its lineage (the RDD
paper's answer) is cheap for one stage, but the output it held of the stage before was read
already, and the one before that: to make a lost reducer's input again, the map tasks that ran on
the same worker one stage up must run again, and theirs one stage further up, each waiting for
the one before. On TPC-DS queries of half a second, such a chain of four stages cost a fifth of a
second when one worker of three was killed.

So once a stage's map tasks have all finished, each worker sends a copy of the blocks its tasks
made to the next worker round the ring, which keeps them as backups
(``BlockStore.put_backups``, within its backup limit, and only while the query runs). A task's
blocks are copied only when they add up to at most ``COPY_TASK_BYTES``: small output is what the
long chains of small queries are made of, and copying large output would cost a clean run more
than recomputation saves. If a worker is lost, its blocks that have a copy are read there
(``StageRun.fall_back_to_backups``) and only the rest are recomputed; if it is found slow, its
blocks that have a copy are read there too, so that copies of its tasks do not wait on it for
their input. Blocks pushed to their reducers' hosts (prefetch) have a copy at their sender
already and are not copied again; a pushed task's blocks for reducers on its own host are.

A copy names its map task and attempt, as every block does, so a reader reads exactly one
attempt's blocks whichever holder it reads them from.
"""

from __future__ import annotations

from qengine.runtime.query_state import QueryState, StageRun

COPY_TASK_BYTES = 4 << 20  # a map task's blocks are copied when they add up to at most this


def copy_calls(state: QueryState, run: StageRun) -> list[tuple[int, dict]]:
    """The ``copy_blocks`` calls for a stage whose map tasks have all finished: (sending
    worker, body) each, one per worker holding blocks worth copying."""
    if run.stage.output is None:
        return []  # a query's result, read once it ends
    live = state.live_hosts()
    takers = sorted(w for w in live if w not in state.slow)
    if len(takers) < 2:
        return []
    sizes: dict[int, int] = {}  # bytes of each task's blocks held where it ran, with no copy yet
    for p, per_task in run.blocks.items():
        copies = run.backups.get(p, {})
        for task, (host, attempt, nbytes, _) in per_task.items():
            if host == run.placement[task] and attempt == run.committed.get(task) and task not in copies:
                sizes[task] = sizes.get(task, 0) + nbytes
    by_worker: dict[int, dict[str, int]] = {}
    for task, nbytes in sizes.items():
        if nbytes <= COPY_TASK_BYTES and task in run.completed:
            by_worker.setdefault(run.placement[task], {})[str(task)] = run.committed[task]
    calls = []
    key = state.key(run.stage.id)
    for worker, tasks in sorted(by_worker.items()):
        if worker not in live:
            continue
        peer = next((w for w in takers if w > worker), takers[0])  # the next round the ring
        calls.append((worker, {"key": key, "to": state.addresses[peer], "tasks": tasks, "peer": peer}))
    return calls


def record_copies(state: QueryState, run: StageRun, body: dict, result: dict) -> int:
    """Count on the copies the other worker kept, for the attempts still committed; returns
    how many blocks now have a copy. A holder found slow meanwhile has them read at the copy."""
    peer = body["peer"]
    if peer in state.lost:
        return 0
    count = 0
    for task, partitions in result["kept"].items():
        t, attempt = int(task), body["tasks"][task]
        if t not in run.completed or run.committed.get(t) != attempt:
            continue  # made again meanwhile: that attempt's blocks count
        for p in partitions:
            entry = run.blocks.get(p, {}).get(t)
            if entry is not None and entry[1] == attempt and entry[0] != peer:
                run.backups.setdefault(p, {}).setdefault(t, (peer, attempt))
                count += 1
    if state.slow:
        state.read_copies_off(run, list(run.blocks), set(state.slow))
    return count
