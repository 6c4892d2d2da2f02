"""MySQL 8.3+ tagged GTID events (``Gtid_tagged_log_event``, binlog event type 42).

A transaction committed with a tagged GTID (``SET gtid_next = 'AUTOMATIC:tag'``) starts with
this event instead of the Gtid_log_event (33). mysql-replication 1.0.17 does not know the
type (it hands it over as a NotImplementedEvent), so its body is decoded here: without it a
tagged transaction would lose its GTID (GTID positions need it; file positions use it as
the transaction id).

The body is not the fixed layout of event 33 but a message of MySQL's serialization library
(``libs/mysql/serialization/readme.md``): a header of format version (1), message size (in
bytes, from the start of the body) and the last non-ignorable field id, then ``field id,
value`` pairs; every integer is a variable-length integer (the count of trailing one bits of
the first byte + 1 is the byte count, little endian, the value above those bits; signed
ones zig-zag: the sign is the lowest bit), a string is a length and its bytes, a fixed array
its elements one after the other. The fields are those of ``Gtid_event::define_fields`` in
``libs/mysql/binlog/event/control_events.h``, ids in order: 0 gtid_flags (uint8), 1 the
source UUID (16 uint8), 2 gno (int64), 3 tag (string, at most 32 bytes), 4 last_committed
(int64), 5 sequence_number (int64), 6 immediate_commit_timestamp (uint64), 7
original_commit_timestamp (uint64, left out when equal to 6), 8 transaction_length (uint64),
9 immediate_server_version (uint32), 10 original_server_version (uint32, left out when equal
to 9), 11 commit_group_ticket (uint64, left out when unset). A field left out is skipped
(its id is not in the message).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Optional

GTID_TAGGED_LOG_EVENT = 0x2A
_FORMAT_VERSION = 1
_LAST_KNOWN_FIELD = 11


class TaggedGtidError(ValueError):
    """The body is not a tagged GTID event this decoder can read."""


@dataclasses.dataclass(frozen=True)
class TaggedGtid:
    flags: int
    source_uuid: str
    gno: int
    tag: str
    last_committed: int
    sequence_number: int
    immediate_commit_timestamp: int
    original_commit_timestamp: int
    transaction_length: int
    immediate_server_version: int
    original_server_version: int
    commit_group_ticket: Optional[int]

    @property
    def gtid(self) -> str:
        """``uuid:tag:gno`` as the server prints it (``uuid:gno`` without a tag)."""
        return f"{self.source_uuid}:{self.tag}:{self.gno}" if self.tag else f"{self.source_uuid}:{self.gno}"


class _Reader:
    def __init__(self, body: bytes):
        self.body, self.pos, self.end = body, 0, len(body)

    def unsigned(self, bits: int = 64) -> int:
        if self.pos >= self.end:
            raise TaggedGtidError(f"the event ends at byte {self.pos} inside a field")
        first = self.body[self.pos]
        size = 1
        while size < 9 and first & (1 << (size - 1)):
            size += 1  # one more byte per trailing one bit
        if self.pos + size > self.end:
            raise TaggedGtidError(f"a {size}-byte integer at byte {self.pos} runs past the event's end")
        rest = int.from_bytes(self.body[self.pos + 1 : self.pos + size], "little")
        # The value's low bits follow the length bits in the first byte; 9 bytes: all 64 after it.
        value = rest if size == 9 else (first >> size) | (rest << (8 - size))
        self.pos += size
        if value >= 1 << bits:
            raise TaggedGtidError(f"an integer at byte {self.pos - size} is wider than {bits} bits")
        return value

    def signed(self) -> int:
        raw = self.unsigned()
        return -(raw >> 1) - 1 if raw & 1 else raw >> 1

    def string(self, limit: int) -> bytes:
        length = self.unsigned()
        if length > limit or self.pos + length > self.end:
            raise TaggedGtidError(f"a string of {length} bytes at byte {self.pos} is too long")
        self.pos += length
        return self.body[self.pos - length : self.pos]

    def next_field(self, field_id: int) -> bool:
        """True (and the id consumed) when field ``field_id`` comes next; left out otherwise."""
        if self.pos >= self.end:
            return False
        at = self.pos
        if self.unsigned() == field_id:
            return True
        self.pos = at
        return False


def decode_tagged_gtid(body: bytes) -> TaggedGtid:
    """The fields of a Gtid_tagged_log_event's body (after the 19-byte header; a trailing
    checksum is ignored: the message says its own size). TaggedGtidError if it cannot be read."""
    r = _Reader(bytes(body))
    version = r.unsigned(8)
    if version != _FORMAT_VERSION:
        raise TaggedGtidError(f"serialization format version {version}, this decoder reads {_FORMAT_VERSION}")
    size = r.unsigned()
    if size > len(body) or size < r.pos:
        raise TaggedGtidError(f"the message says it has {size} bytes, the event body has {len(body)}")
    r.end = size
    last_non_ignorable = r.unsigned(32)
    if last_non_ignorable > _LAST_KNOWN_FIELD:
        # A newer server added a field its readers must understand: guessing would be wrong.
        raise TaggedGtidError(f"it has a field (id {last_non_ignorable}) newer servers added and readers must know")
    fields: dict[int, object] = {}
    for field_id, read in (
        (0, lambda: r.unsigned(8)),
        (1, lambda: bytes(r.unsigned(8) for _ in range(16))),
        (2, r.signed),
        (3, lambda: r.string(32)),
        (4, r.signed),
        (5, r.signed),
        (6, r.unsigned),
        (7, r.unsigned),
        (8, r.unsigned),
        (9, lambda: r.unsigned(32)),
        (10, lambda: r.unsigned(32)),
        (11, r.unsigned),
    ):
        if r.next_field(field_id):
            fields[field_id] = read()
    # Whatever follows is a field of a newer server that readers may ignore (checked above).
    if 1 not in fields or 2 not in fields:
        raise TaggedGtidError("it has no source UUID or no transaction number")
    if not isinstance(fields[2], int) or fields[2] < 1:
        raise TaggedGtidError(f"its transaction number {fields[2]} is not positive")
    source = uuid.UUID(bytes=fields[1])  # type: ignore[arg-type]
    try:
        tag = bytes(fields.get(3, b"")).decode("ascii")  # type: ignore[call-overload]
    except UnicodeDecodeError:
        raise TaggedGtidError("its tag is not ASCII") from None

    def number(field_id: int, default: int = 0) -> int:
        value = fields.get(field_id, default)
        assert isinstance(value, int)
        return value

    immediate_ts, immediate_version = number(6), number(9)
    ticket = fields.get(11)
    return TaggedGtid(
        flags=number(0),
        source_uuid=str(source),
        gno=number(2),
        tag=tag.lower(),
        last_committed=number(4),
        sequence_number=number(5),
        immediate_commit_timestamp=immediate_ts,
        original_commit_timestamp=number(7, immediate_ts),
        transaction_length=number(8),
        immediate_server_version=immediate_version,
        original_server_version=number(10, immediate_version),
        commit_group_ticket=ticket if isinstance(ticket, int) else None,
    )
