"""Row digests for ``dblog verify --ranges`` on PostgreSQL: the same text of a row built in
SQL (over the table's rows, where they are) and in Python (from canonical values, over the
changelog's replay), so that a key range of both sides can be compared by its row count and
the sum of its rows' hashes without moving the rows.

The text joins one rendering per column (NULL as its own marker), chosen so that both sides
can produce it exactly from what they have:

* most types: the type's output function (``concat(col)``), which is also the text the
  capture's canonical value keeps (postgres_values.py), so Python renders the value as is;
* ``boolean``: ``t`` / ``f``;
* ``real`` / ``double precision``: the value's IEEE bits in hex (``float4send`` /
  ``float8send``), which Python's ``struct`` gives from the canonical float;
* timestamps: ``YYYY-MM-DDTHH:MI:SS.ffffff`` (``+00:00`` with a time zone, the session runs in
  UTC), the canonical form with its fraction always written;
* ``bytea``: hex;
* ``json`` / ``jsonb``: the ``jsonb`` text (keys ordered and spaced as jsonb prints them),
  which Python rebuilds from the parsed value.

A value whose renderings still differ (a JSON number written ``1e2``, an infinite timestamp)
only makes its range look different: verify then reads that range's rows and compares them
value by value, so the result is the same, at the cost of reading them.
"""

from __future__ import annotations

import base64
import decimal
import json
import math
import re
import struct
from typing import Any, Callable

from ...core import row_digest
from ...core.chunks import POSTGRES
from ...core.events import Row, TableSchema
from .values import _base_name as _base  # the type name without its modifiers

_FRACTION = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,6}))?(\+00:00)?$")


def column_sql(name: str, type_name: str) -> str:
    """The SQL rendering of one column (NULL handled by the caller)."""
    col, base = POSTGRES.quote(name), _base(type_name)
    if base == "boolean":
        return f"CASE WHEN {col} THEN 't' ELSE 'f' END"
    if base == "double precision":
        return f"encode(float8send({col}), 'hex')"
    if base == "real":
        return f"encode(float4send({col}), 'hex')"
    if base == "timestamp without time zone":
        return f"""to_char({col}, 'YYYY-MM-DD"T"HH24:MI:SS.US')"""
    if base == "timestamp with time zone":
        return f"""to_char({col} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"""
    if base == "bytea":
        return f"encode({col}, 'hex')"
    if base in ("json", "jsonb"):
        return f"{col}::jsonb::text"
    return f"concat({col})"  # the output function's text


def _is_null(name: str, type_name: str) -> str:
    """When the column counts as NULL: a JSON ``null`` too, whose canonical value is None
    like SQL NULL's (postgres_values.py parses JSON)."""
    col = POSTGRES.quote(name)
    if _base(type_name) in ("json", "jsonb"):
        return f"({col} IS NULL OR jsonb_typeof({col}::jsonb) = 'null')"
    return f"{col} IS NULL"


def texts_sql(schema: TableSchema) -> list[str]:
    """Per column, the SQL expression of its text in a row (the NULL marker for NULL)."""
    return [
        f"CASE WHEN {_is_null(c.name, c.type)} THEN E'\\x1e' ELSE {column_sql(c.name, c.type)} END"
        for c in schema.columns
    ]


def row_sql(schema: TableSchema) -> str:
    """The SQL expression of a row's text."""
    return f"concat_ws(E'\\x1f', {', '.join(texts_sql(schema))})"


def digest_sql(schema: TableSchema) -> str:
    """The select list of a range's digest: its row count and the sum of its rows' hashes
    (the first 60 bits of each row text's MD5, as a number; the sum as text, it is exact)."""
    return "count(*), coalesce(sum(('x' || substr(md5(" + row_sql(schema) + "), 1, 15))::bit(60)::bigint), 0)::text"


def _float8(v: Any) -> str:
    return struct.pack(">d", _as_float(v)).hex()


def _float4(v: Any) -> str:
    return struct.pack(">f", _as_float(v)).hex()


def _as_float(v: Any) -> float:
    if isinstance(v, str):  # NaN, Infinity and -Infinity are strings in canonical values
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(v, math.nan)
    return float(v)


def _timestamp(v: Any) -> str:
    m = _FRACTION.match(str(v))
    if not m:  # infinity, BC: rendered differently in SQL; its range is compared row by row
        return str(v)
    return f"{m.group(1)}.{(m.group(2) or '').ljust(6, '0')}{m.group(3) or ''}"


def _bytea(v: Any) -> str:
    if isinstance(v, dict) and "$b64" in v:
        return base64.b64decode(v["$b64"]).hex()
    return str(v)


def _jsonb(value: Any) -> str:
    """jsonb's text of a parsed JSON value: objects' keys shorter first, then by bytes;
    ``", "`` and ``": "``; numbers as PostgreSQL's numeric prints them (no exponent, no
    negative zero). A number written with an exponent and no fraction (``1e2``) prints as
    ``100`` there and ``100.0`` here: its range is then compared row by row."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_jsonb(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_jsonb(v) for v in value) + "]"
    if isinstance(value, float):
        return format(decimal.Decimal(repr(abs(value) if value == 0 else value)), "f")
    return json.dumps(value, ensure_ascii=False)  # strings, integers, true, false, null


def _text(v: Any) -> str:
    if v is True or v is False:
        return "t" if v else "f"
    return str(v)


def column_renderer(type_name: str) -> Callable[[Any], str]:
    """The Python rendering of one column's canonical value, equal to ``column_sql``'s."""
    base = _base(type_name)
    return {
        "double precision": _float8,
        "real": _float4,
        "timestamp without time zone": _timestamp,
        "timestamp with time zone": _timestamp,
        "bytea": _bytea,
        "json": _jsonb,
        "jsonb": _jsonb,
    }.get(base, _text)


def row_hasher(schema: TableSchema) -> Callable[[Row], int]:
    """A function from a replayed row (canonical values) to the hash ``digest_sql`` sums."""
    return row_digest.row_hasher(renderers(schema))


def renderers(schema: TableSchema) -> list[tuple[str, Callable[[Any], str]]]:
    """Per column, its name and the Python rendering ``texts_sql`` matches."""
    return [(c.name, column_renderer(c.type)) for c in schema.columns]
