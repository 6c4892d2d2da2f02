"""Schema changes of captured tables (issue 11): notice them, and re-dump the table.

The log does not say what an ALTER TABLE did to rows nobody touched afterwards: an added
column's default (volatile ones included) is in every row without a row event, a type change
may rewrite values, a renamed or dropped column leaves old row images behind. So a changed
table is dumped again through the ordinary watermark path: its chunks are selected after the
change, in the new shape, at positions after it, and replace every row's older image (rows
deleted meanwhile go too: range repair). docs/design.md "Schema changes" says why this and
not a schema event that replay would have to interpret.

A change is noticed by comparing the catalog's schema with the last one recorded in the
state store (so a change made while the capture was down is noticed at its next start): on
a timer, at once when the log announces a new shape of a captured table, and when a chunk
SELECT names a column that is gone. The re-dump is requested before the new shape is
recorded, so a crash in between requests it again rather than never.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Callable, Optional

from .dumps import DumpControl, DumpSpec
from .events import TableSchema
from .protocols import StateStore

log = logging.getLogger(__name__)


def schema_key(source_id: str, table: str) -> str:
    """The state-store key under which the last seen catalog schema of a table is kept."""
    return f"schemas/{source_id}/{table}"


def describe(old: TableSchema, new: TableSchema) -> str:
    """What changed, for logs and the dump's reason: added, dropped and retyped columns."""
    was = {c.name: c.type for c in old.columns}
    now = {c.name: c.type for c in new.columns}
    parts = [f"added {n} {t}" for n, t in now.items() if n not in was]
    parts += [f"dropped {n}" for n in was if n not in now]
    parts += [f"{n} {was[n]} -> {t}" for n, t in now.items() if n in was and was[n] != t]
    if old.key != new.key:
        parts.append(f"key ({', '.join(old.key)}) -> ({', '.join(new.key)})")
    return "; ".join(parts) or "column order or nullability"


class SchemaWatch:
    """Compares catalog schemas with the recorded ones and requests re-dumps."""

    def __init__(
        self,
        state: StateStore,
        source_id: str,
        interval: float,
        chunk_size: int = 1_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.state = state
        self.source_id = source_id
        self.interval = interval
        self.chunk_size = chunk_size
        self._clock = clock
        self._next = 0.0  # check at the first chance
        self.checked_at: Optional[float] = None  # wall time of the last complete check

    def soon(self) -> None:
        """Check at the next chance (the log announced a new shape; a SELECT failed on one)."""
        self._next = 0.0

    def due(self) -> bool:
        return self.interval > 0 and self._clock() >= self._next

    def checked(self) -> None:
        self._next = self._clock() + self.interval
        self.checked_at = time.time()

    def changed(self, schema: TableSchema) -> Optional[TableSchema]:
        """The recorded schema of the table if the catalog's ``schema`` differs from it, else
        None. The first sight of a table is recorded at once, without a dump (its initial
        dump is the user's request)."""
        text = self.state.get_value(schema_key(self.source_id, schema.table))
        old: Optional[TableSchema] = None
        if text is not None:
            try:
                old = TableSchema.from_json(json.loads(text)["schema"])
            except (ValueError, KeyError, TypeError):
                old = None  # unreadable: record the current one, as at first sight
        if old is None:
            self._record(schema)
            return None
        return None if old.schema_id() == schema.schema_id() else old

    def redump(self, schema: TableSchema, old: Optional[TableSchema]) -> DumpSpec:
        """Request a dump of the changed table, then record its new schema (a crash in
        between requests it again rather than never)."""
        spec = DumpSpec.new(self.source_id, [schema.table], repair=True)  # before backfills
        self.state.add_dump(spec, DumpControl(chunk_size=self.chunk_size))
        log.warning(
            "capture of %s: the schema of %s changed (%s): dump %s re-reads the table in its new shape",
            self.source_id,
            schema.table,
            describe(old, schema) if old is not None else "its primary key",
            spec.dump_id,
        )
        self._record(schema)
        return spec

    def _record(self, schema: TableSchema) -> None:
        key = schema_key(self.source_id, schema.table)
        self.state.put_value(key, json.dumps({"schema": schema.to_json(), "at": time.time()}))
