"""An in-memory database, source and changelog for unit tests of the engine and scheduler.

``MemoryDatabase`` holds tables and a commit log; ``MemorySource`` implements the Source
protocol over it (watermark writes are log items too, chunk SELECTs read the current rows) with
hooks to run concurrent writes inside a chunk's window and to lose the connection;
``MemoryChangelog`` is an Output that keeps every event. Pure Python, no servers: the engine's
logic is tested here, the real databases in tests/integration.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Iterator, Optional, Sequence

from airflow_provider_dblog.core.errors import PositionLostError, RequestError, SchemaChanged, SourceUnavailable
from airflow_provider_dblog.core.events import (
    ChangeEvent,
    Column,
    Key,
    LogItem,
    Op,
    Position,
    Row,
    TableSchema,
    WatermarkEvent,
)
from airflow_provider_dblog.core.protocols import ChunkResult

SOURCE_ID = "mem"
TABLE = "app.items"
SCHEMA = TableSchema(TABLE, (Column("id", "integer", False), Column("v", "text")), ("id",))


class MemoryDatabase:
    """Tables of rows by key, and the committed log in commit order (thread-safe)."""

    def __init__(self, schemas: Sequence[TableSchema] = (SCHEMA,)):
        self.schemas = {s.table: s for s in schemas}
        self.rows: dict[str, dict[Key, Row]] = {s.table: {} for s in schemas}
        self.log: list[LogItem] = []
        self._lock = threading.Lock()
        self._seq = 0
        self._tx = threading.local()  # the open transaction's id, per thread (transaction())

    def _position(self) -> Position:
        self._seq += 1
        return Position(f"{self._seq:012d}")

    def _txid(self) -> str:
        """The open transaction's id, else this change's own (one change, one transaction)."""
        return getattr(self._tx, "txid", None) or str(self._seq)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """The changes made inside (by this thread) share one transaction id."""
        with self._lock:
            self._tx.txid = str(self._seq + 1)
        try:
            yield
        finally:
            self._tx.txid = None

    def upsert(self, table: str, row: Row) -> Position:
        with self._lock:
            key = self.schemas[table].key_of(row)
            before = self.rows[table].get(key)
            self.rows[table][key] = dict(row)
            op = Op.CREATE if before is None else Op.UPDATE
            pos = self._position()
            self.log.append(ChangeEvent(SOURCE_ID, table, op, key, before, dict(row), pos, txid=self._txid()))
            return pos

    def update(self, table: str, key: Key, values: Row) -> Position:
        """UPDATE .. SET ``values`` of the row with ``key``, which may change its key (the
        event has the new key, ``before`` the old row)."""
        with self._lock:
            schema = self.schemas[table]
            before = self.rows[table].pop(key)
            after = {**before, **values}
            new_key = schema.key_of(after)
            self.rows[table][new_key] = after
            pos = self._position()
            self.log.append(
                ChangeEvent(SOURCE_ID, table, Op.UPDATE, new_key, before, dict(after), pos, txid=self._txid())
            )
            return pos

    def delete(self, table: str, key: Key) -> Position:
        with self._lock:
            before = self.rows[table].pop(key)
            pos = self._position()
            self.log.append(ChangeEvent(SOURCE_ID, table, Op.DELETE, key, before, None, pos, txid=self._txid()))
            return pos

    def truncate(self, table: str) -> Position:
        """TRUNCATE: every row goes, and one table-level event (op t, key ()) is logged."""
        with self._lock:
            self.rows[table].clear()
            pos = self._position()
            self.log.append(ChangeEvent(SOURCE_ID, table, Op.TRUNCATE, (), None, None, pos, txid=self._txid()))
            return pos

    def alter(self, schema: TableSchema, fill: Callable[[Row], Row]) -> None:
        """ALTER TABLE: a new shape, every row rewritten by ``fill``, nothing in the log (as
        an added column's default on PostgreSQL and MariaDB)."""
        with self._lock:
            self.schemas[schema.table] = schema
            rows = [fill(dict(r)) for r in self.rows[schema.table].values()]
            self.rows[schema.table] = {schema.key_of(r): r for r in rows}  # by the new key

    def watermark(self, uuid: str) -> None:
        with self._lock:
            pos = self._position()
            self.log.append(WatermarkEvent(uuid, pos, str(self._seq)))

    def create(self, schema: TableSchema) -> None:
        """CREATE TABLE: a new, empty table."""
        with self._lock:
            self.schemas[schema.table] = schema
            self.rows[schema.table] = {}

    def drop(self, table: str) -> None:
        """DROP TABLE (nothing in the log)."""
        with self._lock:
            del self.schemas[table], self.rows[table]

    def snapshot(self, table: str) -> dict[Key, Row]:
        """The table's rows; RequestError when there is no such table (as a chunk SELECT's)."""
        with self._lock:
            if table not in self.rows:
                raise RequestError(f"table {table} does not exist (test).", "dump it again once it exists.")
            return {k: dict(r) for k, r in self.rows[table].items()}


class MemorySource:
    """The Source protocol over a MemoryDatabase.

    ``in_window``: called after each chunk SELECT, before its high watermark is written (so
    its writes land inside the window). ``unavailable``: while it returns True, every call
    that talks to the "server" raises SourceUnavailable (a lost connection)."""

    def __init__(self, db: MemoryDatabase):
        self.source_id = SOURCE_ID
        self.db = db
        self.in_window: Optional[Callable[[TableSchema, list[Row]], None]] = None
        self.unavailable: Callable[[], bool] = lambda: False
        self.opens = 0
        self.chunk_selects = 0
        self.acknowledged: Optional[Position] = None
        self.purged_before: Optional[Position] = None  # set: the log before it is gone (a purge)
        self._cursor: Optional[int] = None

    def _server(self) -> None:
        if self.unavailable():
            self._cursor = None
            raise SourceUnavailable("the in-memory server is down (test).")

    def open(self) -> None:
        self._server()
        self.opens += 1

    def tables(self) -> list[str]:
        return list(self.db.schemas)

    def table_schema(self, table: str) -> TableSchema:
        self._server()
        if table not in self.db.schemas:
            raise RequestError(f"table {table} does not exist.", "name a captured table.")
        return self.db.schemas[table]

    def catalog_schema(self, table: str) -> TableSchema:
        return self.table_schema(table)

    def reset_log(self) -> None:
        self.purged_before = None  # a new "slot": readable from the end

    def start_log(self, after: Optional[Position], from_end: bool = False, floor: Optional[Position] = None) -> None:
        self._server()
        log = self.db.log
        if after is not None and self.purged_before is not None and after < self.purged_before:
            raise PositionLostError(f"the log before {self.purged_before} is gone (test).")
        if from_end:
            self._cursor = len(log)
        elif after is None:
            self._cursor = 0
        else:  # like PostgreSQL: from the transaction of ``after`` on (a redelivery included)
            self._cursor = next((i for i, item in enumerate(log) if item.position >= after), len(log))

    def poll(self, max_items: int, timeout: float) -> list[LogItem]:
        self._server()
        if self._cursor is None:
            raise RuntimeError("poll() before start_log()")
        items = self.db.log[self._cursor : self._cursor + max_items]
        if not items:
            time.sleep(min(timeout, 0.005))
        self._cursor += len(items)
        return items

    def write_watermark(self, uuid: str) -> None:
        self._server()
        self.db.watermark(uuid)

    def _result(self, schema: TableSchema, rows: list[Row]) -> ChunkResult:
        """The rows as SELECT <schema's columns> gives them: a column the table no longer
        has fails the SELECT (as a dropped or renamed column does on a real server)."""
        gone = [c.name for c in schema.columns if c.name not in {c.name for c in self.db.schemas[schema.table].columns}]
        if gone:
            raise SchemaChanged(f"column {gone[0]} of {schema.table} does not exist (test).")
        rows = [{c.name: r.get(c.name) for c in schema.columns} for r in rows]
        if self.in_window is not None:
            self.in_window(schema, rows)
        return ChunkResult(rows)

    replica_lag: Optional[float] = None  # what replication_lag reports (adaptive dump tests)

    def replication_lag(self) -> Optional[float]:
        return self.replica_lag

    def check_predicate(self, schema: TableSchema, where: str) -> None:
        try:
            compile(where, "<where>", "eval")  # the fake's filters are Python expressions over the row
        except SyntaxError as exc:
            raise RequestError(f"the row filter {where!r} is not valid: {exc} (test).", "fix the filter.") from None

    @staticmethod
    def _matches(where: str, row: Row) -> bool:
        try:
            return bool(eval(where, {}, dict(row)))  # noqa: S307 - test fake
        except Exception as exc:  # a filter the "database" refuses fails that dump
            raise RequestError(f"the row filter {where!r} failed: {exc} (test).", "fix the filter.") from None

    def select_chunk(
        self,
        schema: TableSchema,
        after_key: Optional[Key],
        limit: int,
        upper_key: Optional[Key] = None,
        where: Optional[str] = None,
    ) -> ChunkResult:
        self._server()
        self.chunk_selects += 1
        snap = self.db.snapshot(schema.table)
        keys = sorted(
            k
            for k in snap
            if (after_key is None or k > after_key)
            and (upper_key is None or k <= upper_key)
            and (where is None or self._matches(where, snap[k]))
        )[:limit]
        return self._result(schema, [snap[k] for k in keys])

    def chunk_readers(self, n: int) -> list[Callable[..., ChunkResult]]:
        """Parallel readers (--readers): the same SELECT, called from the engine's threads."""
        self.readers_asked = max(getattr(self, "readers_asked", 0), n)
        return [self.select_chunk] * n

    def max_key(self, schema: TableSchema) -> Optional[Key]:
        self._server()
        return max(self.db.snapshot(schema.table), default=None)

    def select_keys(self, schema: TableSchema, keys: Sequence[Key]) -> ChunkResult:
        self._server()
        snap = self.db.snapshot(schema.table)
        return self._result(schema, [snap[k] for k in sorted(keys) if k in snap])

    def acknowledge(self, position: Position) -> None:
        self.acknowledged = position

    def estimate_rows(self, table: str) -> int:
        return len(self.db.rows.get(table, {}))

    def take_unchanged_toast(self) -> list[tuple[str, Key, Position]]:
        return []

    def log_status(self) -> dict[str, Any]:
        return {"lag_bytes": 0, "warnings": []}

    def close(self) -> None:
        self._cursor = None


class MemoryChangelog:
    """An Output keeping every event in commit order; ``gate`` (when set) holds each commit
    until it is set, so a test can look at the state while a commit is under way."""

    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []
        self.commits: list[list[ChangeEvent]] = []
        self.schemas: list[TableSchema] = []
        self.gate: Optional[threading.Event] = None
        self.epochs: list[Optional[int]] = []
        self.down: Callable[[], bool] = lambda: False  # True: every write fails (an outage)
        self.refused = 0

    def open(self) -> None:
        pass

    def register_schema(self, schema: TableSchema) -> None:
        self.schemas.append(schema)

    def register_schemas(self, schemas: Sequence[TableSchema]) -> None:
        self.schemas.extend(schemas)

    def write(self, events: Sequence[ChangeEvent], epoch: Optional[int] = None) -> None:
        if self.gate is not None:
            self.gate.wait(30)
        if self.down():
            self.refused += 1
            raise ConnectionError("the broker is down")
        last = self.last_position(SOURCE_ID)
        fresh = [e for e in events if last is None or e.position > last]
        self.commits.append(fresh)
        self.events.extend(fresh)
        self.epochs.append(epoch)

    def last_position(self, source_id: str) -> Optional[Position]:
        return self.events[-1].position if self.events else None

    def close(self) -> None:
        pass
