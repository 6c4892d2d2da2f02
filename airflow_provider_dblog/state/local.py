"""The embedded state store: one SQLite file, shared by the capture process and the CLI.

SQLite in WAL mode lets ``dblog status`` read while the capture writes, and every write is
its own transaction, so a kill -9 leaves either the old or the new value, never a torn one.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Optional

from ..core.dumps import Dump, DumpControl, DumpSpec, DumpStatus, TableProgress
from ..core.errors import ConfigurationError, RequestError
from ..core.events import Position
from ..core.protocols import Fence
from .lease_common import lease_lost

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    source_id TEXT PRIMARY KEY, position TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dumps (
    dump_id TEXT PRIMARY KEY, source_id TEXT NOT NULL, spec TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dump_control (dump_id TEXT PRIMARY KEY, control TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS dump_status (
    dump_id TEXT PRIMARY KEY, status TEXT NOT NULL, error TEXT, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS dump_progress (
    dump_id TEXT NOT NULL, table_name TEXT NOT NULL, progress TEXT NOT NULL,
    PRIMARY KEY (dump_id, table_name));
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


# The engine's writes, shared by the plain store and its fenced view (FencedLocalStore).
_SET_CHECKPOINT = (
    "INSERT INTO checkpoints VALUES (?,?,?) ON CONFLICT(source_id) DO UPDATE "
    "SET position=excluded.position, updated_at=excluded.updated_at"
)
_CLEAR_CHECKPOINT = "DELETE FROM checkpoints WHERE source_id=?"
_SET_STATUS = "UPDATE dump_status SET status=?, error=?, updated_at=? WHERE dump_id=?"
_SAVE_PROGRESS = (
    "INSERT INTO dump_progress VALUES (?,?,?) ON CONFLICT(dump_id, table_name) DO UPDATE SET progress=excluded.progress"
)
_PUT_VALUE = "INSERT INTO kv VALUES (?,?) ON CONFLICT(key) DO UPDATE SET value=excluded.value"


class NoCaptureState(ConfigurationError):
    """A store no capture has made yet: an error for a command that reads or controls a
    capture, the normal state of a fresh deployment for ``dblog doctor``."""


def no_capture_state(where: str, why: str) -> ConfigurationError:
    """A command that reads or controls a capture pointed at a store no capture made."""
    return NoCaptureState(
        f"no capture state at {where}: {why}, so no `dblog capture` has run with this state store "
        "(nothing was created there).",
        "pass the --state (or [state] path, DBLOG_STATE) that the capture uses; a store is made "
        "only by `dblog capture`, so start the capture first to request or control its dumps.",
    )


class LocalStateStore:
    def __init__(self, path: str, create: bool = True):
        """The store in the SQLite file ``path``, made if needed; ``create`` False: only an
        existing one (a command that reads or controls a capture must not make an empty store
        at a mistyped path and report nothing from it)."""
        self.path = os.path.abspath(path)
        parent = os.path.dirname(self.path)
        if not create and not os.path.isfile(self.path):
            raise no_capture_state(self.path, "the file does not exist")
        try:
            os.makedirs(parent, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a committed write survives a kill -9 of this process (only
            # an OS crash could lose the last commits); FULL fsyncs every checkpoint.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise ConfigurationError(
                f"cannot open the local state store at {self.path}: {exc}.",
                "pass a writable file path with --state (or DBLOG_STATE).",
            ) from None
        self._lock = threading.Lock()
        self._requests = 0  # dumps added and controls set through this object

    def _exec(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    # -- checkpoints -------------------------------------------------------------------
    def get_checkpoint(self, source_id: str) -> Optional[Position]:
        rows = self._exec("SELECT position FROM checkpoints WHERE source_id=?", (source_id,))
        return Position.parse(rows[0][0]) if rows else None

    def set_checkpoint(self, source_id: str, position: Position) -> None:
        self._exec(
            _SET_CHECKPOINT,
            (source_id, position.encode(), time.time()),
        )

    def clear_checkpoint(self, source_id: str) -> None:
        self._exec(_CLEAR_CHECKPOINT, (source_id,))

    # -- dumps -------------------------------------------------------------------------
    def add_dump(self, spec: DumpSpec, control: Optional[DumpControl] = None) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self.insert_dump(spec, control)
                self._db.execute("COMMIT")
                self._requests += 1
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def dumps_version(self, source_id: str) -> tuple[int, int]:
        """Moves when another connection (the CLI, an Airflow task) commits to the store, or a
        dump is added or a control set through this object: SQLite's data_version, read
        without touching the tables. The engine reads the requests again when it moves
        (core/scheduler.py)."""
        with self._lock:
            (version,) = self._db.execute("PRAGMA data_version").fetchone()
            return version, self._requests

    def insert_dump(self, spec: DumpSpec, control: Optional[DumpControl]) -> None:
        """The inserts of one dump, inside the caller's transaction."""
        self._db.execute(
            "INSERT INTO dumps VALUES (?,?,?,?)", (spec.dump_id, spec.source_id, spec.to_json(), spec.created_at)
        )
        self._db.execute(
            "INSERT INTO dump_control VALUES (?,?)", (spec.dump_id, _control_json(control or DumpControl()))
        )
        self._db.execute(
            "INSERT INTO dump_status VALUES (?,?,?,?)", (spec.dump_id, DumpStatus.PENDING.value, None, time.time())
        )

    def get_dump(self, dump_id: str) -> Dump:
        dumps = self._load("WHERE d.dump_id=?", (dump_id,))
        if not dumps:
            raise RequestError(f"no dump with id {dump_id!r}.", "list dumps with `dblog status`.")
        return dumps[0]

    def list_dumps(self, source_id: Optional[str] = None) -> list[Dump]:
        if source_id is None:
            return self._load("", ())
        return self._load("WHERE d.source_id=?", (source_id,))

    def _load(self, where: str, params: tuple) -> list[Dump]:
        rows = self._exec(
            "SELECT d.spec, c.control, s.status, s.error, s.updated_at FROM dumps d "
            "JOIN dump_control c USING (dump_id) JOIN dump_status s USING (dump_id) "
            f"{where} ORDER BY d.created_at, d.dump_id",
            params,
        )
        out = []
        for spec_json, control_json, status, error, updated in rows:
            spec = DumpSpec.from_json(spec_json)
            progress = {
                t: TableProgress.from_json(p)
                for t, p in self._exec(
                    "SELECT table_name, progress FROM dump_progress WHERE dump_id=?", (spec.dump_id,)
                )
            }
            out.append(
                Dump(spec, DumpControl(**json.loads(control_json)), DumpStatus(status), progress, error, updated)
            )
        return out

    def set_control(self, dump_id: str, control: DumpControl) -> None:
        self.get_dump(dump_id)  # RequestError when unknown
        self._exec("UPDATE dump_control SET control=? WHERE dump_id=?", (_control_json(control), dump_id))
        self._requests += 1

    def set_status(self, dump_id: str, status: DumpStatus, error: Optional[str] = None) -> None:
        self._exec(
            _SET_STATUS,
            (status.value, error, time.time(), dump_id),
        )

    def save_progress(self, dump_id: str, table: str, progress: TableProgress) -> None:
        self._exec(
            _SAVE_PROGRESS,
            (dump_id, table, progress.to_json()),
        )

    # -- small values ------------------------------------------------------------------
    def put_value(self, key: str, value: str) -> None:
        self._exec(_PUT_VALUE, (key, value))

    def get_value(self, key: str) -> Optional[str]:
        rows = self._exec("SELECT value FROM kv WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def fenced(self, fence: Fence) -> "FencedLocalStore":
        return FencedLocalStore(self, fence)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class FencedLocalStore:
    """``LocalStateStore.fenced``: the lease holder's view. Each write is one SQLite
    transaction that first reads the source's epoch (kept by the local lease under
    ``leader/<source>``) and rolls back with StaleEpochError when a newer holder took one."""

    def __init__(self, store: LocalStateStore, fence: Fence):
        self._store = store
        self._fence = fence
        self._key = f"leader/{fence.source_id}"

    def __getattr__(self, name: str) -> Any:  # reads and user-side writes: the store's own
        return getattr(self._store, name)

    def fenced(self, fence: Fence) -> "FencedLocalStore":
        return FencedLocalStore(self._store, fence)

    def _write(self, sql: str, params: tuple[Any, ...]) -> None:
        self._fenced(lambda db: db.execute(sql, params))

    def _fenced(self, write: Callable[[sqlite3.Connection], object]) -> None:
        db = self._store._db
        with self._store._lock:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT value FROM kv WHERE key=?", (self._key,)).fetchone()
                epoch = json.loads(row[0]).get("epoch") if row else None
                if epoch != self._fence.epoch:
                    raise lease_lost(self._fence.source_id, self._fence.epoch, f"epoch {epoch} was taken since")
                write(db)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def add_dump(self, spec: DumpSpec, control: Optional[DumpControl] = None) -> None:
        """A dump the capture requests itself (e.g. to repair unchanged TOAST values)."""
        self._fenced(lambda db: self._store.insert_dump(spec, control))

    def set_checkpoint(self, source_id: str, position: Position) -> None:
        """Only forwards: encoded positions sort as positions do, so SQLite compares them."""
        self._write(
            _SET_CHECKPOINT + " WHERE excluded.position > checkpoints.position",
            (source_id, position.encode(), time.time()),
        )

    def clear_checkpoint(self, source_id: str) -> None:
        self._write(_CLEAR_CHECKPOINT, (source_id,))

    def set_status(self, dump_id: str, status: DumpStatus, error: Optional[str] = None) -> None:
        self._write(
            _SET_STATUS,
            (status.value, error, time.time(), dump_id),
        )

    def save_progress(self, dump_id: str, table: str, progress: TableProgress) -> None:
        self._write(
            _SAVE_PROGRESS,
            (dump_id, table, progress.to_json()),
        )

    def put_value(self, key: str, value: str) -> None:
        self._write(_PUT_VALUE, (key, value))


def _control_json(c: DumpControl) -> str:
    return c.to_json()
