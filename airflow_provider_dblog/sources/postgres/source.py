"""PostgreSQL source: logical replication (pgoutput or wal2json) plus watermark-based chunks.

Two connections: a replication connection streams the slot; a regular autocommit connection
writes watermarks, runs chunk SELECTs and reads the catalog. Both run with the same session
settings (``SESSION_SETTINGS``) because the text of a value depends on them, and the log
and a dump must agree (postgres_values). Messages become log items in postgres_log, which
also explains the positions.

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

import base64
import json
import logging
import re
import select
import time
from typing import Any, Callable, Optional, Sequence

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from ...core import names
from ...core.batch import LogRows
from ...core.chunks import POSTGRES, chunk_query
from ...core.errors import ConfigurationError, DBLogError, PositionLostError, RequestError, SourceUnavailable
from ...core.events import Key, LogItem, Position, Row, TableSchema
from ...core.protocols import ChunkResult, RowTextChunks, RowTextLog
from ...core.row_text import PART_ROWS, ChunkTexts
from ..connection_loss import on_connection_loss
from ..dump_errors import filter_errors, postgres_dump_errors
from ..keyset_reader import KeysetChunkReader
from ..tls import TLSSettings, tls_error_fix
from .catalog import (
    TableInfo,
    captured_ancestor,
    check_partitions,
    check_replica_identity,
    format_types,
    list_tables,
    quote_ident,
    quote_table,
    read_table,
    server_version,
    type_names,
)
from .chunk_copy import ChunkCopy
from .digest import digest_sql, row_hasher
from .errors import ErrorContext, first_line, translate
from .log import LogDecoder, commit_lsn_of, format_lsn, make_position, parse_lsn
from .partitions import Partitions
from .pgoutput_native import NativePgRows
from .pq_stream import ReplicationStream
from .server_setup import check_server, ensure_publication, ensure_watermark_table
from .slot import ReplicationSlot
from .values import RAW_TEXT_OIDS, converter, pg_kind

# Seconds between status updates to the walsender while nothing is acknowledged (keeps it
# from ending the connection after wal_sender_timeout).
STATUS_INTERVAL = 10

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
# bool, int8, int2, int4, text, bpchar, varchar: psycopg2's C casters already give the
# canonical value (what from_pg_text makes of the text), so chunk SELECTs convert nothing
# in Python for them (not even the raw-text caster's per-value call).
_C_CANONICAL_OIDS = frozenset((16, 20, 21, 23, 25, 1042, 1043))
_RAW_TEXT = psycopg2.extensions.new_type(
    tuple(sorted((set(RAW_TEXT_OIDS) | set(psycopg2.extensions.string_types)) - _C_CANONICAL_OIDS)),
    "DBLOG_PG_TEXT",
    lambda v, _c: v,
)


def slot_name_for(source_id: str) -> str:
    """Slot and publication names allow only [a-z0-9_], at most 63 characters."""
    return ("dblog_" + re.sub(r"[^a-z0-9_]", "_", source_id.lower()))[:63]


def wal2json_table_filter(tables: Sequence[str]) -> str:
    """wal2json's add-tables list: schema.table, special characters escaped with '\\'."""

    def esc(part: str) -> str:
        return re.sub(r"([\\ ',.*])", r"\\\1", part)

    return ",".join(f"{esc(s)}.{esc(t)}" for s, t in map(names.split_table, tables))


class PostgresSource(KeysetChunkReader, RowTextChunks, RowTextLog):
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
    ):
        if plugin not in _PLUGINS:
            raise ConfigurationError(f"unknown output plugin {plugin!r}.", f"use one of {list(_PLUGINS)}.")
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
        self._repl_conn: Any = None
        self._cursor: Any = None
        self._stream: Optional[ReplicationStream] = None
        self._tables: list[str] = []
        self._captured: set[str] = set()
        self._infos: dict[str, TableInfo] = {}
        self._type_cache: dict[int, str] = {}
        self._label_cache: dict[tuple[int, int], str] = {}
        self.slot = ReplicationSlot(self.slot_name, plugin, source_id, self._dsn, self._cur)
        self._encoding = "utf-8"
        self._native_rows = NativePgRows()  # chunk rows made canonical by the extension
        self._copy = ChunkCopy(self._native_rows)  # or read by COPY into their texts
        # Kept across reopen(): a partition attached or detached while reconnecting is noticed.
        self._partitions = Partitions(self._cur, self._partition_keys, self._log_end_position, partition_check_interval)
        self._reset_stream()

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
            self._encoding = psycopg2.extensions.encodings.get(self._scalar("SHOW server_encoding"), "utf-8")
            with self._cur() as cur:
                check_server(cur, self._dsn["user"], self.plugin)
            self._tables = self._resolve_tables()
            self._captured.clear()  # in place: the log decoder holds this set
            self._captured.update(self._tables)
            for table in self._tables:
                check_replica_identity(self._info(table, refresh=True))
            roots = {t: self._infos[t].oid for t in self._tables if self._infos[t].partitioned}
            leaves = self._check_partitioned(roots)
            with self._cur() as cur:
                ensure_watermark_table(cur, self.watermark_table, self.source_id)
                if self.plugin == "pgoutput":
                    ensure_publication(cur, self.publication, self._tables, self.watermark_table, list(roots))
            self.slot.ensure()
            self._partitions.compare(leaves)  # after a reconnect: what changed meanwhile
        except psycopg2.Error as exc:
            raise translate(exc, self._error_context()) from None

    def _resolve_tables(self) -> list[str]:
        with self._cur() as cur:
            if self._requested_tables is None:
                return list_tables(cur, [self.watermark_schema])
            unknown = []
            for table in self._requested_tables:
                try:
                    self._info(table, refresh=True)
                except RequestError:
                    unknown.append(table)
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
            for table in self._tables:
                ancestor = captured_ancestor(cur, table, self._tables)
                if ancestor is not None:
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
            psycopg2.extensions.register_type(_RAW_TEXT, cur)
            cur.execute(sql, [_to_param(p) for p in params])
            raw = cur.fetchall()
            oids = [d.type_code for d in cur.description]
        rows = self._canonical(TableSchema(root, keys.columns, keys.key), raw, oids)
        return keys.keys_of(rows)

    def _log_end_position(self) -> Position:
        """A position after every change committed so far (index 0 at the WAL's end)."""
        return make_position(parse_lsn(self._scalar("SELECT pg_current_wal_lsn()::text")), 0)

    def take_over(
        self, check: Callable[[], None], previous: Optional[dict[str, Any]] = None, domain: Optional[str] = None
    ) -> None:
        self.slot.lease_check = check  # the previous holder's session is found through the slot
        if domain is not None:
            # Every session, the walsender included, says which lease domain it reads for:
            # the domain first, as PostgreSQL cuts application_name at 63 bytes.
            self._dsn["application_name"] = f"dblog-{domain}-{self.source_id}"[:63]

    # -- schemas -------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return list(self._tables)

    def _info(self, table: str, refresh: bool = False) -> TableInfo:
        info = None if refresh else self._infos.get(table)
        if info is None:
            keys = self._key_columns.get(table)
            with self._cur() as cur:
                info = read_table(cur, table, keys)
            if keys and tuple(keys) != info.schema.key:
                log.warning("table %s has a primary key %s; key_columns %s are not used", table, info.schema.key, keys)
            self._infos[table] = info
        return info

    @on_connection_loss
    def table_schema(self, table: str):
        return self._info(table).schema

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

    # -- log ----------------------------------------------------------------------------
    def _reset_stream(self, texts: bool = False) -> None:
        self._decoder = LogDecoder(
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
        self._deferred_error: Optional[BaseException] = None
        self._acked = 0

    @on_connection_loss
    @on_connection_loss
    def reset_log(self) -> None:
        """A new slot at the current end of the WAL, in place of a dropped one or one whose
        WAL is lost (an inactive slot: a running reader's is not ours to drop)."""
        self._close_stream()
        slot = self.slot.row()
        if slot is not None and slot["wal_status"] == "lost" and not slot["active"]:
            self.slot.drop()
            slot = None
        if slot is None:
            self.slot.create()

    def start_log(
        self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None, texts: bool = False
    ) -> None:
        # No floor needed: LSNs only grow, on a promoted standby too.
        self._close_stream()
        self._reset_stream(texts)
        start = commit_lsn_of(after) if after is not None else 0
        slot = self.slot.row()
        if slot is not None:
            slot = self.slot.check_free(slot)
        if after is not None:
            if slot is None or self.slot.created:
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
        if slot is None:
            raise PositionLostError(f"replication slot {self.slot_name} was dropped after the source opened.")
        if after is None and from_end and not self.slot.created:
            # --reset-position: start from the end of the log, not from wherever the slot
            # stopped. Without it the slot's own position is the safe start (a reconnect
            # before the first checkpoint must not skip what the slot still holds).
            with self._cur() as cur:
                cur.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (self.slot_name,))
        self._repl_conn = self._connect(replication=True)
        self._cursor = self._repl_conn.cursor()
        try:
            self._cursor.start_replication(
                slot_name=self.slot_name,
                decode=False,
                start_lsn=start,
                options=self._plugin_options(),
                status_interval=STATUS_INTERVAL,
            )
        except psycopg2.Error as exc:
            raise translate(exc, self._error_context()) from None
        self._stream = ReplicationStream(self._repl_conn, self._cursor, STATUS_INTERVAL)
        self._acked = start
        # From now on the slot holds every position this process hands out.
        self.slot.created = False

    def _plugin_options(self) -> dict[str, str]:
        if self.plugin == "pgoutput":
            return {"proto_version": "1", "publication_names": quote_ident(self.publication)}
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
        if not self._partitions.roots:
            # wal2json names a partition, not its table, and a filter of names cannot follow
            # partitions created later: with a partitioned table it decodes every table.
            options["add-tables"] = wal2json_table_filter(self._tables + [self.watermark_table])
        return options

    @on_connection_loss
    def poll(self, max_items: int, timeout: float) -> list[LogItem | LogRows]:
        if self._stream is None:
            raise RuntimeError("poll() before start_log()")
        if self._deferred_error is not None:
            raise self._deferred_error
        if self._partitions.roots:
            self._partitions.step()
        decoder = self._decoder
        pending = decoder.pending
        pgoutput = self.plugin == "pgoutput"
        deadline = time.monotonic() + timeout
        while len(pending) + decoder.block_extra < max_items:
            payloads, failure = self._stream.read(max_items - len(pending) - decoder.block_extra)
            try:
                if pgoutput:
                    decoder.pgoutput_many(payloads)
                else:
                    for payload in payloads:
                        decoder.wal2json(payload)
            except DBLogError as exc:
                failure = exc
            if failure is not None:
                err = translate(failure, self._error_context()) if isinstance(failure, psycopg2.Error) else failure
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

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        """(table, key, position) of the changes decoded since the last call whose ``after``
        still holds an unchanged-TOAST placeholder (a table without REPLICA IDENTITY FULL);
        the engine queues a key-list dump for them (core/toast.py). Also the keys of
        partitions that joined or left a captured partitioned table, whose rows came or went
        without a row change in the log (postgres_partitions)."""
        hits = self._decoder.unchanged_toast
        self._decoder.unchanged_toast = []
        for partition, root, position in self._decoder.partial_truncates:
            self._partitions.partial_truncate(partition, root, position)
        self._decoder.partial_truncates = []
        return hits + self._partitions.take_hits()

    # -- watermarks and chunks -------------------------------------------------------------
    @on_connection_loss
    def write_watermark(self, uuid: str) -> None:
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
        return key  # cast by the dialect's %s::type placeholders; _to_param when run

    def _run_chunk(self, conn, schema, sql: str, params: list, where: Optional[str], texts: bool) -> ChunkResult:
        if where is not None:
            with filter_errors(schema.table, where, self.lost):
                return self._select(schema, sql, params, read_only=True, conn=conn, texts=texts)
        with postgres_dump_errors(schema.table, self._dsn["user"]):
            return self._select(schema, sql, params, conn=conn, texts=texts)

    def _run_statement(self, schema, sql: str, params: list) -> list[Row]:
        with postgres_dump_errors(schema.table, self._dsn["user"]), self._cur() as cur:
            psycopg2.extensions.register_type(_RAW_TEXT, cur)
            cur.execute(sql, params or None)
            raw = cur.fetchall()
            oids = [d.type_code for d in cur.description]
        return self._canonical(schema, raw, oids)

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
                cur.execute("EXPLAIN " + sql, [_to_param(p) for p in params])  # a list: %% is formatted
            finally:
                cur.execute("ROLLBACK")

    def _open_reader(self):
        return self._connect()

    def _readers(self) -> list:
        return self._reader_conns

    def _select(self, schema, sql: str, params: list, read_only: bool = False, conn=None, texts=False) -> ChunkResult:
        """One REPEATABLE READ snapshot for the chunk, plus the transactions it cannot see.

        PostgreSQL's WAL commit order and visibility order may differ: a transaction whose
        commit record precedes LW can still be invisible to a snapshot taken after LW
        committed. Its events must remove keys from the chunk like window events do
        (ChunkResult). Invisible are the snapshot's in-progress list (xip) and every xid
        from its xmax on; the latter cannot be listed from the snapshot, so the statement
        also takes an xid of its own, N: every transaction running at the snapshot has an
        xid below N, and [xmax, N) covers them. ``conn``: a parallel reader's connection.
        ``texts``: the rows as JSON texts, read by COPY in the same transaction
        (sources/postgres/chunk_copy.py) or, where that path cannot, made a part at a time
        (core/row_text.py) from a cursor of it; either way the chunk is never in memory all at
        once as the server's result, tuples or dicts (only its texts are)."""
        with (conn or self._conn).cursor() as cur:
            # Keep every value but bool/ints as the server's text: from_pg_text then treats
            # it exactly like the text the log carries.
            psycopg2.extensions.register_type(_RAW_TEXT, cur)
            cur.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            try:
                # The snapshot is taken when this statement starts, the xid while it runs.
                cur.execute("SELECT pg_current_snapshot()::text, pg_current_xact_id()::text")
                snapshot, own = cur.fetchone()
                if read_only:  # a filtered chunk runs operator-given SQL: it may write nothing
                    cur.execute("SET TRANSACTION READ ONLY")
                copied = self._copy_chunk(conn or self._conn, cur, schema, sql, params) if texts else None
                if copied is not None:
                    keys, rows, key_texts = copied
                elif texts:
                    collected = ChunkTexts(schema)
                    # A cursor by SQL: psycopg2's named cursors refuse an autocommit connection,
                    # and this transaction is begun by hand.
                    cur.execute(f"DECLARE dblog_chunk NO SCROLL CURSOR FOR {sql}", [_to_param(p) for p in params])
                    while True:
                        cur.execute(f"FETCH FORWARD {PART_ROWS} FROM dblog_chunk")
                        part = cur.fetchall()
                        if not part:
                            break
                        collected.add(self._canonical(schema, part, [d.type_code for d in cur.description]))
                else:
                    cur.execute(sql, [_to_param(p) for p in params])
                    raw = cur.fetchall()
                    oids = [d.type_code for d in cur.description]
            finally:
                # Nothing was written: ROLLBACK ends it (and also clears an error).
                cur.execute("ROLLBACK")
        invisible = invisible_xids(snapshot, int(own))
        if copied is not None:
            return ChunkResult(rows, invisible, keys, texts=True, key_texts=key_texts)
        if texts:
            return ChunkResult(collected.rows, invisible, collected.keys, texts=True)
        return ChunkResult(self._canonical(schema, raw, oids), invisible)

    def _copy_chunk(self, conn, cur, schema, sql: str, params: list) -> Optional[tuple[list, Any, Any]]:
        """(keys, row texts, key texts) of the chunk by COPY (sources/postgres/chunk_copy.py), or
        None: read it with the cursor."""
        if not self._copy.on:
            return None
        names = [c.name for c in schema.columns]
        key = [names.index(k) for k in schema.key]
        params = [_to_param(p) for p in params]
        return self._copy.read(conn, cur, schema.table, names, self._kinds(schema), key, sql, params)

    def _kinds(self, schema) -> list[str]:
        """Each column's pg_kind (of its base type for a domain)."""
        info = self._info(schema.table)
        return [pg_kind(info.base_types.get(c.name, c.type)) for c in schema.columns]

    def _canonical(self, schema, raw: list, oids: list) -> list[dict]:
        """Rows as dicts of canonical values (the server's text as the log carries it)."""
        info = self._info(schema.table)
        names = [c.name for c in schema.columns]
        kinds = self._kinds(schema)
        # Per column, not per value: which columns still need a text -> canonical step.
        convert = [oid not in _C_CANONICAL_OIDS and k != "text" for oid, k in zip(oids, kinds)]
        if self._native_rows.on:
            native = self._native_rows.chunk_rows(names, kinds, convert, raw)
            if native is not None:
                return native
        todo = [(n, converter(info.base_types.get(n, c.type))) for n, c, f in zip(names, schema.columns, convert) if f]
        rows = [dict(zip(names, r)) for r in raw]
        for n, conv in todo:
            for row in rows:
                v = row[n]
                if v is not None:
                    row[n] = conv(v)
        return rows

    # -- progress ----------------------------------------------------------------------
    @on_connection_loss
    def acknowledge(self, position: Position) -> None:
        lsn = commit_lsn_of(position)
        if lsn <= self._acked:
            return
        self._acked = lsn
        if self._stream is not None:
            # The commit LSN, not beyond: a restart from this position needs that
            # transaction again (see the module docstring).
            self._stream.feedback(lsn)

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

    @on_connection_loss
    def log_status(self) -> dict:
        """Lag (WAL bytes not yet read), retained WAL, and a warning when the slot's WAL is at
        risk; PositionLostError when the slot is gone or lost its WAL (checked every status
        report, so a capture notices even while it has nothing to read)."""
        with self._cur() as cur:
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
        # Before anything was read, reading starts where the slot is confirmed.
        read = max(
            self._stream.data_start if self._stream is not None else 0,
            self._stream.wal_end if self._stream is not None else 0,
            self._acked,
            parse_lsn(confirmed) if confirmed else 0,
        )
        warning = retention_warning(self.slot_name, wal_status, safe, keep)
        warnings = ([warning] if warning else []) + list(self._partitions.warnings)
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
            "partitions": {t: len(ls) for t, ls in (self._partitions.leaves or {}).items()},
            "warnings": warnings,
        }

    def _close_stream(self) -> None:
        if self._repl_conn is not None:
            try:
                self._repl_conn.close()
            except psycopg2.Error:
                pass
        self._repl_conn = self._cursor = self._stream = None

    def close(self) -> None:
        self._close_stream()
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


def invisible_xids(snapshot: str, own_xid: int) -> frozenset[str]:
    """The transactions a snapshot ('xmin:xmax:xip,...') does not see that were running when
    it was taken, as the 32-bit xids the log carries (``own_xid`` was assigned after it)."""
    _xmin, xmax, xip = snapshot.split(":")
    xids = {int(x) for x in xip.split(",") if x}
    xids.update(range(int(xmax), own_xid))
    return frozenset(str(x & 0xFFFFFFFF) for x in xids)


def _to_param(value: Any) -> Any:
    """Canonical key value -> query parameter (the placeholder casts it to the column type)."""
    if isinstance(value, dict) and "$b64" in value:
        return psycopg2.Binary(base64.b64decode(value["$b64"]))
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return value
