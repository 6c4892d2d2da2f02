"""Canonical values for MySQL/MariaDB rows (the rules are in core/events.py).

A row reaches DBLog two ways: decoded from the binlog by mysql-replication, and read by the
chunk SELECT through PyMySQL. The two libraries hand over different Python values for the
same stored value (a BIT is a '0101' string in one and bytes in the other, a FLOAT is the
exact single-precision value in one and a 6-digit rounding in the other, a BINARY(n) loses
its zero padding in the binlog, ...). ``from_binlog`` and ``from_select`` turn both into the
same canonical value; what kind of value a column holds is decided from its catalog type
(which already reflects the character set: a binary-charset string column is reported as
binary/varbinary/blob), never from the Python type alone.

Documented choices:
  * tinyint(1) / BOOL stays an int: MySQL has no boolean type and such a column can hold 2.
  * zero dates ('0000-00-00', '0000-00-00 00:00:00', a zero TIMESTAMP) become None on both
    paths, because neither a Python date nor ISO-8601 can express them.
  * DECIMAL is the plain decimal text with the column's scale ("12.30", never "1.23E+1").
  * FLOAT (single precision) is the exact value of its 4 stored bytes as a double
    (290509.125, 0.10000000149011612): any JSON reader gets the stored value back, into a
    float32 or a float64. Both paths carry those bytes exactly (the binlog as they are, the
    chunk SELECT through ``select_expression``); nothing rounds them to display digits.
  * ENUM is its label, SET the comma-joined members in declaration order (as SELECT shows).
  * MariaDB's UUID and INET6 types become their usual text forms.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import ipaddress
import json
import re
import uuid
from typing import Any, Callable, Optional, Sequence

from ...core.events import Column

_INT = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}
_DECIMAL = {"decimal", "numeric", "dec", "fixed"}
_DOUBLE = {"double", "real", "double precision"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "inet4"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
_SIMPLE = {"year", "float", "bit", "date", "datetime", "timestamp", "time", "json", "enum", "set", "uuid", "inet6"}

_ZERO_TS = datetime.datetime(1970, 1, 1)  # epoch 0 is how the binlog spells a zero TIMESTAMP


@functools.lru_cache(maxsize=4096)
def column_kind(col_type: str) -> tuple[str, Optional[int]]:
    """('int'|'decimal'|'double'|'text'|'binary'|<simple type>|'other', fixed binary length)."""
    base = re.split(r"[\s(]", col_type.strip().lower(), maxsplit=1)[0]
    if col_type.lower().startswith("double precision"):
        base = "double"
    if base in _INT:
        return "int", None
    if base in _DECIMAL:
        return "decimal", None
    if base in _DOUBLE:
        return "double", None
    if base in _TEXT:
        return "text", None
    if base == "binary":
        # BINARY(n) is zero-padded by the server; the binlog drops the padding.
        m = re.match(r"binary\((\d+)\)", col_type.strip().lower())
        return "binary", int(m.group(1)) if m else 1
    if base in _BINARY:
        return "binary", None
    if base in _SIMPLE:
        return base, 16 if base in ("uuid", "inet6") else None
    return "other", None


@functools.lru_cache(maxsize=1024)
def set_members(col_type: str) -> tuple[str, ...]:
    """Members of ``set('a','b')`` in declaration order ('' escapes a quote)."""
    inner = col_type[col_type.index("(") + 1 : col_type.rindex(")")]
    return tuple(m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", inner))


def _b64(value: bytes) -> dict:
    return {"$b64": base64.b64encode(value).decode("ascii")}


def _as_bytes(value: Any) -> bytes:
    # mysql-replication returns '' (a str) for an empty binary value.
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)


def _time_text(value: datetime.timedelta) -> str:
    """TIME as 'HH:MM:SS[.ffffff]' (hours may exceed 24 and the value may be negative)."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    secs, frac = divmod(micros, 1_000_000)
    hours, rest = divmod(secs, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return text + (f".{frac:06d}" if frac else "")


def _binlog_time(value: datetime.timedelta) -> datetime.timedelta:
    """Undo mysql-replication's misreading of a negative TIME with a fraction.

    The binlog stores TIME(n) as one packed number, integer part and fraction together, so a
    negative value with a fraction has an integer part one second further from zero and the
    fraction's complement; mysql-replication (1.0.17) reads the two parts separately and
    returns -(s + 1 - f) for -(s + f): -12:34:56.2 for -12:34:56.8. That is exact to undo:
    the whole seconds are s + 1 - 1 and the fraction is 1 - its fraction. Values without a
    fraction or not negative are read right. tests/unit/test_mysql_values.py pins the
    library's reading, the rows decoder reads the packed number itself."""
    micros = (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds
    if micros >= 0:
        return value
    whole, frac = divmod(-micros, 1_000_000)
    if not frac:
        return value
    return -datetime.timedelta(seconds=whole, microseconds=1_000_000 - frac)


def _json_value(value: Any) -> Any:
    """mysql-replication decodes MySQL's binary JSON with bytes keys/strings: make them str."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8")
    if isinstance(value, dict):
        return {_json_value(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def _inet6_text(raw: bytes) -> str:
    addr = ipaddress.IPv6Address(raw)
    if addr.ipv4_mapped is not None:  # the server writes '::ffff:1.2.3.4'
        return f"::ffff:{addr.ipv4_mapped}"
    return addr.compressed


def _common(kind: str, value: Any) -> Any:
    """Conversions both libraries agree on once the Python value has the same type."""
    if kind == "int":
        return int(value)
    if kind == "decimal":
        return format(decimal.Decimal(value), "f")
    if kind in ("double", "float"):
        return float(value)  # a float32 widens to the double of the same value, exactly
    if kind in ("text", "enum"):
        return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)
    if kind == "date":
        return value.isoformat() if isinstance(value, datetime.date) else None
    if kind == "datetime":
        return value.isoformat() if isinstance(value, datetime.datetime) else None
    if kind == "timestamp":
        if not isinstance(value, datetime.datetime):
            return None
        return value.replace(tzinfo=None).isoformat() + "+00:00"
    if kind == "time":
        return _time_text(value) if isinstance(value, datetime.timedelta) else str(value)
    if kind == "json":
        return _json_value(json.loads(value) if isinstance(value, (str, bytes, bytearray)) else value)
    if isinstance(value, (bytes, bytearray)):
        return _b64(bytes(value))
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return _time_text(value)
    return value


def from_binlog(column: Column, value: Any, none_source: Optional[str] = None) -> Any:
    """Canonical value of one column as mysql-replication decoded it from a rows event."""
    kind, length = column_kind(column.type)
    if value is None:
        # An empty SET is decoded as None (with this none source), but it is '' in SQL.
        return "" if kind == "set" and none_source == "empty set" else None
    if kind == "binary":
        raw = _as_bytes(value)
        return _b64(raw.ljust(length, b"\0") if length else raw)
    if kind == "year":
        return 0 if value == 1900 else int(value)  # YEAR 0000 is stored as 0, decoded as 1900
    if kind == "bit":
        return int(value, 2) if isinstance(value, str) else int(value)
    if kind == "set":
        members = value if isinstance(value, (set, frozenset, list, tuple)) else str(value).split(",")
        return ",".join(m for m in set_members(column.type) if m in members)
    if kind == "timestamp" and value == _ZERO_TS:
        return None
    if kind == "time" and isinstance(value, datetime.timedelta):
        return _time_text(_binlog_time(value))
    if kind == "uuid":
        return str(uuid.UUID(bytes=_as_bytes(value).ljust(16, b"\0")))
    if kind == "inet6":
        return _inet6_text(_as_bytes(value).ljust(16, b"\0"))
    return _common(kind, value)


def from_select(column: Column, value: Any) -> Any:
    """Canonical value of one column as PyMySQL returned it from the chunk SELECT.

    The SELECT runs with session time_zone '+00:00' (TIMESTAMPs arrive as UTC) and reads
    FLOAT columns through ``select_expression`` (their exact value, not a 6-digit rounding).
    """
    kind, _ = column_kind(column.type)
    if value is None:
        return None
    if kind == "binary":
        return _b64(_as_bytes(value))
    if kind == "bit":
        return int.from_bytes(value, "big") if isinstance(value, (bytes, bytearray)) else int(value)
    if kind in ("year", "set", "uuid", "inet6"):
        return int(value) if kind == "year" else str(value)
    return _common(kind, value)


# Kinds whose value PyMySQL already returns canonical (int for the integer types, str for
# character columns with a character set): the chunk SELECT converts nothing for them.
_SELECT_AS_IS = ("int", "text", "enum")


def select_converters(columns: Sequence[Column]) -> list[Optional[Callable[[Any], Any]]]:
    """Per column: ``from_select`` bound to it, or None when PyMySQL's value is canonical
    already (chunk SELECTs run for every dumped row, so decide once per column)."""
    out: list[Optional[Callable[[Any], Any]]] = []
    for c in columns:
        as_is = column_kind(c.type)[0] in _SELECT_AS_IS and not c.type.lower().startswith("inet4")  # inet4: bytes
        out.append(None if as_is else functools.partial(from_select, c))
    return out


def select_expression(quote, column: Column) -> str:
    """The SELECT-list entry for a column. FLOAT is widened to DOUBLE so that the text
    protocol carries the stored single-precision value exactly, as the binlog does."""
    name = quote(column.name)
    if column_kind(column.type)[0] == "float":
        return f"CAST({name} AS DOUBLE) AS {name}"
    return name


def to_param(column: Column, value: Any) -> Any:
    """A canonical key value as a query parameter that compares like the stored value."""
    kind, _ = column_kind(column.type)
    if isinstance(value, dict) and "$b64" in value:
        return base64.b64decode(value["$b64"])
    if kind == "decimal" and isinstance(value, str):
        return decimal.Decimal(value)  # a string would be compared as a double
    if kind in ("datetime", "timestamp") and isinstance(value, str):
        # The session time zone is UTC; MariaDB does not accept an offset in a literal.
        text = value[:-6] if value.endswith("+00:00") else value
        return text.replace("T", " ")
    return value


def binlog_converters(columns: tuple[Column, ...]) -> list[Callable[[Any, Optional[str]], Any]]:
    """One converter per column for rows events, picked once per schema (the reader's hot path).

    Integers and text come out of mysql-replication already canonical, so those columns skip
    the general ``from_binlog`` dispatch; every other kind goes through it unchanged.
    """
    out: list[Callable[[Any, Optional[str]], Any]] = []
    for col in columns:
        kind, _ = column_kind(col.type)
        if kind == "int":
            out.append(_int_or_none)
        elif kind in ("text", "enum"):
            out.append(_text_or_none)
        else:
            out.append(functools.partial(_general, col))
    return out


def _int_or_none(value: Any, none_source: Optional[str]) -> Any:
    return value if value is None or type(value) is int else int(value)


def _text_or_none(value: Any, none_source: Optional[str]) -> Any:
    if value is None or type(value) is str:
        return value
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


def _general(column: Column, value: Any, none_source: Optional[str]) -> Any:
    return from_binlog(column, value, none_source)
