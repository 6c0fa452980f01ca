"""The Arrow Flight SQL protocol messages qengine's endpoint reads and writes.

Flight SQL carries its commands as ``google.protobuf.Any`` messages inside plain Flight calls
(a descriptor's command, a ticket, an action's body). The messages below are the subset of
``FlightSql.proto`` (package ``arrow.flight.protocol.sql``) and ``Flight.proto`` that qengine
serves, declared field by field with their numbers from the specification and built with the
protobuf runtime at import: no generated code, so no generator version has to match the
installed runtime.

Fields the specification declares ``optional`` (presence tracked) are proto2 optionals here,
which encode the same on the wire; enum fields are ``int32``, which also encodes the same.
"""

from __future__ import annotations

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError, Message

SQL_PACKAGE = "arrow.flight.protocol.sql"
FLIGHT_PACKAGE = "arrow.flight.protocol"
_TYPE_URL_PREFIX = "type.googleapis.com/"

_T = descriptor_pb2.FieldDescriptorProto
_TYPES = {"string": _T.TYPE_STRING, "bytes": _T.TYPE_BYTES, "bool": _T.TYPE_BOOL, "int32": _T.TYPE_INT32,
          "int64": _T.TYPE_INT64, "uint32": _T.TYPE_UINT32}

# name → [(field, number, type, repeated)]
_SQL_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "CommandGetSqlInfo": [("info", 1, "uint32", True)],
    "CommandGetCatalogs": [],
    "CommandGetDbSchemas": [("catalog", 1, "string", False), ("db_schema_filter_pattern", 2, "string", False)],
    "CommandGetTables": [
        ("catalog", 1, "string", False), ("db_schema_filter_pattern", 2, "string", False),
        ("table_name_filter_pattern", 3, "string", False), ("table_types", 4, "string", True), ("include_schema", 5, "bool", False),
    ],
    "CommandGetTableTypes": [],
    "CommandGetPrimaryKeys": [("catalog", 1, "string", False), ("db_schema", 2, "string", False), ("table", 3, "string", False)],
    "CommandGetExportedKeys": [("catalog", 1, "string", False), ("db_schema", 2, "string", False), ("table", 3, "string", False)],
    "CommandGetImportedKeys": [("catalog", 1, "string", False), ("db_schema", 2, "string", False), ("table", 3, "string", False)],
    "CommandStatementQuery": [("query", 1, "string", False), ("transaction_id", 2, "bytes", False)],
    "TicketStatementQuery": [("statement_handle", 1, "bytes", False)],
    "CommandPreparedStatementQuery": [("prepared_statement_handle", 1, "bytes", False)],
    "CommandStatementUpdate": [("query", 1, "string", False), ("transaction_id", 2, "bytes", False)],
    "CommandPreparedStatementUpdate": [("prepared_statement_handle", 1, "bytes", False)],
    "DoPutUpdateResult": [("record_count", 1, "int64", False)],
    "DoPutPreparedStatementResult": [("prepared_statement_handle", 1, "bytes", False)],
    "ActionCreatePreparedStatementRequest": [("query", 1, "string", False), ("transaction_id", 2, "bytes", False)],
    "ActionCreatePreparedStatementResult": [
        ("prepared_statement_handle", 1, "bytes", False), ("dataset_schema", 2, "bytes", False), ("parameter_schema", 3, "bytes", False),
    ],
    "ActionClosePreparedStatementRequest": [("prepared_statement_handle", 1, "bytes", False)],
    "ActionCancelQueryRequest": [("info", 1, "bytes", False)],  # a serialized FlightInfo
    "ActionCancelQueryResult": [("result", 1, "int32", False)],
}
# Flight's own action messages for "CancelFlightInfo" (sent bare, not inside an Any).
_FLIGHT_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "CancelFlightInfoRequest": [("info", 1, "bytes", False)],  # an embedded FlightInfo, read as its bytes
    "CancelFlightInfoResult": [("status", 1, "int32", False)],
}

# CancelStatus (Flight) and ActionCancelQueryResult.CancelResult share these numbers.
CANCELLED = 1
NOT_CANCELLABLE = 3


def _file(package: str, messages: dict[str, list[tuple[str, int, str, bool]]]) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name=f"qengine/{package}.proto", package=package, syntax="proto2")
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            message.field.add(name=field, number=number, type=_TYPES[kind], label=_T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL)
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file(SQL_PACKAGE, _SQL_MESSAGES))
_POOL.Add(_file(FLIGHT_PACKAGE, _FLIGHT_MESSAGES))
_CLASSES: dict[str, type[Message]] = {
    f"{package}.{name}": message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{package}.{name}"))
    for package, messages in ((SQL_PACKAGE, _SQL_MESSAGES), (FLIGHT_PACKAGE, _FLIGHT_MESSAGES))
    for name in messages
}


def sql_message(name: str, **fields: object) -> Message:
    """A Flight SQL message by its short name (``CommandStatementQuery``)."""
    return _CLASSES[f"{SQL_PACKAGE}.{name}"](**fields)


def flight_message(name: str, data: bytes = b"", **fields: object) -> Message:
    """One of Flight's own messages, read from ``data`` or made from ``fields``."""
    message = _CLASSES[f"{FLIGHT_PACKAGE}.{name}"](**fields)
    if data:
        message.ParseFromString(data)
    return message


def packed(message: Message) -> bytes:
    """``message`` inside a ``google.protobuf.Any``, serialized: how Flight SQL sends it."""
    wrapper = any_pb2.Any()
    wrapper.Pack(message, type_url_prefix=_TYPE_URL_PREFIX)
    return wrapper.SerializeToString()


def unpacked(data: bytes) -> tuple[str, Message] | None:
    """The short name and message of a serialized ``Any`` holding a Flight SQL message; None
    for bytes that are not one (qengine's own JSON calls share the server)."""
    wrapper = any_pb2.Any()
    try:
        wrapper.ParseFromString(data)
    except DecodeError:
        return None
    full_name = wrapper.type_url.removeprefix(_TYPE_URL_PREFIX)
    cls = _CLASSES.get(full_name) if full_name.startswith(SQL_PACKAGE + ".") else None
    if cls is None:
        return None
    message = cls()
    try:
        message.ParseFromString(wrapper.value)
    except DecodeError:
        return None
    return full_name.removeprefix(SQL_PACKAGE + "."), message


def type_url_of(data: bytes) -> str:
    """The type named by a serialized ``Any`` (for an error about a command not served), or ''."""
    wrapper = any_pb2.Any()
    try:
        wrapper.ParseFromString(data)
    except DecodeError:
        return ""
    return wrapper.type_url.removeprefix(_TYPE_URL_PREFIX)
