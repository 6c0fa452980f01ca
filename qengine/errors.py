"""The DB-API 2.0 (PEP 249) exception hierarchy, raised for every user-facing error.

Everything qengine raises to a caller is one of these, with the original exception chained as
``__cause__``, so callers can catch ``qengine.Error`` and still see what went wrong underneath.
"""

from __future__ import annotations

import json


class Warning(Exception):  # noqa: A001, N818 - the name is mandated by PEP 249
    """Important warnings, e.g. data truncation."""


class Error(Exception):
    """Base class of all qengine errors."""


class InterfaceError(Error):
    """Misuse of the interface itself, e.g. using a closed cursor."""


class DatabaseError(Error):
    """Errors related to the query engine."""


class DataError(DatabaseError):
    """Bad data: a failed cast, a value out of range."""


class OperationalError(DatabaseError):
    """The cluster failed: a worker died, a task could not run, a timeout."""


class WorkerUnreachableError(OperationalError):
    """A call to a worker got no answer: it is gone, stopped or cut off (not an error it sent
    back). The scheduler takes the worker for lost, if the cluster agrees, and runs the task
    elsewhere."""


class InputLostError(OperationalError):
    """A task's input blocks could not be read: their holder is unreachable, or they are gone
    (a lost worker held them, or a reader that failed had consumed them).

    Raised inside a worker and sent to the coordinator, which recomputes the blocks from their
    lineage and runs the task again; a user sees it only if recovery gives up. The message
    starts with ``input lost``, the holder's address and the missing blocks as JSON
    (made by :func:`input_lost`), which the coordinator reads back with :func:`lost_input`.
    """


LOST_INPUT_PREFIX = "input lost "


def lost_input(message: str) -> dict | None:
    """The holder and missing blocks an :class:`InputLostError` message names, or None."""
    if not message.startswith(LOST_INPUT_PREFIX):
        return None
    try:
        info, _ = json.JSONDecoder().raw_decode(message[len(LOST_INPUT_PREFIX):])
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def input_lost(address: str, key: str, missing: list[list[int]] | None, detail: str) -> InputLostError:
    """An :class:`InputLostError` for blocks of ``key`` at ``address``: ``missing`` lists the
    ``[map task, partition, attempt]`` blocks that are gone (partition -1: staged range output),
    None when the holder did not answer at all."""
    info = json.dumps({"address": address, "key": key, "missing": missing})
    return InputLostError(f"{LOST_INPUT_PREFIX}{info} {detail}")


class IntegrityError(DatabaseError):
    """Relational integrity violated."""


class InternalError(DatabaseError):
    """An invariant inside qengine broke; this is a qengine bug."""


class ProgrammingError(DatabaseError):
    """Bad SQL: syntax errors, unknown tables or columns, wrong parameter counts."""


class NotSupportedError(DatabaseError):
    """A construct or API that qengine does not implement."""


_BY_NAME: dict[str, type[Error]] = {
    cls.__name__: cls
    for cls in (
        Error,
        InterfaceError,
        DatabaseError,
        DataError,
        OperationalError,
        InputLostError,
        WorkerUnreachableError,
        IntegrityError,
        InternalError,
        ProgrammingError,
        NotSupportedError,
    )
}

# DuckDB's and Arrow's exception class names (as raised inside a worker) mapped to the PEP 249
# class the user sees. What is not here is taken for trouble with the cluster (OperationalError).
_DUCKDB_TO_DBAPI: dict[str, type[Error]] = {
    "ConversionException": DataError,
    "OutOfRangeException": DataError,
    "InvalidInputException": DataError,
    "TypeMismatchException": DataError,
    "DataError": DataError,
    "ArrowInvalid": DataError,  # values Arrow cannot hold or carry: an overflow, types nested past its limit
    "BinderException": ProgrammingError,
    "CatalogException": ProgrammingError,
    "ParserException": ProgrammingError,
    "SyntaxException": ProgrammingError,
    "InvalidTypeException": ProgrammingError,
    "DependencyException": ProgrammingError,
    "ProgrammingError": ProgrammingError,
    "NotImplementedException": NotSupportedError,
    "ArrowNotImplementedError": NotSupportedError,
    "NotSupportedError": NotSupportedError,
    "ConstraintException": IntegrityError,
    "IntegrityError": IntegrityError,
    "InternalException": InternalError,
    "OutOfMemoryException": OperationalError,
}


def error_class(name: str) -> type[Error]:
    """Map an exception class name (qengine's own or DuckDB's) to the DB-API class to raise."""
    return _BY_NAME.get(name) or _DUCKDB_TO_DBAPI.get(name) or OperationalError


def user_message(type_name: str, message: str) -> str:
    """What the user reads of an engine's error of class ``type_name``: its first line, and for
    Arrow's "not implemented" (a bare ``sparse_union`` for a UNION column a shuffle hashed)
    what it means and what to do."""
    line = first_line(message)
    if type_name == "ArrowNotImplementedError":
        return f"a column's type is not supported where this query needs it (Arrow: {line}); cast the column, to VARCHAR say"
    return line


def first_line(message: str) -> str:
    """The first non-blank line of an engine's error message: DuckDB appends an excerpt of the
    fragment SQL qengine wrote, which the user never saw."""
    return next((line for line in message.splitlines() if line.strip()), message)

