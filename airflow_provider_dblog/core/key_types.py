"""Key values of a dump request checked against their key column's type (DESIGN invariant 9).

A key-list dump selects rows by the requested key values. A value the column cannot hold
must be refused when the request is made, not when the capture selects it: PostgreSQL would
fail the chunk, MySQL/MariaDB would cast it silently (``'abc'`` compares equal to 0), and
PostgreSQL's casts round a decimal or truncate a ``varchar(n)`` to the column's size. So no
value is cast here either: a value is accepted only if it is exactly a value of the column's
type, and then passed on in the form the chunk SELECT converts to a query parameter
(sources/postgres/source.py ``_to_param`` with its ``%s::type`` placeholder, sources/mysql/values.py
``to_param``).

The type family comes from ``Column.type``, the source's lower-case type name: PostgreSQL's
``format_type`` (``integer``, ``numeric(10,2)``, ``character varying(20)``, ``timestamp
without time zone``, ...) or MySQL/MariaDB's column type (``int``, ``bigint unsigned``,
``decimal(10,2)``, ``varchar(20)``, ``datetime(6)``, ``timestamp``, ...). Types outside the
families below keep the general rule: a number or a string (docs/cli.md, "Keys").
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import uuid
from typing import Any, Mapping, Optional

from .errors import RequestError
from .events import Column


@dataclasses.dataclass(frozen=True)
class KeyTypes:
    """One database's type names by family, as ``check_key_value`` checks a key value: the
    integers with their bits, the decimals, texts, floats and booleans. Each source's
    descriptor (sources/<db>/descriptor.py) names its database's; the check uses them all
    (a ``Column`` carries its type name, not its database)."""

    int_bits: Mapping[str, int]
    decimals: frozenset[str]
    texts: frozenset[str]
    floats: frozenset[str]
    bools: frozenset[str] = frozenset({"boolean", "bool"})


POSTGRES_KEY_TYPES = KeyTypes(
    int_bits={"smallint": 16, "int2": 16, "integer": 32, "int4": 32, "bigint": 64, "int8": 64},
    decimals=frozenset({"numeric", "decimal"}),
    texts=frozenset({"text", "character varying", "varchar", "character", "char", "bpchar", "citext", "name"}),
    floats=frozenset({"real", "double precision", "float4", "float8"}),
)
MYSQL_KEY_TYPES = KeyTypes(
    int_bits={"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "integer": 32, "bigint": 64},
    decimals=frozenset({"decimal", "dec", "fixed", "numeric"}),
    texts=frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext"}),
    floats=frozenset({"float", "double", "double precision", "real"}),
)
_FAMILIES = (POSTGRES_KEY_TYPES, MYSQL_KEY_TYPES)
_INT_BITS = {name: bits for f in _FAMILIES for name, bits in f.int_bits.items()}
_DECIMAL = frozenset().union(*(f.decimals for f in _FAMILIES))
_TEXT = frozenset().union(*(f.texts for f in _FAMILIES))
_FLOAT = frozenset().union(*(f.floats for f in _FAMILIES))
_BOOL = frozenset().union(*(f.bools for f in _FAMILIES))


def _parse(col_type: str) -> tuple[str, list[int], str]:
    """(base name, numbers in its parentheses, the rest) of a type name:
    ``numeric(10,2)`` -> ("numeric", [10, 2], ""), ``bigint unsigned`` -> ("bigint", [],
    "unsigned"), ``timestamp(3) without time zone`` -> ("timestamp", [3], "without time zone")."""
    t = " ".join(col_type.strip().lower().split())
    if "(" in t:
        head, _, tail = t.partition("(")
        inner, _, rest = tail.partition(")")
        args = [int(a) for a in inner.split(",") if a.strip().isdigit()]
        return head.strip(), args, rest.strip()
    for multiword in ("character varying", "double precision"):
        if t.startswith(multiword):
            return multiword, [], t[len(multiword) :].strip()
    base, _, rest = t.partition(" ")
    return base, [], rest


def _refuse(table: str, column: Column, value: Any, expected: str) -> RequestError:
    return RequestError(
        f"key value {json.dumps(value)} for column {column.name} ({column.type}) of table {table} is not {expected}.",
        f"give {column.name} as {expected} (see docs/cli.md, 'Keys'); no value is cast.",
    )


def check_key_value(table: str, column: Column, value: Any) -> Any:
    """``value`` if it is a value of ``column``'s type (decimals, uuids, dates and timestamps
    in the form the chunk SELECT compares exactly), else RequestError naming the table, the
    column, its type and the value."""
    base, args, rest = _parse(column.type)
    if base in _INT_BITS:
        return _integer(table, column, value, _INT_BITS[base], "unsigned" in rest)
    if base in _DECIMAL:
        return _decimal(table, column, value, args, "unsigned" in rest)
    if base in _TEXT:
        if not isinstance(value, str):
            raise _refuse(table, column, value, "a string")
        if args and base not in ("text", "citext", "name") and len(value) > args[0]:
            # PostgreSQL's ::varchar(n) would cut it to n characters (and then match another key).
            raise _refuse(table, column, value, f"a string of at most {args[0]} characters")
        return value
    if base == "uuid":
        return _uuid(table, column, value)
    if base == "date":
        return _iso(table, column, value, 'an ISO date string, e.g. "2024-05-31"', date=True)
    if base.startswith(("timestamp", "datetime")):
        return _timestamp(table, column, base, rest, value)
    if base in _BOOL:
        if not isinstance(value, bool):
            raise _refuse(table, column, value, "true or false")
        return value
    if base in _FLOAT:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _refuse(table, column, value, "a JSON number")
        return value
    if isinstance(value, (bool, dict, list)) or value is None:
        raise _refuse(table, column, value, "a number or a string")
    return value


def _uuid(table: str, column: Column, value: Any) -> str:
    expected = 'a UUID string, e.g. "0b9e6c6e-4f7a-4f0e-9d3e-3f1c2a5b6d7e"'
    if not isinstance(value, str) or value.lower().startswith("urn:"):
        raise _refuse(table, column, value, expected)
    try:
        return str(uuid.UUID(value))  # the canonical form both databases read
    except ValueError:
        raise _refuse(table, column, value, expected) from None


def _integer(table: str, column: Column, value: Any, bits: int, unsigned: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(table, column, value, "a JSON integer (no quotes, no fraction)")
    low, high = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if not low <= value <= high:
        raise _refuse(table, column, value, f"an integer from {low} to {high}")
    return value


def _decimal(table: str, column: Column, value: Any, args: list[int], unsigned: bool) -> str:
    expected = 'a JSON number or a decimal string, e.g. 12.5 or "12.50"'
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _refuse(table, column, value, expected)
    try:
        # str() of a float is its shortest round-trip text: 1.1 stays 1.1, not 1.1000000000000000888.
        number = decimal.Decimal(value if isinstance(value, str) else str(value))
    except decimal.InvalidOperation:
        raise _refuse(table, column, value, expected) from None
    if not number.is_finite():
        raise _refuse(table, column, value, expected)
    if unsigned and number < 0:
        raise _refuse(table, column, value, "a decimal >= 0")
    if args:  # (precision, scale); PostgreSQL's bare numeric has neither
        precision, scale = args[0], (args[1] if len(args) > 1 else 0)
        exponent = number.normalize().as_tuple().exponent
        fraction = -exponent if isinstance(exponent, int) and exponent < 0 else 0
        if fraction > scale:
            # The server would round it to the column's scale and select another key.
            raise _refuse(table, column, value, f"a decimal with at most {scale} digits after the point")
        whole = abs(int(number))
        if whole and len(str(whole)) > precision - scale:
            raise _refuse(table, column, value, f"a decimal with at most {precision - scale} digits before the point")
    return format(number, "f")


def _iso(table: str, column: Column, value: Any, expected: str, date: bool = False) -> str:
    if not isinstance(value, str):
        raise _refuse(table, column, value, expected)
    try:
        parsed = datetime.date.fromisoformat(value) if date else datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _refuse(table, column, value, expected) from None
    return parsed.isoformat()


def _timestamp(table: str, column: Column, base: str, rest: str, value: Any) -> str:
    expected = 'an ISO timestamp string, e.g. "2024-05-31T12:00:00"'
    if not isinstance(value, str):
        raise _refuse(table, column, value, expected)
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise _refuse(table, column, value, expected) from None
    offset: Optional[datetime.timedelta] = parsed.utcoffset()
    with_zone = "with time zone" in rest or base == "timestamptz"
    if with_zone:  # PostgreSQL converts any offset exactly; none means UTC (the session's zone)
        return parsed.isoformat()
    if base == "timestamp" and "without time zone" not in rest:
        # MySQL/MariaDB TIMESTAMP: compared in the session's zone, UTC.
        if offset not in (None, datetime.timedelta(0)):
            raise _refuse(table, column, value, "an ISO timestamp in UTC (no offset, or +00:00)")
        return parsed.replace(tzinfo=None).isoformat()
    if offset is not None:
        # A timestamp without time zone ignores an offset: another row would be selected.
        raise _refuse(table, column, value, "an ISO timestamp without an offset (the column has no time zone)")
    return parsed.isoformat()


def orders_like_python(columns: "list[Column] | tuple[Column, ...]") -> bool:
    """Whether keys of these columns sort the same in the database, in Python (canonical
    values) and in Spark (the key's JSON parsed as numbers): integer types only. Decimals are
    canonical strings, text depends on the collation (MySQL's default ignores case), so a
    dump's range repair (events.Op.RANGE) is emitted only for keys of integer columns."""
    return bool(columns) and all(_parse(c.type)[0] in _INT_BITS for c in columns)
