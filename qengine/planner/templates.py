"""Execution templates: a query's plan, kept and filled in again when its shape runs again.

Canary (``canary-scheduling.txt`` §4.1) gives every worker the driver program once, so an
iteration that runs again costs the controller nothing. qengine's equivalent for a query that
runs again is its stage plan, kept after the first run and filled in with the new constants.

The constants a query compares a value with (``d_year = 2001``, ``BETWEEN 10 AND 20``,
``IN ('a', 'b')``, a ``?`` bound there) become slots before planning: opaque placeholders the
planner cannot read a value from. So nothing it decides depends on the values (it cannot fold
``'s' = 'w'`` or merge two ranges), and the plan holds for any constants of the same kind. A
later statement of the same shape, over the same catalog, copies that plan and fills its slots
in: no optimizer and no planner.

Only a comparison's operands become slots. A constant elsewhere can change the plan itself
(``LIMIT 10``, ``ORDER BY 2``, a file name in ``read_parquet``, a CAST's type) and stays part
of the shape. Where the planner does want a slot's value (pushdown folds a UNION ALL branch's
``'s' AS kind`` against ``kind = 'w'`` to FALSE and drops the branch; a rank filter bounds a
window's rows; subqueries with equal filters are merged), it asks ``value_of`` or
``valued_sql``, and the template then holds only for those values: it is kept with them
pinned, and a run with others plans afresh.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

import sqlglot.expressions as exp
from sqlglot.errors import ErrorLevel, UnsupportedError

from qengine.errors import NotSupportedError
from qengine.planner.stages import StagePlan

PARAMETER = "qengine_parameter"  # the meta key of a bound parameter's literal (parameters.bind)
PLACEHOLDER = "qengine_placeholder"  # and of the placeholder it was written as ($1, $name): its column's name shows that
_SLOT = "__qengine_slot"
_SLOT_TEXT = re.compile(r"\$?" + _SLOT + r"_([ns])_(\d+)", re.IGNORECASE)
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Between, exp.In)
CAPACITY = 256  # shapes a session keeps, least recently used dropped first
MAX_VARIANTS = 8  # plans kept for one shape whose plans pinned slot values


def slot_kind(e: exp.Expression) -> str | None:
    """"n" or "s" when ``e`` is the slot of a numeric or string constant; None otherwise."""
    if isinstance(e, exp.Placeholder) and e.name.startswith(_SLOT):
        return e.name[len(_SLOT) + 1]
    return None


def slot_index(e: exp.Expression) -> int:
    return int(e.name.rsplit("_", 1)[1])


@dataclass
class _Planning:
    """The constants of the statement being planned, and the slots whose value it read."""

    values: list[exp.Literal]
    pinned: dict[int, tuple[bool, str]] = field(default_factory=dict)


_planning: ContextVar[_Planning | None] = ContextVar("qengine_template_planning", default=None)


@contextmanager
def planning(values: list[exp.Literal]) -> Iterator[dict[int, tuple[bool, str]]]:
    """Plan with ``values`` behind the slots: yields the slots whose value the plan came to
    depend on (``value_of``), filled in once planning ends."""
    state = _Planning(values)
    token = _planning.set(state)
    try:
        yield state.pinned
    finally:
        _planning.reset(token)


def valued_sql(e: exp.Expression) -> str:
    """``e``'s SQL with each slot as the constant it stands for, for the planner to tell equal
    expressions by: the plan then holds only for those values."""
    state = _planning.get()
    if state is None or not any(slot_kind(n) for n in e.walk()):
        return e.sql()
    return _fill_expression(e.copy(), lambda i: _read(state, i)).sql()


def value_of(e: exp.Expression) -> exp.Expression:
    """``e``, or the constant a slot stands for, which the plan being made then holds only for.
    The planner reads a slot's value through this alone."""
    state = _planning.get()
    if slot_kind(e) is None or state is None:
        return e
    return _read(state, slot_index(e))


def _read(state: _Planning, index: int) -> exp.Literal:
    literal = state.values[index]
    state.pinned[index] = literal_identity(literal)
    return literal.copy()


def literal_identity(literal: exp.Literal) -> tuple[bool, str]:
    """What tells two constants apart: kind and text (``1`` and ``1.0`` are two)."""
    return (literal.is_string, literal.this)


@dataclass
class Shape:
    """A statement with its comparison constants taken out.

    ``statement`` is a copy with a slot in place of each constant, ``key`` its text, ``values``
    the constants in slot order. Equal constants share a slot (``d_year = 2001`` in two
    subqueries), so that the planner sees those expressions as the same, as it does with
    constants; the key then says which constants were equal, and the plan holds for any values
    with the same equalities. The slots carry their kind, so ``a = 5`` and ``a = '5'`` differ.

    ``sources`` says for each slot which bound parameters went into it whole, with None for a
    constant written in the text; ``baked`` are the parameters that went somewhere else too
    (``LIMIT ?``), whose values the shape holds for alone; ``whole`` is False when a parameter
    went into a slot only in part (``-?``), which a later run's value cannot simply replace.
    """

    statement: exp.Expression
    key: str
    values: list[exp.Literal]
    sources: list[list[int | None]]
    baked: set[int]
    whole: bool


def parameterize(statement: exp.Expression, dialect: str) -> Shape:
    """The shape of ``statement``, which is left as it was."""
    values: list[exp.Literal] = []
    sources: list[list[int | None]] = []
    slots: dict[tuple[bool, str], int] = {}
    whole = True

    def visit(node: exp.Expression) -> exp.Expression:
        nonlocal whole
        value = slot_value(node) if compared(node) else None
        if value is None:
            return node
        bound = node if node.meta and PARAMETER in node.meta else None
        if bound is None and isinstance(node, exp.Literal) and isinstance(node.parent, exp.Cast) and node.parent.meta:
            bound = node.parent if PARAMETER in node.parent.meta else None  # a float, decimal or date parameter: CAST('…' AS t)
        origin = bound.meta[PARAMETER] if bound is not None else None
        if origin is None and any(n.meta and PARAMETER in n.meta for n in node.walk()):
            whole = False
        index = slots.setdefault(literal_identity(value), len(values))
        if index == len(values):
            values.append(value)
            sources.append([])
        sources[index].append(origin)
        slot = exp.Placeholder(this=f"{_SLOT}_{'s' if value.is_string else 'n'}_{index}")
        if bound is not None:  # a result column named after the slot shows the parameter as written
            slot.meta[PLACEHOLDER] = bound.meta[PLACEHOLDER]
        return slot

    parameters = [n.meta for n in statement.walk() if n.meta and PARAMETER in n.meta]
    bound = Counter(meta[PARAMETER] for meta in parameters)
    spellings = [meta[PLACEHOLDER] for meta in parameters]
    shaped = statement.transform(visit)
    slotted = Counter(origin for feeding in sources for origin in feeding)
    baked = {i for i, count in bound.items() if count > slotted[i]}
    try:
        # sqlglot's generator leaves out or changes what it cannot spell, with only a notice: two
        # statements differing there would share a key, and a plan
        key = shaped.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as e:
        raise NotSupportedError(str(e).splitlines()[0].strip()) from e
    if spellings:  # texts writing a value apart ($lo, $hi, 6) name their columns apart
        key += " -- " + " ".join(spellings)
    return Shape(shaped, key, values, sources, baked, whole)


def slot_value(node: exp.Expression) -> exp.Literal | None:
    """The constant ``node`` would be as a slot: a literal, or a chain of negations of a number
    as one signed number (``-5``, ``- -5`` and ``5`` are one shape); None for anything else."""
    number = _signed_number(node)
    if number is not None:
        return number
    return node.copy() if isinstance(node, exp.Literal) and not isinstance(node.parent, exp.Neg) else None


def _signed_number(node: exp.Expression) -> exp.Literal | None:
    """The number an outermost chain of negations of a numeric literal comes to, or None."""
    if not isinstance(node, exp.Neg) or isinstance(node.parent, exp.Neg):
        return None
    negative = False
    while isinstance(node, exp.Neg):
        negative, node = not negative, node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    # a Literal even when negative (Literal.number would make it a Neg again)
    return exp.Literal(this=f"-{node.this}" if negative else node.this, is_string=False)


def compared(constant: exp.Expression) -> bool:
    """True when ``constant`` is, perhaps cast or negated, an operand of a comparison, BETWEEN
    or an IN list: a position where its value can change which rows pass, never the plan."""
    node = constant
    if isinstance(node.parent, exp.Cast):
        node = node.parent
    parent = node.parent
    if isinstance(parent, exp.In):
        return node.arg_key == "expressions"
    return isinstance(parent, _COMPARISONS)


def instantiate(template: StagePlan, values: list[exp.Literal], dialect: str, holders: list[tuple[object, str]]) -> StagePlan:
    """A copy of ``template`` with its slots filled by ``values``: in every expression, and in
    every text derived from one (a result column named after its expression). ``holders`` are
    the template's fields that hold slots (``slot_holders``)."""
    memo: dict[int, object] = {}
    plan = copy.deepcopy(template, memo)
    if values:
        for owner, name in holders:
            copied = memo[id(owner)]
            object.__setattr__(copied, name, _fill(getattr(copied, name), values, dialect))
    return plan


def slot_holders(plan: StagePlan) -> list[tuple[object, str]]:
    """The fields of the plan's objects (operators, stages, the plan) whose value holds a slot,
    in an expression or a text, directly or in a list, tuple, set or dict: what ``_fill``
    fills, so a filled plan holds none. (A slot left anywhere else would reach DuckDB as an
    unbound ``$`` parameter, an error, never another value.)"""
    found: list[tuple[object, str]] = []
    seen: set[int] = set()

    def holds(value: object, nested: list[object]) -> bool:
        if isinstance(value, exp.Expression):
            return any(slot_kind(n) for n in value.walk())
        if isinstance(value, str):
            return _SLOT in value.lower()
        if isinstance(value, list | tuple | set | frozenset | dict):
            items = list(value.values()) if isinstance(value, dict) else list(value)
            return any([holds(x, nested) for x in items])  # a list: every item looked at
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            nested.append(value)
        return False

    stack: list[object] = [plan]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        for f in dataclasses.fields(obj):
            nested: list[object] = []
            if holds(getattr(obj, f.name), nested):
                found.append((obj, f.name))
            stack.extend(nested)
    return found


def _fill(obj: object, values: list[exp.Literal], dialect: str) -> object:
    """``obj`` with its slots filled, changed in place where it is mutable; an operator or
    stage inside it is left to its own entry in ``slot_holders``."""
    if isinstance(obj, exp.Expression):
        return _fill_expression(obj, lambda i: values[i].copy())
    if isinstance(obj, str):
        return _SLOT_TEXT.sub(lambda m: values[int(m[2])].sql(dialect=dialect), obj) if _SLOT in obj.lower() else obj
    if isinstance(obj, list):
        obj[:] = [_fill(x, values, dialect) for x in obj]
        return obj
    if isinstance(obj, tuple | set | frozenset):
        return type(obj)(_fill(x, values, dialect) for x in obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            obj[k] = _fill(v, values, dialect)
        return obj
    return obj


def _fill_expression(root: exp.Expression, value: Callable[[int], exp.Expression]) -> exp.Expression:
    """``root`` with every slot replaced, found through each node's own arguments: the planner
    shares subexpressions between trees, and a shared node's ``parent`` names one of them only,
    which ``Expression.transform`` would follow."""
    if slot_kind(root):
        return value(slot_index(root))
    stack = [root]
    while stack:
        node = stack.pop()
        for key, arg in list(node.args.items()):
            for index, child in enumerate(arg if isinstance(arg, list) else [arg]):
                if not isinstance(child, exp.Expression):
                    continue
                if slot_kind(child):
                    node.set(key, value(slot_index(child)), index if isinstance(arg, list) else None)
                else:
                    stack.append(child)
    return root


@dataclass
class _Template:
    plan: StagePlan
    pinned: dict[int, tuple[bool, str]]  # slot → the only value the plan holds for
    holders: list[tuple[object, str]]  # slot_holders(plan)

    def holds_for(self, values: list[exp.Literal]) -> bool:
        return all(literal_identity(values[i]) == value for i, value in self.pinned.items())


class Templates:
    """A session's plans by shape and catalog version, the least recently used shape dropped
    first. A shape whose plans pinned slot values keeps one plan per set of pinned values."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._shapes: OrderedDict[tuple[str, int], list[_Template]] = OrderedDict()
        self._lock = threading.Lock()
        self.reused = 0  # plans filled in from a template rather than planned

    def fill(self, key: tuple[str, int], values: list[exp.Literal], dialect: str) -> StagePlan | None:
        """A plan for ``values`` from a template of shape ``key``; None when there is none."""
        with self._lock:
            found = next((t for t in self._shapes.get(key, ()) if t.holds_for(values)), None)
            if found is None:
                return None
            self._shapes.move_to_end(key)
            self.reused += 1
        return instantiate(found.plan, values, dialect, found.holders)

    def put(
        self, key: tuple[str, int], plan: StagePlan, pinned: dict[int, tuple[bool, str]], holders: list[tuple[object, str]]
    ) -> None:
        with self._lock:
            for stale in [k for k in self._shapes if k[1] < key[1]]:  # made over an older catalog
                del self._shapes[stale]
            variants = self._shapes.setdefault(key, [])
            variants.append(_Template(plan, dict(pinned), holders))
            del variants[:-MAX_VARIANTS]
            self._shapes.move_to_end(key)
            while len(self._shapes) > self.capacity:
                self._shapes.popitem(last=False)
