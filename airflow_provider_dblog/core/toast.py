"""Unchanged TOAST values: the placeholder, how replay fills it in, and the dump fallback.

PostgreSQL stores large values (text, jsonb, bytea, ... over about 2 kB after compression)
out of line ("TOASTed"). An UPDATE that does not change such a value does not write it to
the WAL again, so the log carries only a marker for it. With REPLICA IDENTITY FULL the old
row, value included, is in the same log record and the source copies the value into
``after``; without it ``after`` holds the placeholder ``{"$unchanged_toast": true}``, which
means "this column did not change: keep the value the key had".

Consumers (replay here, the Spark landing) therefore never let a placeholder overwrite a
value: they take the column's value from the key's previous event. A previous value exists
unless the row's earlier state was never captured (a row older than the capture whose dump
has not reached it, a dump row dropped because this very update fell into its window, the
new key of a primary-key update). For those the capture queues a key-list dump of the key
(``ToastRepairs``): its row, emitted at the chunk's high watermark after the
update, carries every value.
"""

from __future__ import annotations

import bisect
import collections
from typing import Any, Callable, Iterable, Optional, Sequence

from .batch import LogRows
from .dumps import Dump, DumpControl, DumpSpec, DumpStatus
from .events import ChangeEvent, Key, Op, Position, Row
from .protocols import StateStore
from .row_text import as_row

UNCHANGED_TOAST_KEY = "$unchanged_toast"
_ROW_OPS = frozenset((Op.CREATE, Op.UPDATE, Op.DELETE, Op.READ))


def unchanged_toast_value() -> dict[str, Any]:
    """A fresh placeholder (a new dict each time: rows are mutable)."""
    return {UNCHANGED_TOAST_KEY: True}


def is_unchanged_toast(value: Any) -> bool:
    return value.__class__ is dict and len(value) == 1 and value.get(UNCHANGED_TOAST_KEY) is True


def unchanged_columns(row: Optional[Row | str]) -> list[str]:
    """The columns of ``row`` (a dict, or its JSON text: core/row_text.py) that hold the
    placeholder; a text without the placeholder's key is not parsed."""
    if isinstance(row, str):
        row = as_row(row) if f'"{UNCHANGED_TOAST_KEY}"' in row else None
    return [c for c, v in row.items() if is_unchanged_toast(v)] if row else []


class ToastHistory:
    """Per key, the events a placeholder may need, in position order: those since the last
    complete row image or delete (older ones can never be looked at). Events may arrive in
    any order; an event older than that barrier is dropped."""

    def __init__(self) -> None:
        self._events: dict[Key, list[tuple[Position, Optional[Row]]]] = {}

    def add(self, event: ChangeEvent) -> None:
        if event.op not in _ROW_OPS:
            return  # a table-level event (TRUNCATE): replay passes it to fill() as a barrier
        row = None if event.op is Op.DELETE else as_row(event.after)
        entry = (event.position, row)
        hist = self._events.get(event.key)
        if hist is None:
            self._events[event.key] = [entry]
            return
        if event.position < hist[0][0] and _complete(hist[0][1]):
            return  # older than a complete image or a delete: never needed
        i = bisect.bisect_left(hist, event.position, key=lambda e: e[0])
        if i < len(hist) and hist[i][0] == event.position:
            return  # the same event twice
        hist.insert(i, entry)
        if _complete(row):  # a barrier: what came before it is never needed
            del hist[:i]

    def fill(self, key: Key, row: Row, position: Position, after: Optional[Position] = None) -> Row:
        """``row`` (the key's event at ``position``) with each placeholder replaced by the
        column's value in the key's newest earlier event that has one. The look-back stops at
        a delete and at ``after`` (a TRUNCATE's position); a placeholder with no earlier value
        stays (the dump queued for the key replaces the row later)."""
        missing = unchanged_columns(row)
        if not missing:
            return row
        out = dict(row)
        hist = self._events.get(key, [])
        i = bisect.bisect_left(hist, position, key=lambda e: e[0])
        for pos, earlier in reversed(hist[:i]):
            if earlier is None or (after is not None and pos <= after):
                break
            for c in list(missing):
                if c in earlier and not is_unchanged_toast(earlier[c]):
                    out[c] = earlier[c]
                    missing.remove(c)
            if not missing:
                break
        return out


def _complete(row: Optional[Row]) -> bool:
    """A delete (None) or a row image without placeholders."""
    return row is None or not any(is_unchanged_toast(v) for v in row.values())


def fill_from_before(after: Row, before: Optional[Row]) -> Row:
    """REPLICA IDENTITY FULL: the old row is in the log record, so an unchanged TOASTed
    column's value is taken from it (in place; returns ``after``)."""
    if before:
        for c, v in after.items():
            if is_unchanged_toast(v) and c in before and not is_unchanged_toast(before[c]):
                after[c] = before[c]
    return after


class ToastRepairs:
    """The key-list dumps the capture queues for the keys of events whose ``after`` still
    holds a placeholder. Each is recorded before those events go to the writer, so the request
    is stored before the events can become durable (a crash in between re-reads the events and
    requests again).

    One dump per table *waits* at a time (recorded by this process, no chunk handed out yet):
    a placeholder of a key it lists needs nothing more, because its chunk, selected later,
    reads the row after this change (a change inside the chunk's window drops the chunk's row
    but arrives after ``started``, so it is queued anew). New keys replace the waiting dump by
    one listing both (recorded first; the old one is never performed and becomes done with the
    new one), up to ``max_keys``. So
    after a restart or failover, when every key is unknown, an update workload queues a few
    growing dumps, not one dump of a key or two per log step (each a watermark window)."""

    def __init__(
        self,
        state: StateStore,
        source_id: str,
        chunk_size: int = 1_000,
        max_keys: int = 10_000,
        superseded: Callable[[str, str], None] = lambda dump_id, by: None,
        ended: Callable[[str], bool] = lambda dump_id: False,
    ):
        self.state, self.source_id = state, source_id
        self.chunk_size, self.max_keys = chunk_size, max_keys
        self._superseded = superseded  # the scheduler skips a superseded waiting dump
        self._ended = ended  # cancelled or failed before any chunk (by a user, say)
        self._waiting: dict[str, tuple[DumpSpec, set[Key]]] = {}  # table -> dump, its keys

    def queue(self, hits: Iterable[tuple[str, Key]]) -> list[DumpSpec]:
        """Record what ``hits`` (table, key) need; returns the dumps recorded."""
        by_table: dict[str, dict[Key, None]] = {}
        for table, key in hits:
            by_table.setdefault(table, {})[tuple(key)] = None
        specs = []
        for table, keys in sorted(by_table.items()):
            waiting = self._waiting.get(table)
            if waiting is not None and self._ended(waiting[0].dump_id):
                waiting = None  # it will never read its keys: queue them anew
            new = [k for k in keys if waiting is None or k not in waiting[1]]
            if not new:
                continue  # the waiting dump lists them all
            old = None
            if waiting is not None and len(waiting[1]) + len(new) <= self.max_keys:
                old = waiting[0]
                new = list(old.keys or ()) + new
            spec = DumpSpec.new(self.source_id, [table], new, toast_repair=True)
            self.state.add_dump(spec, DumpControl(chunk_size=self.chunk_size))
            if old is not None:
                self._superseded(old.dump_id, spec.dump_id)
            self._waiting[table] = (spec, set(new))
            specs.append(spec)
        return specs

    def merge_pending(self, dumps: Sequence[Dump], known: Callable[[str, Key], bool]) -> list[DumpSpec]:
        """At a start: the repair dumps an earlier process queued and never began (a crash
        leaves every superseded one pending too) become one dump per table listing their
        keys once, less the keys ``known`` to have a full row in the changelog by now (the
        replay fills those); the merged ones end with it. Returns the dumps recorded."""
        by_table: dict[str, list[Dump]] = {}
        for d in dumps:
            if d.spec.toast_repair and d.status is DumpStatus.PENDING and not d.progress and d.spec.tables:
                by_table.setdefault(d.spec.tables[0], []).append(d)
        specs = []
        for table, waiting in sorted(by_table.items()):
            keys = {k: None for d in waiting for k in d.spec.keys or () if not known(table, k)}
            if not keys:
                for d in waiting:  # every key has its full row: nothing left to read
                    self.state.set_status(d.dump_id, DumpStatus.DONE)
                continue
            if len(waiting) == 1 and len(keys) == len(waiting[0].spec.keys or ()):
                self._waiting[table] = (waiting[0].spec, set(keys))
                continue
            listed = list(keys)
            for i in range(0, len(listed), self.max_keys):
                part = listed[i : i + self.max_keys]
                spec = DumpSpec.new(self.source_id, [table], part, toast_repair=True)
                self.state.add_dump(spec, DumpControl(chunk_size=self.chunk_size))
                specs.append(spec)
                self._waiting[table] = (spec, set(part))
            for d in waiting:  # done when the last of the new ones is: a crash merges again
                self._superseded(d.dump_id, specs[-1].dump_id)
        return specs

    def started(self, dump_id: str) -> None:
        """A chunk of ``dump_id`` is handed out: that dump no longer waits."""
        for table, (spec, _) in list(self._waiting.items()):
            if spec.dump_id == dump_id:
                del self._waiting[table]


def keys_with_placeholders(events: Sequence[ChangeEvent]) -> list[tuple[str, Key]]:
    """(table, key) of the events whose ``after`` holds a placeholder."""
    return [(e.table, e.key) for e in events if e.after is not None and unchanged_columns(e.after)]


class ToastKnown:
    """Keys of tables with unchanged-TOAST placeholders whose full row this capture process
    has emitted (log or dump), bounded. A placeholder of such a key needs no repair dump: the
    replay fills it from that earlier row. Without this, every UPDATE that leaves a TOASTed
    value alone queued a one-key dump (a steady flood under an update workload). Unknown keys
    (never seen, or evicted) are queued as before: the conservative side."""

    def __init__(self, limit: int = 500_000):
        self.tables: set[str] = set()  # tables that ever had a placeholder: only these are tracked
        self._keys: "collections.OrderedDict[tuple[str, Key], None]" = collections.OrderedDict()
        self._limit = limit

    def __contains__(self, table_key: tuple[str, Key]) -> bool:
        return table_key in self._keys

    def seed(self, table: str, keys: Iterable[Key]) -> None:
        """Keys of ``table`` whose full row the changelog holds already (read from the
        output at the first placeholder of the table in this process): after a restart or
        a failover their placeholders are filled by the replay, not repaired by a dump."""
        self.tables.add(table)
        for k in keys:
            self._keys[(table, tuple(k))] = None
        while len(self._keys) > self._limit:
            self._keys.popitem(last=False)

    def walk(self, items: Sequence[Any], placeholders: dict[Position, tuple[str, Key]]) -> list[tuple[str, Key]]:
        """Go through what goes to the writer, in order: full rows become known, deletes and
        TRUNCATEs forget; returns the (table, key) of the placeholder events (by position in
        ``placeholders``) whose key was not known at that point, plus placeholders that match
        no item (a partition's keys that came or went without a row change)."""
        keys = self._keys
        need: list[tuple[str, Key]] = []
        for block in items:
            table = getattr(block, "table", None)
            if table not in self.tables:
                continue
            each = block.events() if isinstance(block, LogRows) else (block,)
            for item in each:
                self._walk_one(item, table, keys, need, placeholders)
        need.extend(placeholders.values())
        while len(keys) > self._limit:
            keys.popitem(last=False)
        return need

    def _walk_one(
        self,
        item: Any,
        table: str,
        keys: "collections.OrderedDict[tuple[str, Key], None]",
        need: list[tuple[str, Key]],
        placeholders: dict[Position, tuple[str, Key]],
    ) -> None:
        if isinstance(item, ChangeEvent):
            hit = placeholders.pop(item.position, None)
            if hit is not None:
                if hit not in keys:
                    need.append(hit)
            elif item.op is Op.TRUNCATE:
                for k in [k for k in keys if k[0] == table]:
                    del keys[k]
            elif item.op is Op.DELETE:
                keys.pop((table, item.key), None)
            elif item.after is not None and not unchanged_columns(item.after):
                # only a row with every value in it (a split key update's new row, or
                # anything the source did not report, may still hold a placeholder)
                keys[(table, item.key)] = None
            elif item.after is not None:  # a placeholder nobody reported: repair it
                need.append((table, item.key))
        elif hasattr(item, "rows") and hasattr(item, "keys"):  # a chunk's rows (DumpRows)
            for k in item.keys:
                keys[(table, k)] = None
