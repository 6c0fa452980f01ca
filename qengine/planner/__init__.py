"""Query planning: SQL AST → logical plan → physical plan with exchanges → stage DAG."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot.expressions as exp

from qengine.catalog.catalog import Catalog
from qengine.catalog.sources import DEFAULT_SPLIT_BYTES
from qengine.planner.builder import Builder
from qengine.planner.decorrelate import decorrelate
from qengine.planner.frontend import optimize_query
from qengine.planner.logical import Scan, walk_query
from qengine.planner.merge_aggregates import merge_scalar_aggregates
from qengine.planner.physical import PhysicalPlanner
from qengine.planner.pushdown import push_down
from qengine.planner.stages import StagePlan, cut


@dataclass(frozen=True)
class PlanOptions:
    """Planner settings a connection passes down."""

    dialect: str = "duckdb"
    partitions: int = 4
    broadcast_threshold: int = 10 << 20
    # A broadcast table of at most this many bytes is read whole by each consumer task instead.
    replicate_bytes: int = 8 << 20
    # The scan split size: a table that makes one split is read by one task (Source.single_split).
    split_bytes: int = DEFAULT_SPLIT_BYTES


def plan_query(query: exp.Expression, catalog: Catalog, options: PlanOptions) -> StagePlan:
    """Plan a query (already bound and with views expanded) into a stage DAG."""
    optimized = decorrelate(merge_scalar_aggregates(optimize_query(query, catalog, options.dialect)))
    builder = Builder(catalog)
    rel = builder.build(optimized)
    for node in walk_query(rel.node):
        if isinstance(node, Scan) and not node.column_map:
            # Nothing referenced (e.g. count(*)): read the first column so rows can be counted.
            first = node.source.schema[0].name
            node.column_map[first] = builder.names.new()
    physical = PhysicalPlanner(
        options.partitions, options.broadcast_threshold, builder.widths, builder.names, options.split_bytes
    )
    root, _ = physical.plan(push_down(rel.node))
    plan = cut(root, rel.names, options.replicate_bytes)
    plan.readable = catalog.parquet_files()
    plan.access = catalog.effective_policy().to_json()
    plan.labels, plan.origins = builder.names.labels, builder.names.origins
    return plan
