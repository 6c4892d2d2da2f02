"""Row digests for ``dblog verify --ranges`` on MySQL/MariaDB: the same text of a row built in
SQL (over the table's rows, where they are) and in Python (from canonical values, over the
changelog's replay or a mirror); core/row_digest.py hashes it.

One rendering per column kind (mysql_values.column_kind), each chosen so that both sides can
produce it from what they have:

* integers, DECIMAL (the scale's digits), text, ENUM, SET, UUID, INET: the server's own text,
  which is what the canonical value keeps;
* BIT and YEAR: the number (``col + 0``); binary strings: upper-case hex;
* DATE, DATETIME, TIMESTAMP: ISO text with the fraction always written (``DATE_FORMAT``;
  the session runs in UTC); a zero date counts as NULL, as its canonical value is None;
* TIME: the server's text, whose fraction has the column's digits;
* DOUBLE and FLOAT: the server's text of a double (``double_text`` writes it the same way
  from the value's shortest digits); a FLOAT is widened to the double of its exact value
  first, which is its canonical value;
* JSON: MariaDB keeps the text it was given, rendered compact (``JSON_COMPACT``); Python
  dumps the parsed value compact. A document written with ``\\u`` escapes or numbers such as
  ``1.50`` or ``1E2`` renders differently; on MySQL the server's normalised text is used
  (key order and spacing as MySQL prints them).

A value whose renderings still differ only makes its range look different: verify then reads
that range's rows and compares them value by value, so the result is the same, at the cost of
reading them.
"""

from __future__ import annotations

import base64
import decimal
import json
import re
from typing import Any, Callable

from ...core import row_digest
from ...core.chunks import MYSQL
from ...core.events import Column, Row, TableSchema
from .values import column_kind

_ZERO_DATE = {"date", "datetime", "timestamp"}


def _fsp(type_name: str) -> int:
    m = re.search(r"\((\d)\)", type_name)
    return int(m.group(1)) if m else 0


def column_sql(column: Column, mariadb: bool = True) -> str:
    """The SQL rendering of one column (NULL handled by ``row_sql``), its ``%`` doubled for a
    statement run with parameters."""
    col = MYSQL.quote(column.name)
    kind, _ = column_kind(column.type)
    if kind in ("bit", "year"):
        return f"CAST({col} + 0 AS CHAR)"
    if kind == "binary":
        return f"HEX({col})"
    if kind == "date":
        return f"DATE_FORMAT({col}, '%%Y-%%m-%%d')"
    if kind == "datetime":
        return f"DATE_FORMAT({col}, '%%Y-%%m-%%dT%%H:%%i:%%s.%%f')"
    if kind == "timestamp":
        return f"DATE_FORMAT({col}, '%%Y-%%m-%%dT%%H:%%i:%%s.%%f+00:00')"
    if kind == "float":
        return f"CAST(CAST({col} AS DOUBLE) AS CHAR)"
    if kind == "json":
        return f"JSON_COMPACT({col})" if mariadb else f"CAST({col} AS CHAR)"
    return f"CAST({col} AS CHAR)"


def _null_sql(column: Column) -> str:
    """When the column counts as NULL: its canonical value is None for zero dates (no Python
    date holds them) and for a JSON ``null`` too."""
    col = MYSQL.quote(column.name)
    kind, _ = column_kind(column.type)
    if kind in _ZERO_DATE:
        return f"({col} IS NULL OR YEAR({col}) = 0 OR MONTH({col}) = 0 OR DAYOFMONTH({col}) = 0)"
    if kind == "json":
        return f"({col} IS NULL OR JSON_TYPE({col}) = 'NULL')"
    return f"{col} IS NULL"


def texts_sql(schema: TableSchema, mariadb: bool = True) -> list[str]:
    """Per column, the SQL expression of its text in a row (utf8mb4, whatever the column's
    character set; the NULL marker for NULL)."""
    return [
        f"IF({_null_sql(c)}, _utf8mb4 X'1E', CONVERT({column_sql(c, mariadb)} USING utf8mb4))" for c in schema.columns
    ]


def row_sql(schema: TableSchema, mariadb: bool = True) -> str:
    """The SQL expression of a row's text."""
    return f"CONCAT_WS(_utf8mb4 X'1F', {', '.join(texts_sql(schema, mariadb))})"


def digest_sql(schema: TableSchema, mariadb: bool = True) -> str:
    """The select list of a range's digest: its row count and the sum of its rows' hashes
    (the first 60 bits of each row text's MD5; an unsigned sum is an exact DECIMAL)."""
    h = f"CAST(CONV(LEFT(MD5({row_sql(schema, mariadb)}), {row_digest.HEX_DIGITS}), 16, 10) AS UNSIGNED)"
    return f"COUNT(*), COALESCE(SUM({h}), 0)"


def double_text(x: float) -> str:
    """A double as the server prints it (its ``my_gcvt``): the shortest digits that read back
    as the same double, positional for decimal exponents from -14 to 15 (and for longer
    digits), else ``d.ddde<exp>``."""
    if x == 0:
        return "0"
    sign, digits_t, exp = decimal.Decimal(repr(x)).normalize().as_tuple()
    digits = "".join(map(str, digits_t))
    point = len(digits) + int(exp)  # the decimal point's place after the first digit's
    text: str
    if point >= -14 and (point <= 15 or len(digits) > point):
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point < len(digits):
            text = digits[:point] + "." + digits[point:]
        else:
            text = digits + "0" * (point - len(digits))
    else:
        text = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + f"e{point - 1}"
    return ("-" if sign else "") + text


def _stamp(suffix: str) -> Callable[[Any], str]:
    def render(v: Any) -> str:
        text = str(v)
        if suffix and text.endswith(suffix):
            text = text[: -len(suffix)]
        whole, _, fraction = text.partition(".")
        return f"{whole}.{fraction.ljust(6, '0')}{suffix}"

    return render


def _time(fsp: int) -> Callable[[Any], str]:
    def render(v: Any) -> str:
        whole, _, fraction = str(v).partition(".")
        return f"{whole}.{fraction.ljust(6, '0')[:fsp]}" if fsp else whole

    return render


def _hex(v: Any) -> str:
    return base64.b64decode(v["$b64"]).hex().upper() if isinstance(v, dict) else str(v)


def _json_mariadb(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def _json_mysql(v: Any) -> str:
    """MySQL's text of a JSON value: object keys shorter first, then by bytes; ``", "`` and
    ``": "``; doubles in their shortest form."""
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_json_mysql(v[k])}" for k in keys) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_json_mysql(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def column_renderer(column: Column, mariadb: bool = True) -> Callable[[Any], str]:
    """The Python rendering of one column's canonical value, equal to ``column_sql``'s."""
    kind, _ = column_kind(column.type)
    if kind == "binary":
        return _hex
    if kind == "datetime":
        return _stamp("")
    if kind == "timestamp":
        return _stamp("+00:00")
    if kind == "time":
        return _time(_fsp(column.type))
    if kind in ("double", "float"):
        return lambda v: double_text(float(v))
    if kind == "json":
        return _json_mariadb if mariadb else _json_mysql
    return str


def row_hasher(schema: TableSchema, mariadb: bool = True) -> Callable[[Row], int]:
    """A function from a replayed row (canonical values) to the hash ``digest_sql`` sums."""
    return row_digest.row_hasher(renderers(schema, mariadb))


def renderers(schema: TableSchema, mariadb: bool = True) -> list[tuple[str, Callable[[Any], str]]]:
    """Per column, its name and the Python rendering ``texts_sql`` matches."""
    return [(c.name, column_renderer(c, mariadb)) for c in schema.columns]
