"""The engine against real PostgreSQL and MariaDB: dumps, runtime control, restarts, locks."""

from __future__ import annotations

import collections
import itertools
import json
import random
import threading
import time
import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.errors import PositionLostError
from airflow_provider_dblog.core.events import Op, Origin
from airflow_provider_dblog.core.verify import replay
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import wait_for
from .databases import ADAPTERS, env

pytestmark = pytest.mark.integration


class Running:
    """An engine in a background thread, stoppable; surfaces its exception."""

    def __init__(self, db, tmp_path, source_id, source_config=None):
        self.db, self.source_id = db, source_id
        self.source_config = source_config  # default: the adapter's (plaintext user)
        self.lake = f"delta://{tmp_path / 'lake'}"
        self.state = LocalStateStore(str(tmp_path / "state.db"))
        self.error = None
        self.thread = None

    def start(self, reset_position=False, **config):
        cfg = self.source_config or self.db.source_config(self.source_id)
        self.engine = Engine(
            make_source(cfg),
            make_output(self.lake),
            self.state,
            EngineConfig(status_interval=0.5, control_interval=0.1, reset_position=reset_position, **config),
        )
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        t0 = time.time()

        def reported():  # a status report written by this engine, i.e. after start_log()
            raw = self.state.get_value(status_key(self.source_id))
            return bool(raw) and json.loads(raw)["updated_at"] >= t0

        wait(reported, 60, "engine start", self)
        return self

    def _run(self):
        try:
            self.engine.run(self.stop_event)
        except BaseException as exc:  # noqa: BLE001 - reported by check()
            self.error = exc

    def check(self):
        if self.error is not None:
            raise self.error

    def stop(self):
        self.stop_event.set()
        self.thread.join(60)
        self.check()
        self.state.put_value(status_key(self.source_id), "")  # so a restart is observable

    def events(self, table):
        out = make_output(self.lake)
        out.open()
        return sorted(out.scan(self.source_id, table), key=lambda e: e.position)

    def dump(self, tables=None, keys=None, **control):
        spec = DumpSpec.new(self.source_id, tables, keys)
        self.state.add_dump(spec, DumpControl(**control))
        return spec.dump_id

    def status(self, dump_id):
        return self.state.get_dump(dump_id)


def dumped_once(db, tmp_path) -> Running:
    """An engine that dumped every table once (2,000-row chunks), stopped again."""
    r = Running(db, tmp_path, db.source_id).start()
    try:
        d = r.dump(None, chunk_size=2000)
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the first dump", r)
    finally:
        r.stop()
    return r


def wait(cond, timeout, what, running=None):
    wait_for(cond, timeout, what, running.check if running is not None else None, interval=0.1)


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"eng_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


def test_capture_inserts_updates_deletes_and_key_updates(db, tmp_path):
    r = Running(db, tmp_path, db.source_id).start()
    try:
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"INSERT INTO {db.ns}.accounts (id, name, balance) VALUES (1, 'a', 1.50), (2, 'b', 2.00)")
            c.commit()
            cur.execute(f"UPDATE {db.ns}.accounts SET name='a2' WHERE id=1")
            cur.execute(f"DELETE FROM {db.ns}.accounts WHERE id=2")
            c.commit()
            cur.execute(f"UPDATE {db.ns}.accounts SET id=10 WHERE id=1")
            c.commit()
        t = f"{db.ns}.accounts"
        wait(lambda: len(r.events(t)) >= 6, 30, "6 events", r)
        evs = [(e.op, e.key, (e.after or {}).get("name")) for e in r.events(t)]
        assert evs == [
            (Op.CREATE, (1,), "a"),
            (Op.CREATE, (2,), "b"),
            (Op.UPDATE, (1,), "a2"),
            (Op.DELETE, (2,), None),
            (Op.DELETE, (1,), None),
            (Op.CREATE, (10,), "a2"),
        ]
        assert all(e.origin is Origin.LOG for e in r.events(t))
        assert r.events(t)[2].after["balance"] == "1.50"
    finally:
        r.stop()


def test_dumps_of_a_table_a_key_list_and_all_tables(db, tmp_path):
    db.seed(random.Random(3), 120)
    r = Running(db, tmp_path, db.source_id).start()
    try:
        one = r.dump([f"{db.ns}.orders"], chunk_size=25)
        keys = r.dump([f"{db.ns}.accounts"], keys=[(5,), (77,), (9999,)], chunk_size=2)
        every = r.dump(None, chunk_size=50)
        for d in (one, keys, every):
            wait(lambda d=d: r.status(d).status is DumpStatus.DONE, 60, f"dump {d}", r)
        by_dump = collections.defaultdict(list)
        for t in db.tables():
            for e in r.events(t):
                if e.origin is Origin.DUMP and e.op is not Op.RANGE:  # k: what a chunk covers
                    assert e.op is Op.READ and e.before is None and e.after is not None
                    by_dump[e.dump_id].append((t, e.key))
        assert sorted(k for _, k in by_dump[keys]) == [(5,), (77,)]  # 9999 does not exist
        assert len(by_dump[one]) == 120 and {t for t, _ in by_dump[one]} == {f"{db.ns}.orders"}
        assert len(by_dump[every]) == 360
        assert len(set(by_dump[every])) == 360  # each row once per dump
        st = r.status(one)
        assert st.progress[f"{db.ns}.orders"].chunks == 5 and st.progress[f"{db.ns}.orders"].rows == 120
    finally:
        r.stop()


def test_pause_resume_throttle_and_cancel(db, tmp_path):
    db.seed(random.Random(4), 1000)
    r = Running(db, tmp_path, db.source_id).start()
    try:
        t = f"{db.ns}.accounts"
        d = r.dump([t], chunk_size=5, delay_ms=100)
        wait(lambda: r.status(d).progress.get(t) and r.status(d).progress[t].chunks >= 3, 30, "3 chunks", r)
        r.state.set_control(d, DumpControl(paused=True, chunk_size=5, delay_ms=100))
        wait(lambda: r.status(d).status is DumpStatus.PAUSED, 10, "paused", r)
        time.sleep(0.5)  # a chunk in flight may still finish
        p0 = r.status(d).progress[t]
        time.sleep(1.5)
        assert r.status(d).progress[t].chunks == p0.chunks, "a paused dump went on"
        # resume with a new chunk size and delay: the next chunks use them
        r.state.set_control(d, DumpControl(paused=False, chunk_size=40, delay_ms=300))
        wait(lambda: r.status(d).progress[t].chunks >= p0.chunks + 2, 10, "two chunks after resume", r)
        p1 = r.status(d).progress[t]
        assert (p1.rows - p0.rows) / (p1.chunks - p0.chunks) > 5, (p0, p1)
        assert not p1.done
        r.state.set_control(d, DumpControl(cancelled=True, chunk_size=40, delay_ms=300))
        wait(lambda: r.status(d).status is DumpStatus.CANCELLED, 10, "cancelled", r)
        c2 = r.status(d).progress[t].chunks
        time.sleep(1.5)
        assert r.status(d).progress[t].chunks <= c2 + 1, "a cancelled dump went on"
        assert not r.status(d).progress[t].done
    finally:
        r.stop()


def test_a_key_list_repair_does_not_wait_for_a_paced_backfill(db, tmp_path):
    """Invariant 11: a 5-key repair requested while a table dump of 200 paced chunks runs is
    done within a few of the backfill's chunks, and the backfill goes on afterwards."""
    db.seed(random.Random(5), 1000)
    r = Running(db, tmp_path, db.source_id).start()
    try:
        t = f"{db.ns}.accounts"
        backfill = r.dump([t], chunk_size=5, delay_ms=100)
        wait(
            lambda: r.status(backfill).progress.get(t) and r.status(backfill).progress[t].chunks >= 2, 30, "2 chunks", r
        )
        before = r.status(backfill).progress[t].chunks
        repair = r.dump([t], [[k] for k in (1, 250, 500, 750, 999)])
        wait(lambda: r.status(repair).status is DumpStatus.DONE, 30, "the repair", r)
        after = r.status(backfill).progress[t]
        assert not after.done and after.chunks - before <= 3, (before, after)
        wait(lambda: r.status(backfill).progress[t].chunks >= after.chunks + 2, 30, "the backfill going on", r)
        r.state.set_control(backfill, DumpControl(cancelled=True, chunk_size=5, delay_ms=100))
    finally:
        r.stop()
    repaired = {e.key for e in r.events(t) if e.dump_id == repair and e.op is Op.READ}
    assert repaired == {(k,) for k in (1, 250, 500, 750, 999)}


def test_restart_resumes_from_the_checkpoint_without_loss_or_duplicates(db, tmp_path):
    r = Running(db, tmp_path, db.source_id).start()
    t = f"{db.ns}.accounts"
    with db.connect() as c:
        c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (1, 'x')")
        c.commit()
    wait(lambda: len(r.events(t)) == 1, 30, "first event", r)
    r.stop()
    with db.connect() as c:  # written while the capture is down
        cur = c.cursor()
        for i in range(2, 12):
            cur.execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (%s, 'y')", (i,))
        c.commit()
    r.start()
    try:
        wait(lambda: len(r.events(t)) >= 11, 30, "events written while down", r)
        time.sleep(1)
        keys = [e.key[0] for e in r.events(t)]
        assert keys == list(range(1, 12)), keys
    finally:
        r.stop()


def test_reset_position_starts_at_the_end_of_the_log(db, tmp_path):
    """After `--reset-position` the capture skips what happened meanwhile (a dump restores it)."""
    r = Running(db, tmp_path, db.source_id).start()
    t = f"{db.ns}.accounts"
    with db.connect() as c:
        c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (1, 'x')")
        c.commit()
    wait(lambda: len(r.events(t)) == 1, 30, "first event", r)
    r.stop()
    with db.connect() as c:  # e.g. a TRUNCATE the capture could not pass on
        c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (2, 'skipped')")
        c.commit()
    r.start(reset_position=True)  # as `dblog capture --reset-position`
    try:
        with db.connect() as c:
            c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (3, 'after')")
            c.commit()
        wait(lambda: len(r.events(t)) >= 2, 30, "the event after the reset", r)
        assert [e.key for e in r.events(t)] == [(1,), (3,)]
        d = r.dump([t])
        wait(lambda: r.status(d).status is DumpStatus.DONE, 30, "repair dump", r)
        assert {e.key for e in r.events(t) if e.op is Op.READ} == {(1,), (2,), (3,)}
    finally:
        r.stop()


def test_unknown_table_fails_the_dump_not_the_capture(db, tmp_path):
    r = Running(db, tmp_path, db.source_id).start()
    try:
        d = r.dump([f"{db.ns}.no_such_table"])
        wait(lambda: r.status(d).status is DumpStatus.FAILED, 20, "failed dump", r)
        assert "no_such_table" in r.status(d).error and "Fix:" in r.status(d).error
        ok = r.dump([f"{db.ns}.notes"])
        wait(lambda: r.status(ok).status is DumpStatus.DONE, 20, "next dump", r)
    finally:
        r.stop()


def test_dump_takes_no_locks_stronger_than_a_read(db, tmp_path):
    db.seed(random.Random(5), 3000)
    observer = db.connect()
    if db.kind == "mysql":
        root = __import__("pymysql").connect(
            host=db.host,
            port=db.port,
            user="root",
            password=__import__("os").environ.get("DBLOG_MYSQL_ROOT_PASSWORD", "root"),
        )
        try:
            root.cursor().execute("INSTALL SONAME 'metadata_lock_info'")
        except Exception as exc:  # already installed
            assert "already" in str(exc).lower() or "1968" in str(exc) or "1125" in str(exc), exc
        root.close()
    observer.autocommit = True
    cur = observer.cursor()

    def sample() -> list[str]:
        if db.kind == "postgres":
            cur.execute(
                "SELECT mode FROM pg_locks WHERE relation = %s::regclass AND pid <> pg_backend_pid()",
                (f"{db.ns}.accounts",),
            )
        else:
            cur.execute(
                "SELECT lock_mode FROM information_schema.metadata_lock_info "
                "WHERE table_schema=%s AND table_name='accounts'",
                (db.ns,),
            )
        return [m for (m,) in cur.fetchall()]

    # MDL_SHARED and MDL_SHARED_HIGH_PRIO are metadata-only locks taken by catalog lookups
    # (information_schema, table definitions): weaker than a read, they conflict only with
    # exclusive DDL locks. Anything from MDL_SHARED_WRITE up would be a finding.
    allowed = (
        {"AccessShareLock"} if db.kind == "postgres" else {"MDL_SHARED", "MDL_SHARED_HIGH_PRIO", "MDL_SHARED_READ"}
    )
    # Positive control: a plain read in an open transaction elsewhere is seen by the sampler.
    reader = db.connect()
    reader.cursor().execute(f"SELECT * FROM {db.ns}.accounts LIMIT 1")
    assert set(sample()) & allowed, f"the lock sampler does not see a plain read: {sample()}"
    reader.rollback()
    reader.close()

    r = Running(db, tmp_path, db.source_id).start()
    seen = collections.Counter()
    try:
        d = r.dump([f"{db.ns}.accounts"], chunk_size=50)
        samples = 0
        while r.status(d).status is not DumpStatus.DONE:
            r.check()
            seen.update(sample())
            samples += 1
        assert samples > 10
        assert set(seen) <= allowed, f"dump took locks {dict(seen)}"
    finally:
        observer.close()
        r.stop()


def source_rows(db, source_id, table):
    """The table's rows as canonical values, read the way `dblog verify` reads them."""
    src = make_source(db.source_config(source_id))
    src.open()
    try:
        schema = src.table_schema(table)
        return {schema.key_of(r): r for r in src.select_chunk(schema, None, 100_000).rows}
    finally:
        src.close()


def test_truncate_under_capture_and_a_dump_converges(db, tmp_path):
    """TRUNCATE of a captured table (on PostgreSQL also of two tables at once) while the capture
    runs a dump of it: the capture goes on, the changelog carries the op-t events in order,
    rows inserted after it survive, another table's changes around it are all there, and the
    replay equals the source."""
    db.seed(random.Random(5), 150)
    accounts, orders, notes = db.tables()
    r = Running(db, tmp_path, db.source_id).start()
    try:
        d = r.dump(None, chunk_size=4, delay_ms=10)  # many small chunks: truncates land in windows
        wait(lambda: r.status(d).progress.get(accounts) is not None, 30, "the dump to start", r)
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"INSERT INTO {orders} (region, order_no, status) VALUES ('eu', 9001, 'before')")
            c.commit()
            cur.execute(f"TRUNCATE {accounts}")
            c.commit()
            cur.execute(f"INSERT INTO {accounts} (id, name) VALUES (5, 'after'), (9002, 'after')")
            cur.execute(f"INSERT INTO {orders} (region, order_no, status) VALUES ('eu', 9003, 'after')")
            c.commit()
            if db.kind == "postgres":  # both tables in one statement
                cur.execute(f"TRUNCATE {accounts}, {orders}")
                cur.execute(f"INSERT INTO {orders} (region, order_no, status) VALUES ('us', 1, 'last')")
                c.commit()
            cur.execute(f"INSERT INTO {accounts} (id, name) VALUES (9004, 'last')")
            c.commit()
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the dump", r)
        wait(lambda: any(e.key == (9004,) for e in r.events(accounts)), 60, "the last insert", r)
    finally:
        r.stop()
    truncates = 2 if db.kind == "postgres" else 1
    evs = r.events(accounts)
    assert [e.op for e in evs].count(Op.TRUNCATE) == truncates
    assert all(e.key == () and e.after is None for e in evs if e.op is Op.TRUNCATE)
    for t in (accounts, orders, notes):
        assert replay(r.events(t)) == source_rows(db, db.source_id, t), t
    expected = {(9004,)} if db.kind == "postgres" else {(5,), (9002,), (9004,)}
    assert set(replay(evs)) == expected
    statuses = [e.after["status"] for e in r.events(orders) if e.origin is Origin.LOG and e.after]
    if db.kind == "postgres":
        assert statuses[-3:] == ["before", "after", "last"]
        assert [e.op for e in r.events(orders)].count(Op.TRUNCATE) == 1
    else:
        assert statuses[-2:] == ["before", "after"]


def test_a_dump_after_reset_position_repairs_deletes_and_updates(db, tmp_path):
    """Range repair (issue 11, part 6): rows deleted and updated while the capture was down
    and skipped by `--reset-position` converge after a dump of every table (accounts has an
    integer key: its chunks state their key ranges, the last one open above the dump's
    bound; notes has a uuid key: no ranges, but its last chunk states the whole table since
    the dump's bound, issue 39 part 00)."""
    db.seed(random.Random(11), 60)
    accounts, notes = f"{db.ns}.accounts", f"{db.ns}.notes"
    r = Running(db, tmp_path, db.source_id).start()
    d0 = r.dump([accounts, notes])  # the seeded rows predate the capture
    wait(lambda: r.status(d0).status is DumpStatus.DONE, 60, "the first dump", r)
    r.stop()
    greatest = max(k for (k,) in replay(r.events(accounts)))
    gone_note = sorted(replay(r.events(notes)))[0]
    with db.connect() as c:  # the gap: changes the capture never sees
        cur = c.cursor()
        cur.execute(f"DELETE FROM {accounts} WHERE id IN (3, 4, 5, 30, 31, %s)", (greatest,))
        cur.execute(f"UPDATE {accounts} SET name = 'changed in the gap' WHERE id = 10")
        cur.execute(f"DELETE FROM {notes} WHERE uid = %s", gone_note)
        c.commit()
    r.start(reset_position=True)
    try:
        d = r.dump(chunk_size=7)
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the repair dump", r)
    finally:
        r.stop()
    for t in (accounts, notes):
        assert replay(r.events(t)) == source_rows(db, db.source_id, t), t
    assert any(e.op is Op.RANGE for e in r.events(accounts))
    [whole] = [e for e in r.events(notes) if e.op is Op.RANGE and e.dump_id == d]
    assert whole.after["from"] is None and whole.after["to"] is None
    assert (3,) not in replay(r.events(accounts)) and (greatest,) not in replay(r.events(accounts))
    assert gone_note not in replay(r.events(notes))


def test_schema_changes_during_a_dump_and_while_idle_converge(db, tmp_path):
    """Schema changes (issue 11, part 2) on a real server: a dump runs while a column is
    dropped (its next chunk names the column: selected again, the dump does not fail) and
    another is added with a volatile default; later, with the log idle, a column is renamed
    and one added with a constant default (no row event at all: the catalog check notices).
    Each changed table is dumped again and the replay equals the source, every column."""
    db.seed(random.Random(8), 120)
    accounts, orders, notes = db.tables()
    r = Running(db, tmp_path, db.source_id).start(schema_check_interval=0.5)
    volatile = "floor(random() * 1000)" if db.kind == "postgres" else "(FLOOR(RAND() * 1000))"
    try:
        d = r.dump([accounts, orders], chunk_size=5, delay_ms=20)
        wait(lambda: r.status(d).progress.get(accounts) is not None, 30, "the dump to start", r)
        with db.connect() as c:
            cur = c.cursor()
            cur.execute(f"ALTER TABLE {accounts} DROP COLUMN note")
            cur.execute(f"ALTER TABLE {orders} ADD COLUMN stamp integer DEFAULT {volatile}")
            c.commit()
            cur.execute(f"INSERT INTO {accounts} (id, name) VALUES (9001, 'after the drop')")
            c.commit()
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the dump", r)

        def redumps_done(n):
            mine = [x for x in r.state.list_dumps(db.source_id) if x.dump_id != d]
            return len(mine) >= n and all(x.status is DumpStatus.DONE for x in mine)

        wait(lambda: redumps_done(2), 120, "the re-dumps of both tables", r)
        with db.connect() as c:  # idle log: DDL only
            cur = c.cursor()
            cur.execute(f"ALTER TABLE {accounts} RENAME COLUMN name TO title")
            cur.execute(f"ALTER TABLE {notes} ADD COLUMN extra integer DEFAULT 7")
            c.commit()
        wait(lambda: redumps_done(4), 120, "the re-dumps after the idle changes", r)
    finally:
        r.stop()
    assert r.state.get_dump(d).status is DumpStatus.DONE  # not failed by the dropped column
    for t in (accounts, orders, notes):
        want = source_rows(db, db.source_id, t)
        assert replay(r.events(t)) == want, t
    assert all("title" in row and "note" not in row for row in replay(r.events(accounts)).values())
    assert all(row["extra"] == 7 for row in replay(r.events(notes)).values())


def lose_the_position(db, source_id: str) -> None:
    """What production does to a stopped capture: PostgreSQL drops its slot (a failover
    without failover slots, an operator's cleanup); MariaDB purges the binlog it needs."""
    if db.kind == "postgres":
        with db.superconnect() as c:
            c.autocommit = True
            c.cursor().execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (f"dblog_{source_id}",),
            )
        return
    import pymysql

    root = pymysql.connect(
        host=db.host, port=db.port, user=env("DBLOG_MYSQL_ROOT_USER"), password=env("DBLOG_MYSQL_ROOT_PASSWORD")
    )
    try:
        cur = root.cursor()
        for _ in range(2):
            cur.execute("FLUSH BINARY LOGS")
        cur.execute("SHOW BINARY LOGS")
        newest = cur.fetchall()[-1][0]
        deadline = time.monotonic() + 10
        while True:  # a dump thread still on an old file (ours, just closed) holds the purge back
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
            cur.execute("SHOW BINARY LOGS")
            if len(cur.fetchall()) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        root.close()


def test_a_lost_position_recovers_by_itself_when_allowed(db, tmp_path):
    """Issue 10 part 5: with redump_on_position_lost, a capture whose position is gone (slot
    dropped / binlog purged) starts at the log's end and dumps every table; rows deleted and
    changed in the gap converge. Without it, the capture stops with the fix."""
    db.seed(random.Random(12), 50)
    accounts = f"{db.ns}.accounts"
    r = Running(db, tmp_path, db.source_id).start()
    d0 = r.dump(None)
    wait(lambda: r.status(d0).status is DumpStatus.DONE, 60, "the first dump", r)
    wait(lambda: r.state.get_checkpoint(db.source_id) is not None, 30, "a checkpoint", r)
    r.stop()
    with db.connect() as c:
        cur = c.cursor()
        cur.execute(f"DELETE FROM {accounts} WHERE id IN (2, 3, 4)")
        cur.execute(f"UPDATE {accounts} SET name = 'changed in the gap' WHERE id = 9")
        c.commit()
    lose_the_position(db, db.source_id)
    with pytest.raises(PositionLostError) as err:  # the default: stop, naming the fix
        r.start()
    assert "dump" in err.value.fix
    r.error = None
    r.start(redump_on_position_lost=True)
    try:
        wait(lambda: len(r.state.list_dumps(db.source_id)) == 2, 60, "the recovery dump", r)
        recovery = [x for x in r.state.list_dumps(db.source_id) if x.dump_id != d0][0]
        wait(lambda: r.status(recovery.dump_id).status is DumpStatus.DONE, 120, "the recovery dump to finish", r)
        with db.connect() as c:
            c.cursor().execute(f"INSERT INTO {accounts} (id, name) VALUES (8888, 'after the recovery')")
            c.commit()
        wait(lambda: any(e.key == (8888,) for e in r.events(accounts)), 30, "a change after the recovery", r)
        assert json.loads(r.state.get_value(status_key(db.source_id)))["position_recoveries"] == 1
    finally:
        r.stop()
    assert recovery.spec.tables is None
    for t in db.tables():
        assert replay(r.events(t)) == source_rows(db, db.source_id, t), t


def test_a_filtered_dump_reads_only_its_rows_in_read_only_chunks(db, tmp_path):
    """Row-filtered dumps (issue 15, part 1): the database checks the filter before the dump is
    recorded (an unknown column or a second statement: refused, nothing recorded); the dump
    emits exactly the rows the filter accepts (a '%' in it included) and no key ranges; a
    filter that would write runs into the read-only chunk transaction and fails only its dump."""
    from airflow_provider_dblog.core import dump_requests
    from airflow_provider_dblog.core.errors import RequestError

    db.seed(random.Random(21), 90)
    accounts = f"{db.ns}.accounts"
    cfg = db.source_config(db.source_id)
    r = Running(db, tmp_path, db.source_id).start()
    try:
        with pytest.raises(RequestError) as err:
            dump_requests.request_dump(make_source(cfg), r.state, accounts, where="no_such_column > 1")
        assert "no_such_column" in err.value.cause and "filter" in err.value.fix
        with pytest.raises(RequestError, match="';'"):
            dump_requests.request_dump(make_source(cfg), r.state, accounts, where=f"id > 1; DELETE FROM {accounts}")
        assert r.state.list_dumps(db.source_id) == []

        where = "id % 3 = 0 AND name LIKE '%'"
        spec = dump_requests.request_dump(make_source(cfg), r.state, accounts, where=where, chunk_size=7)
        wait(lambda: r.status(spec.dump_id).status is DumpStatus.DONE, 60, "the filtered dump", r)
        dumped = [e for e in r.events(accounts) if e.dump_id == spec.dump_id]
        expected = {k for k, row in source_rows(db, db.source_id, accounts).items() if k[0] % 3 == 0}
        assert {e.key for e in dumped if e.op is not Op.RANGE} == expected and len(expected) == 30
        assert not any(e.op is Op.RANGE for e in dumped)

        with db.connect() as c:  # something a filter could write to, if chunks were writable
            cur = c.cursor()
            if db.kind == "postgres":
                cur.execute(f"CREATE SEQUENCE {db.ns}.probe")
                writing = f"nextval('{db.ns}.probe') > 0"
            else:
                cur.execute(f"CREATE TABLE {db.ns}.probe (n int)")
                cur.execute(
                    f"CREATE FUNCTION {db.ns}.probe_write() RETURNS int DETERMINISTIC MODIFIES SQL DATA "
                    f"BEGIN INSERT INTO {db.ns}.probe VALUES (1); RETURN 1; END"
                )
                writing = f"{db.ns}.probe_write() = 1"
            c.commit()
        try:
            bad = dump_requests.request_dump(make_source(cfg), r.state, accounts, where=writing).dump_id
        except RequestError as refused:  # the database may already refuse it when planning
            assert "read" in refused.cause.lower(), refused.cause
        else:
            wait(lambda: r.status(bad).status is DumpStatus.FAILED, 60, "the writing filter's dump to fail", r)
            assert "read-only" in r.status(bad).error.lower() or "read only" in r.status(bad).error.lower()
        with db.connect() as c:
            cur = c.cursor()
            if db.kind == "postgres":
                cur.execute(f"SELECT last_value, is_called FROM {db.ns}.probe")
                assert cur.fetchone()[1] is False  # nextval never ran
            else:
                cur.execute(f"SELECT count(*) FROM {db.ns}.probe")
                assert cur.fetchone()[0] == 0
        r.check()  # the capture goes on
    finally:
        r.stop()


def test_an_adaptive_dump_paces_itself_and_converges(db, tmp_path):
    """Adaptive dumps (issue 15, part 3) on a real server: the dump reports its pace (mode,
    chunk size, delay, the signal that set them), grows its chunks while the source is healthy,
    finishes, and the replay equals the source. Without standbys or configured replicas the
    source reports no replica lag."""
    from airflow_provider_dblog.core import dump_requests

    db.seed(random.Random(31), 150)
    accounts = f"{db.ns}.accounts"
    with db.connect() as c:  # a few thousand rows: chunks enough to watch the pace change
        rows = "generate_series(1000, 4000) AS t(seq)" if db.kind == "postgres" else f"{db.ns}.seq_1000_to_4000"
        c.cursor().execute(f"INSERT INTO {accounts} (id, name) SELECT seq, 'more' FROM {rows}")
        c.commit()
    src = make_source(db.source_config(db.source_id))
    src.open()
    try:
        assert src.replication_lag() is None
    finally:
        src.close()
    r = Running(db, tmp_path, db.source_id).start()
    paces = []
    try:
        spec = dump_requests.request_dump(
            make_source(db.source_config(db.source_id)), r.state, accounts, chunk_size=10, delay_ms=300, adaptive=True
        )

        def done():
            live = (dump_requests.read_status(r.state, db.source_id)["dumps"] or [{}])[0]
            if live.get("pace"):
                paces.append(live["pace"])
            return r.status(spec.dump_id).status is DumpStatus.DONE

        wait(done, 120, "the adaptive dump", r)
    finally:
        r.stop()
    assert paces and all(p["mode"] == "adaptive" for p in paces), paces
    assert max(p["chunk_size"] for p in paces) > 10  # grew from its start while healthy
    assert replay(r.events(accounts)) == source_rows(db, db.source_id, accounts)


def test_a_dump_with_parallel_readers_converges_under_writes(db, tmp_path):
    """Parallel chunk reads (issue 15, part 2) on a real server: every table dumped with 3
    readers (3 connections selecting disjoint key ranges inside each watermark window) while
    a writer changes rows; the replay equals the source and each window read several ranges."""
    db.seed(random.Random(41), 600)
    r = Running(db, tmp_path, db.source_id).start()
    stop, errors, next_id = threading.Event(), [], itertools.count(10**6)

    def writer():
        rng = random.Random(42)
        try:
            with db.connect() as c:
                while not stop.is_set():
                    db.random_transaction(c, rng, lambda: next(next_id))
                    c.commit()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    try:
        d = r.dump(None, chunk_size=40, readers=3)
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the parallel dump", r)
    finally:
        stop.set()
        t.join(30)
        time.sleep(1)
        r.stop()
    assert not errors, errors
    # the engine's own count (a periodic report can predate a dump of 600 rows)
    assert r.engine.parallel_reads > 0
    progress = r.status(d).progress[f"{db.ns}.accounts"]
    assert progress.done and progress.chunks < progress.rows / 40  # several ranges per window
    for table in db.tables():
        assert replay(r.events(table)) == source_rows(db, db.source_id, table), table


def test_verify_finds_drift_and_a_repair_dump_reads_only_the_drifted_keys(db, tmp_path):
    """Drift repair (issue 15, part 4): rows deleted, changed and inserted while nothing
    captured (a --reset-position restart skips them) make the replay differ from the source;
    verify names exactly those keys, and the repair (a key-list dump of them, requested by
    `dblog verify --repair` and the VerifyOperator) reads < 1 % of the table and makes the
    replay equal to the source again: extra rows deleted, missing and stale rows re-read."""
    from airflow_provider_dblog.core import dump_requests
    from airflow_provider_dblog.core.verify import check_table

    db.seed(random.Random(51), 100)
    accounts = f"{db.ns}.accounts"
    with db.connect() as c:
        rows = "generate_series(5000, 8000) AS t(seq)" if db.kind == "postgres" else f"{db.ns}.seq_5000_to_8000"
        c.cursor().execute(f"INSERT INTO {accounts} (id, name) SELECT seq, 'bulk' FROM {rows}")
        c.commit()
    r = dumped_once(db, tmp_path)
    with db.connect() as c:  # the gap
        db.gap_changes(c, random.Random(52), itertools.count(9000).__next__)
        c.commit()
    r.start(reset_position=True)
    try:
        src, out = make_source(db.source_config(db.source_id)), make_output(r.lake)
        src.open()
        out.open()
        try:
            drift = {t: check_table(src, out, t) for t in db.tables()}
        finally:
            src.close()
            out.close()
        keys = {t: [m.key for m in c.mismatches] for t, c in drift.items()}
        kinds = {m.kind for c in drift.values() for m in c.mismatches}
        assert kinds == {"missing", "different", "extra"}, kinds
        source_total = drift[accounts].source_rows
        repairs = dump_requests.request_repairs(make_source(db.source_config(db.source_id)), r.state, keys)
        assert set(repairs) == {t for t, k in keys.items() if k}
        for spec in repairs.values():
            wait(lambda spec=spec: r.status(spec.dump_id).status is DumpStatus.DONE, 60, "a repair dump", r)
        read = r.status(repairs[accounts].dump_id).progress[accounts].rows
        assert 0 < read <= len(keys[accounts]) < source_total / 100  # < 1 % of the table read
    finally:
        r.stop()
    for t in db.tables():
        assert replay(r.events(t)) == source_rows(db, db.source_id, t), t
