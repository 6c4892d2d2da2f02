"""Dump rows as one block per chunk, log rows as one block per binlog rows event, and the
writer's batches built from such blocks.

A dumped chunk becomes thousands of events that differ only in key, row and sub-position
(op r, origin dump, positions HW.1..n). Making a ChangeEvent for each, and reading each
field back per event in the output, was a third of a dump's CPU time. ``DumpRows`` keeps the
chunk as two lists (keys, rows); ``LogRows`` does the same for the changes of one binlog
rows event (one table, one op, one transaction) as the source read them as JSON text, and
the engine passes it on as one item wherever no watermark window needs its rows one by one.
``EventBatch`` is what ``Output.write`` receives: still a ``Sequence[ChangeEvent]`` for any
output that iterates it (events are made on the fly), while an output that knows the blocks
(the Delta changelog) builds its columns per block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Iterator, Optional, Union, overload

from .events import ChangeEvent, Key, Op, Origin, Position
from .row_text import loads_row


@dataclasses.dataclass(slots=True)
class DumpRows:
    """Rows ``keys[i]``/``rows[i]`` of one chunk at positions ``hw.first_sub + i`` (op r).
    With ``texts`` each row is its changelog JSON text (core/row_text.py), in a list or a
    TextColumn (core/text_column.py); ``event`` and ``events`` give dicts either way.
    ``key_texts``: the keys' JSON texts, where the source wrote them."""

    source_id: str
    table: str
    dump_id: str
    schema_id: Optional[str]
    hw: Position
    first_sub: int
    keys: list[Key]
    rows: Sequence[Any]  # Row dicts, or their JSON texts (``texts``)
    texts: bool = False
    key_texts: Optional[Sequence[str]] = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def first_position(self) -> Position:
        return self.hw.with_sub(self.first_sub)

    @property
    def last_position(self) -> Position:
        return self.hw.with_sub(self.first_sub + len(self.rows) - 1)

    def positions(self) -> list[Position]:
        return self.hw.with_subs(self.first_sub, len(self.rows))

    def split(self, n: int) -> tuple["DumpRows", "DumpRows"]:
        """The first ``n`` rows and the rest (the writer's batches have a maximum size)."""
        kt = self.key_texts
        head = dataclasses.replace(
            self, keys=self.keys[:n], rows=self.rows[:n], key_texts=None if kt is None else kt[:n]
        )
        tail = dataclasses.replace(
            self,
            first_sub=self.first_sub + n,
            keys=self.keys[n:],
            rows=self.rows[n:],
            key_texts=None if kt is None else kt[n:],
        )
        return head, tail

    def event(self, i: int) -> ChangeEvent:
        return ChangeEvent(
            self.source_id,
            self.table,
            Op.READ,
            self.keys[i],
            None,
            loads_row(self.rows[i]) if self.texts else self.rows[i],
            self.hw.with_sub(self.first_sub + i),
            None,
            None,
            Origin.DUMP,
            self.dump_id,
            self.schema_id,
        )

    def events(self) -> list[ChangeEvent]:
        sid, table, dump_id, schema_id = self.source_id, self.table, self.dump_id, self.schema_id
        read, origin = Op.READ, Origin.DUMP
        rows = map(loads_row, self.rows) if self.texts else self.rows
        return [
            ChangeEvent(sid, table, read, key, None, row, pos, None, None, origin, dump_id, schema_id)
            for key, row, pos in zip(self.keys, rows, self.positions())
        ]


@dataclasses.dataclass(slots=True)
class LogRows:
    """Changes ``keys[i]``/``befores[i]``/``afters[i]`` at ``positions[i]`` of one table, op
    and transaction, in log order, their images as changelog JSON text (core/row_text.py) or
    None; never a key update (the engine splits those, so a source keeps them as events)."""

    source_id: str
    table: str
    op: Op
    schema_id: Optional[str]
    commit_ts: Optional[int]
    txid: Optional[str]
    keys: Sequence[Key]
    befores: Sequence[Optional[str]]
    afters: Sequence[Optional[str]]
    positions: Sequence[Position]

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def first_position(self) -> Position:
        return self.positions[0]

    @property
    def last_position(self) -> Position:
        return self.positions[-1]

    def split(self, n: int) -> tuple["LogRows", "LogRows"]:
        """The first ``n`` changes and the rest (the writer's batches have a maximum size)."""
        head = dataclasses.replace(
            self, keys=self.keys[:n], befores=self.befores[:n], afters=self.afters[:n], positions=self.positions[:n]
        )
        tail = dataclasses.replace(
            self, keys=self.keys[n:], befores=self.befores[n:], afters=self.afters[n:], positions=self.positions[n:]
        )
        return head, tail

    def event(self, i: int) -> ChangeEvent:
        return ChangeEvent(
            self.source_id,
            self.table,
            self.op,
            self.keys[i],
            self.befores[i],
            self.afters[i],
            self.positions[i],
            self.commit_ts,
            self.txid,
            Origin.LOG,
            None,
            self.schema_id,
        )

    def events(self) -> list[ChangeEvent]:
        sid, table, op, commit_ts, txid, schema_id = (
            self.source_id,
            self.table,
            self.op,
            self.commit_ts,
            self.txid,
            self.schema_id,
        )
        log_ = Origin.LOG
        return [
            ChangeEvent(sid, table, op, key, b, a, pos, commit_ts, txid, log_, None, schema_id)
            for key, b, a, pos in zip(self.keys, self.befores, self.afters, self.positions)
        ]


Block = (DumpRows, LogRows)  # for isinstance: the segments that are not lists of events
Segment = Union[list[ChangeEvent], DumpRows, LogRows]  # a list of ChangeEvents, or one block


class EventBatch(Sequence[ChangeEvent]):
    """One writer batch, in stream order: a ``Sequence[ChangeEvent]`` made of segments."""

    __slots__ = ("segments", "_len", "_spans")

    def __init__(self, segments: Sequence[Segment] = ()):
        self.segments = [s for s in segments if len(s)]
        self._len = sum(len(s) for s in self.segments)
        self._spans: Optional[dict[str, tuple[Position, Position]]] = None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[ChangeEvent]:
        for seg in self.segments:
            yield from (seg.events() if isinstance(seg, Block) else seg)

    @overload
    def __getitem__(self, index: int) -> ChangeEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[ChangeEvent]: ...

    def __getitem__(self, index: Union[int, slice]) -> Union[ChangeEvent, list[ChangeEvent]]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("EventBatch index out of range")
        for seg in self.segments:
            if index < len(seg):
                return seg.event(index) if isinstance(seg, Block) else seg[index]
            index -= len(seg)
        raise IndexError("EventBatch index out of range")  # not reached

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EventBatch, list, tuple)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence semantics, like list

    def __repr__(self) -> str:
        return f"EventBatch({len(self)} events in {len(self.segments)} segments)"

    def spans(self) -> dict[str, tuple[Position, Position]]:
        """Lowest and highest position per source, without making the blocks' events
        (computed once: an output's epoch check, retry filter and bookkeeping all ask)."""
        if self._spans is not None:
            return self._spans
        out: dict[str, tuple[Position, Position]] = {}
        for seg in self.segments:
            if isinstance(seg, Block):
                items = {seg.source_id: (seg.first_position, seg.last_position)}
            else:
                items = spans_of(seg)
            for sid, (lo, hi) in items.items():
                cur = out.get(sid)
                out[sid] = (lo, hi) if cur is None else (min(cur[0], lo), max(cur[1], hi))
        self._spans = out
        return out


def spans_of(events: Sequence[ChangeEvent]) -> dict[str, tuple[Position, Position]]:
    """Lowest and highest position per source of any event sequence."""
    if isinstance(events, EventBatch):
        return events.spans()
    sids = {e.source_id for e in events}
    if len(sids) == 1:  # the usual case: C-level min/max over one list
        positions = [e.position for e in events]
        return {sids.pop(): (min(positions), max(positions))}
    out: dict[str, tuple[Position, Position]] = {}
    for e in events:
        cur = out.get(e.source_id)
        p = e.position
        out[e.source_id] = (p, p) if cur is None else (min(cur[0], p), max(cur[1], p))
    return out
