"""Typed mirror columns from the schema store: source type names -> Spark types.

The changelog's row images are JSON of *canonical* values (core/events.py). Each column is
read with ``from_json`` as a *parse type* and turned into its *mirror type* by a Spark
expression, so the landing job has no Python UDFs (executors need nothing but Spark):

  source type (PostgreSQL / MySQL)               canonical JSON        mirror type
  smallint / integer, int, mediumint / bigint    number                short / int / long
  tinyint (incl. tinyint(1): MySQL has no bool)  number                byte (short if unsigned)
  int unsigned / bigint unsigned                 number                long / decimal(20,0)
  numeric(p,s), decimal(p,s) with p <= 38        "12.30"               decimal(p,s)
  numeric without precision, or p > 38           "12.30"               string (exact text)
  real, double precision, float, double          number / "NaN"        double (a float4 is
                                                                       widened: its canonical
                                                                       value is a double)
  boolean                                        true/false            boolean
  text, varchar, char, uuid, enum, set, ...      "..."                 string
  bytea, binary, varbinary, blob                 {"$b64": "..."}       binary
  date                                           "2024-02-29"          date
  timestamp without time zone, datetime          "...T..."             timestamp_ntz
  timestamp with time zone, MySQL timestamp      "...T...+00:00"       timestamp (UTC)
  json, jsonb                                    nested value          string (JSON text)
  anything else (time, interval, arrays, bit...) text or number        string

PostgreSQL's format_type() always spells out "timestamp without time zone", so a bare
"timestamp" can only be MySQL's (UTC) TIMESTAMP. Values Spark cannot hold (PostgreSQL
'infinity' dates and timestamps, years beyond 9999) become NULL.
"""

from __future__ import annotations

from typing import Optional

from pyspark.sql import Column as SparkColumn
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..core.events import TableSchema
from ..sources.type_families import base_type as _base
from ..sources.type_families import family as _family

B64 = "$b64"


_BYTE = _family("byte")
_SHORT = _family("short")
_INT = _family("int")
_LONG = _family("long")
_DOUBLE = _family("double")
_BINARY = _family("binary")
_JSON = _family("json")
_NTZ = _family("timestamp_ntz")
_TZ = _family("timestamp")


class IncompatibleSchemaChange(Exception):
    """A source schema change the mirror cannot follow by adding a nullable column or by
    widening a column's type (``widens_to``)."""

    def __init__(self, mirror: str, table: str, column: str, detail: str):
        self.table, self.column = table, column
        super().__init__(
            f"incompatible schema change in {table}, column {column!r}: {detail}. "
            f"The mirror {mirror} is left as it was. Fix: land this table into a new mirror "
            f"(move or delete {mirror} and its checkpoint, then land again from the start of "
            f"the changelog), or change the source column back."
        )


def mirror_type(type_name: str) -> T.DataType:
    """The Spark type of a mirror column for a source column type (table in the docstring)."""
    base, params, unsigned = _base(type_name)
    if base.endswith("[]"):
        return T.StringType()
    if base in _BYTE:
        return T.ShortType() if unsigned else T.ByteType()
    if base in _SHORT:
        return T.IntegerType() if unsigned else T.ShortType()
    if base in _INT:
        return T.LongType() if unsigned else T.IntegerType()
    if base in _LONG:
        return T.DecimalType(20, 0) if unsigned else T.LongType()
    if base in ("numeric", "decimal", "dec", "fixed"):
        if params and params[0] <= 38:
            return T.DecimalType(params[0], params[1] if len(params) > 1 else 0)
        return T.StringType()
    if base in _DOUBLE:
        return T.DoubleType()
    if base in ("boolean", "bool"):
        return T.BooleanType()
    if base in _BINARY:
        return T.BinaryType()
    if base == "date":
        return T.DateType()
    if base in _NTZ:
        return T.TimestampNTZType()
    if base in _TZ:
        return T.TimestampType()
    return T.StringType()


def is_integer(type_name: str) -> bool:
    """An integer source type (a bigint unsigned is held as decimal(20,0))."""
    return _base(type_name)[0] in _BYTE | _SHORT | _INT | _LONG


def is_json(type_name: str) -> bool:
    return _base(type_name)[0] in _JSON


def parse_type(type_name: str) -> T.DataType:
    """The type ``from_json`` reads the canonical value as (see ``to_mirror``)."""
    if is_json(type_name):
        return T.VariantType()  # keeps the exact JSON value; to_json() prints it back
    mt = mirror_type(type_name)
    if isinstance(mt, T.BinaryType):
        return T.StructType([T.StructField(B64, T.StringType())])
    return mt


def to_mirror(value: SparkColumn, type_name: str) -> SparkColumn:
    """Turn a parsed value (``parse_type``) into the mirror type."""
    if is_json(type_name):
        # A SQL NULL in a json column is a JSON null in the row image (the canonical value is
        # the parsed JSON): it stays SQL NULL, never the 4-character text 'null'. A JSON null
        # literal stored in the column is the same canonical value (docs/landing.md).
        return F.when(F.is_variant_null(value), F.lit(None).cast(T.StringType())).otherwise(F.to_json(value))
    if isinstance(mirror_type(type_name), T.BinaryType):
        return F.unbase64(value.getField(B64))
    return value


def parse_struct(columns: dict[str, str]) -> T.StructType:
    """One ``from_json`` schema for all schema versions of a table seen in a batch:
    ``columns`` from ``data_columns`` (each column read as its widest type)."""
    return T.StructType([T.StructField(n, parse_type(t)) for n, t in columns.items()])


def widens_to(old: T.DataType, new: T.DataType) -> bool:
    """Whether Delta's type widening (table feature ``typeWidening``, Delta 4.x) changes a
    column of type ``old`` to ``new`` in place, every stored value kept exactly: a wider
    integer, float -> double, an integer -> double or a decimal with room for all its digits, a
    decimal with no fewer integer digits and no smaller scale, date -> timestamp_ntz."""
    if old == new:
        return True
    ints: list[T.DataType] = [T.ByteType(), T.ShortType(), T.IntegerType(), T.LongType()]
    digits = dict(zip(ints, (3, 5, 10, 20)))  # decimal digits of the largest value
    if old in ints:
        if new in ints:
            return ints.index(new) > ints.index(old)
        if isinstance(new, T.DoubleType):
            return old != T.LongType()
        if isinstance(new, T.DecimalType):
            return new.precision - new.scale >= digits[old]
        return False
    if isinstance(old, T.FloatType):
        return isinstance(new, T.DoubleType)
    if isinstance(old, T.DecimalType) and isinstance(new, T.DecimalType):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    return isinstance(old, T.DateType) and isinstance(new, T.TimestampNTZType)


def wider(mirror: str, table: str, column: str, a: str, b: str) -> str:
    """Of two source types of one column, the one whose mirror type holds both; raises
    IncompatibleSchemaChange when neither does."""
    ta, tb = mirror_type(a), mirror_type(b)
    if widens_to(ta, tb):
        return b
    if widens_to(tb, ta):
        return a
    raise IncompatibleSchemaChange(
        mirror, table, column, f"type {a} ({ta.simpleString()}) became {b} ({tb.simpleString()})"
    )


def data_columns(table: str, mirror: str, schemas: list[TableSchema]) -> dict[str, str]:
    """column -> source type over all schema versions, oldest first. Where versions differ
    the type whose mirror type holds the other's values wins (a widening, or a narrowing
    back); any other type change is incompatible."""
    out: dict[str, str] = {}
    for s in schemas:
        for c in s.columns:
            prev = out.get(c.name)
            out[c.name] = c.type if prev is None else wider(mirror, table, c.name, prev, c.type)
    return out


def check_evolution(
    mirror: str,
    table: str,
    existing: T.StructType,
    wanted: dict[str, str],
    key: tuple[str, ...],
    existing_key: Optional[list[str]],
) -> tuple[list[T.StructField], list[T.StructField]]:
    """(nullable columns to add, columns to widen in place) for an existing mirror; raises
    IncompatibleSchemaChange on anything else.

    Columns the source dropped stay in the mirror (NULL in rows landed afterwards); a mirror
    column already wider than the source type (the source narrowed it back) stays as it is."""
    if existing_key is not None and list(key) != list(existing_key):
        raise IncompatibleSchemaChange(
            mirror, table, ",".join(key), f"the primary key changed from {existing_key} to {list(key)}"
        )
    have = {f.name.lower(): f for f in existing.fields}
    add, widen = [], []
    for name, type_name in wanted.items():
        mt = mirror_type(type_name)
        f = have.get(name.lower())
        if f is None:
            add.append(T.StructField(name, mt, True))
        elif f.dataType == mt or widens_to(mt, f.dataType):
            continue
        elif widens_to(f.dataType, mt):
            widen.append(T.StructField(f.name, mt, True))
        else:
            raise IncompatibleSchemaChange(
                mirror,
                table,
                name,
                f"the mirror column is {f.dataType.simpleString()} but the source type is now "
                f"{type_name} ({mt.simpleString()})",
            )
    return add, widen
