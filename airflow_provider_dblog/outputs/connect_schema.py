"""Kafka Connect schemas for the Debezium envelope (``format=debezium&schemas=true``): what
Kafka Connect's JsonConverter writes with ``schemas.enable=true``, so that sink connectors
(Debezium's JDBC sink, Iceberg's, object-store sinks) can read our topics.

Each record is ``{"schema": <Connect schema>, "payload": <value>}``; the key the same with
the key columns. A column's Connect type and value follow Debezium's defaults
(docs/kafka.md, "Types with schemas"): integers by width, ``decimal.handling.mode`` for
decimals (``precise``: Connect's ``Decimal`` logical type, bytes of the unscaled value;
``string``; ``double``), Debezium's temporal logical types (``Date`` days, ``Timestamp``
milliseconds or ``MicroTimestamp`` microseconds by precision, ``MicroTime``,
``ZonedTimestamp`` text), ``Json``, ``Uuid``, ``Enum``/``EnumSet``, and bytes as base64 (the
JsonConverter's form). Values come from the changelog's canonical values (docs/changelog-
format.md); one that has no form in the column's Connect type (a PostgreSQL 'infinity'
date, a NaN numeric in precise mode) stops the capture with the column and the fix, never
a null or a rounded number.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import functools
import re
from typing import Any, Callable, Optional

from ..core.errors import DBLogError
from ..core.events import Column, TableSchema
from ..core.row_text import dumps
from ..core.toast import is_unchanged_toast
from ..sources.mysql.values import set_members
from ..sources.type_families import base_type, family

DECIMAL_MODES = ("precise", "string", "double")
# Debezium's stand-in for a value the log did not carry (an unchanged TOASTed column).
UNAVAILABLE = "__debezium_unavailable_value"

_EPOCH_DATE = datetime.date(1970, 1, 1)
_EPOCH = datetime.datetime(1970, 1, 1)
_NAME_BAD = re.compile(r"[^A-Za-z0-9_.]")

Convert = Callable[[Any], Any]


class UnrepresentableValue(DBLogError):
    """A canonical value with no form in its column's Connect type."""


@dataclasses.dataclass(frozen=True)
class ConnectField:
    """One column: its Connect schema (without ``field``) and the canonical -> payload value."""

    name: str
    schema: dict[str, Any]
    convert: Convert

    def field_schema(self) -> dict[str, Any]:
        return {**self.schema, "field": self.name}


def schema_name(text: str) -> str:
    """A Connect/Avro record name: characters other than letters, digits, ``_`` and ``.``
    become ``_``, and a part starting with a digit gets a leading ``_`` (as Debezium's
    ``schema.name.adjustment.mode=avro``)."""
    parts = _NAME_BAD.sub("_", text).split(".")
    return ".".join(f"_{p}" if p[:1].isdigit() else p for p in parts)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


UNAVAILABLE_B64 = _b64(UNAVAILABLE.encode())  # the placeholder in a bytes column


def _unscaled_bytes(unscaled: int) -> bytes:
    """Big-endian two's complement in the fewest bytes (Java's BigInteger.toByteArray())."""
    return unscaled.to_bytes(max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1), "big", signed=True)


class _Column:
    """Converters of one column, raising UnrepresentableValue with its table and column."""

    def __init__(self, table: str, column: Column):
        self.table, self.column = table, column

    def fail(self, value: Any, why: str, fix: str) -> UnrepresentableValue:
        return UnrepresentableValue(
            f"the value {value!r} of {self.table}.{self.column.name} ({self.column.type}) {why}.",
            fix,
        )

    def decimal(self, value: Any) -> decimal.Decimal:
        d = decimal.Decimal(str(value))
        if not d.is_finite():
            raise self.fail(
                value,
                "has no form in Connect's Decimal (precise decimal.handling.mode)",
                "set decimal_handling_mode=string in the kafka:// URL (exact text), or use format=dblog",
            )
        return d

    def fixed_decimal(self, scale: int) -> Convert:
        def convert(value: Any) -> str:
            unscaled = self.decimal(value).scaleb(scale)
            if unscaled != unscaled.to_integral_value():
                raise self.fail(value, f"has more than the column's {scale} decimal places", "report this as a bug")
            return _b64(_unscaled_bytes(int(unscaled)))

        return convert

    def variable_decimal(self, value: Any) -> dict[str, Any]:
        d = self.decimal(value)
        sign, digits, exponent = d.as_tuple()
        scale = max(0, -int(exponent))
        return {"scale": scale, "value": _b64(_unscaled_bytes(int(d.scaleb(scale))))}

    def date(self, value: Any) -> int:
        try:
            return (datetime.date.fromisoformat(value) - _EPOCH_DATE).days
        except (TypeError, ValueError):
            raise self.fail(value, "is not a date Debezium's io.debezium.time.Date holds", _TEXT_FIX) from None

    def timestamp(self, per_second: int) -> Convert:
        def convert(value: Any) -> int:
            try:
                delta = datetime.datetime.fromisoformat(value) - _EPOCH
            except (TypeError, ValueError):
                raise self.fail(value, "is not a timestamp Debezium's temporal types hold", _TEXT_FIX) from None
            micros = delta // datetime.timedelta(microseconds=1)
            return micros if per_second == 1_000_000 else micros // 1000

        return convert

    def micro_time(self, value: Any) -> int:
        m = re.fullmatch(r"(-?)(\d+):(\d\d):(\d\d)(?:\.(\d{1,6}))?", str(value))
        if not m:
            raise self.fail(value, "is not a time Debezium's io.debezium.time.MicroTime holds", _TEXT_FIX)
        sign, h, mi, s, frac = m.groups()
        micros = ((int(h) * 60 + int(mi)) * 60 + int(s)) * 1_000_000 + int((frac or "").ljust(6, "0"))
        return -micros if sign else micros


_TEXT_FIX = "use format=dblog for this source (its values are the exact text), or change the value"


def _zoned(value: Any) -> str:
    text = str(value)
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _bytes(value: Any) -> str:
    if isinstance(value, dict) and "$b64" in value:
        return str(value["$b64"])
    raise TypeError(f"not a binary value: {value!r}")


def _same(value: Any) -> Any:
    return value


def _logical(type_: str, name: Optional[str] = None, **parameters: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type_}
    if name:
        out["name"] = name
        out["version"] = 1
    if parameters:
        out["parameters"] = parameters
    return out


def column_field(table: str, column: Column, decimal_mode: str = "precise", key: bool = False) -> ConnectField:
    """The Connect schema and value converter of one column (see the module docstring)."""
    col = _Column(table, column)
    base, params, unsigned = base_type(column.type)
    schema: dict[str, Any]
    convert: Convert = _same
    if base.endswith("[]"):
        schema = _logical("string")
        convert = dumps
    elif base == "year":
        schema = _logical("int32", "io.debezium.time.Year")
    elif base in family("byte") or base in family("short"):
        schema = _logical("int32" if unsigned and base not in family("byte") else "int16")
    elif base in family("int"):
        schema = _logical("int64" if unsigned else "int32")
    elif base in family("long") and unsigned:  # beyond int64: Debezium's precise mode
        schema, convert = _decimal_field(col, decimal_mode, 20, 0)
    elif base in family("long"):
        schema = _logical("int64")
    elif base in ("numeric", "decimal", "dec", "fixed"):
        precision, scale = (params + [0, 0])[:2] if params else (None, None)
        schema, convert = _decimal_field(col, decimal_mode, precision, scale)
    elif base in family("double"):
        # real / float4 / MySQL float: single precision (its canonical value is that float's double)
        schema = _logical("float32" if base in ("real", "float4", "float") else "float64")
    elif base in ("boolean", "bool"):
        schema = _logical("boolean")
    elif base == "bit" and params in ([], [1]):
        schema = _logical("boolean")
        convert = _bit_as_bool
    elif base in family("binary"):
        schema, convert = _logical("bytes"), _bytes
    elif base in family("json"):
        schema, convert = _logical("string", "io.debezium.data.Json"), dumps
    elif base == "uuid":
        schema = _logical("string", "io.debezium.data.Uuid")
    elif base == "date":
        schema, convert = _logical("int32", "io.debezium.time.Date"), col.date
    elif base in family("timestamp_ntz"):
        # adaptive precision: milliseconds up to 3 fractional digits, else microseconds
        # (PostgreSQL's default precision is 6, MySQL DATETIME's 0)
        precision = params[0] if params else (6 if base.startswith("timestamp") else 0)
        if precision <= 3:
            schema, convert = _logical("int64", "io.debezium.time.Timestamp"), col.timestamp(1000)
        else:
            schema, convert = _logical("int64", "io.debezium.time.MicroTimestamp"), col.timestamp(1_000_000)
    elif base in family("timestamp"):
        schema, convert = _logical("string", "io.debezium.time.ZonedTimestamp"), _zoned
    elif base in ("time", "time without time zone"):
        schema, convert = _logical("int64", "io.debezium.time.MicroTime"), col.micro_time
    elif base in ("time with time zone", "timetz"):
        schema = _logical("string", "io.debezium.time.ZonedTime")
    elif base in ("enum", "set") and "(" in column.type:
        name = "io.debezium.data.Enum" if base == "enum" else "io.debezium.data.EnumSet"
        schema = _logical("string", name, allowed=",".join(set_members(column.type)))
    else:  # text types, intervals, network addresses, bit strings, ...: the canonical text
        schema = _logical("string")
        convert = _text
    # Only key columns are required: a row image may lack the others even where the column
    # is NOT NULL (PostgreSQL's old row of a delete without REPLICA IDENTITY FULL holds the key
    # alone), and Connect refuses a null in a required field.
    schema["optional"] = not key
    return ConnectField(column.name, schema, _unavailable_aware(schema, convert, col))


def _text(value: Any) -> Any:
    return value if isinstance(value, str) else dumps(value)


def _bit_as_bool(value: Any) -> bool:
    return bool(int(value)) if not isinstance(value, str) else value not in ("0", "")


def _decimal_field(
    col: _Column, mode: str, precision: Optional[int], scale: Optional[int]
) -> tuple[dict[str, Any], Convert]:
    if mode == "string":
        return _logical("string"), str
    if mode == "double":
        return _logical("float64"), lambda v: float(decimal.Decimal(str(v)))
    if precision is None or scale is None:  # numeric without a declared scale
        return (
            {
                "type": "struct",
                "fields": [
                    {"type": "int32", "optional": False, "field": "scale"},
                    {"type": "bytes", "optional": False, "field": "value"},
                ],
                "name": "io.debezium.data.VariableScaleDecimal",
                "version": 1,
                "doc": "Variable scaled decimal",
            },
            col.variable_decimal,
        )
    params = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return _logical("bytes", "org.apache.kafka.connect.data.Decimal", **params), col.fixed_decimal(scale)


def _unavailable_aware(schema: dict[str, Any], convert: Convert, col: _Column) -> Convert:
    """NULL stays null; an unchanged TOASTed value (PostgreSQL without REPLICA IDENTITY FULL)
    becomes Debezium's placeholder where the type can hold it (text: the text; bytes: its
    UTF-8 bytes), and stops the capture elsewhere."""

    def wrapped(value: Any) -> Any:
        if value is None:
            return None
        if is_unchanged_toast(value):
            if schema["type"] == "string":
                return UNAVAILABLE
            if schema["type"] == "bytes" and "name" not in schema:  # not a Decimal's unscaled bytes
                return UNAVAILABLE_B64
            raise col.fail(
                value,
                "is a value the log did not carry (unchanged TOAST) in a type with no placeholder",
                "give the table REPLICA IDENTITY FULL",
            )
        return convert(value)

    return wrapped


@dataclasses.dataclass(frozen=True)
class TableConnectSchema:
    """The key and row (``before``/``after``) structs of one table schema version."""

    key_fields: tuple[ConnectField, ...]
    row_fields: tuple[ConnectField, ...]

    def key_payload(self, key: tuple[Any, ...]) -> dict[str, Any]:
        return {f.name: f.convert(v) for f, v in zip(self.key_fields, key)}

    def row_payload(self, row: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
        if row is None:
            return None
        return {f.name: f.convert(row.get(f.name)) for f in self.row_fields}

    def source_form(self, rows: dict[tuple, dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
        """A source's rows (canonical values, by key) as a ``schemas=true`` topic holds them:
        each row's payload, by the key its record key gives (``connect_key``). The
        same conversion as the capture's, so a topic equals its source exactly when the two
        agree in this form (``dblog verify`` of such a topic)."""
        return {connect_key(self.key_payload(k)): self.row_payload(r) or {} for k, r in rows.items()}

    def key_schema(self, name: str) -> dict[str, Any]:
        return _struct([f.field_schema() for f in self.key_fields], name + ".Key", optional=False)

    def row_schema(self, name: str) -> dict[str, Any]:
        return _struct([f.field_schema() for f in self.row_fields], name + ".Value", optional=True)


def connect_key(payload: dict[str, Any]) -> tuple:
    """A Connect key payload (``{"id": 42}``, columns in key order) as a key tuple; a struct
    value (VariableScaleDecimal) as its JSON text, so that the key can be hashed."""
    return tuple(dumps(v) if isinstance(v, (dict, list)) else v for v in payload.values())


def _struct(fields: list[dict[str, Any]], name: str, optional: bool) -> dict[str, Any]:
    return {"type": "struct", "fields": fields, "optional": optional, "name": schema_name(name)}


@functools.lru_cache(maxsize=4096)
def table_connect_schema(schema: TableSchema, decimal_mode: str) -> TableConnectSchema:
    by_name = {c.name: c for c in schema.columns}
    keys = tuple(column_field(schema.table, by_name[k], decimal_mode, key=True) for k in schema.key if k in by_name)
    rows = tuple(column_field(schema.table, c, decimal_mode, key=c.name in schema.key) for c in schema.columns)
    return TableConnectSchema(keys, rows)


# The ``source`` block: Debezium's common fields, each connector's own, then DBLog's.
_SOURCE_COMMON = [
    ("version", "string", False),
    ("connector", "string", False),
    ("name", "string", False),
    ("ts_ms", "int64", False),
    ("ts_us", "int64", True),
    ("snapshot", "string", True),
    ("db", "string", True),
]
_SOURCE_CONNECTOR = {
    "postgresql": [("schema", "string", True), ("table", "string", True), ("txId", "int64", True)],
    "mysql": [("table", "string", True), ("gtid", "string", True)],
}
_SOURCE_DBLOG = [
    ("position", "string", False),
    ("txid", "string", True),
    ("dump_id", "string", True),
    ("schema_id", "string", True),
]
_SOURCE_NAMES = {"postgresql": "io.debezium.connector.postgresql.Source", "mysql": "io.debezium.connector.mysql.Source"}


def source_fields(connector: Optional[str]) -> list[str]:
    return [n for n, _, _ in _source_spec(connector)]


def _source_spec(connector: Optional[str]) -> list[tuple[str, str, bool]]:
    middle = _SOURCE_CONNECTOR.get(connector or "", [("table", "string", True)])
    return _SOURCE_COMMON + middle + _SOURCE_DBLOG


@functools.lru_cache(maxsize=8)
def source_schema(connector: Optional[str]) -> dict[str, Any]:
    fields = [{"type": t, "optional": opt, "field": n} for n, t, opt in _source_spec(connector)]
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": _SOURCE_NAMES.get(connector or "", "io.dblog.Source"),
        "field": "source",
    }


_TRANSACTION = {
    "type": "struct",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
    "optional": True,
    "name": "event.block",
    "version": 1,
    "field": "transaction",
}


def envelope_schema(table: TableConnectSchema, name: str, connector: Optional[str]) -> dict[str, Any]:
    """Debezium's ``<name>.Envelope``: before, after, source, op, ts_ms, ts_us, transaction."""
    row = table.row_schema(name)
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            source_schema(connector),
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            _TRANSACTION,
        ],
        "optional": False,
        "name": schema_name(name + ".Envelope"),
        "version": 1,
    }
