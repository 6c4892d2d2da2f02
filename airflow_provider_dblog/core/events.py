"""One event format for log rows and dump rows (DBLog paper, section 3.2).

Every value inside ``key``/``before``/``after`` is *canonical*: JSON-compatible and produced
by the same conversion for the log path and the chunk-SELECT path of a source, so that a
row read from the log and the same row read by a dump compare equal. Canonical forms:
integers -> int; decimal/numeric -> str (exact text, e.g. "12.30"); float -> float;
bool -> bool; text -> str; bytes -> {"$b64": "..."}; date -> "YYYY-MM-DD";
timestamp -> ISO-8601 "YYYY-MM-DDTHH:MM:SS[.ffffff]" (with "+00:00" when the column has a
time zone, always normalised to UTC); uuid -> lowercase str; json -> parsed JSON value.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools
import json
import operator
from typing import Any, Callable, Mapping, Optional, Sequence

# Rows and keys are plain dicts of canonical values, keyed by column name.
Row = dict[str, Any]
# A primary key as a tuple of canonical values, in key-column order (hashable).
Key = tuple[Any, ...]


class Op(str, enum.Enum):
    """Debezium-style operation codes."""

    CREATE = "c"
    UPDATE = "u"
    DELETE = "d"
    READ = "r"  # a row emitted by a dump
    # TRUNCATE of the whole table: key (), no row images. Every row of the table with a
    # smaller position is gone; later events of the table apply as usual.
    TRUNCATE = "t"
    # A dump chunk's key range (table dumps of integer keys): key (), ``after`` holds
    # {"from": key or None, "to": key or None, "since": encoded LW position}. Every key k with
    # from < k <= to whose last event is older than ``since`` is gone (the chunk's rows, at
    # the following subs, re-add the keys it holds). See docs/changelog-format.md.
    RANGE = "k"


class Origin(str, enum.Enum):
    LOG = "log"
    DUMP = "dump"


# Width of the sub-position counter. Sub 0 is the log event itself; sub 1 is the second
# half of a split primary-key update; dump rows of a chunk take subs 1..n at their HW (2..n+1
# after the two range events of a table's last chunk).
SUB_WIDTH = 9


class Position(tuple[str, int]):
    """A totally ordered place in one source's log.

    ``coord`` is a fixed-width string built by the source so that string order is log order
    (PostgreSQL: commit LSN + index in the transaction; MySQL: binlog file number +
    transaction start + event offset + row index). ``sub`` orders events that share one
    coordinate (see ``SUB_WIDTH``). Serialised as ``coord.sub`` with ``sub`` zero-padded,
    so any engine sorting strings (Spark, DuckDB, ``sort``) orders positions correctly.

    A ``(coord, sub)`` tuple underneath: immutable, and created, compared and hashed in C,
    which matters because every event (every dump row too) carries one.
    """

    __slots__ = ()

    def __new__(cls, coord: str, sub: int = 0) -> "Position":
        if "." in coord:
            raise ValueError(f"position coordinate must not contain '.': {coord!r}")
        if not 0 <= sub < 10**SUB_WIDTH:
            raise ValueError(f"position sub out of range: {sub}")
        return tuple.__new__(cls, (coord, sub))

    coord = property(operator.itemgetter(0))
    sub = property(operator.itemgetter(1))

    def __getnewargs__(self) -> tuple[str, int]:  # pickle and copy call __new__(cls, coord, sub)
        return (self[0], self[1])

    def __repr__(self) -> str:
        return f"Position(coord={self[0]!r}, sub={self[1]!r})"

    def encode(self) -> str:
        return f"{self[0]}.{self[1]:0{SUB_WIDTH}d}"

    __str__ = encode

    @classmethod
    def parse(cls, text: str) -> "Position":
        coord, _, sub = text.rpartition(".")
        if not coord or len(sub) != SUB_WIDTH or not sub.isdigit():
            raise ValueError(f"not an encoded position: {text!r}")
        return cls(coord, int(sub))

    @classmethod
    def unchecked(cls, coord: str, sub: int = 0) -> "Position":
        """For hot paths whose coordinate and sub are valid by construction (a source's
        fixed-width hex/digit coordinates): no checks."""
        return tuple.__new__(cls, (coord, sub))

    def with_subs(self, first: int, count: int) -> list["Position"]:
        """``with_sub(first) .. with_sub(first + count - 1)``, built without a Python call
        per position (a chunk's rows take consecutive subs at its HW)."""
        if first < 0 or first + count > 10**SUB_WIDTH:
            raise ValueError(f"position subs out of range: {first}..{first + count - 1}")
        return list(
            map(
                tuple.__new__,
                itertools.repeat(Position, count),
                zip(itertools.repeat(self[0], count), range(first, first + count)),
            )
        )

    def with_sub(self, sub: int) -> "Position":
        if not 0 <= sub < 10**SUB_WIDTH:
            raise ValueError(f"position sub out of range: {sub}")
        return Position.unchecked(self[0], sub)


@dataclasses.dataclass(frozen=True)
class Column:
    name: str
    type: str  # the source's type name, lower case, e.g. "integer", "numeric(10,2)", "varchar(20)"
    nullable: bool = True


@dataclasses.dataclass(frozen=True)
class TableSchema:
    """A captured table: ``table`` is "schema.table" (PostgreSQL) or "database.table" (MySQL)."""

    table: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary key (or user-chosen unique) column names, in order

    def schema_id(self) -> str:
        """Content hash: equal schemas share an id, any change gives a new one.

        Cached on the instance (sources call it for every row; the schema is immutable)."""
        cached = self.__dict__.get("_schema_id")
        if cached is None:
            cached = hashlib.sha256(self.to_json().encode()).hexdigest()[:16]
            object.__setattr__(self, "_schema_id", cached)
        return cached

    def to_json(self) -> str:
        return json.dumps(
            {
                "table": self.table,
                "columns": [dataclasses.asdict(c) for c in self.columns],
                "key": list(self.key),
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> "TableSchema":
        d = json.loads(text)
        return cls(d["table"], tuple(Column(**c) for c in d["columns"]), tuple(d["key"]))

    def key_of(self, row: Mapping[str, Any]) -> Key:
        return self.key_getter()(row)

    def key_getter(self) -> Callable[[Mapping[str, Any]], Key]:
        """``key_of`` as one C-level call per row (cached)."""
        getter = self.__dict__.get("_key_getter")
        if getter is None:
            if len(self.key) == 1:
                one = operator.itemgetter(self.key[0])
                getter = lambda row: (one(row),)  # noqa: E731 - itemgetter of one name is no tuple
            else:
                getter = operator.itemgetter(*self.key)
            object.__setattr__(self, "_key_getter", getter)
        return getter

    def keys_of(self, rows: Sequence[Mapping[str, Any]]) -> list[Key]:
        """``[key_of(r) for r in rows]`` without a Python call per row (dumps key every row)."""
        if len(self.key) == 1:
            return list(zip(map(operator.itemgetter(self.key[0]), rows)))  # zip of one: 1-tuples
        return list(map(operator.itemgetter(*self.key), rows))

    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclasses.dataclass(slots=True)
class ChangeEvent:
    """A change of one row, from the log (op c/u/d) or from a dump (op r), or a TRUNCATE of
    the whole table (op t: ``key`` is ``()``, ``before`` and ``after`` are None).

    ``before``/``after`` are dicts, or that dict's changelog JSON text when a source was asked
    for texts for an output that stores them (``Source.start_log``; core/row_text.py).

    Treat as immutable (use ``dataclasses.replace``); not frozen only because frozen
    dataclasses are markedly slower to create, and millions are created per minute."""

    source_id: str
    table: str
    op: Op
    key: Key
    before: Optional[Row | str]
    after: Optional[Row | str]
    position: Position
    commit_ts: Optional[int] = None  # commit time, microseconds since the Unix epoch (UTC)
    txid: Optional[str] = None
    origin: Origin = Origin.LOG
    dump_id: Optional[str] = None
    schema_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class WatermarkEvent:
    """A committed write of this source's watermark row, seen in the log. Never emitted."""

    uuid: str
    position: Position
    txid: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SchemaEvent:
    """The source learned a (new) schema for a table; later events reference its id."""

    schema: TableSchema
    position: Optional[Position] = None


# What Source.poll() returns.
LogItem = ChangeEvent | WatermarkEvent | SchemaEvent


def split_key_update(event: ChangeEvent, old_key: Key) -> list[ChangeEvent]:
    """A primary-key update becomes a delete of the old key and a create of the new one.

    Downstream consumers then never need to know the key changed (DESIGN: primary-key updates).
    """
    delete = dataclasses.replace(event, op=Op.DELETE, key=old_key, after=None)
    create = dataclasses.replace(
        event, op=Op.CREATE, before=None, position=event.position.with_sub(event.position.sub + 1)
    )
    return [delete, create]
