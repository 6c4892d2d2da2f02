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
``log_status`` warns (``binlog_expiry_warning``, sources/mysql/binlog_log.py) when its expiry
comes near.

No ``invisible_txids`` for MySQL: InnoDB commits in binlog order (binlog_order_commits on
MySQL, group commit ordering on MariaDB), so a transaction the chunk SELECT did not see
commits after every transaction it saw, and therefore appears in the binlog after them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
from typing import Any, Callable, Optional, Sequence

import pymysql

from ...core import names
from ...core.batch import LogRows
from ...core.chunks import MYSQL
from ...core.errors import ConfigurationError, DBLogError, RequestError, SourceUnavailable
from ...core.events import Key, LogItem, Position, Row, TableSchema
from ...core.protocols import CatalogFingerprints, CatalogSchemas, ChunkResult, RowTextChunks, RowTextLog
from ..connection_loss import on_connection_loss
from ..dump_errors import mysql_dump_errors
from ..keyset_reader import KeysetChunkReader
from ..tls import TLSSettings
from . import catalog
from . import digest as mysql_digest
from .binlog_log import BinlogLog, BinlogLogParts
from .catalog import ConnectionSettings, Session
from .checks import StartupChecks
from .chunk_replica import DEFAULT_TIMEOUT as DEFAULT_REPLICA_TIMEOUT
from .chunk_replica import ChunkReplica
from .chunk_select import ChunkSelect
from .leader_sessions import end_deposed_sessions, session_marker
from .log import file_number
from .values import select_expression, to_param

log = logging.getLogger(__name__)


# Lost connection, server gone/shutting down, connection killed, can't connect (yet).
# 4052: a reader with our server_id is still registered (a previous leader's, or our own
# before the server noticed it gone): retried like a lost connection, never fatal.
_CONNECTION_LOST = {2003, 2006, 2013, 2055, 1053, 1927, 4052}


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


class MySQLSource(KeysetChunkReader, RowTextChunks, RowTextLog, CatalogFingerprints, CatalogSchemas):
    """A DBLog source for MySQL 8 and MariaDB 10.5+ (binlog_format=ROW, row image FULL)."""

    # Capabilities (core/protocols.py): rows as their JSON text from chunk SELECTs and from the
    # log; catalog fingerprints and every table's catalog in one read (the schema check reads
    # changed tables only, and all of them in three queries); parallel chunk readers and range
    # digests come with the keyset reader.
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
        queue_size: int = 10_000,  # changes the binlog reader thread may queue ahead (log.ChangeQueue)
        tls: Optional[TLSSettings] = None,
        replicas: Optional[list[str]] = None,
        watermarks: str = "table",
        chunk_replica: Optional[str] = None,
        chunk_replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
    ):
        self.source_id = source_id
        self._use_gtid = use_gtid
        if watermarks not in ("table", "log"):
            raise ConfigurationError(
                f"unknown watermarks {watermarks!r}.", "use one of ['table', 'log'] (docs/sources.md)."
            )
        if watermarks == "log" and use_gtid:
            raise ConfigurationError(
                'watermarks = "log" (read-only dumps) needs file positions: its watermarks are binlog '
                "positions of the server they were read on, which GTID positions (use_gtid) do not carry.",
                'set use_gtid = false, or watermarks = "table".',
            )
        # "table": LW/HW are UPDATEs of the watermark row; "log": binlog positions of
        # consistent snapshots, nothing is written (mysql/log_markers.py).
        self.watermarks = watermarks
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
        # Chunk SELECTs on a replica, the log and the watermarks on the primary (mysql/chunk_replica.py).
        self._chunk_replica: Optional[ChunkReplica] = None
        if chunk_replica:
            if len(self._endpoints) > 1:
                raise ConfigurationError(
                    f"source {source_id} lists several hosts and a chunk_replica: after a failover the "
                    "replica may no longer replicate the server whose log is read.",
                    "list one host with chunk_replica, or remove chunk_replica.",
                )
            replica_hosts = parse_hosts(chunk_replica, port)
            if len(replica_hosts) != 1:
                raise ConfigurationError(
                    f"source {source_id} has chunk_replica {chunk_replica!r}, which is not one host.",
                    'give one replica as "host:port".',
                )
            (replica_host, replica_port), *_ = replica_hosts
            self._chunk_replica = ChunkReplica(
                source_id, replica_host, replica_port, self._settings, chunk_replica_timeout
            )
        self._chunks = ChunkSelect(user, self.lost)  # chunk SELECTs and their canonical rows
        self._databases = list(databases) if databases is not None else None
        self._configured_tables = list(tables) if tables is not None else None
        self.server_id = server_id if server_id is not None else default_server_id(source_id)
        self._wm_db = watermark_database
        self._wm_table = names.table_name(watermark_database, "watermarks")
        self._key_columns = dict(key_columns or {})
        self._session: Optional[Session] = None
        # Set by take_over: the lock-name prefix of a leader's sessions, and whether open()
        # still has to end the previous leader's (sources/mysql/leader_sessions.py).
        self._marker: Optional[str] = None
        self._lease_check: Optional[Callable[[], None]] = None
        self._deposed_ended = True
        self._mariadb = False
        self._tables: list[str] = []
        self._schemas: dict[str, TableSchema] = {}
        self._log = BinlogLog(
            BinlogLogParts(
                source_id,
                self.server_id,
                use_gtid,
                watermark_database,
                self._wm_table,
                queue_size,
                lambda: self._settings,
                self._require_session,
                self.tables,
                lambda: self._mariadb,
                self._schema_for_log,
                read_only=watermarks == "log",
            )
        )

    # -- open and validate -------------------------------------------------------------------
    @on_connection_loss
    def open(self) -> None:
        if len(self._endpoints) > 1:
            self._settings, self._session = self._writable_server()
        else:
            self._session = Session(self._settings, self._marker)
            self._session.conn()  # ConfigurationError when the server refuses us
        if self._marker is not None and self._lease_check is not None and not self._deposed_ended:
            # the first open as leader, before any reader of ours exists
            end_deposed_sessions(self._session, self._marker, self._lease_check, self.source_id)
            self._deposed_ended = True
        self._mariadb = catalog.is_mariadb(self._session)
        check = StartupChecks(self._session, self._settings, self._mariadb)
        check.binlog_settings()
        if self._use_gtid:
            check.gtid_mode()
        # The probe must not reuse the capture's server_id: a second reader with the same id
        # kicks the running capture off the server (e.g. `dblog dump` while capturing).
        check.privileges(random.randrange(2**31, 2**32 - 1))
        self._tables = check.resolve_tables(self._configured_tables, self._databases, self._wm_db)
        if self.watermarks == "log":
            check.snapshot_position()  # MariaDB's binlog_snapshot_position; nothing is created
            check.filters(self._tables, None)
        else:
            check.filters(self._tables, self._wm_db)
            check.watermark_row(self._wm_db, self.source_id)
        # one catalog read for every table; ConfigurationError for a table without a key
        for table, schema in catalog.read_table_schemas(
            self._session, self._tables, self._key_columns, self._mariadb
        ).items():
            if isinstance(schema, DBLogError):
                raise schema
            self._schemas[table] = schema
        check.readable_all(self._tables)
        if self._chunk_replica is not None:
            self._chunk_replica.check(self._session, self._mariadb)
            replica = StartupChecks(self._chunk_replica.session(), self._chunk_replica.settings, self._mariadb)
            replica.readable_all(self._tables)

    def preflight(self) -> None:
        """``open``'s checks on a session of its own, changing nothing (Preflight): the
        watermark table is not created, only looked for."""
        if len(self._endpoints) > 1:
            _, session = self._writable_server()
        else:
            session = Session(self._settings, None)
        try:
            mariadb = catalog.is_mariadb(session)
            check = StartupChecks(session, self._settings, mariadb)
            check.binlog_settings()
            if self._use_gtid:
                check.gtid_mode()
            check.privileges(random.randrange(2**31, 2**32 - 1))
            tables = check.resolve_tables(self._configured_tables, self._databases, self._wm_db)
            if self.watermarks == "log":
                check.snapshot_position()
            check.filters(tables, self._wm_db if self.watermarks == "table" else None)
            for schema in catalog.read_table_schemas(session, tables, self._key_columns, mariadb).values():
                if isinstance(schema, DBLogError):
                    raise schema
            check.readable_all(tables)
        finally:
            session.close()

    def _writable_server(self) -> tuple[ConnectionSettings, Session]:
        """The first listed server that accepts writes (the primary); SourceUnavailable while
        there is none (a failover under way), so the engine tries again with backoff."""
        seen = []
        for host, port in self._endpoints:
            settings = dataclasses.replace(self._settings, host=host, port=port)
            session = Session(settings, self._marker)
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
    def catalog_fingerprints(self, tables: Sequence[str]) -> dict[str, str]:
        return catalog.fingerprints(self._require_session(), tables, self._mariadb)

    @on_connection_loss
    def catalog_schemas(self, tables: Sequence[str]) -> dict[str, TableSchema | DBLogError]:
        return catalog.read_table_schemas(self._require_session(), tables, self._key_columns, self._mariadb)

    @on_connection_loss
    def catalog_schema(self, table: str) -> TableSchema:
        return catalog.read_table_schema(self._require_session(), table, self._key_columns.get(table), self._mariadb)

    def _schema_for_log(self, table: str, columns: list) -> TableSchema:
        """Called by the reader thread at a table's first table map or a column change."""
        session = self._log.session
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

    # -- log: the binlog (sources/mysql/binlog_log.py) -----------------------------------------
    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        self._log.take_over(check, previous, domain)
        if domain is not None:  # our sessions hold a lock the next leader finds them by
            self._marker, self._lease_check, self._deposed_ended = session_marker(self.source_id, domain), check, False

    @on_connection_loss
    def reset_log(self) -> None:
        """Nothing to recreate: ``start_log(None, from_end=True)`` reads from the current end."""

    @on_connection_loss
    def start_log(
        self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None, texts: bool = False
    ) -> None:
        self._log.start(after, from_end, floor, texts)

    @on_connection_loss
    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        return self._log.poll(max_items, timeout)

    def acknowledge(self, position: Position) -> None:
        self._log.acknowledge(position)

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        return []  # row images in the binlog are whole (binlog_row_image=FULL is required)

    @on_connection_loss
    def log_status(self) -> dict:
        return self._log.status()

    def lost(self, exc: BaseException) -> bool:
        """True for a driver error that means a lost or refused connection (server restart,
        KILL): a reconnect can cure it."""
        if isinstance(exc, (ConnectionError, pymysql.err.InterfaceError)):
            return True
        if isinstance(exc, pymysql.err.OperationalError):
            return bool(exc.args) and exc.args[0] in _CONNECTION_LOST
        return False

    # -- dumps -----------------------------------------------------------------------------
    @on_connection_loss
    def write_watermark(self, uuid: str) -> None:
        session = self._require_session()
        replica = self._chunk_replica
        if self._log.markers is not None:  # read-only: a binlog position
            if replica is None:  # the position of a consistent snapshot, for chunks read here
                file, pos = catalog.snapshot_position(session)
            else:  # the binlog end, for chunks read on the replica (mysql/chunk_replica.py)
                file, pos = catalog.master_status(session)[:2]
            self._log.markers.add(uuid, file_number(file), pos)
            self._log.offer_markers()  # an idle reader is past it already: no heartbeat's wait
        else:
            self._write_watermark_row(session, uuid)
        if replica is not None:
            replica.caught_up = False  # the next chunk read waits for the replica (_chunk_session)

    def _write_watermark_row(self, session: Session, uuid: str) -> None:
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

    # -- chunks: the keyset reader (sources/keyset_reader.py) runs them through these -------
    dialect = MYSQL

    def _select_list(self, schema: TableSchema) -> list[str]:
        return [select_expression(MYSQL.quote, c) for c in schema.columns]

    def _run_chunk(
        self, conn: Optional[Session], schema: TableSchema, sql: str, params: list, where: Optional[str], texts: bool
    ) -> ChunkResult:
        session = self._chunk_session()  # first: a parallel reader's connection is the replica's too
        return self._chunks.rows(conn or session, schema, sql, params, where, texts)

    def _run_statement(self, schema: TableSchema, sql: str, params: list) -> Sequence[Row]:
        return self._chunks.rows(self._require_session(), schema, sql, params, None, False).rows

    def _digest_sql(self, schema: TableSchema) -> str:
        return mysql_digest.digest_sql(schema, self._mariadb)

    def _run_digest(self, schema: TableSchema, sql: str, params: list) -> Sequence[Any]:
        with mysql_dump_errors(schema.table, self._settings.user):
            ((rows, total),) = self._chunk_session().query(sql, list(params))  # formatted: %% is %
        return rows, total

    def row_hasher(self, schema: TableSchema) -> Callable[[Row], int]:
        """The hash ``range_digest`` sums, from a row's canonical values."""
        return mysql_digest.row_hasher(schema, self._mariadb)

    def _explain(self, schema: TableSchema, sql: str, params: list) -> None:
        self._require_session().read_only_query("EXPLAIN " + sql, list(params))

    def _open_reader(self) -> Session:
        if self._chunk_replica is not None:
            return self._chunk_replica.reader()
        return Session(self._settings, self._marker)

    def _readers(self) -> list[Session]:
        return self._reader_sessions

    def _chunk_session(self) -> Session:
        """Where chunks and digests are read: the replica, once it holds the primary's binlog up
        to now, when a watermark was written since its last wait (the first read after LW waits,
        which is what makes the chunk exact; heartbeat watermarks and HW wait for nothing) or
        before any first read (``dblog verify``); else the source's own connection."""
        replica = self._chunk_replica
        if replica is None:
            return self._require_session()
        if not replica.caught_up:
            replica.catch_up(self._require_session())
        return replica.session()

    # -- lifecycle -------------------------------------------------------------------------
    def _require_session(self) -> Session:
        if self._session is None:
            raise RuntimeError(f"source {self.source_id} is not open: call open() first")
        return self._session

    def close(self) -> None:
        self._log.close()
        for session in [*self._replica_sessions.values(), *self._reader_sessions]:
            session.close()
        self._replica_sessions.clear()
        self._reader_sessions.clear()
        if self._chunk_replica is not None:
            self._chunk_replica.close()
        if self._session is not None:
            self._session.close()
            self._session = None
