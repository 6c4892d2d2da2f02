"""Source hygiene and health against real PostgreSQL and MariaDB (issue 5, items 4 and 5).

* Heartbeats: with only an uncaptured table being written, the checkpoint (and PostgreSQL's
  slot) still moves past those writes, so the server can recycle its log.
* Connection loss: the server kills the capture's connections in the middle of a dump and a
  workload; the engine reconnects and the changelog still replays to the source tables.
* A slot dropped under a running capture stops it with PositionLostError and the fix.
* ``status`` carries lag in bytes, warnings and per-dump rates.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid

import pymysql
import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.errors import PositionLostError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.sources.mysql.log import decode_coord
from airflow_provider_dblog.sources.postgres.log import commit_lsn_of, parse_lsn
from airflow_provider_dblog.state.local import LocalStateStore
from tests.support.faults import WideWindowSource

from .capture_proc import dblog, wait_for, write_config
from .databases import ADAPTERS
from .test_oracle import Workload

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"hl_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


class Capture:
    """An engine in a thread with a short heartbeat; ``error`` holds what stopped it."""

    def __init__(self, db, tmp_path, window_delay: float = 0.0, **config):
        self.db, self.source_id = db, db.source_id
        self.lake = f"delta://{tmp_path / 'lake'}"
        self.state = LocalStateStore(str(tmp_path / "state.db"))
        self.config_path = write_config(
            tmp_path / "dblog.toml", db.source_config(db.source_id), tmp_path / "state.db", self.lake
        )
        cfg = dict(status_interval=0.5, control_interval=0.1, heartbeat_interval=1.0)
        cfg.update(config)
        source = make_source(db.source_config(db.source_id))
        if window_delay:  # widen each chunk's window (SELECT .. HW)
            source = WideWindowSource(source, window_delay)
        self.engine = Engine(source, make_output(self.lake), self.state, EngineConfig(**cfg))
        self.stop_event, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.engine.run(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - surfaced by check()
            self.error = exc

    def check(self):
        if self.error is not None:
            raise self.error

    def start(self):
        t0 = time.time()
        self.thread.start()
        wait_for(lambda: (self.status() or {}).get("updated_at", 0) >= t0, 60, "engine start", self.check)
        return self

    def stop(self):
        self.stop_event.set()
        self.thread.join(60)

    def status(self):
        raw = self.state.get_value(status_key(self.source_id))
        return json.loads(raw) if raw else None

    def checkpoint(self):
        return self.state.get_checkpoint(self.source_id)


def _log_head(db):
    """The source's current log position, comparable with a checkpoint of it."""
    c = db.connect()
    try:
        cur = c.cursor()
        if db.kind == "postgres":
            cur.execute("SELECT pg_current_wal_lsn()::text")
            return parse_lsn(cur.fetchone()[0])
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
        return int(file.rsplit(".", 1)[1]), int(pos)
    finally:
        c.close()


def _checkpoint_at(db, cp: Position):
    if db.kind == "postgres":
        return commit_lsn_of(cp)
    number, txn_start, _, _ = decode_coord(cp.coord)
    return number, txn_start


def _slot_confirmed(db) -> int:
    c = db.connect()
    try:
        cur = c.cursor()
        cur.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (f"dblog_{db.source_id}",),
        )
        return parse_lsn(cur.fetchone()[0])
    finally:
        c.close()


def test_heartbeat_moves_the_checkpoint_while_captured_tables_are_idle(db, tmp_path):
    with db.connect() as c:  # a table in the same schema/database that is not captured
        c.cursor().execute(f"CREATE TABLE {db.ns}.uncaptured (id int PRIMARY KEY, v int)")
        c.commit()
    cap = Capture(db, tmp_path).start()
    try:
        with db.connect() as c:
            cur = c.cursor()
            for i in range(30):
                cur.execute(f"INSERT INTO {db.ns}.uncaptured VALUES (%s, %s)", (i, i))
                c.commit()
                time.sleep(0.05)
        head = _log_head(db)  # after every uncaptured write
        wait_for(
            lambda: cap.checkpoint() is not None and _checkpoint_at(db, cap.checkpoint()) > head,
            20,
            "the checkpoint to pass the uncaptured writes",
            cap.check,
        )
        if db.kind == "postgres":
            # The slot is confirmed past them too: the server may recycle that WAL.
            wait_for(lambda: _slot_confirmed(db) > head, 20, "the slot to be confirmed past them", cap.check)
        st = cap.status()
        assert st["heartbeats"] >= 1 and st["events_total"] == 0  # nothing captured changed
        assert st["lag_bytes"] is not None and st["lag_bytes"] >= 0
        assert st["warnings"] == []
        out = make_output(cap.lake)
        out.open()
        assert all(not list(out.scan(db.source_id, t)) for t in db.tables())  # heartbeats never leave
    finally:
        cap.stop()
    cap.check()


def _kill_capture_connections(db, cap) -> int:
    """The server ends every connection of this capture (log stream and queries alike)."""
    c = db.connect()
    try:
        cur = c.cursor()
        if db.kind == "postgres":
            cur.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                (f"dblog-{db.source_id}",),
            )
            return cur.fetchone()[0]
        src = cap.engine.source
        ids = []
        reader = src._log.reader
        stream = getattr(getattr(reader, "_stream", None), "_stream_connection", None)
        if stream is not None:
            ids.append(stream.thread_id())
        for session in (src._session, src._log.session):
            if session is not None and session._conn is not None:
                ids.append(session._conn.thread_id())
        for i in ids:
            try:
                cur.execute(f"KILL {int(i)}")
            except pymysql.err.OperationalError as gone:  # 1094 unknown thread: ended already
                print(f"KILL {i}: {gone}")
        return len(ids)
    finally:
        c.close()


def test_capture_reconnects_after_the_server_kills_its_connections(db, tmp_path):
    db.seed(random.Random(11), 150)
    cap = Capture(db, tmp_path, window_delay=0.05).start()
    try:
        spec = DumpSpec.new(db.source_id, None, None)
        cap.state.add_dump(spec, DumpControl(chunk_size=10))
        with Workload(db, 5) as load:
            time.sleep(1.0)
            for _ in range(3):  # mid-dump, mid-workload
                assert _kill_capture_connections(db, cap) >= 2
                time.sleep(1.5)
                cap.check()
        wait_for(lambda: cap.state.get_dump(spec.dump_id).status is DumpStatus.DONE, 120, "the dump", cap.check)
        sentinel = str(uuid.uuid4())
        with db.connect() as c:
            c.cursor().execute(
                f"INSERT INTO {db.ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (sentinel, "{}", True)
            )
            c.commit()
        out = make_output(cap.lake)
        out.open()
        wait_for(
            lambda: any(e.key == (sentinel,) for e in out.scan(db.source_id, f"{db.ns}.notes")),
            60,
            "the last write",
            cap.check,
        )
        # The key-list dumps the capture queued itself (unchanged TOAST values, PostgreSQL)
        # are queued before their events reach the writer: all there by now; let them finish.
        wait_for(
            lambda: all(d.status.finished for d in cap.state.list_dumps(db.source_id)),
            120,
            "the capture's own repair dumps",
            cap.check,
        )
        assert all(d.status is DumpStatus.DONE for d in cap.state.list_dumps(db.source_id))
        assert load.txns > 20
        if db.kind == "postgres":
            assert cap.status()["reconnects"] >= 1
        # (MariaDB: mysql-replication re-requests a killed binlog stream itself and the query
        # session retries once, so the engine may not even see the loss; no loss either way.)
    finally:
        cap.stop()
    cap.check()
    result = dblog(cap.config_path, "verify", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" 0 mismatches") == len(db.tables()), result.stdout


def test_a_slot_dropped_under_a_running_capture_stops_it_with_the_fix(tmp_path):
    db = ADAPTERS["postgres"]()
    db.create()
    db.source_id = f"hl_slot_{uuid.uuid4().hex[:6]}"
    cap = Capture(db, tmp_path, reconnect_timeout=30).start()
    try:
        # A checkpoint first (the heartbeat gives one): without any position the capture would
        # simply start over at the end of the log, as a restart without checkpoint does.
        wait_for(lambda: cap.checkpoint() is not None, 20, "a first checkpoint", cap.check)
        c = db.connect()
        c.autocommit = True
        cur = c.cursor()
        deadline = time.time() + 30
        while True:  # the walsender holds the slot: end it, then drop the slot before we reconnect
            cur.execute(
                "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = %s AND active",
                (f"dblog_{db.source_id}",),
            )
            try:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (f"dblog_{db.source_id}",))
                break
            except Exception:
                assert time.time() < deadline, "could not drop the slot"
                time.sleep(0.05)
        c.close()
        cap.thread.join(60)
        assert isinstance(cap.error, PositionLostError), repr(cap.error)
        assert "--reset-position" in str(cap.error) and f"dblog_{db.source_id}" in str(cap.error)
    finally:
        cap.stop()
        db.drop(db.source_id)


def test_status_json_reports_health(db, tmp_path):
    db.seed(random.Random(2), 60)
    cap = Capture(db, tmp_path).start()
    try:
        dump_id = DumpSpec.new(db.source_id, [f"{db.ns}.accounts"], None)
        cap.state.add_dump(dump_id, DumpControl(chunk_size=5, delay_ms=300))
        wait_for(
            lambda: any(d.get("rows", 0) > 0 for d in (cap.status() or {}).get("dumps", {}).values()),
            30,
            "dump progress in the status",
            cap.check,
        )
        res = json.loads(dblog(cap.config_path, "status", "--json").stdout)
        for k in ("lag_bytes", "lag_seconds", "events_per_s", "warnings"):
            assert k in res, k
        assert isinstance(res["lag_bytes"], int) and res["warnings"] == []
        d = next(x for x in res["dumps"] if x["dump_id"] == dump_id.dump_id)
        assert d["estimated_total"] >= 0 and "eta_seconds" in d and "rows_per_s" in d
        if db.kind == "mysql":
            assert "binlog_expire_seconds" in res["capture"]["log"]
        else:
            assert "safe_wal_size" in res["capture"]["log"]
    finally:
        cap.stop()
    cap.check()


def test_postgres_warns_before_a_slot_loses_its_wal(tmp_path):
    """A throw-away cluster whose slots may keep only 32 MB of WAL: a slot ~28 MB behind has
    less than 20% left, and the status says so before the slot is invalidated."""
    from airflow_provider_dblog.sources.postgres.source import PostgresSource

    from .pg_tmpcluster import TmpCluster

    with TmpCluster({"wal_level": "logical", "max_slot_wal_keep_size": "'32MB'"}) as cluster:
        import psycopg2

        conn = psycopg2.connect(**cluster.dsn)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute("CREATE TABLE t (id int PRIMARY KEY)")
        src = PostgresSource(
            source_id="retention",
            tables=["public.t"],
            **{
                "host": cluster.dsn["host"],
                "port": cluster.dsn["port"],
                "user": "postgres",
                "password": "",
                "dbname": "postgres",
            },
        )
        src.open()
        try:
            assert src.log_status()["warnings"] == []
            st = src.log_status()
            assert st["max_slot_wal_keep_size"] == 32 * 1048576
            for _ in range(80):  # WAL the slot must keep, since nobody reads it, 1 MB at a time
                cur.execute("SELECT pg_logical_emit_message(false, 'dblog-test', repeat('x', 1048576))")
                st = src.log_status()  # PositionLostError once lost: the warning must come first
                if st["warnings"]:
                    break
            assert st["warnings"] and "log retention at risk" in st["warnings"][0], st
            assert st["wal_status"] in ("reserved", "extended", "unreserved")
        finally:
            src.close()
            conn.close()


def test_mariadb_status_warns_when_the_binlog_retention_is_short(tmp_path):
    """With a checkpoint in an older binlog file and a retention shorter than its age, the
    status carries the warning (the decision itself is unit-tested with numbers)."""
    db = ADAPTERS["mysql"]()
    db.create()
    db.source_id = f"hl_exp_{uuid.uuid4().hex[:6]}"
    cap = Capture(db, tmp_path).start()
    try:
        wait_for(lambda: cap.checkpoint() is not None, 20, "a first checkpoint", cap.check)
        src = cap.engine.source
        # Pretend the acknowledged event is old and the binlog has moved on since: exactly
        # what a capture that fell behind sees. (FLUSH BINARY LOGS / a shorter retention
        # would affect every other test using this server.)
        number, *_ = decode_coord(src._log.acknowledged.coord)
        src._log.acknowledged_ts = time.time() - 10 * 86400
        from airflow_provider_dblog.sources.mysql import binlog_log as mysql_source

        real = mysql_source.file_number
        mysql_source.file_number = lambda name: real(name) + 1  # the server is one file further
        try:
            st = src.log_status()
        finally:
            mysql_source.file_number = real
        if st["binlog_expire_seconds"] <= 0:
            pytest.skip("binlogs never expire on this server: no retention to warn about")
        assert st["warnings"] and f"binlog file number {number}" in st["warnings"][0], st
    finally:
        cap.stop()
        db.drop(db.source_id)
