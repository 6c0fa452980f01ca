"""The named options of ``read_parquet(...)`` in FROM that qengine models: the hive ones.

Any other option would change what DuckDB reads (``union_by_name``, ``filename``), so it is
refused rather than ignored.
"""

from __future__ import annotations

import sqlglot.expressions as exp

from qengine.catalog.hive import HiveOptions
from qengine.errors import NotSupportedError, ProgrammingError

_FLAGS = ("hive_partitioning", "hive_types_autocast")


def hive_options(fname: str, options: list[exp.Expression]) -> HiveOptions:
    """The hive options among ``read_parquet``'s arguments after its paths (``name = value``)."""
    values: dict[str, object] = {}
    for option in options:
        if not (isinstance(option, exp.EQ) and isinstance(option.this, exp.Column) and not option.this.table):
            raise ProgrammingError(f"{fname}() takes its options as name = value after the path")
        name = option.this.name.lower()
        value = option.expression
        if name in values:
            raise ProgrammingError(f"{fname}() option {name} given twice")
        if name in _FLAGS:
            if not isinstance(value, exp.Boolean):
                raise ProgrammingError(f"{fname}() option {name} takes true or false")
            values[name] = value.this
        elif name == "hive_types":
            values[name] = _types(fname, value)
        else:
            raise NotSupportedError(f"{fname}() option {name} is not supported (hive_partitioning, hive_types and "
                                    "hive_types_autocast are)")
    return HiveOptions(
        partitioning=values.get("hive_partitioning"),  # type: ignore[arg-type]
        types=values.get("hive_types", {}),  # type: ignore[arg-type]
        autocast=values.get("hive_types_autocast", True),  # type: ignore[arg-type]
    )


def _types(fname: str, value: exp.Expression) -> dict[str, str]:
    """``hive_types = {'column': 'TYPE', ...}`` as column → type name."""
    if not isinstance(value, exp.Struct):
        raise ProgrammingError(f"{fname}() option hive_types takes a struct such as {{'y': 'INTEGER'}}")
    out = {}
    for pair in value.expressions:
        key = pair.this if isinstance(pair, exp.PropertyEQ) else None
        kind = pair.expression if isinstance(pair, exp.PropertyEQ) else None
        if not (isinstance(key, exp.Identifier | exp.Literal) and isinstance(kind, exp.Literal) and kind.is_string):
            raise ProgrammingError(f"{fname}() option hive_types takes column names with type names as strings")
        out[key.name] = kind.name
    return out
