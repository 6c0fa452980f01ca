"""The shuffle as its map tasks finish: size prediction, range bounds, reducer placement ahead
of time (prefetch), the side work that partitions and pushes map output, and the shuffle's metrics.

This is the coordinator's half of the SCache exchange: once ``prefetch_fraction`` of a shuffle's
map tasks have finished, their output sizes (hash) or key samples (range) predict each reducer's
size; the consumer's reducers are placed with MinHeap (accumulate scheduling across the shuffles
a stage reads), and every finished map task's blocks are pushed to their reducers' hosts.

When a worker is lost, the reducers placed on it are placed again with MinHeap over the live
workers (:meth:`ShuffleDriver.replace_reducers`); a map task recomputed for lost blocks keeps
its new blocks where it runs rather than pushing them.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable

import pyarrow as pa

from qengine.exchange.placement import Reducer, accumulate, min_heap, round_robin
from qengine.exchange.prediction import grouped, hash_prediction, range_prediction
from qengine.exchange.push_decision import PushDecision, decide
from qengine.exchange.push_schedule import PIECE_BYTES, destination_order
from qengine.exchange.sampling import weighted_bounds
from qengine.planner import logical as lp
from qengine.runtime.network_load import NetworkLoad
from qengine.runtime.query_state import QueryState, ReducerPlacement, StageRun
from qengine.transport.wire import schema_from_hex, table_from_hex, table_to_hex

# Submits side work of a shuffle (finalize_range, push, expect) to a worker, tracked like a task.
AuxCall = Callable[[StageRun, str, int, dict], None]


class ShuffleDriver:
    """Drives every shuffle of one query from its map tasks' results."""

    def __init__(self, state: QueryState, aux: AuxCall, network: NetworkLoad, nass: bool = False) -> None:
        """``network`` is the coordinator's count of bytes under way between hosts, with each
        worker's push rate; with ``nass``, a shuffle placed while the network is saturated is
        fetched rather than pushed (ShuffleWatcher delays it)."""
        self.state = state
        self.aux = aux
        self.network = network
        self.rates = network.rates  # each worker's push rate, as its pushes measured it
        self.nass = nass
        self._seq = itertools.count()

    def map_finished(self, run: StageRun, index: int, result: dict, first: bool) -> None:
        """Record a finished map task's output (sizes or key samples) and react to it.

        A task finishing again (recomputed after a lost worker) changes no prediction: its
        blocks only need partitioning, if its output was staged for range bounds.
        """
        if not first:
            if result.get("finalized"):  # partitioned by the task itself, bounds known
                run.finalized.add(index)
            elif "sample" in result and run.bounds is not None:
                self._finalize(run, [index])
            return
        run.finished.append(index)
        if result.get("finalized"):  # partitioned by the task itself; pushed as the others are
            run.finalized.add(index)
            run.shuffle.self_partitioned_tasks += 1
        if "sample" in result:
            keys = table_from_hex(result["sample"]).column(0).combine_chunks()
            run.samples[index] = (keys, result["rows"], result["bytes"])
        else:
            run.task_bytes[index] = result["partition_bytes"]
            run.stats.add_partition_bytes(result["partition_bytes"])
        self._progress(run, index)

    def _threshold(self, run: StageRun) -> int:
        return max(1, math.ceil(self.state.options.prefetch_fraction * run.tasks))

    def _progress(self, run: StageRun, index: int) -> None:
        """React to a finished map task: predict once enough have finished, then (prefetch)
        place the reducers and push every finished task's blocks to its reducers' hosts."""
        state = self.state
        ex = run.stage.output
        assert ex is not None and run.shuffle is not None
        # Range bounds need the samples: prefetch picks them once enough map tasks have finished,
        # pull (like Spark) after all of them. Hash sizes are predicted at the threshold in both
        # modes, so both record prediction accuracy; only prefetch acts on it.
        need = self._threshold(run) if state.mode == "prefetch" or ex.kind != "range" else run.tasks
        if run.prediction is None and len(run.finished) >= need:
            if ex.kind == "range":
                self._choose_bounds(run, ex)
                run.prediction = self._range_prediction(run, ex)
            else:
                finished = [(run.placement[t], run.task_bytes[t]) for t in run.finished]
                run.prediction = hash_prediction(finished, run.tasks, ex.partitions)
            run.shuffle.predicted = [r.size for r in run.prediction]
            if state.mode == "prefetch":
                self._try_place(state.consumer_of.get(run.stage.id))
            if ex.kind == "range":
                self._finalize(run, run.finished)
            else:
                self._push(run, run.finished)
        elif run.prediction is not None:
            if ex.kind == "range":
                self._finalize(run, [index])
            self._push(run, [index])  # a range task that partitioned its own output is pushed now

    def _choose_bounds(self, run: StageRun, ex: lp.Exchange) -> None:
        typ = schema_from_hex(run.schema).field(ex.order[0].this.name).type
        samples = [(keys.cast(typ), rows) for keys, rows, _ in run.samples.values()]
        bounds = weighted_bounds(samples, ex.partitions) if samples else pa.array([], typ)
        if 0 < len(bounds) < ex.partitions - 1:  # too few distinct samples: pad, reducers stay valid
            bounds = pa.concat_arrays([bounds] + [bounds[-1:]] * (ex.partitions - 1 - len(bounds)))
        run.bounds = bounds
        first = ex.order[0]
        run.finalize_body = {
            "key": self.state.key(run.stage.id),
            "bounds": table_to_hex(pa.table({"b": bounds})),
            "sort_key": first.this.name,
            "desc": bool(first.args.get("desc")),
            "nulls_first": bool(first.args.get("nulls_first")),
            "mode": self.state.mode,
        }

    @staticmethod
    def _range_prediction(run: StageRun, ex: lp.Exchange) -> list[Reducer]:
        first = ex.order[0]
        typ = run.bounds.type
        samples = [(run.placement[t], keys.cast(typ), size) for t, (keys, _, size) in run.samples.items()]
        prediction = range_prediction(samples, run.bounds, bool(first.args.get("desc")), bool(first.args.get("nulls_first")), run.tasks)
        return prediction + [Reducer(p, 0.0) for p in range(len(prediction), ex.partitions)]

    def _destinations(self, run: StageRun) -> dict[str, str] | None:
        """Where this shuffle's partitions are pushed, once its reducers are placed (prefetch
        only, and only while there is a map stage to overlap)."""
        ahead = self.state.placements.get(self.state.consumer_of.get(run.stage.id, -1))
        return ahead.destinations if ahead is not None and ahead.push else None

    def _finalize(self, run: StageRun, tasks: list[int]) -> None:
        """Partition staged range output with the bounds (and push it, once placed)."""
        destinations = self._destinations(run)
        by_worker: dict[tuple[int, bool], dict[str, int]] = {}
        # A task being recomputed is finalized when its new attempt commits.
        for t in [t for t in tasks if t not in run.finalized and t in run.completed]:
            run.finalized.add(t)
            local = t in run.local_only or destinations is None
            by_worker.setdefault((run.placement[t], local), {})[str(t)] = run.committed[t]
            if not local:
                run.pushed.add(t)
        for (worker, local), mine in by_worker.items():
            self.aux(run, "finalize_range", worker, dict(run.finalize_body, tasks=mine, destinations=None if local else destinations))

    def _push(self, run: StageRun, tasks: list[int]) -> None:
        """Push these map tasks' blocks to their reducers' hosts, each once, when both the
        placement and the task's block sizes are known: one call per destination host, so that
        each host's reducers may start as soon as their own blocks have landed, issued around
        the ring from the sender (``exchange.push_schedule``). A task whose blocks fit in one
        piece sends them all in one call: a call's round trip would cost more than its blocks
        take to land, and TPC-DS shuffles are mostly that small."""
        destinations = self._destinations(run)
        if destinations is None:
            return
        for t in tasks:
            if t in run.pushed or t not in run.task_bytes or t in run.local_only or t not in run.completed:
                continue
            run.pushed.add(t)
            sender = self.state.addresses[run.placement[t]]
            by_host: dict[str, dict[str, str]] = {}
            for p, nbytes in enumerate(run.task_bytes[t]):
                address = destinations.get(str(p), sender)
                if nbytes and address != sender:
                    by_host.setdefault(address, {})[str(p)] = address
            calls = [by_host[address] for address in destination_order(sender, list(by_host))]
            remote = sum(run.task_bytes[t][int(p)] for call in calls for p in call)
            if len(calls) > 1 and remote <= PIECE_BYTES:
                calls = [{p: a for call in calls for p, a in call.items()}]
            for call in calls:
                body = {"key": self.state.key(run.stage.id), "task": t, "attempt": run.committed[t], "destinations": call}
                self.aux(run, "push", run.placement[t], body)

    def _try_place(self, consumer_id: int | None) -> None:
        """Place a consumer's reducers once every shuffle it reads has a prediction (MinHeap for
        one input, accumulate scheduling across several), then tell hosts what to expect."""
        state = self.state
        if consumer_id is None or consumer_id in state.placements:
            return
        consumer = state.runs[consumer_id]
        inputs = [state.runs[r.shuffle_id] for r in consumer.stage.partitioned_reads]
        if any(r.shuffle is None or r.prediction is None for r in inputs):
            return
        partitions = consumer.tasks
        sizes = [sum(r.prediction[p].size for r in inputs if p < len(r.prediction)) for p in range(partitions)]
        groups = state.groups(consumer, sizes)
        hosts = state.placeable_hosts()
        previous: dict[int, Reducer] | None = None
        placed = None
        for source in inputs:
            reducers = grouped(source.prediction, groups)
            placed = accumulate(reducers, hosts, max(1, source.tasks), previous)
            previous = {
                g: Reducer(g, (previous[g].size if previous else 0.0) + reducers[g].size, 1.0, placed.hosts[g])
                for g in range(len(groups))
            }
        assert placed is not None
        decision = self._decide(inputs, sizes, hosts)
        push = decision.push
        state.placements[consumer_id] = ReducerPlacement(groups, [placed.hosts[g] for g in range(len(groups))], state.addresses, push)
        for source in inputs:
            source.shuffle.placement = "minheap"
            source.shuffle.push_decision = decision.describe()
        if not push:
            return
        mine = {host: [p for g, members in enumerate(groups) if placed.hosts[g] == host for p in members] for host in hosts}
        for source in inputs:
            key = state.key(source.stage.id)
            seq = next(self._seq)
            for host in hosts:
                body = {"key": key, "seq": seq, "expected": source.tasks, "partitions": mine[host], "slots": state.options.slots}
                self.aux(source, "expect", host, body)
        for source in inputs:  # tasks that finished (and, for range, were finalized) before placement
            self._push(source, source.finished)

    def _decide(self, inputs: list[StageRun], sizes: list[float], hosts: list[int]) -> PushDecision:
        """Push or fetch (``exchange.push_decision``): the map work the inputs have left against
        moving the predicted bytes that change hosts at the workers' measured push rates."""
        state = self.state
        durations = [t.seconds for source in inputs for t in source.durations]
        remote = sum(sizes) * (1 - 1 / max(1, len(hosts)))
        if self.nass and self.network.saturated([state.addresses[w] for w in state.live_hosts()]):
            return PushDecision(False, 0.0, None, saturated=True)
        return decide(
            pending=sum(source.pending for source in inputs),
            slots=len(state.live_hosts()) * state.options.slots,
            task_seconds=statistics.median(durations) if durations else 0.0,
            remote_bytes=remote,
            senders=len(hosts),
            rate=self.rates.slowest([state.addresses[w] for w in state.live_hosts()]),
        )

    def aux_done(self, run: StageRun, kind: str, worker: int, body: dict, result: dict) -> None:
        """Take the result of side work: a range finalize reports the bytes and rows it
        partitioned, a push where the blocks went."""
        hosts = {a: w for w, a in enumerate(self.state.addresses)}
        address = self.state.addresses[worker]
        if kind == "finalize_range":
            for task, sizes in result["tasks"].items():
                self.rates.learn(address, sizes.get("push_rate") or 0.0)
                t = int(task)
                if run.committed.get(t) != body["tasks"][task]:
                    continue  # recomputed meanwhile: that attempt's blocks count
                if t not in run.task_bytes:
                    run.task_bytes[t] = sizes["partition_bytes"]
                    run.stats.add_partition_bytes(sizes["partition_bytes"])
                sent = {int(p): hosts[a] for p, a in sizes.get("sent", {}).items()}
                run.record_blocks(t, worker, run.committed[t], sizes, sent)
                self.read_moved_from_backups(run, sent)
            # Finalized before the reducers were placed: push now that both are known.
            self._push(run, [int(t) for t in result["tasks"]])
        elif kind == "push" and run.committed.get(body["task"]) == body["attempt"]:
            self.rates.learn(address, result.get("push_rate") or 0.0)
            t = body["task"]
            for p, to in result["sent"].items():
                _, attempt, nbytes, rows = run.blocks[int(p)][t]
                run.blocks[int(p)][t] = (hosts[to], attempt, nbytes, rows)
            run.record_backups(t, worker, body["attempt"], result.get("backups") or [])
            self.read_moved_from_backups(run, {int(p): hosts[a] for p, a in result["sent"].items()})

    def read_moved_from_backups(self, run: StageRun, sent: dict[int, int]) -> None:
        """A reducer placed again while blocks were on their way to its old host (found slow
        meanwhile) reads them from their senders' copies, as it does those pushed before."""
        state = self.state
        ahead = state.placements.get(state.consumer_of.get(run.stage.id, -1))
        if ahead is None:
            return
        stale = {p: host for p, host in sent.items() if host != ahead.host_of(p)}
        if stale:
            state.read_copies_off(run, stale, set(stale.values()))

    def replace_reducers(self, lost: int, waiting_only: bool = False) -> None:
        """Place again, with MinHeap over the live workers that are not slow, the reducers that
        were placed ahead on a lost worker (or, ``waiting_only``, those of stages not started
        yet placed on a worker found slow); map tasks push to the new hosts from now on. Blocks
        already pushed to a slow worker are read from their senders' copies where they kept
        one, and fetched from it otherwise."""
        state = self.state
        for consumer_id, ahead in state.placements.items():
            moved = [g for g, h in enumerate(ahead.hosts) if h == lost]
            if not moved or (waiting_only and state.runs[consumer_id].submitted):
                continue
            consumer = state.runs[consumer_id]
            inputs = [state.runs[r.shuffle_id] for r in consumer.stage.partitioned_reads]
            loads: dict[int, float] = {}
            reducers = []
            for g, members in enumerate(ahead.groups):
                size = sum(r.prediction[p].size for r in inputs if r.prediction for p in members if p < len(r.prediction))
                if g in moved:
                    reducers.append(Reducer(g, size))
                else:
                    loads[ahead.hosts[g]] = loads.get(ahead.hosts[g], 0.0) + size
            live = state.placeable_hosts()
            if not live:
                return  # the query fails: no worker is left to run it
            placed = min_heap(reducers, live, 1, swap=False, initial=loads)
            for g in moved:
                ahead.hosts[g] = placed.hosts[g]
            ahead.update(state.addresses)
            if waiting_only:
                partitions = [p for g in moved for p in ahead.groups[g]]
                for source in inputs:
                    state.read_copies_off(source, partitions, {lost})

    def measure(self, source: StageRun, consumer: StageRun) -> None:
        """Shuffle metrics, once the consumer's reducers are placed and before they run."""
        shuffle = source.shuffle
        if shuffle is None:
            return
        workers = self.state.workers
        shuffle.actual = source.partition_sizes()
        shuffle.pushed_tasks = len(source.pushed)
        groups = consumer.groups or [[p] for p in range(consumer.tasks)]
        host_of = {p: consumer.placement[g] for g, members in enumerate(groups) for p in members}
        ahead = self.state.placements.get(consumer.stage.id)
        loads = [0.0] * workers
        reducers = []
        for g, members in enumerate(groups):
            size = sum(shuffle.actual[p] for p in members if p < len(shuffle.actual))
            loads[consumer.placement[g]] += size
            reducers.append(Reducer(g, size))
        naive = round_robin(reducers, list(range(workers))).loads
        shuffle.host_loads, shuffle.naive_host_loads = loads, [naive[h] for h in range(workers)]
        shuffle.hosts = list(self.state.addresses)
        for task, sizes in source.task_bytes.items():
            for p, b in enumerate(sizes):
                if not b or p not in host_of:
                    continue
                produced = source.placement[task]
                shuffle.blocks_total += 1
                if produced == host_of[p]:
                    shuffle.local_bytes += b
                else:
                    shuffle.remote_bytes += b
                pushed = ahead is not None and task in source.pushed
                if produced == host_of[p] or pushed:
                    shuffle.blocks_local += 1
