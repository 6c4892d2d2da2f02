"""MySQL / MariaDB source: binlog capture, watermark writes and chunk SELECTs (DBLog paper).

The log is read by mysql-replication in a background thread (sources/mysql/log.py); chunk
SELECTs, watermark writes and catalog reads go through a plain PyMySQL connection that is
autocommit, READ COMMITTED and UTC (sources/mysql/catalog.py). Values of both paths are
made canonical by sources/mysql/values.py.

Connection loss: mysql-replication itself reconnects the binlog stream after a lost
connection (error 2013) at the event where it was; anything else (server down, restart)
is raised as ``SourceUnavailable`` (``lost`` classifies the driver's errors, see
sources/connection_loss.py), and the engine reopens the source.

GTID positions (``use_gtid``): positions are built from each transaction's GTID
(sources/mysql/gtid.py) and a start looks the transaction up in the server's binlog by its GTID
(sources/mysql/gtid_resume.py), so the capture resumes on a promoted replica. ``host`` may list
several servers (``a:3306,b:3306``): the source opens the first one that is writable (not
``read_only``), and reopens the list when the connection is lost, which follows a failover.

Log retention: the binlog holding the checkpoint must outlive the capture's lag;
``log_status`` warns (``binlog_expiry_warning``) when its expiry comes near.

No ``invisible_txids`` for MySQL: InnoDB commits in binlog order (binlog_order_commits on
MySQL, group commit ordering on MariaDB), so a transaction the chunk SELECT did not see
commits after every transaction it saw, and therefore appears in the binlog after them.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import queue
import random
import time
from typing import Any, Callable, Optional, Sequence

import pymysql

from ...core import names
from ...core.batch import LogRows
from ...core.chunks import MYSQL
from ...core.errors import ConfigurationError, PositionLostError, RequestError, SourceUnavailable
from ...core.events import Key, LogItem, Position, Row, TableSchema
from ...core.protocols import ChunkResult, RowTextChunks, RowTextLog
from ...core.row_text import PART_ROWS, ChunkTexts
from ..connection_loss import on_connection_loss
from ..dump_errors import filter_errors, mysql_dump_errors
from ..keyset_reader import KeysetChunkReader
from ..tls import TLSSettings
from . import catalog
from . import digest as mysql_digest
from .catalog import ConnectionSettings, Session
from .checks import StartupChecks
from .gtid import History, decode_gtid_coord, era_after, is_gtid_coord
from .gtid_resume import history_at, resume_point, server_history
from .log import BinlogReader, Failure, decode_coord, file_number
from .reader_claim import ReaderClaim
from .select_native import NativeSelect, pymysql_rows, query_texts
from .values import select_converters, select_expression, to_param

log = logging.getLogger(__name__)


# Lost connection, server gone/shutting down, connection killed, can't connect (yet).
# 4052: a reader with our server_id is still registered (a previous leader's, or our own
# before the server noticed it gone): retried like a lost connection, never fatal.
_CONNECTION_LOST = {2003, 2006, 2013, 2055, 1053, 1927, 4052}


def _expire_seconds(variables: dict) -> float:
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


def parse_hosts(host: str, port: int) -> list[tuple[str, int]]:
    """``"a:3306, b"`` -> [("a", 3306), ("b", port)]; IPv6 addresses in brackets."""
    out = []
    for part in filter(None, (p.strip() for p in str(host).split(","))):
        name, colon, tail = part.rpartition(":")
        if colon and tail.isdigit() and (not name.count(":") or name.endswith("]")):
            out.append((name.strip("[]"), int(tail)))
        else:
            out.append((part.strip("[]"), int(port)))
    if not out:
        raise ConfigurationError("the MySQL source has no host.", "set [source] host, e.g. db1:3306,db2:3306.")
    return out


def default_server_id(source_id: str) -> int:
    """A stable replica id per source in [10000, 2**31): two readers with one id kick each
    other off the server, so every source needs its own."""
    digest = int(hashlib.sha256(source_id.encode()).hexdigest(), 16)
    return 10000 + digest % (2**31 - 10000)


class MySQLSource(KeysetChunkReader, RowTextChunks, RowTextLog):
    """A DBLog source for MySQL 8 and MariaDB 10.5+ (binlog_format=ROW, row image FULL)."""

    # Capabilities (core/protocols.py): rows as their JSON text from chunk SELECTs and from the
    # log; parallel chunk readers and range digests come with the keyset reader.
    selects_row_text = True
    logs_row_text = True

    def __init__(
        self,
        *,
        source_id: str,
        host: str,
        port: int,
        user: str,
        password: str,
        databases: Optional[list[str]] = None,
        tables: Optional[list[str]] = None,
        server_id: Optional[int] = None,
        watermark_database: str = "dblog",
        key_columns: Optional[dict[str, list[str]]] = None,
        use_gtid: bool = False,
        connect_timeout: float = 10,
        queue_size: int = 10_000,
        tls: Optional[TLSSettings] = None,
        replicas: Optional[list[str]] = None,
    ):
        self.source_id = source_id
        self._use_gtid = use_gtid
        # Several hosts: the writable one is chosen at every open() (a failover moves it).
        self._endpoints = parse_hosts(host, port)
        # Replicas whose lag paces adaptive dumps (core/pacing.py): same user, password and TLS.
        self._replicas = parse_hosts(",".join(replicas), port) if replicas else []
        self._replica_sessions: dict[tuple[str, int], Session] = {}
        self._reader_sessions: list[Session] = []  # parallel chunk readers' connections (chunk_readers)
        if len(self._endpoints) > 1 and not use_gtid:
            raise ConfigurationError(
                f"source {source_id} lists several hosts, but its positions are binlog file and offset, "
                "which mean nothing on another server.",
                "set use_gtid = true (GTID positions follow a failover), or list one host.",
            )
        # One TLS setting for every connection (catalog, chunks, watermarks, binlog stream).
        first = self._endpoints[0]
        self._settings = ConnectionSettings(first[0], first[1], user, password, connect_timeout, tls or TLSSettings())
        self._native_select = NativeSelect()  # chunk rows made canonical by the extension
        self._databases = list(databases) if databases is not None else None
        self._configured_tables = list(tables) if tables is not None else None
        self.server_id = server_id if server_id is not None else default_server_id(source_id)
        self._bookmark: Optional[tuple[str, int]] = None  # where the log was first read from
        self._wm_db = watermark_database
        self._wm_table = names.table_name(watermark_database, "watermarks")
        self._key_columns = dict(key_columns or {})
        self._queue_size = queue_size
        self._session: Optional[Session] = None
        self._log_session: Optional[Session] = None
        self._mariadb = False
        self._tables: list[str] = []
        self._schemas: dict[str, TableSchema] = {}
        self._reader: Optional[BinlogReader] = None
        # Set by take_over: the lease check before every binlog connection, and the binlog
        # connections a previous leader reported, to end before reading the log ourselves.
        self._lease_check: Optional[Callable[[], None]] = None
        self._previous_readers: list[int] = []
        self._claim: Optional[ReaderClaim] = None  # set by take_over with a lease domain
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=queue_size)
        self._pending: collections.deque = collections.deque()
        self._failure: Optional[BaseException] = None
        self._acknowledged: Optional[Position] = None
        self._acknowledged_ts: Optional[float] = None  # commit time of the acknowledged event
        # (last position, commit time) of each handed-out batch, for _acknowledged_ts
        self._handed: collections.deque = collections.deque(maxlen=100_000)

    # -- open and validate -------------------------------------------------------------------
    @on_connection_loss
    def open(self) -> None:
        if len(self._endpoints) > 1:
            self._settings, self._session = self._writable_server()
        else:
            self._session = Session(self._settings)
            self._session.conn()  # ConfigurationError when the server refuses us
        self._mariadb = catalog.is_mariadb(self._session)
        check = StartupChecks(self._session, self._settings, self._mariadb)
        check.binlog_settings()
        if self._use_gtid:
            check.gtid_mode()
        # The probe must not reuse the capture's server_id: a second reader with the same id
        # kicks the running capture off the server (e.g. `dblog dump` while capturing).
        check.privileges(random.randrange(2**31, 2**32 - 1))
        self._tables = check.resolve_tables(self._configured_tables, self._databases, self._wm_db)
        check.filters(self._tables, self._wm_db)
        check.watermark_row(self._wm_db, self.source_id)
        for table in self._tables:
            self.table_schema(table)  # ConfigurationError for a table without a key
            check.readable(table)

    def _writable_server(self) -> tuple[ConnectionSettings, Session]:
        """The first listed server that accepts writes (the primary); SourceUnavailable while
        there is none (a failover under way), so the engine tries again with backoff."""
        seen = []
        for host, port in self._endpoints:
            settings = dataclasses.replace(self._settings, host=host, port=port)
            session = Session(settings)
            try:
                read_only = session.query("SELECT @@GLOBAL.read_only")[0][0]
            except SourceUnavailable as exc:
                seen.append(f"{host}:{port}: {exc.cause}")
                session.close()
                continue
            except pymysql.err.MySQLError as exc:
                if not self.lost(exc):
                    session.close()
                    raise
                seen.append(f"{host}:{port}: {exc}")
                session.close()
                continue
            if not int(read_only):
                if settings != self._settings:
                    log.warning("source %s: %s:%d is the writable server now", self.source_id, host, port)
                return settings, session
            seen.append(f"{host}:{port}: read-only")
            session.close()
        raise SourceUnavailable(
            f"none of the hosts of source {self.source_id} accepts writes ({'; '.join(seen)}).",
            "promote a replica (SET GLOBAL read_only = OFF) or list the new primary in [source] host; "
            "the capture waits for one.",
        )

    def replication_lag(self) -> Optional[float]:
        """The worst Seconds_Behind_Master of the configured replicas; inf for one that is not
        replicating (its SQL or IO thread stopped) or cannot be reached; None without replicas."""
        if not self._replicas:
            return None
        worst = 0.0
        for host, port in self._replicas:
            session = self._replica_sessions.get((host, port))
            if session is None:
                session = Session(dataclasses.replace(self._settings, host=host, port=port))
                self._replica_sessions[(host, port)] = session
            try:
                lag = catalog.replica_lag(session)
            except (SourceUnavailable, pymysql.err.MySQLError) as exc:
                log.warning("source %s: replica %s:%d: %s", self.source_id, host, port, exc)
                session.close()
                lag = None
            worst = max(worst, float("inf") if lag is None else lag)
        return worst

    # -- catalog ---------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return list(self._tables)

    @on_connection_loss
    def table_schema(self, table: str) -> TableSchema:
        cached = self._schemas.get(table)
        if cached is not None:
            return cached
        if table not in self._tables:
            raise RequestError(
                f"table {table} is not captured by source {self.source_id}.",
                f"use one of its tables: {', '.join(self._tables) or '(none)'}.",
            )
        schema = catalog.read_table_schema(self._require_session(), table, self._key_columns.get(table), self._mariadb)
        self._schemas[table] = schema
        return schema

    @on_connection_loss
    def catalog_schema(self, table: str) -> TableSchema:
        return catalog.read_table_schema(self._require_session(), table, self._key_columns.get(table), self._mariadb)

    def _schema_for_log(self, table: str, columns: list) -> TableSchema:
        """Called by the reader thread at a table's first table map or a column change."""
        session = self._log_session
        if session is None:  # the reader thread runs only after start_log opened it
            raise RuntimeError("a table map arrived before start_log()")
        try:
            current = catalog.read_table_schema(session, table, self._key_columns.get(table), self._mariadb)
        except RequestError:
            current = None  # dropped since these rows were written
        names = [c.name for c in columns]
        if current is not None and (not all(names) or names == current.column_names()):
            self._schemas[table] = current  # refresh the cache (a dict store is atomic)
            return current
        log.warning("binlog columns of %s differ from the catalog's; using the binlog's", table)
        return catalog.schema_from_table_map(table, columns, current)

    @on_connection_loss
    def estimate_rows(self, table: str) -> int:
        db, name = catalog.split_table(table)
        rows = self._require_session().query(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
            [db, name],
        )
        return int(rows[0][0] or 0) if rows else 0

    # -- log -------------------------------------------------------------------------------
    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        self._lease_check = check
        self._previous_readers = [int(i) for i in (previous or {}).get("reader_connections") or ()]
        if domain is not None:  # the reader's named locks tell our domain's from another's
            self._claim = ReaderClaim(self.source_id, domain, check)

    def _end_previous_readers(self, session: Session) -> None:
        """End the binlog dump threads of the previous leader (paused, cut off or killed): the
        server refuses our reader (error 4052, same server_id) while they live, which without
        this lasts until its net_write_timeout notices a dead or stalled client. First claim
        the reader: a reader of another lease domain is refused, not ended (mysql_reader_claim)."""
        if self._claim is not None:
            self._claim.take(self._settings, session)
        ids, self._previous_readers = self._previous_readers, []
        for cid in ids:
            rows = session.query("SELECT COMMAND, USER FROM information_schema.PROCESSLIST WHERE ID = %s", [cid])
            if not rows or rows[0][0] != "Binlog Dump" or rows[0][1] != self._settings.user:
                continue  # gone already, or no longer a binlog reader of ours
            try:
                session.run(f"KILL CONNECTION {cid}")
                log.warning("ended binlog connection %d of the previous leader of %s", cid, self.source_id)
            except pymysql.err.MySQLError as exc:  # 1094 unknown thread: it ended by itself meanwhile
                log.info("binlog connection %d of the previous leader: %s", cid, exc)

    @on_connection_loss
    def reset_log(self) -> None:
        """Nothing to recreate: ``start_log(None, from_end=True)`` reads from the current end."""

    def start_log(
        self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None, texts: bool = False
    ) -> None:
        session = self._require_session()
        self._stop_reader()
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
        if self._use_gtid and history is None:
            history = history_at(session, file, pos, self._mariadb)
            if after is None:  # a new start: above whatever the changelog holds already
                era = era_after(floor.coord if floor is not None else None, history.counter())
        self._queue = queue.Queue(maxsize=self._queue_size)
        self._pending.clear()
        self._failure = None
        self._log_session = Session(self._settings)
        captured = set(self._tables)
        self._reader = BinlogReader(
            settings=self._settings,
            server_id=self.server_id,
            log_file=file,
            log_pos=pos,
            schemas=sorted({t.split(".", 1)[0] for t in captured} | {self._wm_db}),
            source_id=self.source_id,
            captured=captured,
            watermark_table=self._wm_table,
            schema_for=self._schema_for_log,
            out=self._queue,
            guard=self._lease_check,
            history=history,
            era=era,
            texts=texts,
        )
        self._reader.start()

    def _gtid_resume_point(self, after: Position) -> tuple[str, int, History]:
        """(file, offset, GTID history before it) of the transaction holding ``after``, found by
        its GTID: on this server or on a promoted replica alike."""
        if not self._use_gtid:
            raise ConfigurationError(
                f"the checkpoint {after} is a GTID position, but use_gtid is off for source {self.source_id}.",
                "set use_gtid = true for this source (GTID positions cannot go back to file positions).",
            )
        at = decode_gtid_coord(after.coord)
        return resume_point(self._require_session(), at.gtid, at.counter, self._mariadb)

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
        resume_point(self._require_session(), top.gtid, top.counter, self._mariadb, "the changelog's last")

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
        logs = catalog.binary_logs(self._require_session())
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
                f"{size} bytes long: the binlog was reset (RESET MASTER) or this is another server."
            )
        return name, max(4, txn_start)

    @on_connection_loss
    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        if self._reader is None:
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
        self._acknowledged = position
        while self._handed and self._handed[0][0] <= position:
            self._acknowledged_ts = self._handed.popleft()[1]

    def lost(self, exc: BaseException) -> bool:
        """True for a driver error that means a lost or refused connection (server restart,
        KILL): a reconnect can cure it."""
        if isinstance(exc, (ConnectionError, pymysql.err.InterfaceError)):
            return True
        if isinstance(exc, pymysql.err.OperationalError):
            return bool(exc.args) and exc.args[0] in _CONNECTION_LOST
        return False

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        return []  # row images in the binlog are whole (binlog_row_image=FULL is required)

    @on_connection_loss
    def log_status(self) -> dict:
        session = self._require_session()
        file, pos, _, _ = catalog.master_status(session)
        r = self._reader
        status: dict[str, Any] = {
            "server": f"{self._settings.host}:{self._settings.port}",
            "server_file": file,
            "server_pos": pos,
            "reader_file": r.file if r else None,
            # the binlog connections this reader opened: a new leader ends them (take_over)
            "reader_connections": list(r.connection_ids) if r else [],
            "reader_pos": r.pos if r else None,
            "lag_bytes": None,  # binlog bytes written but not yet read
            "acknowledged": str(self._acknowledged) if self._acknowledged else None,
            "warnings": [],
        }
        if self._use_gtid:
            status["server_gtid_state"] = str(server_history(session, self._mariadb))
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
        expire = _expire_seconds(catalog.global_variables(session, ["binlog_expire_logs_seconds", "expire_logs_days"]))
        status["binlog_expire_seconds"] = expire
        acked_file = None
        if self._acknowledged is not None and not is_gtid_coord(self._acknowledged.coord):
            acked_file = decode_coord(self._acknowledged.coord)[0]
        elif self._acknowledged is not None and r is not None and r.file:
            acked_file = file_number(r.file)  # GTID positions name no file: the reader's (at or after it)
        if acked_file is not None and self._acknowledged_ts is not None:
            warning = binlog_expiry_warning(acked_file, file_number(file), self._acknowledged_ts, time.time(), expire)
            if warning:
                status["warnings"].append(warning)
        return status

    # -- dumps -----------------------------------------------------------------------------
    @on_connection_loss
    def write_watermark(self, uuid: str) -> None:
        session = self._require_session()
        db = MYSQL.quote(self._wm_db)
        _, count = session.run(
            f"UPDATE {db}.`watermarks` SET value = %s, updated_at = NOW(6) WHERE source_id = %s",
            [uuid, self.source_id],
        )
        if count == 0:  # the row was deleted behind our back
            session.run(
                f"INSERT INTO {db}.`watermarks` (source_id, value, updated_at) VALUES (%s, %s, NOW(6)) "
                "ON DUPLICATE KEY UPDATE value = VALUES(value), updated_at = VALUES(updated_at)",
                [self.source_id, uuid],
            )

    def _key_params(self, schema: TableSchema, key: Key) -> tuple:
        cols = {c.name: c for c in schema.columns}
        return tuple(to_param(cols[k], v) for k, v in zip(schema.key, key))

    def _rows(
        self,
        schema: TableSchema,
        sql: str,
        params: Sequence[Any],
        where: Optional[str] = None,
        session: Optional[Session] = None,
        texts: bool = False,
    ) -> ChunkResult:
        # Its own autocommit READ COMMITTED statement: sees every commit before it (DESIGN
        # "Non-stale read"); no transaction is ever left open on this connection. A filtered
        # chunk: a READ ONLY transaction of its own, just as fresh. ``session``: a parallel
        # reader's connection (chunk_readers). ``texts``: the rows as JSON texts, made a part
        # at a time (core/row_text.py): a chunk's dicts are never all in memory at once.
        session = session or self._require_session()
        if where is not None:
            with filter_errors(schema.table, where, self.lost):
                raw = session.read_only_query(sql, list(params))  # a list: %% is formatted
        elif self._native_select.on and self._native_select.plan(schema) is not None:
            if texts:
                with mysql_dump_errors(schema.table, self._settings.user):
                    read = session.read(
                        lambda conn: query_texts(conn, sql, params or None, self._native_select, schema)
                    )
                if read is not None:
                    return ChunkResult(read[1], keys=read[0], texts=True, key_texts=read[2])
            with mysql_dump_errors(schema.table, self._settings.user):
                result, encoding = session.query_packets(sql, params or None)
            collected = ChunkTexts(schema) if texts else None
            canonical = self._native_select.rows(schema, encoding, result, collected)
            if canonical is not None:
                return ChunkResult(canonical, keys=collected.keys, texts=True) if collected else ChunkResult(canonical)
            raw = pymysql_rows(encoding, result)
        else:
            with mysql_dump_errors(schema.table, self._settings.user):
                raw = session.query(sql, params or None)
        if not texts:
            return ChunkResult(self._from_select(schema, raw))
        collected = ChunkTexts(schema)
        for at in range(0, len(raw), PART_ROWS):
            collected.add(self._from_select(schema, raw[at : at + PART_ROWS]))
        return ChunkResult(collected.rows, keys=collected.keys, texts=True)

    @staticmethod
    def _from_select(schema: TableSchema, raw: Sequence[Sequence[Any]]) -> list[Row]:
        """PyMySQL's rows as dicts of canonical values."""
        names = [c.name for c in schema.columns]
        rows = [dict(zip(names, r)) for r in raw]
        # Per column, not per value: only the columns PyMySQL does not return canonical.
        for name, conv in zip(names, select_converters(schema.columns)):
            if conv is not None:
                for row in rows:
                    v = row[name]
                    if v is not None:
                        row[name] = conv(v)
        return rows

    # -- chunks: the keyset reader (sources/keyset_reader.py) runs them through these -------
    dialect = MYSQL

    def _select_list(self, schema: TableSchema) -> list[str]:
        return [select_expression(MYSQL.quote, c) for c in schema.columns]

    def _run_chunk(
        self, conn: Optional[Session], schema: TableSchema, sql: str, params: list, where: Optional[str], texts: bool
    ) -> ChunkResult:
        return self._rows(schema, sql, params, where, conn, texts)

    def _run_statement(self, schema: TableSchema, sql: str, params: list) -> Sequence[Row]:
        return self._rows(schema, sql, params).rows

    def _digest_sql(self, schema: TableSchema) -> str:
        return mysql_digest.digest_sql(schema, self._mariadb)

    def _run_digest(self, schema: TableSchema, sql: str, params: list) -> Sequence[Any]:
        with mysql_dump_errors(schema.table, self._settings.user):
            ((rows, total),) = self._require_session().query(sql, list(params))  # formatted: %% is %
        return rows, total

    def row_hasher(self, schema: TableSchema) -> Callable[[Row], int]:
        """The hash ``range_digest`` sums, from a row's canonical values."""
        return mysql_digest.row_hasher(schema, self._mariadb)

    def _explain(self, schema: TableSchema, sql: str, params: list) -> None:
        self._require_session().read_only_query("EXPLAIN " + sql, list(params))

    def _open_reader(self) -> Session:
        return Session(self._settings)

    def _readers(self) -> list[Session]:
        return self._reader_sessions

    # -- lifecycle -------------------------------------------------------------------------
    def _require_session(self) -> Session:
        if self._session is None:
            raise RuntimeError(f"source {self.source_id} is not open: call open() first")
        return self._session

    def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.stop()
            self._reader = None
        if self._log_session is not None:
            self._log_session.close()
            self._log_session = None

    def close(self) -> None:
        self._stop_reader()
        if self._claim is not None:
            self._claim.close()
        for session in [*self._replica_sessions.values(), *self._reader_sessions]:
            session.close()
        self._replica_sessions.clear()
        self._reader_sessions.clear()
        if self._session is not None:
            self._session.close()
            self._session = None
