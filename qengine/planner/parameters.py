"""Query parameters: ``?`` and ``$n`` placeholders numbered as written, and bound to typed
literals as DuckDB binds Python values (a ``Decimal`` as wide as its digits, a ``datetime``
with an offset as a TIMESTAMPTZ, a list as a LIST). Each bound literal remembers which
parameter it is, for ``planner.templates`` to fill a later run's value in where it went."""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import duckdb
import sqlglot.expressions as exp
from sqlglot.tokens import Token, TokenType

from qengine.errors import NotSupportedError, ProgrammingError, first_line
from qengine.planner.templates import PARAMETER, PLACEHOLDER, compared
from qengine.sandbox.connection import scratch_connection

QUESTION_MARKS = "qengine_question_marks"  # meta of a statement whose parameters were written ?
# meta of a bound literal: its placeholder ($1 for the first ?, $name), which names an
# unaliased result column as DuckDB names it ("($1 + 1)"), whatever the value


# Tokens an operand ends with: a ``~`` after one is the binary regular expression match, not
# the bitwise NOT of what follows.
OPERAND_END = {
    TokenType.VAR, TokenType.IDENTIFIER, TokenType.STRING, TokenType.NUMBER, TokenType.R_PAREN, TokenType.R_BRACKET,
    TokenType.NULL, TokenType.TRUE, TokenType.FALSE,
}


def numbered_placeholders(tokens: list[Token]) -> list[Token]:
    """``?`` parameters as ``$1``, ``$2``… in the order they are written. The parser's tree
    lists a LIMIT before the WHERE, so counting ``?`` in it bound ``WHERE x > ? LIMIT ?`` the
    wrong way round."""
    tokens = _placeholder_casts(tokens)
    if not any(t.token_type == TokenType.PLACEHOLDER for t in tokens):
        return tokens
    if any(t.token_type == TokenType.PARAMETER and t.text == "$" for t in tokens):
        raise ProgrammingError("a statement cannot mix ? and $n parameters")
    out: list[Token] = []
    numbers = itertools.count(1)
    for t in tokens:
        if t.token_type != TokenType.PLACEHOLDER:
            out.append(t)
            continue
        out.append(Token(TokenType.PARAMETER, "$", t.line, t.col, t.start, t.end))
        out.append(Token(TokenType.NUMBER, str(next(numbers)), t.line, t.col, t.start, t.end))
    return out


def _placeholder_casts(tokens: list[Token]) -> list[Token]:
    """``?::INT`` as the parameter ``?`` cast to INT, as DuckDB reads it: sqlglot's tokenizer
    makes ``?::`` one operator (another dialect's try-cast), and the statement failed as a
    syntax error. Only where an operand may begin: after an operand, ``?::`` stays that operator."""
    if not any(t.token_type == TokenType.QDCOLON for t in tokens):
        return tokens
    out: list[Token] = []
    for t in tokens:
        if t.token_type == TokenType.QDCOLON and (not out or out[-1].token_type not in OPERAND_END):
            out.append(Token(TokenType.PLACEHOLDER, "?", t.line, t.col, t.start, t.start))
            out.append(Token(TokenType.DCOLON, "::", t.line, t.col, t.start + 1, t.end))
        else:
            out.append(t)
    return out


def bind(statement: exp.Expression, params: Sequence[Any] | Mapping[str, Any] | None) -> exp.Expression:
    """Replace ``$n`` placeholders (``?`` is numbered by ``parse``) with literals, checking the
    count; with a mapping, ``$name`` placeholders by name."""
    holders = list(statement.find_all(exp.Placeholder, exp.Parameter))
    for holder in holders:
        if clause := _refused_clause(holder):
            # bound, it would be a constant there: a column position (ORDER BY ? sorted by
            # the column its value named), or a group of its own
            raise ProgrammingError(f"a parameter is not supported in the {clause} clause, as in DuckDB")
    if isinstance(params, Mapping):
        return _bind_names(statement, holders, params)
    params = list(params or [])
    if not holders:
        if params:
            raise ProgrammingError(f"statement takes no parameters but {len(params)} were given")
        return statement
    numbers = []
    for holder in holders:
        try:
            numbers.append(int(holder.name))
        except ValueError:
            raise ProgrammingError(f"no value for parameter {holder.sql(dialect='duckdb')}") from None  # as written: :name
    written = statement.meta.get(QUESTION_MARKS)
    for holder, number in zip(holders, numbers, strict=True):
        if not written and not 1 <= number <= len(params):
            raise ProgrammingError(f"no value for parameter {holder.sql(dialect='duckdb')}")  # as written: $2
    if len(params) != max(numbers):
        raise ProgrammingError(f"statement takes {counted(max(numbers), 'parameter')} but {len(params)} were given")
    unused = sorted(set(range(1, len(params) + 1)) - set(numbers))
    if unused:  # $1 + $3 with three values: DuckDB refuses the value no $2 reads
        raise ProgrammingError(f"parameter ${unused[0]} is given but not in the statement")
    for holder, number in zip(holders, numbers, strict=True):
        holder.replace(_bound(holder, params[number - 1], number - 1))
    return statement


def _refused_clause(holder: exp.Expression) -> str | None:
    """"ORDER BY" or "GROUP BY" when ``holder`` is a whole term of the query's ORDER BY (not a
    window's) or of its GROUP BY (also inside ROLLUP, CUBE and GROUPING SETS), else None."""
    node = holder
    while isinstance(node.parent, exp.Paren | exp.Tuple | exp.Rollup | exp.Cube | exp.GroupingSets):
        node = node.parent
    parent = node.parent
    if isinstance(parent, exp.Group):
        return "GROUP BY"
    if isinstance(parent, exp.Ordered) and isinstance(parent.parent, exp.Order) and not isinstance(parent.parent.parent, exp.Window):
        return "ORDER BY"
    return None


def _bind_names(statement: exp.Expression, holders: list[exp.Expression], params: Mapping[str, Any]) -> exp.Expression:
    """Bind ``$name`` placeholders as DuckDB does: names match regardless of case, and every
    name written needs a value and every value a name written."""
    if statement.meta.get(QUESTION_MARKS):
        raise ProgrammingError("a dict of parameters binds $name placeholders, not ?: pass a list for ?")
    named = {}
    for index, (name, value) in enumerate(params.items()):
        if not isinstance(name, str):
            raise ProgrammingError(f"parameter names must be strings, not {name!r}")
        if name.lower() in named:
            raise ProgrammingError(f"parameter ${name} is given twice")
        named[name.lower()] = (index, value)
    written = {holder.name.lower() for holder in holders}
    missing = [holder.name for holder in holders if holder.name.lower() not in named]
    if missing:
        raise ProgrammingError(f"no value for parameter ${missing[0]}")
    extra = [name for name in params if name.lower() not in written]
    if extra:
        raise ProgrammingError(f"parameter ${extra[0]} is not in the statement")
    for holder in holders:
        holder.replace(_bound(holder, named[holder.name.lower()][1], named[holder.name.lower()][0]))
    return statement


def _bound(holder: exp.Expression, value: Any, index: int) -> exp.Expression:
    """``value``, bound at ``holder``, as a literal that remembers it is parameter ``index``, for
    ``planner.templates`` to fill a later run's value in where it went."""
    node = literal(value, duckdb_width=not compared(holder))
    if isinstance(holder.parent, exp.Bracket):
        # sqlglot takes 1 off an integer index as it parses, unless what is indexed is a
        # string, and adds it back as it writes where what is indexed is of a type it does not
        # know or a list. Typed as unknown, a bound index is written as it is (l[?] with 2 read
        # the third element), and a bound string indexed has its index written back as it was
        # (?[1] with 'abc' read no character)
        node.type = exp.DataType.build("unknown")
    node.meta[PARAMETER] = index
    node.meta[PLACEHOLDER] = holder.sql(dialect="duckdb")
    if isinstance(node, exp.Null) and isinstance(holder.parent, exp.Bracket) and holder.arg_key == "this":
        return exp.paren(node, copy=False)  # DuckDB cannot parse NULL[1]; (NULL)[1] is NULL
    return node


# pandas' missing values (pd.NaT, pd.NA), which DuckDB binds as NULL; told by their types'
# names, so that binding does not import pandas
_PANDAS_MISSING = ("NaTType", "NAType")


def literal(value: Any, duckdb_width: bool = False) -> exp.Expression:
    """A Python value as a typed SQL literal. A ``Decimal`` is a DECIMAL(38, its scale) unless
    ``duckdb_width``: compared, its width changes no answer, and a template then holds for
    decimals of every width (``planner.templates``)."""
    if value is None or type(value).__name__ in _PANDAS_MISSING:
        return exp.Null()
    if type(value).__module__ == "numpy" and hasattr(value, "item"):  # np.float64(1.5): its Python value
        if getattr(value, "ndim", 0):  # an array: DuckDB binds it as a LIST
            return literal(value.tolist(), duckdb_width)
        item = value.item()
        if item is None:  # NaT
            return exp.Null()
        if getattr(value, "dtype", None) is not None and value.dtype.kind in "mM" and not isinstance(item, dt.date | dt.timedelta):
            # a nanosecond numpy time has no Python value but an integer: np.timedelta64(1, 'ns') was bound as 1
            raise ProgrammingError(f"cannot bind {value!r}: convert it to a datetime or timedelta (of microseconds at most)")
        return literal(item, duckdb_width)
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        if not -(1 << 127) <= value < 1 << 128:  # DuckDB refuses it too, where a number literal would be a DOUBLE
            raise ProgrammingError(f"cannot bind the integer {value}: it does not fit in 128 bits")
        if 1 << 63 <= value < 1 << 64:  # DuckDB's binding: beyond BIGINT, a UBIGINT while one holds it
            return exp.cast(exp.Literal.number(value), exp.DataType.build("UBIGINT", dialect="duckdb"))
        return exp.Literal.number(value)
    if isinstance(value, float):
        return exp.cast(exp.Literal.string(repr(float(value))), "DOUBLE")
    if isinstance(value, decimal.Decimal):
        return _decimal_literal(value, duckdb_width)
    if isinstance(value, str):
        if "\x00" in value:  # no SQL string literal holds a NUL: the pieces joined by chr(0)
            pieces: list[exp.Expression] = [exp.Literal.string(piece) for piece in value.split("\x00")]
            joined = pieces[0]
            for piece in pieces[1:]:
                joined = exp.DPipe(this=exp.DPipe(this=joined, expression=exp.func("chr", exp.Literal.number(0))), expression=piece)
            return joined
        return exp.Literal.string(value)
    if isinstance(value, dt.datetime):
        # an aware datetime is an instant, as DuckDB binds it: TIMESTAMP would drop its offset
        kind = "TIMESTAMPTZ" if value.utcoffset() is not None else "TIMESTAMP"
        return exp.cast(exp.Literal.string(value.isoformat(sep=" ")), kind)
    if isinstance(value, dt.date):
        return exp.cast(exp.Literal.string(value.isoformat()), "DATE")
    if isinstance(value, dt.time):
        if value.utcoffset() is not None:  # a TIME WITH TIME ZONE, which qengine does not carry
            raise NotSupportedError("a time with a UTC offset cannot be bound: TIME WITH TIME ZONE is not supported; bind a naive time")
        return exp.cast(exp.Literal.string(value.isoformat()), "TIME")
    if isinstance(value, bytes | bytearray | memoryview):
        return exp.cast(exp.Literal.string("".join(f"\\x{b:02x}" for b in bytes(value))), "BLOB")
    if isinstance(value, dt.timedelta):  # DuckDB's INTERVAL of the same days and microseconds
        return exp.cast(exp.Literal.string(f"{value.days} days {value.seconds * 1_000_000 + value.microseconds} microseconds"), "INTERVAL")
    if isinstance(value, uuid.UUID):
        return exp.cast(exp.Literal.string(str(value)), "UUID")
    if isinstance(value, list | tuple | dict):
        return _nested_literal(value, _duckdb_type(value))
    raise ProgrammingError(f"cannot bind a parameter of type {type(value).__name__}")


def _duckdb_type(value: list | tuple | dict) -> duckdb.DuckDBPyType:
    """The type DuckDB binds a list or dict parameter as. Its values are of one type, which
    DuckDB works out from all of them: ``[Decimal('1.5'), Decimal('12345.678')]`` is a
    DECIMAL(8,3)[], ``[1, 'a']`` a VARCHAR[], ``[2**63, 1]`` a HUGEINT[]. Typing each value alone
    left the list's own rules to pick, and it rounded 12345.678 to 12345.7."""
    con = scratch_connection()
    try:
        return duckdb.sqltype(con.execute("SELECT typeof($1)", [value]).fetchone()[0])
    except (duckdb.Error, TypeError, ValueError, OverflowError) as e:
        raise ProgrammingError(f"cannot bind this {type(value).__name__} as a parameter: {first_line(str(e))}") from e
    finally:
        con.close()


def _nested_literal(value: Any, kind: duckdb.DuckDBPyType) -> exp.Expression:
    """``value`` as a literal of DuckDB's type ``kind`` for it (:func:`_duckdb_type`): a list,
    struct or map built of its values, each cast to the type DuckDB gives the values there. A
    NaN inside a list or struct is NULL, as DuckDB binds it."""
    if value is None or type(value).__name__ in _PANDAS_MISSING or (isinstance(value, float) and math.isnan(value)):
        return exp.Null()
    children = dict(kind.children) if kind.id in ("list", "struct", "map") else {}
    if kind.id == "list":
        return exp.Array(expressions=[_nested_literal(v, children["child"]) for v in value])
    if kind.id == "map":  # DuckDB's Python binding: {"key": [...], "value": [...]} is a MAP, {} an empty one
        return exp.Map(
            keys=exp.Array(expressions=[_nested_literal(k, children["key"]) for k in value.get("key", ())]),
            values=exp.Array(expressions=[_nested_literal(v, children["value"]) for v in value.get("value", ())]),
        )
    if kind.id == "struct":
        named = {str(k): v for k, v in value.items()}  # DuckDB names a field by its key's text: {1: 'a'} has "1"
        fields = []
        for name, child in kind.children:
            key = exp.to_identifier(name)
            key.meta["case_sensitive"] = True  # a struct's field names keep their case (frontend)
            fields.append(exp.PropertyEQ(this=key, expression=_nested_literal(named.get(name), child)))
        return exp.Struct(expressions=fields)
    if str(kind) == '"NULL"':
        return exp.Null()
    # a Cast of its own: sqlglot's cast() keeps a DECIMAL(38,1) as it is for a DECIMAL(8,3)
    return exp.Cast(this=literal(value), to=exp.DataType.build(str(kind), dialect="duckdb"))


def _decimal_literal(value: decimal.Decimal, duckdb_width: bool) -> exp.Expression:
    """A ``Decimal`` typed as DuckDB types a parameter (with ``duckdb_width``), so that what is
    computed from it has DuckDB's types: ``Decimal('1.5')`` is a DECIMAL(2,1), ``Decimal('0.05')``
    a DECIMAL(3,2); else DECIMAL(38, its scale). Of more than 38 digits, a DOUBLE; NaN and the
    infinities a FLOAT. (DuckDB reads ``Decimal('1E+3')`` as 1.000; qengine keeps its value, 1000.)"""
    if not value.is_finite():
        return exp.cast(exp.Literal.string(str(value)), "FLOAT")
    digits, exponent = value.as_tuple().digits, int(value.as_tuple().exponent)
    scale = max(0, -exponent)
    width = len(digits) + max(0, exponent)
    precision = scale + 1 if width < scale else max(width, scale, 1)
    kind = "DOUBLE" if precision > 38 else f"DECIMAL({precision if duckdb_width else 38},{scale})"
    return exp.cast(exp.Literal.string(str(value)), kind)


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
