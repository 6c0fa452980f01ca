"""A session: the catalog, the planner settings and the coordinator behind one connection.

It executes one SQL statement at a time: queries, EXPLAIN [ANALYZE], views, session tables
(CREATE TABLE [AS], INSERT, DROP), COPY, DESCRIBE / SHOW / SUMMARIZE (``api.introspection``),
SET / RESET (``api.set_statements``) and registrations of external data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa
import sqlglot.expressions as exp

from qengine.api import catalog_mirror, copy_to, introspection, result_stream, set_statements, system_tables
from qengine.api.options import SessionSettings
from qengine.api.prepared import Prepared
from qengine.api.replicas import Replicas
from qengine.api.result_stream import ResultStream
from qengine.api.statements import Statements, checked_sql, new_statement_id
from qengine.api.trace import chrome_trace
from qengine.catalog.access import claim_output, record_output
from qengine.catalog.catalog import Catalog, View
from qengine.catalog.sources import CsvSource, MemorySource, Partition, RecordSource, Source, hive_parquet
from qengine.catalog.types import column_type
from qengine.errors import Error, InputLostError, NotSupportedError, OperationalError, ProgrammingError, WorkerUnreachableError
from qengine.planner import plan_query, table_sources
from qengine.planner.clock import read_clock_once
from qengine.planner.explain import explain_lines
from qengine.planner.frontend import (
    deduplicated,
    expand_sources,
    name_outputs,
    normalize_null_ordering,
    parse,
    user_terms,
    written_aliases,
)
from qengine.planner.output_names import spelled, spelled_names
from qengine.planner.parameters import bind
from qengine.planner.stages import StagePlan, reads_no_data
from qengine.planner.templates import Shape, Templates, instantiate, parameterize, planning, slot_holders
from qengine.planner.unsupported import struct_unnest_refused
from qengine.runtime.coordinator import Coordinator
from qengine.runtime.query_state import ExecutionOptions
from qengine.runtime.stats import QueryStats
from qengine.sandbox.carried_types import tagged_result
from qengine.sandbox.connection import scratch_connection
from qengine.transport.wire import schema_from_hex, schema_to_hex

log = logging.getLogger("qengine.api.session")

# EXPLAIN [ANALYZE] query, or EXPLAIN (option, ...) query with options ANALYZE and FORMAT text|trace
_EXPLAIN = re.compile(r"^\s*EXPLAIN(?:(\s+ANALYZE)|\s*\(([^()]*)\))?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_table_ids = itertools.count(1)
RESULT_TRIES = 3  # runs of a query whose result partitions a lost worker took with it


@dataclass
class Result:
    """The outcome of one statement: ``rows`` to read, None for statements that return none."""

    rows: ResultStream | None
    rowcount: int
    stats: QueryStats | None = None
    plan: StagePlan | None = None

    @classmethod
    def of_table(cls, table: pa.Table, stats: QueryStats | None = None, plan: StagePlan | None = None) -> Result:
        return cls(ResultStream.of_table(table), table.num_rows, stats, plan)

    def close(self) -> None:
        """Free what holds the rows not read yet."""
        if self.rows is not None:
            self.rows.close()


# What sqlglot makes of a statement it cannot read as one, and DuckDB's one-word statements it
# reads so (qengine refuses those by name)
_BARE_EXPRESSIONS = (exp.Column, exp.Alias, exp.Identifier, exp.Literal, exp.Binary, exp.Func, exp.Paren, exp.Neg, exp.Not, exp.Dot)
_ONE_WORD_STATEMENTS = frozenset({"CHECKPOINT", "ANALYZE", "VACUUM", "ROLLBACK", "COMMIT", "ABORT", "END", "DEALLOCATE"})

class Session:
    def __init__(self, cluster: Any, settings: SessionSettings, workers: int, catalog: Catalog, user: str | None = None) -> None:
        """``settings`` are the connection's (``connect()``'s), for ``workers`` workers; SET
        changes them for this session, RESET puts them back."""
        self.cluster = cluster
        self.opened_with = self.settings = settings
        self.workers = workers
        self.plan_options = settings.plan_options(workers)
        self.catalog = catalog
        self.coordinator = Coordinator(cluster, _execution(settings, user))
        self.replicas = Replicas(cluster)
        cluster.changes.listen(self._heal_now)  # a lost holder's partitions are copied at once, not at the next statement
        self.templates = Templates()
        self.prepared = Prepared()
        self.statements = Statements()
        # What a planned query waits for before it runs (a standalone coordinator's admission
        # by memory, ``api.admission``): given the plan, a context held while it runs.
        self.gate: Callable[[StagePlan], contextlib.AbstractContextManager[None]] | None = None
        self._lock = threading.Lock()

    @property
    def dialect(self) -> str:
        """The SQL dialect statements are read in."""
        return self.plan_options.dialect

    @property
    def user(self) -> str:
        """Whose share of the cluster the session's queries run in (``connect(user=...)``)."""
        return self.coordinator.options.user

    # ---- statements --------------------------------------------------------------------

    def execute(
        self,
        sql: str,
        params: Sequence[Any] | Mapping[str, Any] | None = None,
        progress: Callable[[int, int], None] | None = None,
        statement_id: str | None = None,
    ) -> Result:
        """Run ``sql`` with ``params`` for its ``?``/``$n`` (a sequence) or ``$name`` (a
        mapping) placeholders; ``statement_id`` (one is made when none is given) is what
        :meth:`cancel_statement` knows it by while it runs."""
        checked_sql(sql)
        statement_id = statement_id or new_statement_id()
        with self.statements.running(statement_id), self.cluster.history.statement(statement_id, sql, self.user) as record:
            result = self._execute(sql, params, progress)
            record.rows = result.rowcount
            return result

    def cancel_statement(self, statement_id: str) -> bool:
        """Cancel the statement running under ``statement_id``; whether one was."""
        return self.statements.cancel(statement_id)

    def running_statements(self) -> list[dict]:
        """The statements this session runs now."""
        return [{"query": q, "state": "running"} for q in self.statements.ids()]

    def _execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, progress: Callable[[int, int], None] | None) -> Result:
        self.catalog.refresh()  # tables whose files changed are read again, before any plan is reused
        match = _EXPLAIN.match(sql)
        with user_terms(sql, self.plan_options.dialect):
            if match:  # EXPLAIN blanked out rather than cut off: syntax errors give the user's positions
                query = re.sub(r"[^\n]", " ", sql[: match.start(3)]) + match.group(3)
                analyze, trace = _explain_options(match.group(1), match.group(2))
                self._heal()
                return self._explain(query, params, analyze, trace)
            # Parameters by name skip the prepared-statement cache (it knows them by position);
            # their shapes' templates still serve.
            named = isinstance(params, Mapping)
            params = params if named else list(params or [])
            plan = None if named else self.prepared.plan(sql, params, self.catalog.version, self.templates, self.plan_options.dialect)
            if plan is not None:
                self._heal()
                return self._run(plan, progress)
            statements = parse(sql, self.plan_options.dialect)
            if params and len(statements) > 1:
                raise ProgrammingError("parameters can only be bound to a single statement")
            result = Result(None, -1)
            for statement in statements:
                self._heal()
                bound = set_statements.with_current_settings(bind(statement, params), self.settings, self.workers)
                if len(statements) == 1 and isinstance(bound, exp.Query | exp.Values):
                    version = self.catalog.version
                    shape, plan = self._shaped_plan(bound)
                    if not named:
                        self.prepared.learn(sql, params, version, shape)
                    return self._run(plan, progress)
                result.close()  # only the last statement's rows are read
                result = self._execute_one(bound, progress)
            return result

    def _heal_now(self) -> None:
        """Heal when the cluster's workers change (``runtime.membership_changes``): an idle
        connection kept one copy of a lost holder's partitions until its next statement, and
        a second loss before it lost them."""
        try:
            self._heal()
        except Error as e:  # the next statement heals again, and says what fails
            log.warning("copying session tables after a change of the workers failed: %s", e)

    def _heal(self) -> None:
        """Before a statement: bring every session-table partition back to two holders, after a
        worker holding one has left the cluster (``qengine.api.replicas``)."""
        tables = [s for s in list(self.catalog.tables.values()) if isinstance(s, MemorySource)]
        if tables:  # without any, nothing needs the workers, which may still be starting
            self.replicas.heal(p for s in tables for p in s.partitions)

    def cancel(self) -> None:
        """Cancel this session's running query (a remote client's Ctrl-C)."""
        self.coordinator.cancel()

    def _execute_one(self, st: exp.Expression, progress: Callable[[int, int], None] | None) -> Result:
        if isinstance(st, exp.Query | exp.Values):
            return self.query(st, progress)
        if isinstance(st, exp.Create):
            return self._create(st, progress)
        if isinstance(st, exp.Insert):
            return self._insert(st, progress)
        if isinstance(st, exp.Drop):
            return self._drop(st)
        if isinstance(st, exp.Copy):
            return self._copy(st, progress)
        if isinstance(st, exp.Describe):
            return Result.of_table(introspection.describe(st, self.catalog, self.plan_options.dialect))
        if introspection.is_show(st):
            return Result.of_table(introspection.show(st, self.catalog, self.plan_options.dialect))
        if isinstance(st, exp.Summarize):
            return self._summarize(st, progress)
        if isinstance(st, exp.Set):
            return self._set(set_statements.changed(self.settings, set_statements.assignments(st)))
        if isinstance(st, exp.Command) and st.name.upper() == "RESET":
            names = set_statements.reset_names(st)
            return self._set(dataclasses.replace(self.settings, **{n: getattr(self.opened_with, n) for n in names}))
        text = st.sql(dialect=self.plan_options.dialect)  # not sqlglot's own dialect: it spells fewer statements
        word = text.split()[0].strip('"') if text else type(st).__name__
        what = word.upper()
        if isinstance(st, _BARE_EXPRESSIONS) and what not in _ONE_WORD_STATEMENTS:
            # sqlglot reads a mistyped word (SELEC, FOO) as an expression: no statement at all
            raise ProgrammingError(f"syntax error: {word!r} does not begin an SQL statement")
        raise NotSupportedError(f"{what} statements are not supported")

    def plan(self, query: exp.Expression) -> StagePlan:
        """The plan of ``query``: filled in from the template of an earlier query of the same
        shape over the same catalog (``planner.templates``), or planned and kept as one."""
        return self._shaped_plan(query)[1]

    def _shaped_plan(self, query: exp.Expression) -> tuple[Shape, StagePlan]:
        dialect = self.plan_options.dialect
        shape = parameterize(query, dialect)
        key = (shape.key, self.catalog.version)
        plan = self.templates.fill(key, shape.values, dialect)
        if plan is not None:
            return shape, plan
        try:
            with planning(shape.values) as pinned:
                template = self._plan(shape.statement)
        except Exception:
            if not shape.values:
                raise
            # Planned with its constants as written, the query either fails in the user's
            # terms, naming no slot, or plans after all (and is not kept).
            return shape, self._plan(query)
        holders = slot_holders(template)
        if not template.reads_clock:
            self.templates.put(key, template, pinned, holders)
        return shape, instantiate(template, shape.values, dialect, holders)

    def _plan(self, query: exp.Expression) -> StagePlan:
        query = system_tables.inline(expand_sources(query, self.catalog, self.plan_options.dialect), self.catalog, self.plan_options.dialect)
        normalize_null_ordering(query, self.plan_options.dialect)
        name_outputs(query, self.plan_options.dialect)
        reads_clock = read_clock_once(query)  # named first: now()'s column is "now()"
        written = written_aliases(query)
        spellings = spelled_names(query, self.catalog)
        plan = plan_query(query, self.catalog, self.plan_options)
        plan.reads_clock = reads_clock
        plan.names = spelled([written[i] if written.get(i, "").lower() == n.lower() else n for i, n in enumerate(plan.names)], spellings)
        return plan

    def query(self, query: exp.Expression, progress: Callable[[int, int], None] | None = None) -> Result:
        return self._run(self.plan(query), progress)

    def _run(self, plan: StagePlan, progress: Callable[[int, int], None] | None) -> Result:
        if reads_no_data(plan):
            table, stats = self.coordinator.run_here(plan)
            struct_unnest_refused(table.num_columns, plan.names)
            return Result.of_table(table.rename_columns(plan.names), stats, plan)
        for tries_left in reversed(range(RESULT_TRIES)):
            placement, stats, query_id = self._coordinate(plan, progress=progress)
            rows = self._result_rows(plan, placement, stats, query_id)
            try:
                rows.fill(result_stream.AHEAD_BYTES)
                break
            except (WorkerUnreachableError, InputLostError):
                # A worker holding result partitions was lost after the run: run it again.
                rows.close()
                if not tries_left:
                    raise
            except BaseException:
                rows.close()  # its blocks are freed whatever stopped the read
                raise
        return Result(rows, rows.rows, stats, plan)

    def _coordinate(
        self, plan: StagePlan, output: dict | None = None, progress: Callable[[int, int], None] | None = None
    ) -> tuple[list[tuple[str, dict]], QueryStats, str]:
        """Run ``plan`` on the cluster as part of the calling thread's statement, which a
        ``cancel_statement`` of it stops."""
        with self.gate(plan) if self.gate is not None else contextlib.nullcontext():
            return self.coordinator.run(plan, output=output, progress=progress, cancelled=self.statements.current())

    def _result_rows(self, plan: StagePlan, placement: list[tuple[str, dict]], stats: QueryStats, query_id: str) -> ResultStream:
        """The result of a run as it is read from its workers, its columns named as the user
        wrote them; once read (or closed), the query's blocks are released."""
        schema = self.coordinator.result_schema(placement)
        try:
            struct_unnest_refused(len(schema), plan.names)
        except NotSupportedError:
            self.coordinator.release(f"{query_id}/")  # nothing is to read its blocks
            raise
        named = pa.schema([f.with_name(n) for f, n in zip(schema, plan.names, strict=True)], schema.metadata)

        def release() -> None:
            stats.spilled_bytes = self.coordinator.release(f"{query_id}/")

        batches = (
            pa.RecordBatch.from_arrays(batch.columns, schema=named)
            for batch in self.coordinator.result_batches(query_id, placement, schema)
        )
        return ResultStream(named, batches, sum(output["rows"] for _, output in placement), release)

    def _explain(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None, analyze: bool, trace: bool = False) -> Result:
        statements = parse(sql, self.plan_options.dialect)
        if len(statements) != 1 or not isinstance(statements[0], exp.Query):
            raise ProgrammingError("EXPLAIN takes a single query")
        query = bind(statements[0], params)
        if analyze:
            result = self.query(query)
            result.close()  # its rows are not shown; closing releases its blocks and counts their spills
            plan, stats = result.plan, result.stats
        else:
            plan, stats = self.plan(query), None
        if trace:  # one row: the run's Chrome trace, as JSON text
            return Result.of_table(pa.table({"trace": [json.dumps(chrome_trace(stats))]}), stats, plan)
        workers = len(self.cluster.addresses)
        lines = explain_lines(plan, workers, self.coordinator.options.split_bytes, stats)
        return Result.of_table(pa.table({"plan": lines}), stats, plan)

    # ---- DDL and DML -------------------------------------------------------------------

    def _create(self, st: exp.Create, progress: Callable[[int, int], None] | None) -> Result:
        kind = (st.args.get("kind") or "").upper()
        replace = bool(st.args.get("replace"))
        if_not_exists = bool(st.args.get("exists"))
        target = st.this
        if kind == "VIEW":
            query = st.expression
            if not isinstance(query, exp.Query):
                raise ProgrammingError("CREATE VIEW needs AS SELECT …")
            name = target.this.name if isinstance(target, exp.Schema) else target.name
            if if_not_exists and name.lower() in self.catalog.views:
                return Result(None, -1)
            if isinstance(target, exp.Schema):  # CREATE VIEW v (x, y): its first columns renamed
                query = exp.select("*").from_(exp.Subquery(this=query, alias=exp.TableAlias(
                    this=exp.to_identifier("__qengine_view"), columns=[c.copy() for c in target.expressions])))
            planned = self.plan(query.copy())  # validate now, as DuckDB does
            if isinstance(target, exp.Schema) and len(target.expressions) > len(planned.names):
                raise ProgrammingError(f"view {name!r} names more columns than its query has")
            described = catalog_mirror.query_columns(self.catalog, self.plan_options.dialect, query)
            columns = tuple(zip(described.column("column_name").to_pylist(), described.column("column_type").to_pylist(), strict=True))
            self.catalog.add_view(View(name, query, columns), replace)
            return Result(None, -1)
        if kind != "TABLE":
            raise NotSupportedError(f"CREATE {kind or type(target).__name__} is not supported")
        table = target.this if isinstance(target, exp.Schema) else target
        name = table.name
        exists = name.lower() in self.catalog.tables or name.lower() in self.catalog.views
        if exists and if_not_exists:
            return Result(None, -1)
        if exists and not replace:
            raise ProgrammingError(f"table {name!r} already exists")
        stats = None
        if st.expression is not None:
            source, stats = self._materialize(name, st.expression, progress)
        elif isinstance(target, exp.Schema):
            source = MemorySource(name, _schema_of(target), next(_table_ids))
        else:
            raise ProgrammingError("CREATE TABLE needs a column list or AS SELECT …")
        try:
            replaced = self.catalog.add_table(source, replace=replace)
        except ProgrammingError:  # a table of that name was made meanwhile (another thread's CREATE)
            if isinstance(source, MemorySource):
                self._release_table(source)
            raise
        if isinstance(replaced, MemorySource):
            self._release_table(replaced)
        return Result(None, source.rows, stats)

    def _materialize(
        self, name: str, query: exp.Expression, progress: Callable[[int, int], None] | None
    ) -> tuple[MemorySource, QueryStats]:
        """Run a query and keep its result partitions in the workers as a session table."""
        plan = self.plan(query)
        plan.names = deduplicated(plan.names)
        uid = next(_table_ids)
        placement, stats, partitions = self._write_table(plan, {"kind": "table", "names": plan.names}, f"table/{uid}", progress)
        first = schema_from_hex(placement[0][1]["schema"])
        schema = pa.schema([f.with_name(n) for f, n in zip(first, plan.names, strict=True)])
        source = MemorySource(name, schema, uid)
        source.partitions = partitions
        return source, stats

    def _write_table(
        self, plan: StagePlan, output: dict, under: str, progress: Callable[[int, int], None] | None
    ) -> tuple[list[tuple[str, dict]], QueryStats, list[Partition]]:
        """Run a table-writing query (CREATE TABLE AS, INSERT) and copy its partitions to a
        second worker each. A worker lost after the last task, before the copy of what it held,
        took the new rows with it, and the statement reported them stored (an INSERT left the
        whole table unreadable): the query is then run again, under a new key, and after
        ``RESULT_TRIES`` runs the statement fails, the table as it was."""
        runs = 0
        while True:
            runs += 1
            key = f"{under}/{next(_table_ids)}"
            placement, stats, query_id = self._coordinate(plan, output=dict(output, key=key), progress=progress)
            stats.spilled_bytes = self.coordinator.release(f"{query_id}/")
            partitions = _partitions(key, placement)
            lost = self.replicas.copy(partitions)
            if not lost:
                return placement, stats, partitions
            self.coordinator.release(f"{key}/")  # what the run left on the workers still there
            if runs == RESULT_TRIES:
                raise OperationalError(
                    f"the worker holding partition {lost[0].key} of the rows written was lost before they were copied, "
                    f"{RESULT_TRIES} times; nothing was written"
                )

    def _insert(self, st: exp.Insert, progress: Callable[[int, int], None] | None) -> Result:
        target = st.this
        table = target.this if isinstance(target, exp.Schema) else target
        _refuse_insert_clauses(st)
        source = self.catalog.table(table.name)
        if not isinstance(source, MemorySource):
            raise NotSupportedError(f"INSERT into {table.name!r} is not supported: only session tables take inserts")
        lookup = {f.name.lower(): f.name for f in source.schema}
        query = _insert_query(st, len(source.schema) if not isinstance(target, exp.Schema) else len(target.expressions))
        plan = None
        if st.args.get("by_name"):
            if isinstance(target, exp.Schema):
                raise ProgrammingError("INSERT ... BY NAME takes no column list: the query's column names say where each goes")
            plan = self.plan(query)
            columns = plan.names
        else:
            columns = [c.name for c in target.expressions] if isinstance(target, exp.Schema) else source.schema.names
        missing = [c for c in columns if c.lower() not in lookup]
        if missing:
            raise ProgrammingError(f"table {table.name!r} has no column {missing[0]!r}")
        repeated = next((c for i, c in enumerate(columns) if c.lower() in {d.lower() for d in columns[:i]}), None)
        if repeated is not None:
            raise ProgrammingError(f"column {repeated!r} is named twice in INSERT's columns")
        if isinstance(query, exp.Values):  # its values cast to the columns' types: planned anew
            query, plan = _values_as(query, [source.schema.field(lookup[c.lower()]) for c in columns]), None
        if plan is None:
            plan = self.plan(query)
        if len(plan.names) != len(columns):
            raise ProgrammingError(f"INSERT has {len(columns)} target columns but the query returns {len(plan.names)}")
        output = {"kind": "table", "schema": schema_to_hex(source.schema), "insert_columns": [lookup[c.lower()] for c in columns]}
        placement, _, partitions = self._write_table(plan, output, f"table/{source.uid}", progress)
        with self._lock:
            source.partitions += partitions
        self.catalog.changed()
        return Result(None, sum(stats["rows"] for _, stats in placement))

    def _copy(self, st: exp.Copy, progress: Callable[[int, int], None] | None) -> Result:
        """COPY (query) TO target: one file or hive partitions written here from the streamed
        result, or a directory of part files, part-NNNNN in result order, each written by its
        result task (``api.copy_to``). Its result is the row count, in DuckDB's column Count."""
        if st.args.get("kind"):
            raise NotSupportedError("COPY ... FROM is not supported: use register_parquet or register_csv")
        query = st.this.this if isinstance(st.this, exp.Subquery) else st.this
        if isinstance(query, exp.Table):
            query = exp.select("*").from_(query)
        out = copy_to.target(st, self.catalog.policy)
        plan = self.plan(query)
        if len({n.lower() for n in plan.names}) != len(plan.names):
            if out.format == "json":  # DuckDB: "Duplicate struct entry name"
                raise ProgrammingError("COPY to JSON writes each row as an object: two columns of one name, give one another")
            plan.names = deduplicated(plan.names)  # a and a_1, as DuckDB's COPY names them in CSV and Parquet
        if out.kind == "parts":
            claim_output(out.path, out.overwrite)
            output = {"kind": "files", "key": "files", "dir": out.path, "format": out.format, "names": plan.names}
            try:
                placement, stats, query_id = self._coordinate(plan, output=output, progress=progress)
            finally:
                record_output(out.path)
            stats.spilled_bytes = self.coordinator.release(f"{query_id}/")
            rows = sum(s["rows"] for _, s in placement)
        else:
            if out.kind == "hive":
                out.partition_by = copy_to.partition_keys(out, plan.names)  # checked before the query runs
            result = self._run(plan, progress)
            try:
                write = copy_to.write_file if out.kind == "file" else copy_to.write_partitions
                rows = write(out, result.rows.schema, result.rows)
            finally:
                result.close()
            stats = result.stats
        count = ResultStream.of_table(pa.table({"Count": pa.array([rows], pa.int64())}))
        return Result(count, rows, stats)

    def _summarize(self, st: exp.Summarize, progress: Callable[[int, int], None] | None) -> Result:
        """SUMMARIZE: its aggregates run on the cluster as one query (``api.introspection``)."""
        query, columns = introspection.summary_query(st, self.catalog, self.plan_options.dialect)
        result = self.query(query, progress)
        try:
            row = pa.Table.from_batches(list(result.rows), result.rows.schema).to_pylist()[0]
        finally:
            result.close()
        return Result.of_table(introspection.summary_table(columns, tuple(row.values())), result.stats, result.plan)

    def _set(self, settings: SessionSettings) -> Result:
        """Plan and run the session's next statements with ``settings``; plans made before
        (templates, prepared statements) are not reused, as after a change to the catalog."""
        self.settings, self.plan_options = settings, settings.plan_options(self.workers)
        self.coordinator.options = _execution(settings, self.user)
        self.catalog.changed()
        return Result(None, -1)

    def _drop(self, st: exp.Drop) -> Result:
        kind = (st.args.get("kind") or "").upper()
        if kind not in ("TABLE", "VIEW"):
            raise NotSupportedError(f"DROP {kind} is not supported")
        targets = st.args.get("tables") or ([st.this] if st.this is not None else [])
        if len(targets) > 1:  # DuckDB drops nothing then: dropping the first ones would not be DuckDB's
            raise NotSupportedError("DROP drops one table or view at a time, as in DuckDB")
        for target in targets:
            self._forget(target.name, kind, bool(st.args.get("exists")))
        return Result(None, -1)

    def forget_table(self, name: str) -> None:
        """Drop the session table ``name`` if it is there, freeing its blocks."""
        self._forget(name, "TABLE", True)

    def _forget(self, name: str, kind: str, if_exists: bool) -> None:
        """Drop a table or view from the catalog and free a session table's blocks."""
        dropped = self.catalog.drop(name, kind, if_exists)
        if isinstance(dropped, MemorySource):
            self._release_table(dropped)

    def _release_table(self, source: MemorySource) -> None:
        """Free a session table's blocks on the workers, every copy of them."""
        prefix = f"table/{source.uid}/"
        self.replicas.drop(prefix, functools.partial(self.coordinator.release, prefix))

    # ---- registration ------------------------------------------------------------------

    def _resolve(self, path: str, suffixes: tuple[str, ...], listed: list[str] | None = None) -> list[str]:
        """The files behind ``path``, which every worker must be able to read (on a multi-host
        cluster that takes a shared file system)."""
        return [resolved for resolved, _ in self._resolve_files(path, suffixes, listed)]

    def _resolve_files(self, path: str, suffixes: tuple[str, ...], listed: list[str] | None = None) -> list[tuple[str, str]]:
        """:meth:`_resolve`, each file with its path as ``path`` spells it (``Catalog.resolve_files``)."""
        files = self.catalog.resolve_files(path, suffixes, listed=listed)
        self.cluster.check_readable([resolved for resolved, _ in files])
        return files

    def _add(self, make: Callable[[list[str]], Source], path: str) -> None:
        """Register a file-backed table, made by ``make`` from the files it lists (adding the
        directories it listed); SQL may then also read under its directory."""
        self.catalog.add_table(self._listed(make))
        self.catalog.add_root(path)

    def _listed(self, make: Callable[[list[str]], Source]) -> Source:
        """A table ``make`` lists and reads, read again whenever the directories it listed change."""
        listed: list[str] = []
        source = make(listed)
        source.watch(listed, functools.partial(self._listed, make))
        return source

    def register_parquet(self, name: str, path: str) -> None:
        """A Parquet file, directory or glob; a hive-partitioned one (``y=2024/part.parquet``)
        with its partition columns, detected as DuckDB detects them."""
        self._add(lambda listed: hive_parquet(name, self._resolve_files(path, table_sources.SUFFIXES["parquet"], listed)), path)

    def register_records(self, name: str, path: str) -> None:
        """Flat files of 100-byte sort-benchmark records (gensort's binary layout)."""
        self._add(lambda listed: RecordSource(name, self._resolve(path, (".dat", ".bin", ".gensort"), listed)), path)

    def register_csv(self, name: str, path: str, delimiter: str | None = None, header: bool | None = None) -> None:
        """CSV files as DuckDB's read_csv() reads them; ``delimiter`` and ``header`` override what
        its sniffer finds (None: sniffed)."""
        self._add(lambda listed: CsvSource(name, self._resolve(path, (".csv", ".tsv", ".txt"), listed), delimiter, header), path)

    def register_file(self, kind: str, name: str, path: str, delimiter: str | None = None, header: bool | None = None) -> None:
        """Register a table by its kind: "parquet", "csv", "tsv" (tab-delimited CSV) or
        "records" (how servers name what a client or a data directory asks for)."""
        if kind == "parquet":
            self.register_parquet(name, path)
        elif kind in ("csv", "tsv"):
            self.register_csv(name, path, delimiter or ("\t" if kind == "tsv" else None), header)
        elif kind == "records":
            self.register_records(name, path)
        else:
            raise ProgrammingError(f"unknown table kind {kind!r}")

    def allow_root(self, directory: str) -> None:
        """Let SQL's read_parquet()/read_csv() read under ``directory``."""
        self.catalog.add_root(directory)

    def table_schema(self, name: str) -> pa.Schema:
        return self.catalog.table(name).schema

    def close(self) -> None:
        """Free the session tables' rows held on the workers, and the coordinator's threads."""
        self.cluster.changes.forget(self._heal_now)
        for source in list(self.catalog.tables.values()):
            if isinstance(source, MemorySource):
                self._release_table(source)
        self.catalog.tables.clear()
        self.coordinator.close()

    def table_names(self) -> list[str]:
        """Names of the registered tables and views."""
        catalog = self.catalog
        return sorted([s.name for s in catalog.user_tables()] + [v.name for v in catalog.views.values()])

    def register_arrow(self, name: str, table: pa.Table) -> None:
        """Spread an in-memory table over the workers as a session table, each piece on two.
        A worker found lost as its piece is put is left out of the next try."""
        for tries_left in reversed(range(RESULT_TRIES)):
            try:
                self._register_arrow(name, table)
                return
            except WorkerUnreachableError:
                if not tries_left:
                    raise

    def _register_arrow(self, name: str, table: pa.Table) -> None:
        addresses = self.cluster.addresses
        uid = next(_table_ids)
        source = MemorySource(name, table.schema, uid)
        chunk = max(1, -(-table.num_rows // len(addresses)))
        pieces: dict[str, pa.Table] = {}
        for i, address in enumerate(addresses):
            piece = table.slice(i * chunk, chunk)
            if piece.num_rows == 0 and i > 0:
                break
            key = f"table/{uid}/0/{i}"
            pieces[key] = piece
            source.partitions.append(Partition([address], key, piece.num_rows, piece.nbytes))
        try:
            self.replicas.store(source.partitions, pieces)
        except BaseException:  # the pieces already put would stay on their workers until close
            self.coordinator.release(f"table/{uid}/")
            raise
        self.catalog.add_table(source)


def _explain_options(analyze_word: str | None, options: str | None) -> tuple[bool, bool]:
    """(analyze, trace) from ``EXPLAIN ANALYZE`` or ``EXPLAIN (ANALYZE, FORMAT trace)``."""
    if options is None:
        return bool(analyze_word), False
    analyze, fmt = False, "text"
    for option in filter(None, (o.strip() for o in options.split(","))):
        words = option.split()
        if [w.upper() for w in words] in (["ANALYZE"], ["ANALYZE", "TRUE"]):
            analyze = True
        elif len(words) == 2 and words[0].upper() == "FORMAT" and words[1].lower() in ("text", "trace"):
            fmt = words[1].lower()
        else:
            raise ProgrammingError(f"unknown EXPLAIN option {option!r}: ANALYZE and FORMAT text|trace are")
    if fmt == "trace" and not analyze:
        raise ProgrammingError("EXPLAIN (FORMAT trace) needs ANALYZE: a trace is of a run")
    return analyze, fmt == "trace"


def _execution(settings: SessionSettings, user: str | None) -> ExecutionOptions:
    """The scheduler's options from the connection's settings, for ``user`` (None: the default)."""
    options = settings.execution_options()
    return options if user is None else dataclasses.replace(options, user=user)


def _partitions(key: str, placement: list[tuple[str, dict]]) -> list[Partition]:
    """Where a table-writing query left each of its result partitions (one holder each)."""
    return [Partition([address], f"{key}/{index}", stats["rows"], stats["bytes"]) for index, (address, stats) in enumerate(placement)]


def _refuse_insert_clauses(st: exp.Insert) -> None:
    """INSERT's clauses that session tables cannot honour: they have no keys to conflict on, and
    a statement's answer is its row count. Refused by name, rather than dropped."""
    if st.args.get("alternative"):
        raise NotSupportedError(f"INSERT OR {st.args['alternative'].upper()} is not supported: session tables have no keys")
    if st.args.get("conflict") is not None:
        raise NotSupportedError("INSERT ... ON CONFLICT is not supported: session tables have no keys")
    if st.args.get("returning") is not None:
        raise NotSupportedError("INSERT ... RETURNING is not supported: INSERT answers its row count; query the table after it")
    if st.args.get("overwrite"):
        raise NotSupportedError("INSERT OVERWRITE is not supported: CREATE OR REPLACE TABLE ... AS SELECT replaces a table")


def _insert_query(st: exp.Insert, width: int) -> exp.Expression:
    """The rows an INSERT adds, as a query: a WITH written before INSERT belongs to it, and
    DEFAULT (in VALUES, or DEFAULT VALUES) is NULL, as no session table column has a default."""
    if st.args.get("default"):
        return exp.Values(expressions=[exp.Tuple(expressions=[exp.Null() for _ in range(width)])])
    query = st.expression.copy()
    if isinstance(query, exp.Values):
        for item in list(query.find_all(exp.Var)):
            if item.name.upper() == "DEFAULT" and isinstance(item.parent, exp.Tuple):
                item.replace(exp.Null())
    written = st.args.get("with_")
    if written is not None:
        if not isinstance(query, exp.Query):
            raise NotSupportedError("WITH before INSERT ... VALUES is not supported: write INSERT ... SELECT")
        inner = query.args.get("with_")
        ctes = [*written.expressions, *(inner.expressions if inner is not None else [])]
        query.set("with_", exp.With(expressions=[c.copy() for c in ctes], recursive=written.args.get("recursive")))
    return query


def _values_as(values: exp.Values, fields: list[pa.Field]) -> exp.Values:
    """INSERT's VALUES with each value cast to its column's type, as DuckDB's INSERT casts it:
    typed as a query, the rows took the first row's types, and (2.5), (' 12') failed to make
    ' 12' a DECIMAL(2,1) where DuckDB stores both in an INTEGER column."""
    kinds = [column_type(f) for f in fields]
    cast = values.copy()
    for row in cast.expressions:
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        if len(items) != len(kinds):
            return values  # the planner says what is wrong with its width
        for item, kind in zip(items, kinds, strict=True):
            item.replace(exp.Cast(this=item.copy(), to=exp.DataType.build(kind, dialect="duckdb")))
    return cast


def _schema_of(schema: exp.Schema) -> pa.Schema:
    """Arrow schema of a CREATE TABLE column list, with DuckDB deciding what each type means.

    Constraints, defaults and collations are refused: a session table would store rows that
    break them, or NULL where a default was asked for."""
    defs = [c for c in schema.expressions if isinstance(c, exp.ColumnDef)]
    if not defs:
        raise ProgrammingError("CREATE TABLE needs at least one column")
    seen: set[str] = set()
    for column in defs:  # names are compared without case, as DuckDB compares them
        if column.name.lower() in seen:
            raise ProgrammingError(f"CREATE TABLE: column {column.name!r} repeats an earlier name (names are compared without case, as in DuckDB)")
        seen.add(column.name.lower())
    for item in schema.expressions:
        kinds = [c.args.get("kind") for c in item.args.get("constraints") or []] if isinstance(item, exp.ColumnDef) else [item]
        for kind in kinds:
            words = re.sub(r"(Column)?Constraint$", "", type(kind).__name__)
            words = re.sub(r"(?<!^)(?=[A-Z])", " ", words).upper()
            raise NotSupportedError(f"{words} in CREATE TABLE is not supported: session tables keep no constraints, "
                                    "defaults or collations; create the table without it")
    casts = ", ".join(f"CAST(NULL AS {c.args['kind'].sql(dialect='duckdb')}) AS {c.this.sql(dialect='duckdb')}" for c in defs if c.args.get("kind"))
    if len(casts.split(" AS ")) // 2 != len(defs):
        raise ProgrammingError("every column in CREATE TABLE needs a type")
    try:
        con = scratch_connection()
        try:
            relation = con.sql(f"SELECT {casts} LIMIT 0")
            # HUGEINT columns tagged as a query's are: as decimal128 alone, they divided as DECIMAL
            return tagged_result(relation).schema
        finally:
            con.close()
    except duckdb.Error as e:
        # only DuckDB's first line: the next ones quote the SQL qengine wrote to check the types
        raise ProgrammingError(f"bad column type in CREATE TABLE: {str(e).splitlines()[0]}") from e
