"""Canonical values for PostgreSQL rows (the rules are in core/events.py).

Both ways a row reaches DBLog carry each value as the text PostgreSQL's type output
function prints: pgoutput sends text-format tuples, and the chunk SELECT reads every column
through a cursor that keeps the server's text (see ``RAW_TEXT_OIDS``). wal2json wraps the
same text in JSON (``wal2json_text`` undoes that). So one function, ``from_pg_text``, makes
the canonical value for both paths, and the log and a dump agree by construction.

Both connections run with TimeZone=UTC, DateStyle=ISO, bytea_output=hex and
extra_float_digits=1, because the output functions follow the session settings (for the log
those of the walsender session).

Why the SELECT does not use ``col::text``: the cast to text is not the output function for
every type (``true::text`` is 'true' while the output is 't', ``char(5)::text`` drops the
padding, ``inet::text`` adds '/32').

Documented choices:
  * numeric keeps PostgreSQL's exact text ("12.30", "NaN").
  * float NaN/Infinity/-Infinity become those strings (JSON has no such numbers).
  * real (float4) is the exact value of the stored float32 as a double (290509.125, not the
    printed 290509.12, which is another double): PostgreSQL prints the shortest digits that
    read back as the float32, so the text is rounded to float32 exactly (``_real``) and
    widened; double precision is printed exactly already.
    wal2json prints them as JSON null, so with wal2json such values arrive as None.
  * timestamps get six fraction digits when they have a fraction, like datetime.isoformat();
    'infinity' and BC values are kept as PostgreSQL prints them.
  * every other type (arrays, time, interval, inet, ranges, enums, ...) keeps its text.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import functools
import json
import math
import re
import struct
from typing import Any, Callable, Optional

from ...core.toast import UNCHANGED_TOAST_KEY

# The value that replaces a TOASTed column an UPDATE did not change: PostgreSQL does not send
# such a value (with REPLICA IDENTITY FULL the decoder takes it from the old row instead).
UNCHANGED_TOAST_VALUE = {UNCHANGED_TOAST_KEY: True}

_INT = {"smallint", "integer", "bigint", "oid", "xid", "cid"}
_TEXT = {"text", "character varying", "character", "name", '"char"', "citext"}
_FLOAT_SPECIAL = {"NaN": "NaN", "Infinity": "Infinity", "-Infinity": "-Infinity"}

_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?([+-]\d{2}(?::?\d{2}){0,2})?$")


def _base_name(type_name: str) -> str:
    """'numeric(12,2)' -> 'numeric', 'timestamp(3) with time zone' -> 'timestamp with time zone'."""
    return re.sub(r"\(\d+(?:,\d+)?\)", "", type_name.strip().lower()).replace("  ", " ")


def _timestamp(text: str, with_zone: bool) -> str:
    m = _TS.match(text)
    if not m:  # 'infinity', '-infinity', '... BC', years beyond 9999
        return text
    date, clock, frac, offset = m.groups()
    out = f"{date}T{clock}" + (f".{frac.ljust(6, '0')}" if frac else "")
    if not with_zone:
        return out
    if offset in (None, "+00", "+00:00", "-00"):
        return out + "+00:00"
    # Only reachable if a session ran without TimeZone=UTC: normalise to UTC anyway.
    sign = 1 if offset[0] == "+" else -1
    parts = [int(p) for p in re.findall(r"\d{2}", offset[1:])] + [0, 0]
    delta = datetime.timedelta(hours=parts[0], minutes=parts[1], seconds=parts[2])
    try:
        local = datetime.datetime.fromisoformat(f"{date}T{clock}")
        utc = local - sign * delta
    except (ValueError, OverflowError):
        return text
    return utc.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac.ljust(6, '0')}" if frac else "") + "+00:00"


def _float(text: str) -> Any:
    special = _FLOAT_SPECIAL.get(text)
    return special if special is not None else float(text)


def _to_float32(x: float) -> float:
    return _F32.unpack(_F32.pack(x))[0]


_F32 = struct.Struct("<f")


def _real(text: str) -> Any:
    """The float32 a real's text reads as (as PostgreSQL's float4in reads it), as a double.

    Python reads text only into a double; rounding that double to float32 is the correct
    rounding of the text except when the double lands exactly halfway between two float32s
    (a double rounding): then the text itself decides which side it is on."""
    special = _FLOAT_SPECIAL.get(text)
    if special is not None:
        return special
    x = float(text)
    f = _to_float32(x)
    if f != x and math.isfinite(f):
        other = 2 * x - f  # f's mirror image across x: a float32 only if x is their midpoint
        if _to_float32(other) == other:
            exact, mid = decimal.Decimal(text), decimal.Decimal(x)
            if exact != mid:
                return max(f, other) if exact > mid else min(f, other)
    return f


def _bytea(text: str) -> dict:
    if not text.startswith("\\x"):
        raise ValueError("bytea value not in hex format: set bytea_output = hex")
    return {"$b64": base64.b64encode(bytes.fromhex(text[2:])).decode("ascii")}


def _bool(text: str) -> bool:
    if text in ("t", "true"):
        return True
    if text in ("f", "false"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def keep_text(text: str) -> str:
    return text


_keep = keep_text  # the text is already canonical


# How a type's text becomes canonical, by kind; native/src/pgoutput.rs numbers them in this order.
PG_KINDS = ("text", "int", "float", "bool", "bytea", "timestamp", "timestamptz", "uuid", "json", "real")


@functools.lru_cache(maxsize=1024)
def pg_kind(type_name: str) -> str:
    """The kind (PG_KINDS) of a type, by its (base) type name."""
    base = _base_name(type_name)
    if base.endswith("[]"):
        return "text"
    if base in _INT:
        return "int"
    if base == "real":
        return "real"
    if base == "double precision":
        return "float"
    if base == "boolean":
        return "bool"
    if base == "bytea":
        return "bytea"
    if base == "timestamp without time zone":
        return "timestamp"
    if base == "timestamp with time zone":
        return "timestamptz"
    if base == "uuid":
        return "uuid"
    if base in ("json", "jsonb"):
        return "json"
    # numeric (its exact text), character types, date ('YYYY-MM-DD' under DateStyle ISO),
    # time, interval, inet, ...
    return "text"


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "text": _keep,
    "int": int,
    "float": _float,
    "real": _real,
    "bool": _bool,
    "bytea": _bytea,
    "timestamp": lambda t: _timestamp(t, with_zone=False),
    "timestamptz": lambda t: _timestamp(t, with_zone=True),
    "uuid": str.lower,
    "json": json.loads,
}


def converter(type_name: str) -> Callable[[str], Any]:
    """The text -> canonical function for a type, by its (base) type name."""
    return _CONVERTERS[pg_kind(type_name)]


def from_pg_text(type_name: str, text: Optional[str]) -> Any:
    """Canonical value of one column from PostgreSQL's text output (None for NULL)."""
    if text is None:
        return None
    return converter(type_name)(text)


class RawNumber(str):
    """A JSON number kept as the exact text wal2json printed (e.g. numeric "12.30")."""


def parse_wal2json(payload: str | bytes) -> dict:
    """Parse one wal2json message, keeping numbers as their text (never through float)."""
    return json.loads(payload, parse_float=RawNumber, parse_int=RawNumber)


def wal2json_text(type_name: str, value: Any) -> Optional[str]:
    """The output-function text of a wal2json column value, for ``from_pg_text``.

    wal2json prints numbers and booleans unquoted, bytea as hex without the leading '\\x',
    and everything else as a JSON string of the output-function text."""
    if value is None:
        return None
    if value is True:
        return "t"
    if value is False:
        return "f"
    text = str(value)
    if _base_name(type_name) == "bytea":
        return "\\x" + text
    return text


# Type OIDs psycopg2 would turn into Python objects. The chunk SELECT's cursor registers a
# caster that returns the server's text for all of them (unknown OIDs are text already).
RAW_TEXT_OIDS: tuple[int, ...] = (
    16,
    17,
    18,
    19,
    20,
    21,
    23,
    25,
    26,
    114,
    142,
    199,
    650,
    700,
    701,
    790,
    869,
    1000,
    1001,
    1002,
    1003,
    1005,
    1007,
    1009,
    1014,
    1015,
    1016,
    1021,
    1022,
    1028,
    1040,
    1041,
    1042,
    1043,
    1082,
    1083,
    1114,
    1115,
    1182,
    1183,
    1184,
    1185,
    1186,
    1187,
    1231,
    1266,
    1270,
    1560,
    1562,
    1700,
    2950,
    2951,
    3802,
    3807,
    3904,
    3906,
    3908,
    3910,
    3912,
    3926,
)


_UNIX_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def timestamp_us(text: Optional[str]) -> Optional[int]:
    """A timestamptz's text (e.g. wal2json's commit time) as microseconds since the Unix epoch."""
    if not text:
        return None
    canon = _timestamp(text, with_zone=True)
    try:
        dt = datetime.datetime.fromisoformat(canon)
    except ValueError:
        return None
    return (dt - _UNIX_EPOCH) // datetime.timedelta(microseconds=1)
