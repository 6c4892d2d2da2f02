"""What bench/dumps.py runs against: a fast fill for MariaDB, an in-process capture that
counts the log events of the dumped table, the concurrent write load (a separate process),
and the bare chunk-SELECT loops the watermark overhead is measured against.

The write load runs in its own process (spawned, not forked: the capture's threads may hold
locks at fork time) so it neither shares the capture's GIL nor steals its CPU time slices
inside one interpreter. It connects with the same DBLOG_* environment the benchmark has:
the password never crosses a process boundary in argv or pickled arguments.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import random
import time
from typing import Any, Optional

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.batch import DumpRows, EventBatch
from airflow_provider_dblog.core.chunks import MYSQL, POSTGRES, chunk_query
from airflow_provider_dblog.core.events import Origin

from .dbs import MariaDBBench, PostgresBench
from .engine_runs import InProcessCapture, SentinelWatch

FILL_BATCH = 500_000  # rows per INSERT ... SELECT transaction of the MariaDB fill
# Share of each write-load transaction's rows: updates of random existing keys, inserts of
# new keys beyond the max, deletes of random keys ("a few").
LOAD_MIX = {"update": 0.75, "insert": 0.20, "delete": 0.05}


class FastMariaDBBench(MariaDBBench):
    """MariaDBBench whose dump table is filled by the server itself: the SEQUENCE engine's
    ``seq_1_to_N`` tables (MariaDB 10.0+) make 5M rows a matter of seconds instead of the
    minutes the client-side multi-row INSERTs take. Same values as the PostgreSQL fill
    (``md5`` of the decimal key)."""

    def fill_dump_table(self, rows: int) -> None:
        try:
            self.insert_seq(self.dump_table, 1, rows, FILL_BATCH)
        except Exception as exc:  # noqa: BLE001 - MySQL proper has no SEQUENCE engine
            if "seq_" not in str(exc):
                raise
            self._run(f"DELETE FROM {self.dump_table}")
            self._insert_rows(self.dump_table, 1, rows)
        self._run(f"ANALYZE TABLE {self.dump_table}")


DATABASES = {"pg": PostgresBench, "mysql": FastMariaDBBench}


def connect(kind: str, autocommit: bool = False):
    """A plain driver connection from the DBLOG_* environment (what bench/dbs.py reads)."""
    env = os.environ
    if kind == "pg":
        import psycopg2

        conn = psycopg2.connect(
            host=env["DBLOG_PG_HOST"],
            port=int(env["DBLOG_PG_PORT"]),
            user=env["DBLOG_PG_USER"],
            password=env["DBLOG_PG_PASSWORD"],
            dbname=env["DBLOG_PG_DATABASE"],
        )
        conn.autocommit = autocommit
        return conn
    import pymysql

    return pymysql.connect(
        host=env["DBLOG_MYSQL_HOST"],
        port=int(env["DBLOG_MYSQL_PORT"]),
        user=env["DBLOG_MYSQL_USER"],
        password=env["DBLOG_MYSQL_PASSWORD"],
        autocommit=autocommit,
        charset="utf8mb4",
    )


# -- the capture, with counters -----------------------------------------------------------
class CountingWatch(SentinelWatch):
    """Also counts the log events of one table (the write load's) once ``counting`` is set;
    off by default so the idle runs pay nothing for it."""

    def __init__(self, output, sentinel_table: str, counted_table: str):
        super().__init__(output, sentinel_table)
        self.counted, self.counting, self.log_events = counted_table, False, 0

    def write(self, events, epoch=None):
        super().write(events, epoch=epoch)
        if self.counting:
            t = self.counted
            # Dump rows arrive as blocks (core/batch.py): count the log segments only, without
            # making the blocks' events.
            segments = events.segments if isinstance(events, EventBatch) else [events]
            self.log_events += sum(
                1
                for seg in segments
                if not isinstance(seg, DumpRows)
                for e in seg
                if e.origin is Origin.LOG and e.table == t
            )


class LiveCapture(InProcessCapture):
    """A capture whose output also counts the dumped table's log events."""

    def wrap_output(self, output) -> CountingWatch:
        return CountingWatch(output, self.db.event_table, self.db.dump_table)


class ChunkRetries(logging.Handler):
    """Counts the engine's "chunk ... selected again" notices (a PostgreSQL chunk whose
    snapshot missed a transaction that commits inside the window is re-selected)."""

    LOGGER = "airflow_provider_dblog.core.engine"

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("chunk of") and "selected again" in str(record.msg):
            self.count += 1


# -- the concurrent write load ------------------------------------------------------------
# Shared counters (doubles): when the load started, transactions, rows updated / inserted /
# deleted (affected rows, so an update of a key deleted before counts nothing, exactly as
# the log shows it), and seconds the load fell behind its schedule.
_STARTED, _TXNS, _UPD, _INS, _DEL, _LATE = range(6)


def _load_worker(
    kind: str, table: str, first_key: int, rate: float, txn_rows: int, seed: int, counters, stop, errors
) -> None:
    try:
        conn = connect(kind)
        cur = conn.cursor()
        rng = random.Random(seed)
        n_ins = max(1, round(txn_rows * LOAD_MIX["insert"]))
        n_del = max(1, round(txn_rows * LOAD_MIX["delete"]))
        n_upd = max(1, txn_rows - n_ins - n_del)
        period = (n_upd + n_ins + n_del) / rate
        key = first_key  # the next new key; every key below it was inserted once
        in_list = "= ANY(%s)" if kind == "pg" else "IN %s"
        arg = list if kind == "pg" else tuple  # psycopg2: an ARRAY; PyMySQL: (a, b, ...)
        with counters.get_lock():
            counters[_STARTED] = time.time()
        next_at = time.perf_counter()
        while not stop.is_set():
            # Sorted keys: row locks are always taken in one order.
            upd = sorted({rng.randrange(1, key) for _ in range(n_upd)})
            dels = sorted({rng.randrange(1, key) for _ in range(n_del)} - set(upd))
            new = list(range(key, key + n_ins))
            key += n_ins
            cur.execute(f"UPDATE {table} SET v = v + 1 WHERE id {in_list}", (arg(upd),))
            updated = cur.rowcount
            cur.execute(
                f"INSERT INTO {table} (id, v, s) VALUES " + ",".join(["(%s, %s, %s)"] * len(new)),
                [x for k in new for x in (k, k % 1000, "load")],
            )
            deleted = 0
            if dels:  # empty when the delete's key was drawn for an update too
                cur.execute(f"DELETE FROM {table} WHERE id {in_list}", (arg(dels),))
                deleted = cur.rowcount
            conn.commit()
            with counters.get_lock():
                counters[_TXNS] += 1
                counters[_UPD] += updated
                counters[_INS] += len(new)
                counters[_DEL] += deleted
            next_at += period
            delay = next_at - time.perf_counter()
            if delay > 0:
                stop.wait(delay)
            elif delay < -1.0:
                # More than a second behind: note it and do not burst to catch up.
                with counters.get_lock():
                    counters[_LATE] += -delay
                next_at = time.perf_counter()
        conn.close()
    except BaseException as exc:  # noqa: BLE001 - reported by WriteLoad.check()
        errors.put(f"{type(exc).__name__}: {exc}")


class WriteLoad:
    """A steady stream of small transactions against one table, in a child process."""

    def __init__(self, kind: str, table: str, first_key: int, rate: float, txn_rows: int = 20):
        self.kind, self.table, self.rate, self.txn_rows = kind, table, rate, txn_rows
        self._ctx = mp.get_context("spawn")
        self.counters = self._ctx.Array("d", 6)
        self._stop = self._ctx.Event()
        self._errors = self._ctx.Queue()
        self.proc = self._ctx.Process(
            target=_load_worker,
            name="dblog-bench-load",
            daemon=True,
            args=(kind, table, first_key, rate, txn_rows, first_key, self.counters, self._stop, self._errors),
        )

    def start(self, warmup: float = 2.0) -> "WriteLoad":
        self.proc.start()
        end = time.monotonic() + 60
        while self.snapshot()["txns"] == 0:
            self.check()
            if time.monotonic() > end:
                raise TimeoutError("bench: the write load did not commit within 60 s")
            time.sleep(0.05)
        time.sleep(warmup)  # a steady rate before anything is measured
        return self

    def snapshot(self) -> dict:
        with self.counters.get_lock():
            c = list(self.counters)
        return {
            "at": time.time(),
            "started": c[_STARTED],
            "txns": int(c[_TXNS]),
            "updated": int(c[_UPD]),
            "inserted": int(c[_INS]),
            "deleted": int(c[_DEL]),
            "late_s": c[_LATE],
            "changes": int(c[_UPD] + c[_INS] + c[_DEL]),
        }

    def check(self) -> None:
        if not self.proc.is_alive() and not self._stop.is_set():
            err = self._errors.get(timeout=1) if not self._errors.empty() else f"exit code {self.proc.exitcode}"
            raise RuntimeError(f"bench: the write load stopped: {err}")

    def stop(self) -> dict:
        """Stop the process; the totals and the achieved rate (rows changed per second)."""
        if self.proc.pid is None:
            return {}
        self._stop.set()
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        s = self.snapshot()
        err = None if self._errors.empty() else self._errors.get(timeout=1)
        secs = s["at"] - s["started"] if s["started"] else 0.0
        out = {k: s[k] for k in ("txns", "updated", "inserted", "deleted", "changes")}
        out.update(
            seconds=round(secs, 1),
            target_rows_per_s=self.rate,
            txn_rows=self.txn_rows,
            achieved_rows_per_s=round(s["changes"] / secs, 1) if secs else 0.0,
            behind_schedule_s=round(s["late_s"], 1),
        )
        if err:
            out["error"] = err
        return out


def changes_between(a: dict, b: dict) -> dict:
    n = b["changes"] - a["changes"]
    secs = b["at"] - a["at"]
    return {"changes": n, "rows_per_s": round(n / secs, 1) if secs > 0 else 0.0}


# -- the bare chunk-SELECT loops -----------------------------------------------------------
def select_list(kind: str, schema) -> list[str]:
    """The SELECT list the engine's sources use (MySQL widens FLOAT; PostgreSQL quotes)."""
    if kind == "pg":
        return [POSTGRES.quote(c.name) for c in schema.columns]
    try:
        from airflow_provider_dblog.sources.mysql.values import select_expression
    except ImportError:  # renamed by an engine change: plain quoted names are equivalent here
        return [MYSQL.quote(c.name) for c in schema.columns]
    return [select_expression(MYSQL.quote, c) for c in schema.columns]


def driver_loop(kind: str, schema, chunk_size: int) -> tuple[int, int, float]:
    """The engine's keyset chunk SQL (core/chunks.py) looped through a plain driver cursor,
    default type conversion, autocommit: no snapshot bookkeeping, no canonical values.
    Returns (rows, chunks, seconds)."""
    dialect = POSTGRES if kind == "pg" else MYSQL
    cols = select_list(kind, schema)
    key_at = [c.name for c in schema.columns].index(schema.key[0])
    if len(schema.key) != 1:
        raise ValueError("the bare loop handles single-column keys (the bench tables have one)")
    conn = connect(kind, autocommit=True)
    try:
        cur = conn.cursor()
        after: Optional[tuple] = None
        rows = chunks = 0
        t0 = time.perf_counter()
        while True:
            sql, params = chunk_query(dialect, schema, cols, after, chunk_size)
            cur.execute(sql, params)
            got = cur.fetchall()
            chunks += 1
            rows += len(got)
            if len(got) < chunk_size:
                break
            after = (got[-1][key_at],)
        return rows, chunks, time.perf_counter() - t0
    finally:
        conn.close()


def source_loop(source: Any, schema, chunk_size: int) -> tuple[int, int, float]:
    """The source's own ``select_chunk`` (protocols.Source) looped without watermarks, log
    or output: the engine's SELECT path including canonical value conversion."""
    after = None
    rows = chunks = 0
    t0 = time.perf_counter()
    while True:
        got = source.select_chunk(schema, after, chunk_size).rows
        chunks += 1
        rows += len(got)
        if len(got) < chunk_size:
            break
        after = schema.key_of(got[-1])
    return rows, chunks, time.perf_counter() - t0


_BARE: dict = {}  # the worker process's open source, reused across calls


def bare_loops(kind: str, source_config: dict, table: str, chunk_size: int, repeat: int) -> dict:
    """Runs in a worker process of its own (a plain script: no capture thread, no GIL
    shared with one): both bare loops ``repeat`` times each. The source gets its password
    from the environment variable its config names, like the capture's."""
    src = _BARE.get("source")
    if src is None:
        src = make_source(source_config)
        src.open()  # its own slot / watermark row: never reads the log
        _BARE["source"] = src
    schema = src.table_schema(table)
    out: dict = {"driver": [], "select_chunk": []}
    for name, fn in (
        ("driver", lambda: driver_loop(kind, schema, chunk_size)),
        ("select_chunk", lambda: source_loop(src, schema, chunk_size)),
    ):
        for _ in range(repeat):
            rows, chunks, secs = fn()
            out[name].append({"rows": rows, "chunks": chunks, "seconds": round(secs, 3), "rows_per_s": rows / secs})
    return out


def close_bare() -> None:
    src = _BARE.pop("source", None)
    if src is not None:
        src.close()
