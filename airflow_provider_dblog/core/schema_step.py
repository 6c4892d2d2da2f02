"""The engine's schemas: each captured table's current shape, the periodic comparison with
the catalog, the split of a primary-key update by the table's key, and the reset of a table
whose primary key changed.

The log, the catalog and the chunks' reads all learn shapes; this step keeps the one
``schemas`` map they update, hands each new shape to the writer (which registers it with the
output), queues a re-dump of a changed table (core/schema_watch.py) and, when a table's key
changed, clears its older rows with a TRUNCATE at a watermark of its own (``reset``) before
dumping it again under the new key (``reset_durable``). It exists so that the engine's loop
only calls ``check`` and passes the reset's events on.
"""

from __future__ import annotations

import logging
import uuid
from typing import Optional

from .errors import DBLogError, SourceUnavailable
from .events import ChangeEvent, Op, Origin, TableSchema, WatermarkEvent, split_key_update
from .markers import TableReset
from .protocols import CatalogFingerprints, CatalogSchemas, Source
from .scheduler import DumpScheduler
from .schema_watch import SchemaWatch, describe
from .watermark import WatermarkWindow
from .writer import Writer

log = logging.getLogger(__name__)

# With catalog fingerprints, every this many checks still reads every table's catalog: a
# change the fingerprint does not see is found within this many intervals all the same.
FULL_CHECK_EVERY = 6


class SchemaStep:
    def __init__(self, source: Source, watch: SchemaWatch, window: WatermarkWindow, scheduler: DumpScheduler):
        self.source = source
        self.source_id = source.source_id
        self.watch = watch
        self.window = window
        self.scheduler = scheduler
        self.schemas: dict[str, TableSchema] = {}
        self._unreadable: dict[str, str] = {}  # table -> why its catalog schema cannot be read
        self._resets: dict[str, TableSchema] = {}  # watermark uuid -> new schema (key changed)
        self._resetting: set[str] = set()  # tables whose reset is not durable yet
        self._prints: dict[str, str] = {}  # table -> its catalog fingerprint when last read
        self._checks = 0

    def schema(self, table: str, writer: Writer) -> TableSchema:
        """The table's schema, read from the source (and handed to the writer, which registers
        it with the output) on first use; RequestError for an unknown table."""
        schema = self.schemas.get(table)
        if schema is None:
            schema = self.schemas[table] = self.source.table_schema(table)
            writer.put(schema)
        return schema

    def logged(self, schema: TableSchema) -> None:
        """A shape the log gave (the writer gets it with the log's items): maybe an ALTER
        TABLE, so the catalog is compared soon."""
        self.schemas[schema.table] = schema
        self.watch.soon()

    def split(self, ev: ChangeEvent) -> list[ChangeEvent]:
        """A primary-key update is a delete of the old key and an upsert of the new one. (A
        ``before`` as JSON text is from a source that found the key unchanged: ``start_log``.)"""
        if ev.before is not None and not isinstance(ev.before, str):
            schema = self.schemas.get(ev.table)
            if schema is not None and all(c in ev.before for c in schema.key):
                old = schema.key_of(ev.before)
                if old != ev.key:
                    return split_key_update(ev, old)
        return [ev]

    def check(self, writer: Writer) -> None:
        """Compare each captured table's catalog schema with the recorded one; a changed table
        is dumped again (core/schema_watch.py). Chunks select the catalog's columns from here
        on. Not while a chunk is in flight (its rows are in the shape it selected)."""
        if self.window.busy or not self.watch.due():
            return
        queued = False
        tables = self.source.tables()
        prints = self._fingerprints(tables)
        # its catalog did not move since it was last read
        unmoved = {t for t in tables if prints is not None and t in prints and self._prints.get(t) == prints[t]}
        to_read = [t for t in tables if t not in unmoved]
        read = self.source.catalog_schemas(to_read) if isinstance(self.source, CatalogSchemas) and to_read else {}
        for table in to_read:
            try:
                found = read[table] if table in read else self.source.catalog_schema(table)
                if isinstance(found, DBLogError):
                    raise found
                schema = found
            except SourceUnavailable:
                raise
            except DBLogError as exc:  # dropped, or no key any more: its dumps say why
                if self._unreadable.get(table) != str(exc):
                    log.warning("capture of %s: cannot read the schema of %s: %s", self.source_id, table, exc)
                self._unreadable[table] = str(exc)
                continue
            self._unreadable.pop(table, None)
            if prints is not None and table in prints:
                self._prints[table] = prints[table]
            known = self.schemas.get(table)
            if known is None or known.schema_id() != schema.schema_id():
                self.schemas[table] = schema
                writer.put(schema)
            old = self.watch.changed(schema)
            if old is None or table in self._resetting:
                continue
            if old.key != schema.key:
                # Old and new events name rows by different keys: clear the table's older rows
                # with a TRUNCATE at a position of our own (a watermark); the re-dump follows
                # once it is durable (markers.TableReset).
                reset = uuid.uuid4().hex
                self._resets[reset] = schema
                self._resetting.add(table)
                self.source.write_watermark(reset)
                log.warning(
                    "capture of %s: the primary key of %s changed (%s): its older rows are cleared "
                    "(op t) and the table is dumped again under the new key",
                    self.source_id,
                    table,
                    describe(old, schema),
                )
            else:
                self.watch.redump(schema, old)
                queued = True
        self.watch.checked()
        if queued:
            self.scheduler.wake()

    def _fingerprints(self, tables: list[str]) -> Optional[dict[str, str]]:
        """The tables' catalog fingerprints, or None: read every table (a source without
        them, and every FULL_CHECK_EVERY-th check)."""
        self._checks += 1
        if not isinstance(self.source, CatalogFingerprints) or self._checks % FULL_CHECK_EVERY == 0:
            return None
        return self.source.catalog_fingerprints(tables)

    def reset(self, wm: WatermarkEvent) -> Optional[tuple[ChangeEvent, TableReset]]:
        """For the watermark of a primary-key change: the TRUNCATE at its position (for the
        window) and the marker that queues the re-dump once it is durable; None for any other
        watermark."""
        schema = self._resets.pop(wm.uuid, None)
        if schema is None:
            return None
        truncate = ChangeEvent(
            self.source_id,
            schema.table,
            Op.TRUNCATE,
            (),
            None,
            None,
            wm.position,
            None,
            wm.txid,
            Origin.LOG,
            None,
            schema.schema_id(),
        )
        return truncate, TableReset(schema)

    def reset_durable(self, schema: TableSchema) -> None:
        """The TRUNCATE of a reset is durable: dump the table again under its new key."""
        self.watch.redump(schema, None)
        self._resetting.discard(schema.table)
        self.scheduler.wake()
