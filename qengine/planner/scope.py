"""What a query's FROM items look like to the expressions above them: a planned relation and
the aliases through which its columns are named."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from qengine.planner.logical import Names, Node, Scan, made_up


class ColumnAllocator(Protocol):
    """Allocates internal column names and records their widths (the plan builder)."""

    names: Names
    widths: dict[str, float]


@dataclass
class Rel:
    """A planned relation: its operator and the display names of its columns."""

    node: Node
    names: list[str]


@dataclass
class SourceScope:
    """One FROM item visible under an alias. Scans allocate internal columns on first use."""

    alias: str
    node: Node
    fixed: dict[str, str] | None = None
    scan: Scan | None = None
    builder: ColumnAllocator | None = None

    def has(self, name: str) -> bool:
        """Whether this item has a column ``name``, without making a scan read it."""
        return name.lower() in self.fixed if self.fixed is not None else self._scanned(name) is not None

    def _scanned(self, name: str) -> str | None:
        """The scanned table's column ``name`` (any case) as the table spells it."""
        assert self.scan is not None
        key = name.lower()
        return next((f.name for f in self.scan.source.schema if f.name.lower() == key), None)

    def lookup(self, name: str) -> str | None:
        if self.fixed is not None:
            return self.fixed.get(name.lower())
        assert self.scan is not None and self.builder is not None
        source = self.scan.source
        actual = self._scanned(name)
        if actual is None:
            return None
        if actual not in self.scan.column_map:
            # the alias as the user wrote it (or the table's name); not one the planner made up
            internal = self.builder.names.new(actual if made_up(self.alias) else f"{self.alias}.{actual}")
            self.scan.column_map[actual] = internal
            self.builder.widths[internal] = source.column_width(actual)
        return self.scan.column_map[actual]
