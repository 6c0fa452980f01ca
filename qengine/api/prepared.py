"""Statements run again as written, perhaps with other parameters: the parser is skipped.

The first run of a text parses it, binds its parameters and takes its shape
(``planner.templates``), which says where each parameter went. A later run of the same text,
with parameters of the same types, over the same catalog, fills its values straight into the
shape's template: no sqlglot at all. Parameters that went anywhere but a slot (``LIMIT ?``)
must be the same as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlglot.expressions as exp

from qengine.errors import Error
from qengine.planner.parameters import literal
from qengine.planner.stages import StagePlan
from qengine.planner.templates import CAPACITY, Shape, Templates, literal_identity, slot_value


@dataclass
class _Entry:
    shape_key: str
    # per slot: the constant written in the text, or the parameters that fill it (equal ones
    # share a slot, and must be equal again)
    slots: list[exp.Literal | tuple[int, ...]]
    fixed: dict[int, tuple[type, str]]  # parameters a run must bind as before


class Prepared:
    """Statement texts a session has run, the least recently used dropped first."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def plan(self, sql: str, params: Sequence[Any], version: int, templates: Templates, dialect: str) -> StagePlan | None:
        """The plan of ``sql`` with ``params``, filled in from a template; None when this text
        has to be parsed (not seen, other parameter types, another catalog, no template)."""
        key = _key(sql, params, version)
        with self._lock:
            entry = self._entries.get(key) if key is not None else None
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or any(_identity(params[i]) != v for i, v in entry.fixed.items()):
            return None
        values = []
        for slot in entry.slots:
            if isinstance(slot, exp.Literal):
                values.append(slot)
                continue
            filled = [_slot_of(params[i]) for i in slot]
            if len({literal_identity(v) for v in filled}) > 1:  # no longer equal: another shape
                return None
            values.append(filled[0])
        return templates.fill((entry.shape_key, version), values, dialect)

    def learn(self, sql: str, params: Sequence[Any], version: int, shape: Shape) -> None:
        """Remember where the parameters of a statement just parsed went."""
        key = _key(sql, params, version)
        if key is None or not shape.whole:
            return
        slots: list[exp.Literal | tuple[int, ...]] = []
        fixed_too: set[int] = set()
        for value, feeding in zip(shape.values, shape.sources, strict=True):
            if None in feeding:  # also written in the text: its parameters must stay equal to it
                slots.append(value)
                fixed_too.update(i for i in feeding if i is not None)
            else:
                slots.append(tuple(i for i in feeding if i is not None))
        slotted = {i for feeding in shape.sources for i in feeding if i is not None}
        fixed = {i: _identity(p) for i, p in enumerate(params) if i not in slotted or i in shape.baked or i in fixed_too}
        with self._lock:
            for stale in [k for k in self._entries if k[1] < version]:  # learned over an older catalog
                del self._entries[stale]
            self._entries[key] = _Entry(shape.key, slots, fixed)
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


def _key(sql: str, params: Sequence[Any], version: int) -> tuple | None:
    try:
        return (sql, version, tuple(_signature(p) for p in params))
    except Error:  # a type no parameter can have: parsing says so
        return None


def _signature(value: Any) -> tuple[str, str]:
    """What of a parameter the shape depends on: its type, and its literal with the constant
    a slot takes blanked out (a decimal's scale stays: it is the CAST's type)."""
    node = literal(value)
    found = slot_value(node.this if isinstance(node, exp.Cast) else node)
    if found is None:  # TRUE, NULL: no slot takes it, so the value is the signature
        return type(value).__name__, node.sql()
    blank = exp.var("?s" if found.is_string else "?n")
    if isinstance(node, exp.Cast):
        node.set("this", blank)
        return type(value).__name__, node.sql()
    return type(value).__name__, blank.sql()


def _slot_of(value: Any) -> exp.Literal:
    """The constant a parameter puts in its slot (inside a CAST for floats, decimals, dates)."""
    node = literal(value)
    found = slot_value(node.this if isinstance(node, exp.Cast) else node)
    assert found is not None  # the same signature as when its origin was learned
    return found


def _identity(value: Any) -> tuple[type, str]:
    """What a parameter must be again for a plan it was baked into: its type and its SQL
    literal, not Python's ``==``, for which -0.0 is 0.0 and two instants an hour apart (the
    same wall time, ``fold`` apart) are equal."""
    return type(value), literal(value).sql()
