"""PostgreSQL source: logical replication (pgoutput or wal2json) plus watermark-based chunks.

Two connections: a replication connection streams the slot; a regular autocommit connection
writes watermarks, runs chunk SELECTs and reads the catalog. Both run with the same session
settings (``SESSION_SETTINGS``) because the text of a value depends on them, and the log
and a dump must agree (postgres/values.py). The log half, slot_log.py, streams the slot;
its messages become log items in postgres/log.py, which also explains the positions.

Restarts: ``start_log(P)`` asks for the log from P's commit LSN. PostgreSQL sends that whole
transaction again (it skips only transactions whose commit record lies before the start
point) and the engine drops what it already has. ``acknowledge(P)`` confirms the slot up to
P's commit LSN and never further, so that restart point stays available. A slot confirmed
beyond a checkpoint therefore means the transactions in between are gone: PositionLostError.

psycopg2 caveat, without the compiled extension (with it, sources/postgres/pq_stream.py reads the
stream and psycopg2 never sees a keepalive): when the client confirmed a position at or after
the start LSN of the last message it received and a keepalive then arrives, psycopg2 itself
moves the flush position to the keepalive's WAL end. In the middle of a transaction that
began before the confirmed commit, this can confirm transactions the output has not made
durable yet. The walsender sends such mid-transaction keepalives only when the client has
not replied for half of wal_sender_timeout; a crash right after would then end in
PositionLostError at the next start (loud, never a silent gap).

WAL retention: the slot is confirmed only up to acknowledged positions. While the captured
tables are idle, the engine's heartbeat watermarks give it positions to acknowledge, so the
server can recycle the WAL. ``log_status`` warns (``retention_warning``) when the slot's WAL
is at risk, and raises PositionLostError once the slot is gone or its WAL lost.

Partitioned tables are captured as one table under the root's name; partitions attached,
created and detached while capturing are followed by postgres_partitions.

Connection loss: ``lost`` tells which driver errors a reconnect can cure (server restart,
terminated backend or walsender); the public methods raise those as ``SourceUnavailable``
(sources/connection_loss.py) and the engine then reopens the source.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Callable, Optional, Sequence

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from ...core.batch import LogRows
from ...core.chunks import POSTGRES, chunk_query
from ...core.errors import ConfigurationError, DBLogError, RequestError, SourceUnavailable
from ...core.events import Key, LogItem, Position, Row, TableSchema
from ...core.protocols import CatalogFingerprints, CatalogSchemas, ChunkResult, RowTextChunks, RowTextLog
from ..connection_loss import on_connection_loss
from ..dump_errors import filter_errors, postgres_dump_errors
from ..keyset_reader import KeysetChunkReader
from ..tls import TLSSettings, tls_error_fix
from .catalog import (
    TableInfo,
    captured_ancestors,
    check_partitions,
    check_replica_identity,
    fingerprints,
    format_types,
    list_tables,
    quote_table,
    read_table,
    read_tables,
    server_version,
    type_names,
)
from .chunk_select import ChunkSelect, to_param
from .digest import digest_sql, row_hasher
from .errors import ErrorContext, first_line, translate
from .log import LogDecoder, make_position, parse_lsn
from .log_markers import marker_lsn
from .partitions import Partitions
from .server_setup import check_publication, check_server, ensure_publication, ensure_watermark_table
from .slot import ReplicationSlot
from .slot_log import SlotLog, SlotLogParts

# Connection failures a later attempt may not see (SQLSTATE classes 08 connection exception,
# 57P admin shutdown / crash shutdown / cannot connect now, e.g. "the database system is
# starting up"); authentication failures are not among them.
_NOT_TRANSIENT = ("password authentication failed", "no pg_hba.conf entry", "does not exist", "permission denied")

log = logging.getLogger(__name__)

SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO",
    "bytea_output": "hex",
    "extra_float_digits": "1",
    "IntervalStyle": "postgres",
    "client_encoding": "UTF8",
}
_OPTIONS = " ".join(f"-c {k}={v}" for k, v in SESSION_SETTINGS.items())
_PLUGINS = ("pgoutput", "wal2json")
WATERMARK_KINDS = ("table", "log")


def leader_application_name(domain: str, source_id: str) -> str:
    """The application_name of a leader's sessions: the lease domain and the source. PostgreSQL
    keeps 63 bytes of it, so a longer source id is cut and a digest of the whole id kept,
    so that two sources never share the name."""
    name = f"dblog-{domain}-{source_id}"
    if len(name.encode()) <= 63:
        return name
    digest = hashlib.sha256(source_id.encode()).hexdigest()[:12]
    return f"dblog-{domain}-{digest}-{source_id}".encode()[:63].decode(errors="ignore")


def slot_name_for(source_id: str) -> str:
    """Slot and publication names allow only [a-z0-9_], at most 63 characters."""
    return ("dblog_" + re.sub(r"[^a-z0-9_]", "_", source_id.lower()))[:63]


class PostgresSource(KeysetChunkReader, RowTextChunks, RowTextLog, CatalogFingerprints, CatalogSchemas):
    # Capabilities (core/protocols.py): rows as their JSON text from chunk SELECTs and from the
    # log; catalog fingerprints and every table's catalog in one read (the schema check reads
    # changed tables only, and all of them in four queries); parallel chunk readers and range
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
        dbname: str,
        tables: Optional[list[str]] = None,
        plugin: str = "pgoutput",
        slot_name: Optional[str] = None,
        publication: Optional[str] = None,
        watermark_schema: str = "dblog",
        key_columns: Optional[dict[str, list[str]]] = None,
        connect_timeout: int = 10,
        tls: Optional[TLSSettings] = None,
        partition_check_interval: float = 1.0,
        watermarks: str = "table",
    ):
        if plugin not in _PLUGINS:
            raise ConfigurationError(f"unknown output plugin {plugin!r}.", f"use one of {list(_PLUGINS)}.")
        if watermarks not in WATERMARK_KINDS:
            raise ConfigurationError(
                f"unknown watermarks {watermarks!r}.", f"use one of {list(WATERMARK_KINDS)} (docs/sources.md)."
            )
        if watermarks == "log" and plugin != "pgoutput":
            raise ConfigurationError(
                f'watermarks = "log" (read-only dumps) needs the pgoutput plugin, not {plugin}: its Begin '
                "messages carry the commit position the watermarks are placed by.",
                'use plugin = "pgoutput", or watermarks = "table".',
            )
        # "table": LW/HW are UPDATEs of the watermark row; "log": WAL positions, nothing is
        # written to the database (postgres/log_markers.py).
        self.watermarks = watermarks
        self._wal_sizes = (8192, 16 * 1024 * 1024)  # WAL block and segment size, read by open()
        self.source_id = source_id
        self.plugin = plugin
        self.slot_name = slot_name or slot_name_for(source_id)
        if not re.fullmatch(r"[a-z0-9_]{1,63}", self.slot_name):
            raise ConfigurationError(
                f"replication slot name {self.slot_name!r} is not valid.",
                "slot names may contain only lower-case letters, digits and '_' (at most 63).",
            )
        self.publication = publication or slot_name_for(source_id)
        self.watermark_schema = watermark_schema
        self.watermark_table = f"{watermark_schema}.watermarks"
        self._dsn: dict[str, Any] = dict(
            host=host,
            port=port,
            user=user,
            password=password,
            dbname=dbname,
            connect_timeout=connect_timeout,
            application_name=f"dblog-{source_id}"[:63],
        )
        self._tls = tls or TLSSettings()  # every connection: catalog, chunks, watermarks, log
        self._requested_tables = list(tables) if tables is not None else None
        self._key_columns = dict(key_columns or {})
        self._conn: Any = None
        self._reader_conns: list[Any] = []  # parallel chunk readers' connections (chunk_readers)
        self._deposed_ended = True  # set False by take_over: open() then ends the old leader's sessions
        self._tables: list[str] = []
        self._captured: set[str] = set()
        self._infos: dict[str, TableInfo] = {}
        self._type_cache: dict[int, str] = {}
        self._label_cache: dict[tuple[int, int], str] = {}
        self.slot = ReplicationSlot(self.slot_name, plugin, source_id, self._dsn, self._cur)
        self._encoding = "utf-8"
        self._chunks = ChunkSelect(self._info)  # chunk SELECTs and their canonical rows
        self._chunks.writes_nothing = watermarks == "log"
        # Kept across reopen(): a partition attached or detached while reconnecting is noticed.
        self._partitions = Partitions(self._cur, self._partition_keys, self._log_end_position, partition_check_interval)
        self._log = SlotLog(
            SlotLogParts(
                plugin,
                self.publication,
                self.watermark_table,
                self.slot,
                self._partitions,
                lambda: self._connect(replication=True),
                self._cur,
                self._new_decoder,
                self.tables,
                self._error_context,
            )
        )

    # -- connections -------------------------------------------------------------------
    def _connect(self, replication: bool = False):
        kwargs = dict(self._dsn, options=_OPTIONS, **self._tls.libpq())
        if replication and self.slot.lease_check is not None:
            self.slot.lease_check()  # StaleEpochError: a deposed leader opens no replication connection
        if replication:
            kwargs["connection_factory"] = psycopg2.extras.LogicalReplicationConnection
        try:
            conn = psycopg2.connect(**kwargs)
        except psycopg2.OperationalError as exc:
            d = self._dsn
            cause = (
                f"cannot connect to PostgreSQL {d['host']}:{d['port']} database {d['dbname']} as "
                f"{d['user']}{' for replication' if replication else ''}: {first_line(exc)}"
            )
            fix = (
                "check host, port, user, password and pg_hba.conf (a logical replication "
                "connection matches the database's ordinary pg_hba.conf entries)."
            )
            tls_fix = tls_error_fix(str(exc), self._tls)
            if tls_fix is not None:
                raise ConfigurationError(cause, tls_fix) from None
            if any(t in first_line(exc).lower() for t in _NOT_TRANSIENT):
                raise ConfigurationError(cause, fix) from None
            raise SourceUnavailable(cause, fix) from None  # down or restarting: the engine retries
        if not replication:
            conn.autocommit = True
        return conn

    def _cur(self):
        return self._conn.cursor()

    def lost(self, exc: BaseException) -> bool:
        """True for a driver error that means a lost connection (server restart,
        pg_terminate_backend): a reconnect can cure it; False for everything else."""
        if isinstance(exc, psycopg2.InterfaceError):  # "connection already closed"
            return True
        if isinstance(exc, psycopg2.OperationalError):
            code = getattr(exc, "pgcode", None) or ""
            return not code or code.startswith("08") or code.startswith("57P")
        if isinstance(exc, psycopg2.DatabaseError) and not getattr(exc, "pgcode", None):
            # The replication stream cut mid-message (a server crash, over TLS in particular):
            # libpq reports a failed COPY BOTH without a server message.
            return "no message from the libpq" in str(exc)
        return isinstance(exc, ConnectionError)

    def _error_context(self) -> ErrorContext:
        """What postgres_errors needs to name the setting to fix, and a way to read one."""
        return ErrorContext(
            self.slot_name,
            self._dsn["user"],
            self.publication,
            self.plugin,
            self.watermark_schema,
            self.watermark_table,
            tuple(self._tables),
            lambda name: self._scalar("SELECT setting FROM pg_settings WHERE name = %s", (name,)),
        )

    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        with self._cur() as cur:
            cur.execute(sql, params)
            row = cur.fetchone()
            return row[0] if row else None

    # -- open: validation and set-up -----------------------------------------------------
    @on_connection_loss
    def open(self) -> None:
        self._conn = self._connect()
        try:
            if self.slot.lease_check is not None and not self._deposed_ended:
                self._end_deposed_sessions()  # the first open as leader: no reader of ours yet
                self._deposed_ended = True
            self._encoding = psycopg2.extensions.encodings.get(self._scalar("SHOW server_encoding"), "utf-8")
            with self._cur() as cur:
                check_server(cur, self._dsn["user"], self.plugin)
            self._infos.clear()  # read afresh, once per table (a reopen may follow an ALTER)
            self._tables = self._resolve_tables()
            self._captured.clear()  # in place: the log decoder holds this set
            self._captured.update(self._tables)
            self._read_infos(self._tables)
            for table in self._tables:
                check_replica_identity(self._info(table))
            roots = {t: self._infos[t].oid for t in self._tables if self._infos[t].partitioned}
            leaves = self._check_partitioned(roots)
            with self._cur() as cur:
                if self.watermarks == "log":  # read-only: the publication is the operator's to create
                    check_publication(cur, self.publication, self._tables, list(roots))
                    cur.execute(
                        "SELECT current_setting('wal_block_size')::int, "
                        "(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')"
                    )
                    self._wal_sizes = cur.fetchone()
                else:
                    ensure_watermark_table(cur, self.watermark_table, self.source_id)
                    if self.plugin == "pgoutput":
                        ensure_publication(cur, self.publication, self._tables, self.watermark_table, list(roots))
            self.slot.ensure()
            self._partitions.compare(leaves)  # after a reconnect: what changed meanwhile
        except psycopg2.Error as exc:
            raise translate(exc, self._error_context()) from None

    @on_connection_loss
    def preflight(self) -> None:
        """``open``'s checks, changing nothing (Preflight): no slot, publication or watermark
        table is created, and no session of a previous leader is ended."""
        self._conn = self._connect()
        try:
            with self._cur() as cur:
                check_server(cur, self._dsn["user"], self.plugin)
            self._infos.clear()
            self._tables = self._resolve_tables()
            self._read_infos(self._tables)
            for table in self._tables:
                check_replica_identity(self._info(table))
            roots = {t: self._infos[t].oid for t in self._tables if self._infos[t].partitioned}
            self._check_partitioned(roots)
            if self.watermarks == "log":  # read-only: the operator's publication must be there already
                with self._cur() as cur:
                    check_publication(cur, self.publication, self._tables, list(roots))
        except psycopg2.Error as exc:
            raise translate(exc, self._error_context()) from None
        finally:
            self.close()

    def _resolve_tables(self) -> list[str]:
        with self._cur() as cur:
            if self._requested_tables is None:
                return list_tables(cur, [self.watermark_schema])
        errors = self._read_infos(self._requested_tables)
        unknown = [t for t, e in errors.items() if isinstance(e, RequestError)]
        for error in errors.values():
            if not isinstance(error, RequestError):
                raise error  # a table without a usable key
        if unknown:
            raise ConfigurationError(
                f"table(s) {unknown} to capture do not exist in database {self._dsn['dbname']} "
                "(or this role cannot see them).",
                'fix the tables list: schema-qualified, case-sensitive names ("schema.table").',
            )
        return list(self._requested_tables)

    def _check_partitioned(self, roots: dict[str, int]) -> dict:
        """A captured partition must not have a captured ancestor (its changes are the
        ancestor's), and every partition of a captured partitioned table must reach the log
        with the table's key. Returns the partitions read."""
        with self._cur() as cur:
            nested = captured_ancestors(cur, self._tables, self._tables)
            if nested:
                table, ancestor = next(iter(nested.items()))
                raise ConfigurationError(
                    f"table {table} is a partition of {ancestor}, which is captured too: its rows are "
                    f"captured and dumped as rows of {ancestor}.",
                    f"remove {table} from the tables to capture.",
                )
            version = server_version(cur)
        if roots and version < 130000:
            raise ConfigurationError(
                f"table(s) {list(roots)} are partitioned, and PostgreSQL {version // 10000} cannot publish a "
                "partitioned table as one table (publish_via_partition_root needs PostgreSQL 13).",
                "upgrade to PostgreSQL 13 or later, or capture each partition as a table of its own.",
            )
        leaves = self._partitions.read(roots)
        with self._cur() as cur:
            for root, found in leaves.items():
                check_partitions(cur, self._infos[root], found)
        return leaves

    def _partition_keys(self, root: str, table: str, after: Optional[Key], limit: int) -> list[Key]:
        """Up to ``limit`` keys of ``table`` (a partition of ``root``, or a former one) after
        ``after``, in key order, canonical as the root's chunk rows have them."""
        info = self._info(root)
        cols = {c.name: c for c in info.schema.columns}
        keys = TableSchema(table, tuple(cols[k] for k in info.schema.key), info.schema.key)
        sql, params = chunk_query(POSTGRES, keys, self._select_list(keys), after, limit)
        with self._cur() as cur:
            rows = self._chunks.rows(cur, TableSchema(root, keys.columns, keys.key), sql, params)
        return keys.keys_of(rows)

    def _log_end_position(self) -> Position:
        """A position after every change committed so far (index 0 at the WAL's end)."""
        return make_position(parse_lsn(self._scalar("SELECT pg_current_wal_lsn()::text")), 0)

    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        self.slot.lease_check = check  # the previous holder's session is found through the slot
        if domain is not None:
            # Every session, the walsender included, says which lease domain and source it
            # works for: the previous leader's sessions are found by it (_end_deposed_sessions).
            self._dsn["application_name"] = leader_application_name(domain, self.source_id)
            self._deposed_ended = False

    def _end_deposed_sessions(self) -> None:
        """Once we lead: end the client sessions of the previous leader of this source and
        lease domain (paused, cut off, or killed while the server has not noticed). A session
        paused inside a chunk's transaction keeps its lock on the table; a TRUNCATE or ALTER
        queued behind that lock stalls every later reader of the table, this capture first,
        until the old process wakes. They carry our application_name (which names the domain
        and the source); its walsender is the slot's to end (slot.py)."""
        if self.slot.lease_check is not None:
            self.slot.lease_check()  # still ours: whoever else has our name is deposed
        with self._cur() as cur:
            try:
                cur.execute(
                    "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s "
                    "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
                    "AND datname = current_database() AND usename = current_user",
                    (self._dsn["application_name"],),
                )
            except psycopg2.errors.InsufficientPrivilege as exc:  # then only the server's timeouts help
                log.warning("cannot end the previous leader's sessions of %s: %s", self.source_id, first_line(exc))
                return
            ended = sorted(pid for pid, done in cur.fetchall() if done)
        if ended:
            log.warning("ended the session(s) %s of the previous leader of %s", ended, self.source_id)

    # -- schemas -------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return list(self._tables)

    def _info(self, table: str, refresh: bool = False) -> TableInfo:
        info = None if refresh else self._infos.get(table)
        if info is None:
            with self._cur() as cur:
                info = read_table(cur, table, self._key_columns.get(table))
            self._remember(table, info)
        return info

    def _read_infos(self, tables: Sequence[str]) -> dict[str, DBLogError]:
        """Read the tables not read yet, all at once; the errors of those that failed."""
        todo = [t for t in tables if t not in self._infos]
        if not todo:
            return {}
        with self._cur() as cur:
            read = read_tables(cur, todo, self._key_columns)
        for table, info in read.items():
            if not isinstance(info, DBLogError):
                self._remember(table, info)
        return {t: e for t, e in read.items() if isinstance(e, DBLogError)}

    def _remember(self, table: str, info: TableInfo) -> None:
        keys = self._key_columns.get(table)
        if keys and tuple(keys) != info.schema.key:
            log.warning("table %s has a primary key %s; key_columns %s are not used", table, info.schema.key, keys)
        self._infos[table] = info

    @on_connection_loss
    def table_schema(self, table: str):
        return self._info(table).schema

    @on_connection_loss
    def catalog_fingerprints(self, tables: Sequence[str]) -> dict[str, str]:
        with self._cur() as cur:
            return fingerprints(cur, tables)

    @on_connection_loss
    def catalog_schemas(self, tables: Sequence[str]) -> dict[str, TableSchema | DBLogError]:
        with self._cur() as cur:
            read = read_tables(cur, tables, self._key_columns)
        return {t: i if isinstance(i, DBLogError) else i.schema for t, i in read.items()}

    @on_connection_loss
    def catalog_schema(self, table: str):
        with self._cur() as cur:
            return read_table(cur, table, self._key_columns.get(table)).schema

    def _type_name(self, oid: int) -> str:
        name = self._type_cache.get(oid)
        if name is None:
            with self._cur() as cur:
                self._type_cache.update(type_names(cur, [oid]))
            name = self._type_cache.setdefault(oid, "text")
        return name

    def _format_type(self, oid: int, modifier: int) -> str:
        label = self._label_cache.get((oid, modifier))
        if label is None:
            with self._cur() as cur:
                self._label_cache.update(format_types(cur, [(oid, modifier)]))
            label = self._label_cache[(oid, modifier)]
        return label

    # -- log: the slot's stream (sources/postgres/slot_log.py) -------------------------------
    def _new_decoder(self, texts: bool) -> LogDecoder:
        return LogDecoder(
            self.source_id,
            self.watermark_table,
            self._captured,
            self._info,
            self._type_name,
            self._format_type,
            self._encoding,
            self._partitions.root_of,
            texts,
        )

    @on_connection_loss
    def reset_log(self) -> None:
        self._log.reset()

    @on_connection_loss
    def start_log(
        self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None, texts: bool = False
    ) -> None:
        self._log.start(after, from_end, texts)

    @on_connection_loss
    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        return self._log.poll(max_items, timeout)

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        return self._log.take_unchanged_toast()

    @on_connection_loss
    def acknowledge(self, position: Position) -> None:
        self._log.acknowledge(position)

    @on_connection_loss
    def log_status(self) -> dict:
        return self._log.status()

    # -- watermarks and chunks -------------------------------------------------------------
    @on_connection_loss
    def write_watermark(self, uuid: str) -> None:
        if self.watermarks == "log":  # read-only: the WAL position, placed in the stream
            lsn = parse_lsn(self._scalar("SELECT pg_current_wal_insert_lsn()::text"))
            self._log.add_marker(uuid, marker_lsn(lsn, *self._wal_sizes))
            return
        with self._cur() as cur:
            # An upsert, so a watermark row deleted by hand does not stall dumps.
            cur.execute(
                f"INSERT INTO {quote_table(self.watermark_table)} (source_id, value, updated_at) "
                "VALUES (%s, %s, now()) ON CONFLICT (source_id) DO UPDATE "
                "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
                (self.source_id, uuid),
            )

    @on_connection_loss
    def replication_lag(self) -> Optional[float]:
        """The worst ``replay_lag`` of the standbys streaming from this server (pg_stat_replication
        shows every standby to superusers and members of pg_monitor / pg_read_all_stats, else
        only the user's own); None without a standby. An idle standby's lag reads as NULL: 0."""
        with self._cur() as cur:
            cur.execute(
                "SELECT count(*), COALESCE(max(EXTRACT(EPOCH FROM replay_lag)), 0)::float8 FROM pg_stat_replication"
            )
            n, lag = cur.fetchone()
        return float(lag) if n else None

    # -- chunks: the keyset reader (sources/keyset_reader.py) runs them through these -------
    dialect = POSTGRES

    def _select_list(self, schema) -> list[str]:
        return [POSTGRES.quote(c.name) for c in schema.columns]

    def _key_params(self, schema, key: Key) -> Key:
        return key  # cast by the dialect's %s::type placeholders; to_param when run

    def _run_chunk(self, conn, schema, sql: str, params: list, where: Optional[str], texts: bool) -> ChunkResult:
        if where is not None:
            with filter_errors(schema.table, where, self.lost):
                return self._chunks.select(conn or self._conn, schema, sql, params, read_only=True, texts=texts)
        with postgres_dump_errors(schema.table, self._dsn["user"]):
            return self._chunks.select(conn or self._conn, schema, sql, params, texts=texts)

    def _run_statement(self, schema, sql: str, params: list) -> list[Row]:
        with postgres_dump_errors(schema.table, self._dsn["user"]), self._cur() as cur:
            return self._chunks.rows(cur, schema, sql, params)

    def _digest_sql(self, schema) -> str:
        return digest_sql(schema)

    def _run_digest(self, schema, sql: str, params: list) -> Sequence[Any]:
        with postgres_dump_errors(schema.table, self._dsn["user"]), self._cur() as cur:
            cur.execute(sql, params)
            return cur.fetchone()

    def row_hasher(self, schema) -> Callable[[Row], int]:
        """The hash ``range_digest`` sums, from a row's canonical values."""
        return row_hasher(schema)

    def _explain(self, schema, sql: str, params: list) -> None:
        with self._cur() as cur:
            cur.execute("BEGIN READ ONLY")
            try:
                cur.execute("EXPLAIN " + sql, [to_param(p) for p in params])  # a list: %% is formatted
            finally:
                cur.execute("ROLLBACK")

    def _open_reader(self):
        return self._connect()

    def _readers(self) -> list:
        return self._reader_conns

    # -- progress ----------------------------------------------------------------------
    @on_connection_loss
    def estimate_rows(self, table: str) -> int:
        info = self._info(table)
        if info.partitioned:  # the rows are in the leaf partitions; -1 means never analysed
            n = self._scalar(
                "SELECT sum(greatest(c.reltuples, 0)) FROM pg_partition_tree(%s::oid::regclass) p "
                "JOIN pg_class c ON c.oid = p.relid WHERE p.isleaf",
                (info.oid,),
            )
        else:
            n = self._scalar("SELECT reltuples FROM pg_class WHERE oid = %s", (info.oid,))
        return max(0, int(n or 0))

    def close(self) -> None:
        self._log.close()
        for conn in self._reader_conns:
            try:
                conn.close()
            except psycopg2.Error:
                pass
        self._reader_conns.clear()
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None
