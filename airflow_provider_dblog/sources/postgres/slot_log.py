"""The log half of the PostgreSQL source: the slot's stream from a checkpoint on, decoded.

One ``start`` per log start: it checks that the slot still holds the checkpoint (a slot
created since, lost, or confirmed beyond it means PositionLostError), opens a replication
connection and streams from the checkpoint's commit LSN. ``poll`` decodes what arrived
(postgres/log.py), ``acknowledge`` confirms the slot up to a commit LSN and never further,
``status`` reads the slot's lag and WAL retention. The source's catalog connection, its
slot and its partitions are shared, not owned: the source opens and closes them.
"""

from __future__ import annotations

import re
import select
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import psycopg2

from ...core import names
from ...core.batch import LogRows
from ...core.errors import DBLogError, PositionLostError
from ...core.events import Key, LogItem, Position
from .catalog import quote_ident
from .errors import ErrorContext, translate
from .log import LogDecoder, commit_lsn_of, format_lsn, parse_lsn
from .partitions import Partitions
from .pq_stream import ReplicationStream
from .slot import ReplicationSlot

# Seconds between status updates to the walsender while nothing is acknowledged (keeps it
# from ending the connection after wal_sender_timeout).
STATUS_INTERVAL = 10


@dataclass
class SlotLogParts:
    """What the log shares with the rest of the source. ``connect``: a new replication
    connection; ``cur``: a cursor of the catalog connection; ``decoder(texts)``: a decoder
    for one log start; ``tables()``: the captured tables (wal2json's filter);
    ``error_context()``: what postgres/errors.py needs to name the setting to fix."""

    plugin: str
    publication: str
    watermark_table: str
    slot: ReplicationSlot
    partitions: Partitions
    connect: Callable[[], Any]
    cur: Callable[[], Any]
    decoder: Callable[[bool], LogDecoder]
    tables: Callable[[], list[str]]
    error_context: Callable[[], ErrorContext]


class SlotLog:
    def __init__(self, parts: SlotLogParts):
        self._p = parts
        self.slot_name = parts.slot.name
        self._conn: Any = None  # the replication connection
        self._cursor: Any = None
        self._stream: Optional[ReplicationStream] = None
        self._reset(False)

    def _reset(self, texts: bool) -> None:
        self._decoder = self._p.decoder(texts)
        self._deferred_error: Optional[BaseException] = None
        self._acked = 0

    def reset(self) -> None:
        """A new slot at the current end of the WAL, in place of a dropped one or one whose
        WAL is lost (an inactive slot: a running reader's is not ours to drop)."""
        self.close()
        slot = self._p.slot.row()
        if slot is not None and slot["wal_status"] == "lost" and not slot["active"]:
            self._p.slot.drop()
            slot = None
        if slot is None:
            self._p.slot.create()

    def start(self, after: Optional[Position], from_end: bool, texts: bool) -> None:
        # No floor needed: LSNs only grow, on a promoted standby too.
        self.close()
        self._reset(texts)
        start = commit_lsn_of(after) if after is not None else 0
        slot_ = self._p.slot
        slot = slot_.row()
        if slot is not None:
            slot = slot_.check_free(slot)
        if after is not None:
            self._check_holds(slot, after, start)
        if slot is None:
            raise PositionLostError(f"replication slot {self.slot_name} was dropped after the source opened.")
        if after is None and from_end and not slot_.created:
            # --reset-position: start from the end of the log, not from wherever the slot
            # stopped. Without it the slot's own position is the safe start (a reconnect
            # before the first checkpoint must not skip what the slot still holds).
            with self._p.cur() as cur:
                cur.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (self.slot_name,))
        self._conn = self._p.connect()
        self._cursor = self._conn.cursor()
        try:
            self._cursor.start_replication(
                slot_name=self.slot_name,
                decode=False,
                start_lsn=start,
                options=self._plugin_options(),
                status_interval=STATUS_INTERVAL,
            )
        except psycopg2.Error as exc:
            raise translate(exc, self._p.error_context()) from None
        self._stream = ReplicationStream(self._conn, self._cursor, STATUS_INTERVAL)
        self._acked = start
        # From now on the slot holds every position this process hands out.
        slot_.created = False

    def _check_holds(self, slot: Optional[dict], after: Position, start: int) -> None:
        """PositionLostError unless the slot still sends the log after ``after``."""
        if slot is None or self._p.slot.created:
            raise PositionLostError(
                f"replication slot {self.slot_name} did not exist when the capture started, "
                f"so the log after position {after} is gone (the slot was dropped or lost)."
            )
        if slot["wal_status"] == "lost":
            raise PositionLostError(
                f"replication slot {self.slot_name} lost its WAL (wal_status 'lost', e.g. "
                "max_slot_wal_keep_size was exceeded)."
            )
        confirmed = parse_lsn(slot["confirmed_flush"]) if slot["confirmed_flush"] else 0
        if confirmed > start:
            raise PositionLostError(
                f"replication slot {self.slot_name} is confirmed up to {slot['confirmed_flush']}, "
                f"beyond the checkpoint's commit LSN {format_lsn(start)}: the server no longer "
                "sends the transactions in between."
            )

    def _plugin_options(self) -> dict[str, str]:
        if self._p.plugin == "pgoutput":
            return {"proto_version": "1", "publication_names": quote_ident(self._p.publication)}
        options = {
            "format-version": "2",
            "include-xids": "1",
            "include-timestamp": "1",
            "include-lsn": "1",
            "include-types": "1",
            "include-typmod": "1",
            "include-type-oids": "1",
            "include-transaction": "1",
        }
        if not self._p.partitions.roots:
            # wal2json names a partition, not its table, and a filter of names cannot follow
            # partitions created later: with a partitioned table it decodes every table.
            options["add-tables"] = wal2json_table_filter(self._p.tables() + [self._p.watermark_table])
        return options

    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        if self._stream is None:
            raise RuntimeError("poll() before start_log()")
        if self._deferred_error is not None:
            raise self._deferred_error
        if self._p.partitions.roots:
            self._p.partitions.step()
        decoder = self._decoder
        pending = decoder.pending
        pgoutput = self._p.plugin == "pgoutput"
        deadline = time.monotonic() + timeout
        while len(pending) + decoder.block_extra < max_items:
            payloads, failure = self._stream.read(max_items - len(pending) - decoder.block_extra)
            try:
                if pgoutput:
                    decoder.pgoutput_many(payloads)
                    if decoder.markers:  # read-only watermarks the server's decoding passed
                        decoder.markers_passed(self._stream.wal_end)
                else:
                    for payload in payloads:
                        decoder.wal2json(payload)
            except DBLogError as exc:
                failure = exc
            if failure is not None:
                err = translate(failure, self._p.error_context()) if isinstance(failure, psycopg2.Error) else failure
                if not pending:
                    raise err from None
                # Hand out what came before the failure first, so the checkpoint gets there.
                self._deferred_error = err
                break
            if not payloads:
                if pending:
                    break  # drain what is there, never wait once something is found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                select.select([self._cursor], [], [], remaining)
        out: list[LogItem | LogRows] = []
        n = 0  # changes handed out: a block (LogRows) counts as its changes
        while pending and n < max_items:
            item = pending.popleft()
            out.append(item)
            if item.__class__ is LogRows:
                n += len(item)
                decoder.block_extra -= len(item) - 1
            else:
                n += 1
        return out

    def add_marker(self, uuid: str, lsn: int) -> None:
        """A read-only watermark at WAL position ``lsn`` (postgres/log_markers.py)."""
        self._decoder.markers.add(uuid, lsn)

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        """(table, key, position) of the changes decoded since the last call whose ``after``
        still holds an unchanged-TOAST placeholder (a table without REPLICA IDENTITY FULL);
        the engine queues a key-list dump for them (core/toast.py). Also the keys of
        partitions that joined or left a captured partitioned table, whose rows came or went
        without a row change in the log (postgres/partitions.py)."""
        decoder, partitions = self._decoder, self._p.partitions
        hits = decoder.unchanged_toast
        decoder.unchanged_toast = []
        for partition, root, position in decoder.partial_truncates:
            partitions.partial_truncate(partition, root, position)
        decoder.partial_truncates = []
        return hits + partitions.take_hits()

    def acknowledge(self, position: Position) -> None:
        lsn = commit_lsn_of(position)
        if lsn <= self._acked:
            return
        self._acked = lsn
        if self._stream is not None:
            # The commit LSN, not beyond: a restart from this position needs that
            # transaction again ("Restarts" in postgres/source.py).
            self._stream.feedback(lsn)

    def status(self) -> dict:
        """Lag (WAL bytes not yet read), retained WAL, and a warning when the slot's WAL is at
        risk; PositionLostError when the slot is gone or lost its WAL (checked every status
        report, so a capture notices even while it has nothing to read)."""
        with self._p.cur() as cur:
            cur.execute(
                "SELECT pg_current_wal_lsn()::text, s.slot_name IS NOT NULL, s.confirmed_flush_lsn::text, "
                "pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn)::bigint, s.wal_status, "
                "s.safe_wal_size, (SELECT setting::bigint * CASE unit WHEN 'MB' THEN 1048576 "
                "WHEN 'kB' THEN 1024 ELSE 1 END FROM pg_settings WHERE name = 'max_slot_wal_keep_size') "
                "FROM (SELECT 1) x LEFT JOIN pg_replication_slots s ON s.slot_name = %s",
                (self.slot_name,),
            )
            server, exists, confirmed, retained, wal_status, safe, keep = cur.fetchone()
        if not exists:
            raise PositionLostError(
                f"replication slot {self.slot_name} was dropped while the capture ran: the log "
                "from the checkpoint on is gone."
            )
        if wal_status == "lost":
            raise PositionLostError(
                f"replication slot {self.slot_name} was invalidated (wal_status 'lost'): the server "
                "removed WAL it still needed (max_slot_wal_keep_size exceeded)."
            )
        stream = self._stream
        # Before anything was read, reading starts where the slot is confirmed.
        read = max(
            stream.data_start if stream is not None else 0,
            stream.wal_end if stream is not None else 0,
            self._acked,
            parse_lsn(confirmed) if confirmed else 0,
        )
        warning = retention_warning(self.slot_name, wal_status, safe, keep)
        partitions = self._p.partitions
        return {
            "server_lsn": server,
            "read_lsn": format_lsn(read),
            "lag_bytes": max(0, parse_lsn(server) - read) if read else None,
            "slot": self.slot_name,
            "slot_confirmed_flush": confirmed,
            "retained_bytes": retained,
            "wal_status": wal_status,
            "safe_wal_size": safe,
            "max_slot_wal_keep_size": keep,
            "acknowledged": format_lsn(self._acked),
            "partitions": {t: len(ls) for t, ls in (partitions.leaves or {}).items()},
            "warnings": ([warning] if warning else []) + list(partitions.warnings),
        }

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
        self._conn = self._cursor = self._stream = None


def wal2json_table_filter(tables: Sequence[str]) -> str:
    """wal2json's add-tables list: schema.table, special characters escaped with '\\'."""

    def esc(part: str) -> str:
        return re.sub(r"([\\ ',.*])", r"\\\1", part)

    return ",".join(f"{esc(s)}.{esc(t)}" for s, t in map(names.split_table, tables))


def retention_warning(
    slot: str, wal_status: Optional[str], safe_wal_size: Optional[int], max_keep: Optional[int]
) -> Optional[str]:
    """A warning while the slot's WAL is at risk of removal, before it is lost: wal_status
    'extended' (beyond max_wal_size) or 'unreserved' (next checkpoint may remove it), or less
    than 20% of max_slot_wal_keep_size left (safe_wal_size)."""
    if wal_status in ("extended", "unreserved"):
        return (
            f"log retention at risk: replication slot {slot} has wal_status '{wal_status}' "
            f"(safe_wal_size {safe_wal_size} bytes); the capture must catch up or the slot is "
            "invalidated (raise max_slot_wal_keep_size, or speed up the output)."
        )
    if max_keep is not None and max_keep > 0 and safe_wal_size is not None and safe_wal_size < 0.2 * max_keep:
        return (
            f"log retention at risk: replication slot {slot} has {safe_wal_size} bytes of WAL left "
            f"before max_slot_wal_keep_size ({max_keep} bytes) invalidates it."
        )
    return None
