"""The log half of the MySQL / MariaDB source: the binlog from a checkpoint on, read by a
BinlogReader thread (mysql/log.py) into a bounded queue.

``start`` finds where to read from: the checkpoint's transaction by its binlog file and
offset, or by its GTID (mysql/gtid_resume.py) on this server or a promoted replica; before
that, it ends the binlog connections of a previous leader (``take_over``). ``poll`` hands out
what the reader queued, ``acknowledge`` keeps the acknowledged position and its commit time
(nothing is confirmed to a MySQL server: the checkpoint lives in DBLog's state store), and
``status`` measures the lag and warns before the binlog holding the checkpoint expires.
"""

from __future__ import annotations

import collections
import logging
import queue
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pymysql

from ...core.batch import LogRows
from ...core.errors import ConfigurationError, PositionLostError
from ...core.events import LogItem, Position, TableSchema
from . import catalog
from .catalog import ConnectionSettings, Session
from .gtid import History, decode_gtid_coord, era_after, is_gtid_coord
from .gtid_resume import history_at, resume_point, server_history
from .log import BinlogReader, ChangeQueue, Failure, decode_coord, encode_coord, file_number
from .log_markers import READ_ONLY_HEARTBEAT, BinlogMarkers
from .reader_claim import ReaderClaim

log = logging.getLogger(__name__)


@dataclass
class BinlogLogParts:
    """What the log shares with the rest of the source. ``settings()``: the connection settings
    of the writable server (a failover changes them at open); ``session()``: the source's
    catalog session; ``tables()``: the captured tables; ``mariadb()``: whether the server is
    MariaDB; ``schema_for(table, columns)``: a table's schema for the reader thread."""

    source_id: str
    server_id: int
    use_gtid: bool
    watermark_db: str
    watermark_table: str
    queue_size: int
    settings: Callable[[], ConnectionSettings]
    session: Callable[[], Session]
    tables: Callable[[], list[str]]
    mariadb: Callable[[], bool]
    schema_for: Callable[[str, list], TableSchema]
    read_only: bool = False  # watermarks = "log": binlog positions (mysql/log_markers.py)


def expire_seconds(variables: dict) -> float:
    """Binlog retention in seconds (MySQL 8 / MariaDB 10.6: binlog_expire_logs_seconds, older:
    expire_logs_days); 0 when binlogs never expire."""
    secs = float(variables.get("binlog_expire_logs_seconds") or 0)
    return secs if secs > 0 else float(variables.get("expire_logs_days") or 0) * 86400


def binlog_expiry_warning(
    checkpoint_file: int,
    current_file: int,
    checkpoint_ts: float,
    now: float,
    expire_seconds: float,
    margin: float = 0.2,
) -> Optional[str]:
    """A warning when the binlog file holding the checkpoint may expire within ``margin`` of
    the retention. The server purges a file once its last write is older than the retention;
    that last write is at or after the checkpoint's commit time, so counting from the commit
    time warns early, never late. The file being written is never purged."""
    if expire_seconds <= 0 or checkpoint_file >= current_file:
        return None
    left = checkpoint_ts + expire_seconds - now
    if left >= margin * expire_seconds:
        return None
    return (
        f"log retention at risk: the checkpoint is in binlog file number {checkpoint_file}, "
        f"which may be purged in {max(0, int(left))} s (binlog_expire_logs_seconds "
        f"{int(expire_seconds)}); the capture must catch up, or raise the retention."
    )


class BinlogLog:
    def __init__(self, parts: BinlogLogParts):
        self._p = parts
        self.reader: Optional[BinlogReader] = None
        self.session: Optional[Session] = None  # the reader thread's catalog reads (schema_for)
        self._bookmark: Optional[tuple[str, int]] = None  # where the log was first read from
        # Set by take_over: the lease check before every binlog connection, and the binlog
        # connections a previous leader reported, to end before reading the log ourselves.
        self._lease_check: Optional[Callable[[], None]] = None
        self._previous_readers: list[int] = []
        self._claim: Optional[ReaderClaim] = None  # set by take_over with a lease domain
        self._queue: "queue.Queue[Any]" = ChangeQueue(maxsize=parts.queue_size)
        self._pending: collections.deque = collections.deque()
        self._failure: Optional[BaseException] = None
        self.acknowledged: Optional[Position] = None
        self.acknowledged_ts: Optional[float] = None  # commit time of the acknowledged event
        # (last position, commit time) of each handed-out batch, for acknowledged_ts
        self._handed: collections.deque = collections.deque(maxlen=100_000)
        # Read-only watermarks waiting for the reader (a new reader starts without them: the
        # engine abandons its window then, as with a restarted stream of table watermarks).
        self.markers: Optional[BinlogMarkers] = BinlogMarkers(encode_coord) if parts.read_only else None

    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        self._lease_check = check
        self._previous_readers = [int(i) for i in (previous or {}).get("reader_connections") or ()]
        if domain is not None:  # the reader's named locks tell our domain's from another's
            self._claim = ReaderClaim(self._p.source_id, domain, check)

    def _end_previous_readers(self, session: Session) -> None:
        """End the binlog dump threads of the previous leader (paused, cut off or killed): the
        server refuses our reader (error 4052, same server_id) while they live, which without
        this lasts until its net_write_timeout notices a dead or stalled client. First claim
        the reader: a reader of another lease domain is refused, not ended (mysql_reader_claim)."""
        if self._claim is not None:
            self._claim.take(self._p.settings(), session)
        ids, self._previous_readers = self._previous_readers, []
        for cid in ids:
            rows = session.query("SELECT COMMAND, USER FROM information_schema.PROCESSLIST WHERE ID = %s", [cid])
            if not rows or rows[0][0] != "Binlog Dump" or rows[0][1] != self._p.settings().user:
                continue  # gone already, or no longer a binlog reader of ours
            try:
                session.run(f"KILL CONNECTION {cid}")
                log.warning("ended binlog connection %d of the previous leader of %s", cid, self._p.source_id)
            except pymysql.err.MySQLError as exc:  # 1094 unknown thread: it ended by itself meanwhile
                log.info("binlog connection %d of the previous leader: %s", cid, exc)

    def start(self, after: Optional[Position], from_end: bool, floor: Optional[Position], texts: bool) -> None:
        session = self._p.session()
        self.stop()
        if self._previous_readers or self._claim is not None:
            self._end_previous_readers(session)
        history: Optional[History] = None
        era = 0
        if after is None:
            if self._bookmark is not None and not from_end:
                # Started before but no event reached a checkpoint (e.g. the connection dropped
                # at once): read again from where we first started, not from the end.
                file, pos = self._bookmark
            else:
                file, pos, _, _ = catalog.master_status(session)
                self._bookmark = (file, pos)
        elif is_gtid_coord(after.coord):
            file, pos, history = self._gtid_resume_point(after)
            era = decode_gtid_coord(after.coord).era
            self._check_changelog_end(after, floor)
        else:
            file, pos = self._resume_point(after)
        if self._p.use_gtid and history is None:
            history = history_at(session, file, pos, self._p.mariadb())
            if after is None:  # a new start: above whatever the changelog holds already
                era = era_after(floor.coord if floor is not None else None, history.counter())
        self._queue = ChangeQueue(maxsize=self._p.queue_size)
        self._pending.clear()
        if self.markers is not None:
            self.markers = BinlogMarkers(encode_coord)
        self._failure = None
        self.session = Session(self._p.settings())
        captured = set(self._p.tables())
        self.reader = BinlogReader(
            settings=self._p.settings(),
            server_id=self._p.server_id,
            log_file=file,
            log_pos=pos,
            schemas=sorted({t.split(".", 1)[0] for t in captured} | {self._p.watermark_db}),
            source_id=self._p.source_id,
            captured=captured,
            watermark_table=self._p.watermark_table,
            schema_for=self._p.schema_for,
            out=self._queue,
            guard=self._lease_check,
            history=history,
            era=era,
            texts=texts,
            markers=self.markers,
            # read-only watermarks: an idle server's position often (mysql/log_markers.py)
            **({"heartbeat": READ_ONLY_HEARTBEAT} if self.markers is not None else {}),
        )
        self.reader.start()

    def _gtid_resume_point(self, after: Position) -> tuple[str, int, History]:
        """(file, offset, GTID history before it) of the transaction holding ``after``, found by
        its GTID: on this server or on a promoted replica alike."""
        if not self._p.use_gtid:
            raise ConfigurationError(
                f"the checkpoint {after} is a GTID position, but use_gtid is off for source {self._p.source_id}.",
                "set use_gtid = true for this source (GTID positions cannot go back to file positions).",
            )
        at = decode_gtid_coord(after.coord)
        return resume_point(self._p.session(), at.gtid, at.counter, self._p.mariadb())

    def _check_changelog_end(self, after: Position, floor: Optional[Position]) -> None:
        """The changelog may already hold transactions after the checkpoint ``after`` (a
        crash between the output's commit and the checkpoint write). The engine skips the
        log up to ``floor``, its last position, as already written: that is only right if
        this server's history holds those same transactions. On a promoted replica that
        never received them, the server's own new transactions would take their counters
        and be skipped, while the lost ones stay in the changelog: PositionLostError, as for
        the checkpoint's own transaction."""
        if floor is None or floor <= after or not is_gtid_coord(floor.coord):
            return
        top = decode_gtid_coord(floor.coord)
        if top.gtid == decode_gtid_coord(after.coord).gtid:
            return  # the same transaction: looked up already
        # Its counter is the size of the history up to it, so finding it there with the same
        # counter means every transaction in between is the same too.
        resume_point(self._p.session(), top.gtid, top.counter, self._p.mariadb(), "the changelog's last")

    def _resume_point(self, after: Position) -> tuple[str, int]:
        """(file, offset) of the transaction holding ``after``: the whole transaction is
        sent again (with its table maps) and the engine drops what it already has."""
        try:
            number, txn_start, _, _ = decode_coord(after.coord)
        except ValueError:
            raise ConfigurationError(
                f"the checkpoint {after} is not a MySQL binlog position (another source's?).",
                "reset the checkpoint of this source (`dblog capture --reset-position`) and run a full dump.",
            ) from None
        logs = catalog.binary_logs(self._p.session())
        by_number = {file_number(name): (name, size) for name, size in logs}
        if number not in by_number:
            have = f"{logs[0][0]} .. {logs[-1][0]}" if logs else "none"
            raise PositionLostError(
                f"the checkpoint {after} is in binlog file number {number}, which the server "
                f"no longer has (it holds {have}): it was purged (binlog_expire_logs_seconds / "
                "expire_logs_days / PURGE BINARY LOGS) or the binlog was reset."
            )
        name, size = by_number[number]
        if txn_start > size:
            raise PositionLostError(
                f"the checkpoint {after} points at offset {txn_start} of {name}, which is only "
                f"{size} bytes long: the binlog was reset (RESET BINARY LOGS AND GTIDS, before MySQL 8.4 "
                "RESET MASTER) or this is another server."
            )
        return name, max(4, txn_start)

    def offer_markers(self) -> None:
        """Read-only watermarks the reader has passed go into the stream at once (log.py)."""
        if self.reader is not None:
            self.reader.offer_markers()

    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        if self.reader is None:
            raise RuntimeError("start_log() must be called before poll()")
        out: list[LogItem | LogRows] = []
        n = 0  # changes in out: a block (LogRows) counts as its changes
        while n < max_items:
            if self._pending:
                item = self._pending.popleft()
                out.append(item)
                n += len(item) if item.__class__ is LogRows else 1
                continue
            if self._failure is not None:
                break
            try:
                item = self._queue.get(timeout=timeout) if not out else self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Failure):
                self._failure = item.error
            else:
                self._pending.extend(item)
                if item and getattr(item, "ts", None) is not None:
                    last = item[-1]
                    self._handed.append((last.last_position if last.__class__ is LogRows else last.position, item.ts))
        if not out and self._failure is not None:
            raise self._failure
        return out

    def acknowledge(self, position: Position) -> None:
        # Nothing to tell a MySQL server: the checkpoint lives in DBLog's state store.
        self.acknowledged = position
        while self._handed and self._handed[0][0] <= position:
            self.acknowledged_ts = self._handed.popleft()[1]

    def status(self) -> dict:
        session, settings = self._p.session(), self._p.settings()
        file, pos, _, _ = catalog.master_status(session)
        r = self.reader
        status: dict[str, Any] = {
            "server": f"{settings.host}:{settings.port}",
            "server_file": file,
            "server_pos": pos,
            "reader_file": r.file if r else None,
            # the binlog connections this reader opened: a new leader ends them (take_over)
            "reader_connections": list(r.connection_ids) if r else [],
            "reader_pos": r.pos if r else None,
            "lag_bytes": None,  # binlog bytes written but not yet read
            "acknowledged": str(self.acknowledged) if self.acknowledged else None,
            "warnings": [],
        }
        if self._p.use_gtid:
            status["server_gtid_state"] = str(server_history(session, self._p.mariadb()))
            status["reader_gtid_state"] = str(r.history) if r is not None and r.history is not None else None
        logs = catalog.binary_logs(session)
        if r is not None and r.file:
            lag = 0
            for name, size in logs:
                n = file_number(name)
                if n == file_number(r.file):
                    lag += (pos if name == file else size) - r.pos
                elif file_number(r.file) < n <= file_number(file):
                    lag += pos if name == file else size
            status["lag_bytes"] = max(0, lag)
        expire = expire_seconds(catalog.global_variables(session, ["binlog_expire_logs_seconds", "expire_logs_days"]))
        status["binlog_expire_seconds"] = expire
        acked_file = None
        if self.acknowledged is not None and not is_gtid_coord(self.acknowledged.coord):
            acked_file = decode_coord(self.acknowledged.coord)[0]
        elif self.acknowledged is not None and r is not None and r.file:
            acked_file = file_number(r.file)  # GTID positions name no file: the reader's (at or after it)
        if acked_file is not None and self.acknowledged_ts is not None:
            warning = binlog_expiry_warning(acked_file, file_number(file), self.acknowledged_ts, time.time(), expire)
            if warning:
                status["warnings"].append(warning)
        return status

    def stop(self) -> None:
        if self.reader is not None:
            self.reader.stop()
            self.reader = None
        if self.session is not None:
            self.session.close()
            self.session = None

    def close(self) -> None:
        self.stop()
        if self._claim is not None:
            self._claim.close()
