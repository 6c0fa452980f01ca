"""SET, RESET and current_setting() over a connection's own settings.

The settings are those ``qengine.connect()`` takes for a session (``api.options.SessionSettings``):
``SET shuffle = 'pull'``, ``SET broadcast_threshold = 0`` (or ``'0'``, ``'10MB'``), ``SET
partitions TO 8``. Each value is checked as ``connect()`` checks it. RESET puts a setting back to
what the connection was opened with. A name that is no such setting (DuckDB's own ``threads``,
say) is refused naming the settings there are: qengine must not seem to take a setting it
ignores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sqlglot.expressions as exp

from qengine.api.options import SessionSettings, parse_size
from qengine.errors import NotSupportedError, ProgrammingError
from qengine.planner.parameters import literal

NAMES = tuple(f.name for f in dataclasses.fields(SessionSettings))
_SIZES = ("broadcast_threshold", "replicate_size", "split_size", "coalesce_size")


def _known(name: str) -> str:
    key = name.lower()
    if key not in NAMES:
        raise ProgrammingError(f"unrecognized setting {name!r}: qengine's settings are {', '.join(NAMES)}")
    return key


def assignments(st: exp.Set) -> dict[str, Any]:
    """Setting → value of each item of a SET statement, as written (not yet checked)."""
    out = {}
    for item in st.expressions:
        kind = (item.args.get("kind") or "").upper()
        if kind not in ("", "SESSION") or not isinstance(item.this, exp.EQ):
            raise NotSupportedError(f"SET {kind or item.sql(dialect='duckdb')} is not supported: write SET name = value")
        target, value = item.this.this, item.this.expression
        if not isinstance(target, exp.Column | exp.Identifier) or (isinstance(target, exp.Column) and target.table):
            raise ProgrammingError(f"SET takes a setting's name, not {target.sql(dialect='duckdb')}")
        out[_known(target.name)] = _value(value)
    return out


def _value(value: exp.Expression) -> Any:
    """A SET value as Python: a number, a string, true/false, or NULL."""
    if isinstance(value, exp.Neg) and isinstance(value.this, exp.Literal):
        inner = _value(value.this)
        return -inner if isinstance(inner, int | float) else inner
    if isinstance(value, exp.Literal):
        if value.is_string:
            return value.name
        return int(value.name) if value.name.lstrip("-").isdigit() else float(value.name)
    if isinstance(value, exp.Boolean):
        return bool(value.this)
    if isinstance(value, exp.Null):
        return None
    if isinstance(value, exp.Column | exp.Identifier | exp.Var):  # SET shuffle = pull
        return value.name
    raise ProgrammingError(f"SET takes a constant value, not {value.sql(dialect='duckdb')}")


def reset_names(st: exp.Command) -> tuple[str, ...]:
    """The settings a RESET statement names (ALL: every one)."""
    text = st.expression.name if isinstance(st.expression, exp.Expression) else str(st.expression)
    words = text.strip().rstrip(";").split()
    if len(words) == 2 and words[0].upper() in ("SESSION", "LOCAL"):
        words = words[1:]
    if len(words) != 1:
        raise ProgrammingError(f"RESET takes one setting's name or ALL, not {text.strip()!r}")
    return NAMES if words[0].upper() == "ALL" else (_known(words[0].strip('"')),)


def changed(settings: SessionSettings, values: dict[str, Any]) -> SessionSettings:
    """``settings`` with ``values`` set, each read as ``connect()`` takes it and checked."""
    typed = {name: _typed(name, value) for name, value in values.items()}
    return dataclasses.replace(settings, **typed).validated()


def _typed(name: str, value: Any) -> Any:
    """A SET value in the type the setting has: '8' sets partitions to 8, 'true' speculation on."""
    if name in _SIZES:
        return value if isinstance(value, int) and not isinstance(value, bool) else str(value)
    if name == "partitions" and value is None:
        return None
    default = getattr(SessionSettings, name)
    try:
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false", "on", "off", "1", "0"):
                return value.lower() in ("true", "on", "1")
            return bool(value) if value in (0, 1) else value
        if isinstance(default, int) or name == "partitions":
            return int(value) if isinstance(value, str) else value
        if isinstance(default, float):
            return float(value) if isinstance(value, str | int) and not isinstance(value, bool) else value
    except ValueError:
        raise ProgrammingError(f"{name} must be a number, not {value!r}") from None
    return value if value is None else str(value)


def current(settings: SessionSettings, workers: int, name: str) -> Any:
    """current_setting(name): sizes in bytes, partitions as the planner uses them."""
    key = _known(name)
    if key in _SIZES:
        return parse_size(getattr(settings, key), key)
    if key == "partitions":
        return settings.plan_options(workers).partitions
    return getattr(settings, key)


def with_current_settings(statement: exp.Expression, settings: SessionSettings, workers: int) -> exp.Expression:
    """``statement`` with each current_setting('name') replaced by the setting's value now; a
    select-list item that is only the call keeps DuckDB's name for it, current_setting('name')."""
    for call in list(statement.find_all(exp.Anonymous)):
        if call.name.lower() != "current_setting":
            continue
        if isinstance(statement, exp.Create):  # a view would keep the value of the moment it was made
            raise NotSupportedError("current_setting() in CREATE is not supported: a view would keep the value it had when made")
        args = call.expressions
        if len(args) != 1 or not (isinstance(args[0], exp.Literal) and args[0].is_string):
            raise ProgrammingError("current_setting() takes a setting's name as a string literal")
        value = literal(current(settings, workers, args[0].name))
        if isinstance(call.parent, exp.Select) and call.arg_key == "expressions":
            value = exp.alias_(value, call.sql(dialect="duckdb", normalize_functions="lower"), quoted=True)
        call.replace(value)
    return statement
