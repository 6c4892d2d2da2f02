"""Decoder for PostgreSQL's built-in ``pgoutput`` logical replication protocol, version 1.

Pure functions and value classes, no I/O, so every message type is unit-tested on hand-built
bytes. Reference: PostgreSQL docs, "Logical Replication Message Formats". Only what a
protocol-1 stream (no streaming of in-progress transactions, no binary values) can carry is
decoded; anything else is rejected loudly rather than misread.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Optional, Union

from ...core import names

# pgoutput timestamps count microseconds from 2000-01-01 00:00:00 UTC.
PG_EPOCH_OFFSET_US = 946_684_800 * 1_000_000


class _UnchangedToast:
    """Marker for a TOASTed column the UPDATE did not touch (tuple kind 'u').

    PostgreSQL does not send such a value: the row's new version shares the old, unchanged
    out-of-line datum and only the replica identity decides what the old tuple carries."""

    _instance: Optional["_UnchangedToast"] = None

    def __new__(cls) -> "_UnchangedToast":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"


UNCHANGED_TOAST = _UnchangedToast()

# One column of a TupleData: None (SQL NULL), UNCHANGED_TOAST, str (text format) or bytes
# (binary format; only if binary mode was requested, which this package never does).
TupleValue = Union[None, _UnchangedToast, str, bytes]


class DecodeError(ValueError):
    """The bytes are not a well-formed pgoutput protocol-1 message."""


@dataclasses.dataclass(frozen=True)
class Begin:
    final_lsn: int  # LSN of the transaction's commit record: the same for every change of it
    commit_ts: int  # microseconds since the Unix epoch
    xid: int


@dataclasses.dataclass(frozen=True)
class Commit:
    flags: int
    commit_lsn: int
    end_lsn: int
    commit_ts: int  # microseconds since the Unix epoch


@dataclasses.dataclass(frozen=True)
class Origin:
    lsn: int
    name: str


@dataclasses.dataclass(frozen=True)
class RelationColumn:
    flags: int  # bit 1: part of the replica identity ("key")
    name: str
    type_oid: int
    type_modifier: int

    @property
    def is_key(self) -> bool:
        return bool(self.flags & 1)


@dataclasses.dataclass(frozen=True)
class Relation:
    relid: int
    namespace: str  # "" stands for pg_catalog
    name: str
    replica_identity: str  # 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]

    @property
    def qualified_name(self) -> str:
        return names.table_name(self.namespace or "pg_catalog", self.name)


@dataclasses.dataclass(frozen=True)
class Type:
    oid: int
    namespace: str
    name: str


@dataclasses.dataclass(frozen=True)
class Insert:
    relid: int
    new: tuple[TupleValue, ...]


@dataclasses.dataclass(frozen=True)
class Update:
    relid: int
    # 'K': old replica-identity columns only (sent when the key changed); 'O': the whole old
    # row (REPLICA IDENTITY FULL); None: no old tuple.
    old_kind: Optional[str]
    old: Optional[tuple[TupleValue, ...]]
    new: tuple[TupleValue, ...]


@dataclasses.dataclass(frozen=True)
class Delete:
    relid: int
    old_kind: str  # 'K' or 'O' as for Update
    old: tuple[TupleValue, ...]


@dataclasses.dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclasses.dataclass(frozen=True)
class LogicalMessage:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


Message = Union[Begin, Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate, LogicalMessage]


_INT16 = struct.Struct("!h")
_INT32 = struct.Struct("!i")


class _Reader:
    """A cursor over one message's bytes with the protocol's primitive types."""

    __slots__ = ("buf", "pos", "encoding")

    def __init__(self, buf: bytes, encoding: str):
        self.buf = buf
        self.pos = 0
        self.encoding = encoding

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise DecodeError(
                f"message truncated: need {n} bytes at offset {self.pos}, have {len(self.buf) - self.pos}"
            )
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def byte(self) -> str:
        return chr(self._take(1)[0])

    def int8(self) -> int:
        return self._take(1)[0]

    def int16(self) -> int:
        return struct.unpack("!h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack("!i", self._take(4))[0]

    def uint32(self) -> int:
        return struct.unpack("!I", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack("!q", self._take(8))[0]

    def uint64(self) -> int:
        return struct.unpack("!Q", self._take(8))[0]

    def string(self) -> str:
        end = self.buf.find(b"\x00", self.pos)
        if end < 0:
            raise DecodeError(f"unterminated string at offset {self.pos}")
        out = self.buf[self.pos : end].decode(self.encoding)
        self.pos = end + 1
        return out

    def timestamp(self) -> int:
        return self.int64() + PG_EPOCH_OFFSET_US

    def tuple_data(self) -> tuple[TupleValue, ...]:
        # Every captured row's columns pass through here: one loop with local state and
        # struct.unpack_from, not a method call per length and kind byte.
        buf, pos, size = self.buf, self.pos, len(self.buf)
        if pos + 2 > size:
            raise DecodeError(f"message truncated: need 2 bytes at offset {pos}, have {size - pos}")
        (count,) = _INT16.unpack_from(buf, pos)
        pos += 2
        values: list[TupleValue] = []
        append = values.append
        for _ in range(count):
            if pos >= size:
                raise DecodeError(f"message truncated: need 1 bytes at offset {pos}, have 0")
            kind = buf[pos]
            pos += 1
            if kind == 0x74 or kind == 0x62:  # 't' text, 'b' binary: Int32 length + bytes
                if pos + 4 > size:
                    raise DecodeError(f"message truncated: need 4 bytes at offset {pos}, have {size - pos}")
                (n,) = _INT32.unpack_from(buf, pos)
                pos += 4
                if n < 0 or pos + n > size:
                    raise DecodeError(f"message truncated: need {n} bytes at offset {pos}, have {size - pos}")
                raw = buf[pos : pos + n]
                pos += n
                append(raw.decode(self.encoding) if kind == 0x74 else bytes(raw))
            elif kind == 0x6E:  # 'n'
                append(None)
            elif kind == 0x75:  # 'u'
                append(UNCHANGED_TOAST)
            else:
                raise DecodeError(f"unknown TupleData column kind {chr(kind)!r}")
        self.pos = pos
        return tuple(values)

    def end(self, what: str) -> None:
        if self.pos != len(self.buf):
            raise DecodeError(f"{len(self.buf) - self.pos} unexpected trailing bytes after {what} message")


def decode(data: bytes, encoding: str = "utf-8") -> Message:
    """Decode one pgoutput message (the payload of one XLogData)."""
    if not data:
        raise DecodeError("empty message")
    r = _Reader(bytes(data), encoding)
    tag = r.byte()
    msg: Message
    if tag == "B":
        msg = Begin(final_lsn=r.uint64(), commit_ts=r.timestamp(), xid=r.uint32())
    elif tag == "C":
        msg = Commit(flags=r.int8(), commit_lsn=r.uint64(), end_lsn=r.uint64(), commit_ts=r.timestamp())
    elif tag == "O":
        msg = Origin(lsn=r.uint64(), name=r.string())
    elif tag == "R":
        relid, namespace, name, ident = r.uint32(), r.string(), r.string(), r.byte()
        cols = tuple(
            RelationColumn(flags=r.int8(), name=r.string(), type_oid=r.uint32(), type_modifier=r.int32())
            for _ in range(r.int16())
        )
        msg = Relation(relid, namespace, name, ident, cols)
    elif tag == "Y":
        msg = Type(oid=r.uint32(), namespace=r.string(), name=r.string())
    elif tag == "I":
        relid = r.uint32()
        if r.byte() != "N":
            raise DecodeError("Insert without a new tuple ('N')")
        msg = Insert(relid, r.tuple_data())
    elif tag == "U":
        relid = r.uint32()
        kind = r.byte()
        old_kind, old = None, None
        if kind in ("K", "O"):
            old_kind, old = kind, r.tuple_data()
            kind = r.byte()
        if kind != "N":
            raise DecodeError(f"Update: expected new tuple ('N'), got {kind!r}")
        msg = Update(relid, old_kind, old, r.tuple_data())
    elif tag == "D":
        relid = r.uint32()
        kind = r.byte()
        if kind not in ("K", "O"):
            raise DecodeError(f"Delete: expected old tuple ('K' or 'O'), got {kind!r}")
        msg = Delete(relid, kind, r.tuple_data())
    elif tag == "T":
        nrels = r.int32()
        options = r.int8()
        relids = tuple(r.uint32() for _ in range(nrels))
        msg = Truncate(relids, cascade=bool(options & 1), restart_identity=bool(options & 2))
    elif tag == "M":
        flags, lsn, prefix = r.int8(), r.uint64(), r.string()
        content = r._take(r.int32())
        msg = LogicalMessage(bool(flags & 1), lsn, prefix, content)
    else:
        raise DecodeError(f"unknown pgoutput message type {tag!r} (only protocol version 1 is supported)")
    r.end(type(msg).__name__)
    return msg
