"""Binlog capture for the MySQL/MariaDB source: positions and the reader thread.

mysql-replication's BinLogStreamReader blocks on its socket, so it runs in a daemon thread
that decodes rows events into DBLog log items and hands them over through a bounded queue
(a full queue blocks the thread: backpressure instead of unbounded memory).

Position coordinate (fixed width, so string order is log order):
    FFFFFF TTTTTTTTTTTT EEEEEEEEEEEE RRRRRR
    binlog file number, offset of the transaction's first event (GTID or BEGIN), offset of
    the rows event, index of the row inside the rows event.
A transaction never spans binlog files and later transactions start at later offsets, so
the order is the commit order; restarting at the transaction start re-sends the whole
transaction, including its table map events, which a mid-transaction start would miss.
With ``use_gtid`` the coordinate is built from the transaction's GTID instead (mysql_gtid.py),
so that it keeps its meaning on a promoted replica.
"""

from __future__ import annotations

import itertools
import logging
import queue
import re
import socket
import threading
import time
from typing import Any, Callable, Optional

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    NotImplementedEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    PartialUpdateRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from ...core import names
from ...core.batch import LogRows
from ...core.errors import ConfigurationError, PositionLostError
from ...core.events import ChangeEvent, Op, Origin, Position, SchemaEvent, TableSchema, WatermarkEvent
from ...core.row_text import loads_row
from . import table_maps as mysql_table_maps
from .catalog import ConnectionSettings, library_connect, library_connection_settings
from .gtid import History, encode_gtid_coord, gtid_coord_prefix, parse_gtid
from .log_markers import BinlogMarkers
from .rows_native import NativeRows
from .tagged_gtid import GTID_TAGGED_LOG_EVENT, TaggedGtidError, decode_tagged_gtid
from .values import binlog_converters

log = logging.getLogger(__name__)
mysql_table_maps.install()

# How long to wait for a killed predecessor's binlog dump thread to go away (seconds).
_SAME_SERVER_ID_WAIT = 120.0

_FILE_W, _OFF_W, _ROW_W = 6, 12, 6
# The row-index part of a coordinate for the first rows of an event, made once (_take_rows).
_ROW_PARTS = [f"{i:0{_ROW_W}d}" for i in range(2048)]
_ZEROS = itertools.repeat(0)  # sub 0 for every row
_COORD = f"%0{_FILE_W}d%0{_OFF_W}d%0{_OFF_W}d%0{_ROW_W}d"  # file, transaction, event, row
# The event classes the reader asks mysql-replication for: it drops every other one unread.
STREAM_EVENTS = [
    WriteRowsEvent,
    UpdateRowsEvent,
    PartialUpdateRowsEvent,  # only to stop on it (BinlogReader._partial_update)
    DeleteRowsEvent,
    TableMapEvent,
    RotateEvent,
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
    NotImplementedEvent,  # with filter_non_implemented_events=False: tagged GTIDs, compression
    HeartbeatLogEvent,  # an idle server's position (read-only watermarks, mysql/log_markers.py)
]
_ANONYMOUS_GTID = 0x22  # MySQL's GTID event when gtid_mode is OFF (parsed as NotImplementedEvent)
# Events the library cannot decode but that may carry row changes: failing beats skipping.
# (what, the setting that turns it off); both settings can also be set per session.
_UNDECODABLE = {
    0x28: (
        "MySQL binlog transaction compression (binlog_transaction_compression=ON, event Transaction_payload)",
        "SET GLOBAL binlog_transaction_compression = OFF",
    ),
    **{
        t: ("MariaDB binlog compression (log_bin_compress=ON)", "SET GLOBAL log_bin_compress = OFF")
        for t in range(165, 172)
    },
}


# TRUNCATE [TABLE] [db.]name [WAIT n | NOWAIT], names bare or in backticks, after comments.
_NAME = r"(?:`((?:[^`]|``)+)`|([^`.\s;]+))"
_TRUNCATE = re.compile(
    rf"^\s*(?:/\*.*?\*/\s*)*TRUNCATE\s+(?:TABLE\s+)?{_NAME}(?:\s*\.\s*{_NAME})?"
    r"(?:\s+(?:WAIT\s+\d+|NOWAIT))?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)


def truncated_table(query: str, current_db: str, captured: set[str]) -> Optional[str]:
    """The captured table a TRUNCATE statement empties (unqualified names are in the
    statement's current database), or None (another statement, another table)."""
    m = _TRUNCATE.match(query)
    if not m:
        return None
    first = m.group(1).replace("``", "`") if m.group(1) is not None else m.group(2)
    second = m.group(3).replace("``", "`") if m.group(3) is not None else m.group(4)
    name = names.table_name(first, second) if second is not None else names.table_name(current_db, first)
    if name in captured:
        return name
    # Names compare case-insensitively where the server does (lower_case_table_names).
    return next((t for t in captured if t.lower() == name.lower()), None)


def encode_coord(file_number: int, txn_start: int, event_pos: int, row_index: int) -> str:
    if file_number >= 10**_FILE_W or max(txn_start, event_pos) >= 10**_OFF_W or row_index >= 10**_ROW_W:
        raise ValueError(f"binlog coordinate out of range: {file_number}/{txn_start}/{event_pos}/{row_index}")
    return _COORD % (file_number, txn_start, event_pos, row_index)


def decode_coord(coord: str) -> tuple[int, int, int, int]:
    if len(coord) != _FILE_W + 2 * _OFF_W + _ROW_W or not coord.isdigit():
        raise ValueError(f"not a MySQL binlog position: {coord!r}")
    a, b, c = _FILE_W, _FILE_W + _OFF_W, _FILE_W + 2 * _OFF_W
    return int(coord[:a]), int(coord[a:b]), int(coord[b:c]), int(coord[c:])


def file_number(name: str) -> int:
    """'mysql-bin.000042' -> 42."""
    return int(name.rsplit(".", 1)[1])


class _QuietWhileStopping(logging.Filter):
    """Drops the library's 'Re-request the connection' warning caused by our own close()."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.threadName not in self.threads


_QUIET = _QuietWhileStopping()
logging.getLogger("pymysqlreplication").addFilter(_QUIET)


class _Stopped(Exception):
    """Raised into the library's reconnect path once close() was asked for."""


class Items(list):
    """One event's log items, with the event's commit time (seconds; binlog resolution)."""

    def __init__(self, items: list, ts: Optional[float]):
        super().__init__(items)
        self.ts = ts


class ChangeQueue(queue.Queue):
    """The reader thread's queue, bounded in changes, not in events: a rows event holds from
    one row to hundreds (a block, core/batch.py), so a bound in events let a fast reader queue
    a million and more changes ahead of a slower writer (1.5 GB under one 10-million-row
    transaction, docs/benchmarks.md). ``maxsize`` is the number of changes; an event that
    arrives below it is queued whole."""

    def _init(self, maxsize: int) -> None:
        super()._init(maxsize)
        self._changes = 0

    def _qsize(self) -> int:
        return self._changes

    def _put(self, item: Any) -> None:
        self._changes += changes_in(item)
        super()._put(item)

    def _get(self) -> Any:
        item = super()._get()
        self._changes -= changes_in(item)
        return item


def changes_in(item: Any) -> int:
    """The changes one queued item stands for (a Failure: 1)."""
    if item.__class__ is not Items:
        return 1
    return sum(len(i) if i.__class__ is LogRows else 1 for i in item) or 1


class Failure:
    """The reader thread's error, queued after the items it delivered before failing."""

    def __init__(self, error: BaseException):
        self.error = error


def _table_map_signature(columns: list) -> tuple:
    """Everything the table map says about the columns: any change means a new schema."""
    return tuple(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in c.data.items())) for c in columns)


class BinlogReader(threading.Thread):
    """Streams the binlog from (log_file, log_pos) and queues lists of LogItems or a Failure."""

    def __init__(
        self,
        *,
        settings: ConnectionSettings,
        server_id: int,
        log_file: str,
        log_pos: int,
        schemas: list[str],
        source_id: str,
        captured: set[str],
        watermark_table: str,
        schema_for: Callable[[str, list], TableSchema],  # (table, table-map columns)
        out: "queue.Queue[Any]",
        heartbeat: float = 10.0,
        guard: Optional[Callable[[], None]] = None,  # raises once this process may not read the log
        history: Optional[History] = None,  # GTID positions: the history before (log_file, log_pos)
        era: int = 0,  # GTID positions: their era (mysql_gtid.py)
        texts: bool = False,  # row images as their changelog JSON text where it can (start_log)
        markers: Optional[BinlogMarkers] = None,  # read-only watermarks (mysql/log_markers.py)
    ):
        super().__init__(name=f"dblog-binlog-{source_id}-{id(self):x}", daemon=True)
        self._markers = markers
        # Held while an event is turned into items and queued: a marker the reader has already
        # passed is queued from another thread (offer_markers) only between two events.
        self._emit_lock = threading.Lock()
        self._settings = settings
        self._server_id = server_id
        self._schemas = schemas
        self._source_id = source_id
        self._captured = captured
        self._watermark_table = watermark_table
        self._schema_for = schema_for
        self._out = out
        self._heartbeat = heartbeat
        self._guard = guard
        self.connection_ids: list[int] = []  # server thread ids of the connections opened last
        self._stop_flag = threading.Event()
        self._stream: Optional[BinLogStreamReader] = None
        # Where the reader is (read by log_status from another thread; plain attributes).
        self.file, self.pos = log_file, log_pos
        self._start = (log_file, log_pos)
        self._txn_start, self._group_open = log_pos, False
        self._gtid: Optional[str] = None  # the open transaction's GTID
        # GTID mode: the server's GTID history, the open transaction's counter and rows so far.
        self.history, self._era = history, era
        self._counter, self._txn_rows = 0, 0
        self.event_ts: Optional[float] = None  # commit time of the last event read
        self._signatures: dict[str, tuple] = {}
        self._table_schemas: dict[str, TableSchema] = {}
        self._emitted: dict[str, str] = {}
        self._converters: dict[str, tuple] = {}  # schema id -> (column names, converters)
        self._native = NativeRows()  # the compiled rows decoder, when built (mysql_rows_native.py)
        self._texts = texts
        self._key_columns: dict[str, list[int]] = {}  # schema id -> indices of its key columns

    # -- thread ----------------------------------------------------------------------------
    def _connect(self, **kwargs: Any) -> pymysql.connections.Connection:
        # Also called by the library's reconnect-on-2013 loop: stop it once we are closing.
        if self._stop_flag.is_set():
            raise _Stopped()
        if self._guard is not None:
            self._guard()  # StaleEpochError: a deposed leader opens no binlog connection
        conn = library_connect(**kwargs)
        setattr(conn, mysql_table_maps.CACHE_MARK, True)  # table maps parsed once per definition
        self.connection_ids = [*self.connection_ids[-1:], conn.thread_id()]  # the stream's and its control's
        return conn

    def run(self) -> None:
        # After a kill -9 of an earlier capture, MariaDB keeps its binlog dump thread until a
        # write to the dead socket fails (the next event or heartbeat) and meanwhile refuses
        # a reader with the same server_id (error 4052). Retry that, before any event only.
        deadline = time.monotonic() + _SAME_SERVER_ID_WAIT
        retries = 0
        while True:
            self._received = False
            failure = self._stream_once()
            if (
                isinstance(failure, pymysql.err.OperationalError)
                and failure.args
                and failure.args[0] == 4052
                and not self._received
                and time.monotonic() < deadline
                and not self._stop_flag.is_set()
            ):
                if not retries:
                    log.info("a previous reader with server_id %s is still registered; retrying", self._server_id)
                retries += 1
                # Short steps: a new leader just ended that reader, and the server lets it go
                # within a moment (a takeover's first row waited up to a whole step more).
                time.sleep(0.1)
                continue
            if failure is not None and not self._stop_flag.is_set():
                self._put(Failure(self._translate(failure)))
            _QUIET.threads.discard(self.name)
            return

    def _stream_once(self) -> Optional[BaseException]:
        s = self._settings
        read_timeout = max(30, int(self._heartbeat * 3))
        try:
            # Plain file/position mode (is_mariadb=False) for MariaDB too: the library's
            # MariaDB mode always sends an empty file name and ignores log_file/log_pos.
            self._stream = BinLogStreamReader(
                connection_settings=library_connection_settings(s, read_timeout=read_timeout),
                server_id=self._server_id,
                log_file=self._start[0],
                log_pos=self._start[1],
                resume_stream=True,  # else the library starts (and reconnects) at offset 4
                blocking=True,
                only_schemas=self._schemas,
                only_events=STREAM_EVENTS,
                filter_non_implemented_events=False,
                slave_heartbeat=self._heartbeat,
                pymysql_wrapper=self._connect,
                enable_logging=False,  # its parameter dump is noise
            )
            while not self._stop_flag.is_set():
                event = self._stream.fetchone()
                if event is None:
                    if self._stop_flag.is_set():
                        break
                    # A server shutting down ends the stream: a connection loss to reconnect.
                    raise ConnectionResetError("the server ended the binlog stream unexpectedly")
                self._received = True
                with self._emit_lock:
                    items = self._handle(event)
                    if event.packet.timestamp:
                        self.event_ts = float(event.packet.timestamp)
                    if items:
                        self._put(Items(items, self.event_ts))
            return None
        except _Stopped:
            return None
        except BaseException as exc:  # noqa: BLE001 - handed to poll() by run()
            return exc
        finally:
            try:
                if self._stream is not None:
                    self._stream.close()
            except Exception as broken:  # noqa: BLE001 - the stream failed already; keep its error
                log.debug("closing the binlog stream: %s", broken)

    def _translate(self, exc: BaseException) -> BaseException:
        code = exc.args[0] if isinstance(exc, pymysql.err.MySQLError) and exc.args else None
        msg = exc.args[1] if isinstance(exc, pymysql.err.MySQLError) and len(exc.args) > 1 else str(exc)
        if code == 1236:  # ER_MASTER_FATAL_ERROR_READING_BINLOG: purged, truncated or reset
            return PositionLostError(
                f"the server cannot send its binlog from {self._start[0]}:{self._start[1]} ({msg})."
            )
        if code in (1227, 1045):
            return ConfigurationError(
                f"the server refused the binlog stream to {self._settings.user} ({msg}).",
                "GRANT REPLICATION SLAVE ON *.* TO the source's user.",
            )
        return exc

    def offer_markers(self) -> bool:
        """Queue the read-only watermarks the reader has already passed, now, instead of at the
        next event or heartbeat (up to READ_ONLY_HEARTBEAT later: on a quiet server that was
        most of a chunk's time). Only between two events and with no transaction open, so the
        stream's order holds; never blocks (the caller is the queue's consumer). True if it
        queued any."""
        markers = self._markers
        if not markers or not self._emit_lock.acquire(blocking=False):
            return False  # none waiting, or an event is being queued: the next one brings them
        try:
            if self._group_open or self._out.full():
                return False
            due = markers.due(file_number(self.file), self.pos)
            if due:
                self._out.put_nowait(Items(due, self.event_ts))
            return bool(due)
        finally:
            self._emit_lock.release()

    def _put(self, item: Any) -> None:
        while not self._stop_flag.is_set():
            try:
                self._out.put(item, timeout=0.5)
                return
            except queue.Full:
                continue

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_flag.set()
        if self.is_alive():
            _QUIET.threads.add(self.name)
        stream = self._stream
        conn = getattr(stream, "_stream_connection", None) if stream is not None else None
        sock = getattr(conn, "_sock", None)
        if sock is not None:
            try:  # wakes the blocked recv() at once, unlike close() from another thread
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)

    # -- decoding --------------------------------------------------------------------------
    def _handle(self, ev: Any) -> list:
        """``_handle_event``, with the read-only watermarks the binlog passed put around its
        items (mysql/log_markers.py): those at or before the event's start when it opens no
        transaction's middle, and those at or before its end once no transaction is open."""
        markers = self._markers
        if not markers:
            return self._handle_event(ev)
        assert markers is not None
        before: list = []
        if not self._group_open and not isinstance(ev, (RotateEvent, HeartbeatLogEvent)):
            pk = ev.packet
            before = markers.due(file_number(self.file), pk.log_pos - pk.event_size)
        items = self._handle_event(ev)
        after = [] if self._group_open else markers.due(file_number(self.file), self.pos)
        return before + items + after if before or after else items

    def _handle_event(self, ev: Any) -> list:
        pk = ev.packet
        start = pk.log_pos - pk.event_size
        if isinstance(ev, RotateEvent):
            self.file, self.pos = ev.next_binlog, ev.position
            return []
        if isinstance(ev, HeartbeatLogEvent):  # the server's position while it has nothing to send
            if not self._group_open and ev.ident == self.file and pk.log_pos > self.pos:
                self.pos = pk.log_pos
            return []
        if pk.log_pos:
            self.pos = pk.log_pos
        if isinstance(ev, (MariadbGtidEvent, GtidEvent)):
            self._begin_gtid(start, ev.gtid)
        elif isinstance(ev, NotImplementedEvent):
            if pk.event_type == GTID_TAGGED_LOG_EVENT:
                self._begin_gtid(start, self._tagged_gtid(ev, start))
            elif self.history is not None and pk.event_type == _ANONYMOUS_GTID:
                raise ConfigurationError(
                    "use_gtid is set, but the binlog holds transactions without a GTID (gtid_mode is OFF).",
                    "set use_gtid = false (file positions), or turn GTIDs on (gtid_mode = ON).",
                )
            elif pk.event_type == _ANONYMOUS_GTID:
                self._txn_start, self._gtid, self._group_open = start, None, True
            elif pk.event_type in _UNDECODABLE:
                what, setting = _UNDECODABLE[pk.event_type]
                raise ConfigurationError(
                    f"the binlog holds events DBLog cannot decode at {self.file}:{start}: {what}.",
                    f"turn that compression off ({setting}, the same in my.cnf, and in no session), "
                    "then restart the capture from a new full dump "
                    "(`dblog capture --reset-position`, `dblog dump --all`).",
                )
        elif isinstance(ev, QueryEvent):
            query = ev.query.strip().upper() if isinstance(ev.query, str) else ""
            if query == "BEGIN":
                if not self._group_open:  # no GTID event before it (old servers)
                    self._no_gtid(start)
                self._group_open = True
            else:
                if not self._group_open:  # a statement that is its own transaction
                    self._no_gtid(start)
                self._group_open = False
                return self._truncate(ev, start)
        elif isinstance(ev, XidEvent):
            self._group_open = False
        elif isinstance(ev, TableMapEvent):
            return self._table_map(ev, start)
        elif isinstance(ev, PartialUpdateRowsEvent):  # before UpdateRowsEvent, its base class
            self._partial_update(ev, start)
        elif isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            return self._rows(ev, start)
        return []

    def _begin_gtid(self, start: int, gtid: str) -> None:
        self._txn_start, self._gtid, self._group_open = start, gtid, True
        if self.history is not None:
            self._counter, self._txn_rows = self.history.advance(parse_gtid(gtid)), 0

    def _tagged_gtid(self, ev: Any, start: int) -> str:
        """The GTID of a MySQL 8.3+ tagged GTID event (tagged_gtid.py), from the packet's
        bytes: the library skips the body of an event type it does not know."""
        data = ev.packet.packet.get_all_data()
        body = data[20 : 20 + ev.event_size]  # after the OK byte and the 19-byte header
        try:
            return decode_tagged_gtid(body).gtid
        except TaggedGtidError as exc:
            raise ConfigurationError(
                f"the binlog holds a tagged GTID event (MySQL 8.3+, event type 42) at "
                f"{self.file}:{start} that DBLog cannot decode ({exc}), so its transaction's GTID "
                "would be lost.",
                "stop tagging transactions (SET gtid_next = 'AUTOMATIC' without a tag, and revoke "
                "TRANSACTION_GTID_TAG), then restart the capture from a new full dump "
                "(`dblog capture --reset-position`, `dblog dump --all`); please report the event "
                f"(mysqlbinlog --hexdump from {start}) as a DBLog issue.",
            ) from None

    def _partial_update(self, ev: Any, start: int) -> None:
        """binlog_row_value_options = PARTIAL_JSON (a session may set it, whatever the global
        value the start-up check read) logs updates as Update_rows_partial events whose JSON
        after-images are diffs: a captured table's rows would be wrong, so stop."""
        table = names.table_name(ev.schema, ev.table)
        if table != self._watermark_table and table not in self._captured:
            return
        raise ConfigurationError(
            f"the binlog holds a partial JSON update of {table} at {self.file}:{start} "
            "(binlog_row_value_options = PARTIAL_JSON, event Update_rows_partial): its after-image "
            "holds JSON diffs, not the rows' values.",
            "run SET GLOBAL binlog_row_value_options = '' (and in my.cnf), keep sessions from "
            "setting PARTIAL_JSON, then restart the capture from a new full dump "
            "(`dblog capture --reset-position`, `dblog dump --all`).",
        )

    def _truncate(self, ev: QueryEvent, start: int) -> list:
        """TRUNCATE is logged as a statement, without row events: a table-level event (op t,
        key (), no images) at the statement's position, for captured tables only."""
        query = ev.query if isinstance(ev.query, str) else ""
        schema = ev.schema.decode() if isinstance(ev.schema, bytes) else str(ev.schema or "")
        table = truncated_table(query, schema, self._captured)
        if table is None:
            return []
        known = self._table_schemas.get(table)
        return [
            ChangeEvent(
                self._source_id,
                table,
                Op.TRUNCATE,
                (),
                None,
                None,
                Position(self._coord(start, 0)),
                ev.packet.timestamp * 1_000_000,
                self._txid(),
                Origin.LOG,
                None,
                known.schema_id() if known is not None else None,
            )
        ]

    def _no_gtid(self, start: int) -> None:
        if self.history is not None:
            raise ConfigurationError(
                f"use_gtid is set, but the transaction at {self.file}:{start} has no GTID event.",
                "set use_gtid = false (file positions), or turn GTIDs on (MySQL: gtid_mode = ON).",
            )
        self._txn_start, self._gtid = start, None

    def _coord(self, event_pos: int, row: int) -> str:
        """A single item's coordinate (row ``row`` of the event at ``event_pos``); in GTID mode
        the row number continues the transaction's (``_take_rows`` moves it on)."""
        if self.history is not None:
            return encode_gtid_coord(self._era, self._counter, self._txn_rows + row, self._gtid or "")
        return encode_coord(file_number(self.file), self._txn_start, event_pos, row)

    def _take_rows(self, event_pos: int, count: int) -> list[Position]:
        """The positions of a rows event's ``count`` rows (GTID mode: the transaction's next
        row numbers, consumed even when no item is made of them, so that a transaction
        numbers its rows the same way on every server and after every restart)."""
        if self.history is not None:
            base, self._txn_rows = self._txn_rows, self._txn_rows + count
            head, tail = gtid_coord_prefix(self._era, self._counter), f"/{self._gtid}"
            return [Position.unchecked(f"{head}{base + i:010d}{tail}") for i in range(count)]
        if count == 1:  # a one-row transaction's event: no iterators to build
            return [tuple.__new__(Position, (self._coord(event_pos, 0), 0))]
        head = self._coord(event_pos, 0)[:-_ROW_W]  # the event's part, computed once
        rows = _ROW_PARTS[:count] if count <= len(_ROW_PARTS) else [f"{i:0{_ROW_W}d}" for i in range(count)]
        # Position.unchecked(head + row) for each row, without a Python call per row.
        return list(map(tuple.__new__, itertools.repeat(Position, count), zip(map(head.__add__, rows), _ZEROS)))

    def _txid(self) -> str:
        return self._gtid or f"{self.file}:{self._txn_start}"

    def _table_map(self, ev: TableMapEvent, start: int) -> list:
        table = names.table_name(ev.schema, ev.table)
        if table not in self._captured:
            return []
        sig = _table_map_signature(ev.columns)
        if self._signatures.get(table) == sig:
            return []
        # First sight of the table, or its columns changed (ALTER TABLE): ask the catalog.
        schema = self._schema_for(table, list(ev.columns))
        self._signatures[table] = sig
        self._native.forget(table)
        self._table_schemas[table] = schema
        sid = schema.schema_id()
        if self._emitted.get(table) == sid:
            return []
        self._emitted[table] = sid
        return [SchemaEvent(schema, Position(self._coord(start, 0)))]

    def _convert(self, schema: TableSchema, values: dict, none_sources: dict) -> dict:
        if len(values) != len(schema.columns):
            raise RuntimeError(
                f"binlog row of {schema.table} has {len(values)} columns, its schema "
                f"{len(schema.columns)}: the table changed in a way DBLog could not follow"
            )
        # By position: the names agree, and positions also work without column names.
        convs = self._converters.get(schema.schema_id())
        if convs is None:
            convs = self._converters[schema.schema_id()] = (schema.column_names(), binlog_converters(schema.columns))
        names, fns = convs
        if none_sources:
            return {n: f(v, none_sources.get(k)) for n, f, (k, v) in zip(names, fns, values.items())}
        return {n: f(v, None) for n, f, v in zip(names, fns, values.values())}

    def _images(self, ev: Any, table: str, schema: TableSchema) -> list:
        """The event's rows as (before, after) pairs of canonical images: from the compiled
        decoder, or from mysql-replication's values through ``_convert``."""
        native = self._native.rows(ev, table, schema.columns)
        if native is not None:
            return native
        convert = self._convert
        if isinstance(ev, UpdateRowsEvent):
            return [
                (
                    convert(schema, row["before_values"], row["before_none_sources"]),
                    convert(schema, row["after_values"], row["after_none_sources"]),
                )
                for row in ev.rows
            ]
        if isinstance(ev, WriteRowsEvent):
            return [(None, convert(schema, row["values"], row["none_sources"])) for row in ev.rows]
        return [(convert(schema, row["values"], row["none_sources"]), None) for row in ev.rows]

    def _rows(self, ev: Any, start: int) -> list:
        table = names.table_name(ev.schema, ev.table)
        if table != self._watermark_table and table not in self._captured:
            return []  # not decoded, not numbered
        if table == self._watermark_table:
            return self._watermarks(ev, self._take_rows(start, len(ev.rows)))
        schema = self._table_schemas[table]
        # The event's kind, once per event; a key change keeps the old key in before.
        op = (
            Op.UPDATE if isinstance(ev, UpdateRowsEvent) else Op.CREATE if isinstance(ev, WriteRowsEvent) else Op.DELETE
        )
        texts = self._texts and self._native.texts(ev, table, schema.columns, self._key_indices(schema))
        if texts:
            return self._text_rows(ev, start, schema, op, texts)
        images = self._images(ev, table, schema)
        positions = self._take_rows(start, len(images))
        sid = schema.schema_id()
        commit_ts = ev.packet.timestamp * 1_000_000
        txid = self._txid()
        key_of, src = schema.key_getter(), self._source_id
        keyed = 0 if op is Op.DELETE else 1
        # Positional ChangeEvent arguments (every row).
        return [
            ChangeEvent(
                src, table, op, key_of(pair[keyed]), pair[0], pair[1], pos, commit_ts, txid, Origin.LOG, None, sid
            )
            for pair, pos in zip(images, positions)
        ]

    def _key_indices(self, schema: TableSchema) -> list[int]:
        sid = schema.schema_id()
        indices = self._key_columns.get(sid)
        if indices is None:
            names = schema.column_names()
            indices = self._key_columns[sid] = [names.index(k) for k in schema.key]
        return indices

    def _text_rows(self, ev: Any, start: int, schema: TableSchema, op: Op, rows: list) -> list:
        """ChangeEvents of the compiled decoder's (before_key, after_key, before, after) rows,
        images as JSON text (start_log's ``texts``). An update that changes the key keeps dict
        images, which the engine splits into a delete and a create."""
        positions = self._take_rows(start, len(rows))
        sid, table, src = schema.schema_id(), schema.table, self._source_id
        commit_ts = ev.packet.timestamp * 1_000_000
        txid = self._txid()
        keyed = 0 if op is Op.DELETE else 1
        before_keys, after_keys, befores, afters = zip(*rows)
        if op is not Op.UPDATE or before_keys == after_keys:
            # The usual case: the event's changes as one block (core/batch.py).
            keys = after_keys if keyed else before_keys
            return [LogRows(src, table, op, sid, commit_ts, txid, keys, befores, afters, positions)]
        return [
            ChangeEvent(src, table, op, row[keyed], row[2], row[3], pos, commit_ts, txid, Origin.LOG, None, sid)
            if op is not Op.UPDATE or row[0] == row[1]
            else ChangeEvent(
                src,
                table,
                op,
                row[1],
                loads_row(row[2]),
                loads_row(row[3]),
                pos,
                commit_ts,
                txid,
                Origin.LOG,
                None,
                sid,
            )
            for row, pos in zip(rows, positions)
        ]

    def _watermarks(self, ev: Any, positions: list[Position]) -> list:
        if isinstance(ev, DeleteRowsEvent):
            return []
        out = []
        for i, row in enumerate(ev.rows):
            values = row["after_values"] if isinstance(ev, UpdateRowsEvent) else row["values"]
            # (source_id, value, updated_at): by name, or by position without column names.
            source_id, value = values.get("source_id"), values.get("value")
            if "source_id" not in values:
                source_id, value = list(values.values())[:2]
            if source_id == self._source_id:  # other sources share the table
                out.append(WatermarkEvent(str(value), positions[i], self._txid()))
        return out
