"""Replay a changelog and compare it with the source table (the convergence oracle).

Replay rule (the changelog's public contract): per key, the event with the highest position
wins; a delete removes the key; a TRUNCATE removes every row of its table with a smaller
position. Dump rows and log rows are treated alike. A column holding the unchanged-TOAST
placeholder keeps the key's previous value of that column (core/toast.py). A dump chunk's
range event (op k) removes every key in its range whose last event is older than its
``since`` position (a row deleted while nothing was captured).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

from .events import ChangeEvent, Key, Op, Position, Row, TableSchema
from .protocols import OwnRowForm
from .row_text import as_row
from .toast import ToastHistory


def replay(events: Iterable[ChangeEvent]) -> dict[Key, Row]:
    """The rows of one table after ``events`` (any order). A TRUNCATE (op t) removes every
    row whose last event is older than it; later events apply as usual."""
    latest: dict[Key, tuple[Position, Optional[Row]]] = {}
    truncated: Optional[Position] = None  # the table's latest TRUNCATE
    covered = Covered()  # dump chunks' statements (op k): what they remove
    toast = ToastHistory()  # what an unchanged-TOAST placeholder is filled from
    for e in events:
        if e.op is Op.TRUNCATE:
            truncated = e.position if truncated is None else max(truncated, e.position)
            continue
        if e.op is Op.RANGE:
            covered.add(e)
            continue
        toast.add(e)
        cur = latest.get(e.key)
        if cur is None or e.position > cur[0]:
            latest[e.key] = (e.position, None if e.op is Op.DELETE else as_row(e.after))
    return {
        k: toast.fill(k, row, p, truncated)
        for k, (p, row) in latest.items()
        if row is not None and (truncated is None or p > truncated) and not covered.removes(k, p)
    }


class Covered:
    """Dump chunks' range events (op k): a key range (from exclusive, to inclusive; None: no
    bound) or a list of keys, each with a ``since`` position. A key covered by one of them
    whose last event is older than its ``since`` was deleted while nothing was captured."""

    def __init__(self) -> None:
        self.ranges: list[tuple[Optional[Key], Optional[Key], Position]] = []
        self.keys: dict[Key, Position] = {}  # listed key -> greatest since
        self.latest: Optional[Position] = None  # the greatest range since: keys newer are safe

    def add(self, event: ChangeEvent) -> None:
        body = as_row(event.after) or {}
        since = Position.parse(body["since"])
        if "keys" in body:
            for k in body["keys"]:
                key = tuple(k)
                self.keys[key] = max(since, self.keys.get(key, since))
            return
        low, high = body.get("from"), body.get("to")
        self.latest = since if self.latest is None else max(self.latest, since)
        self.ranges.append((tuple(low) if low is not None else None, tuple(high) if high is not None else None, since))

    def removes(self, key: Key, last: Position) -> bool:
        """Whether ``key``, whose last event is at ``last``, is gone."""
        listed = self.keys.get(key)
        if listed is not None and last < listed:
            return True
        if self.latest is None or last >= self.latest:  # most keys: dumped after every range
            return False
        return any(
            last < since and (low is None or key > low) and (high is None or key <= high)
            for low, high, since in self.ranges
        )


# Mismatches of a mirror no dump can set right: rows a landing wrote twice, versions it overlapped.
LANDING_FAULTS = ("duplicate", "overlap")


@dataclasses.dataclass
class Mismatch:
    key: Key
    # "missing" (in source, not in changelog), "extra", "different", "duplicate" (mirror only),
    # "overlap" (history mirror only)
    kind: str
    source: Optional[Row]
    changelog: Optional[Row]

    def describe(self) -> str:
        if self.kind == "different":
            cols = sorted(
                c
                for c in set(self.source or {}) | set(self.changelog or {})
                if (self.source or {}).get(c) != (self.changelog or {}).get(c)
            )
            src, out = self.source or {}, self.changelog or {}
            diffs = ", ".join(f"{c}: source={src.get(c)!r} changelog={out.get(c)!r}" for c in cols)
            return f"key {list(self.key)}: different ({diffs})"
        if self.kind == "duplicate":
            return (
                f"key {list(self.key)}: more than one row in the mirror (a landing fault that a repair "
                "dump cannot undo: land the table into a new mirror, docs/landing.md)"
            )
        if self.kind == "overlap":
            return (
                f"key {list(self.key)}: versions in the history mirror overlap (a landing fault that a "
                "repair dump cannot undo: rebuild the history mirror, docs/landing.md)"
            )
        return f"key {list(self.key)}: {self.kind} " + (
            "in the changelog" if self.kind == "missing" else "(deleted in the source)"
        )


def compare(source_rows: dict[Key, Row], mirror: dict[Key, Row]) -> list[Mismatch]:
    out: list[Mismatch] = []
    for k, row in source_rows.items():
        other = mirror.get(k)
        if other is None:
            out.append(Mismatch(k, "missing", row, None))
        elif other != row:
            out.append(Mismatch(k, "different", row, other))
    for k, row in mirror.items():
        if k not in source_rows:
            out.append(Mismatch(k, "extra", None, row))
    out.sort(key=lambda m: repr(m.key))
    return out


@dataclasses.dataclass
class TableCheck:
    """One table of ``dblog verify``: its rows in the source and in the replay, and how they differ."""

    table: str
    source_rows: int
    replay_rows: int
    mismatches: list[Mismatch]


def read_all(source: Any, schema: TableSchema, chunk: int = 50_000) -> dict[Key, Row]:
    """Every row of the table by key, read in keyset chunks (canonical values)."""
    rows: dict[Key, Row] = {}
    after = None
    while True:
        got = source.select_chunk(schema, after, chunk).rows
        for r in got:
            rows[schema.key_of(r)] = r
        if len(got) < chunk:
            return rows
        after = schema.key_of(got[-1])


def source_form(output: Any, schema: TableSchema) -> Optional[Callable[[dict[Key, Row]], dict[Key, Row]]]:
    """The output's own form of a table's rows (protocols.OwnRowForm), or None: canonical."""
    return output.source_form(schema) if isinstance(output, OwnRowForm) else None


def check_table(source: Any, output: Any, table: str) -> TableCheck:
    """The source table against the replay of its changelog (both already open), in the
    output's form of the rows where it has one of its own (``source_form``)."""
    schema = source.table_schema(table)
    rows = read_all(source, schema)
    form = source_form(output, schema)
    if form is not None:
        rows = form(rows)
    mirror = replay(output.scan(source.source_id, table))
    return TableCheck(table, len(rows), len(mirror), compare(rows, mirror))
