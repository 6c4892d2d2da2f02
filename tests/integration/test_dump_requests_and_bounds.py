"""Issue 11, parts 4 and 5, against real PostgreSQL and MariaDB.

* A bad request fails only its dump: keys that do not fit the key columns are refused when
  the dump is requested (the ``dblog dump`` command); a table dropped while its dump runs
  fails that dump with the cause, and the capture keeps capturing.
* Dumps finish: a table dump fixes its upper key bound when it starts, so a dump of a table
  under a steady insert load ends, and dumps at most the rows present at its start.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid

import pytest

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.events import Op, Origin
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import dblog, write_config
from .databases import ADAPTERS
from .test_engine import Running, wait

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mysql"])
def db(request):
    d = ADAPTERS[request.param]()
    d.create()
    d.source_id = f"dreq_{request.param}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


def test_keys_that_do_not_fit_the_key_columns_are_refused_at_request_time(db, tmp_path):
    config = write_config(
        tmp_path / "dblog.toml", db.source_config(db.source_id), tmp_path / "state.db", f"delta://{tmp_path / 'lake'}"
    )
    LocalStateStore(str(tmp_path / "state.db")).close()  # the capture's store: requests need one
    accounts, orders, notes = (f"{db.ns}.{t}" for t in ("accounts", "orders", "notes"))
    refused = [
        (accounts, '"abc"', ['"abc"', "column id (bigint", accounts]),  # a string for an integer key
        (accounts, "1.5", ["1.5", "column id (bigint", "a JSON integer"]),
        (accounts, "true", ["true", "column id (bigint"]),
        (orders, '["eu", "7"]', ['"7"', "column order_no (int", orders]),  # composite, mistyped part
        (orders, '{"region": "eu", "order_nr": 7}', ["missing ['order_no']", "unknown ['order_nr']"]),
        (orders, '["eu"]', ["has 1 value(s) but the key has 2 column(s)"]),  # wrong arity
        (orders, '["eu", 1, 2]', ["has 3 value(s)"]),
    ]
    if db.kind == "postgres":  # uid uuid: a UUID string
        refused.append((notes, '"not-a-uuid"', ['"not-a-uuid"', "column uid (uuid)", "a UUID string"]))
    else:  # uid char(36): any string that fits
        refused.append((notes, json.dumps("x" * 37), ["column uid (char(36))", "at most 36 characters"]))
    for table, key, needles in refused:
        p = dblog(config, "dump", "--table", table, "--key", key, check=False)
        assert p.returncode == 2 and "Fix:" in p.stderr, (key, p.stderr)
        for needle in needles:
            assert needle in p.stderr, (key, needle, p.stderr)
    assert json.loads(dblog(config, "status", "--json").stdout)["dumps"] == []  # nothing recorded
    # The same keys in their column's types are accepted.
    uid = str(uuid.uuid4())
    dblog(config, "dump", "--table", accounts, "--key", "42", "--key", '{"id": 43}')
    dblog(config, "dump", "--table", orders, "--key", '["eu", 7]', "--key", '{"order_no": 8, "region": "us"}')
    dblog(config, "dump", "--table", notes, "--key", json.dumps(uid))
    assert len(json.loads(dblog(config, "status", "--json").stdout)["dumps"]) == 3
    # Row filters through the command: refused with the database's message, or recorded and shown.
    p = dblog(config, "dump", "--table", accounts, "--where", "no_such_column = 1", check=False)
    assert p.returncode == 2 and "no_such_column" in p.stderr and "Fix:" in p.stderr, p.stderr
    p = dblog(config, "dump", "--all", "--where", "id > 1", check=False)
    assert p.returncode == 2 and "exactly one table" in p.stderr, p.stderr
    dblog(config, "dump", "--table", accounts, "--where", "id % 2 = 0 AND name <> 'x'")
    dumps = json.loads(dblog(config, "status", "--json").stdout)["dumps"]
    assert [d["where"] for d in dumps if d["where"]] == ["id % 2 = 0 AND name <> 'x'"]
    assert "where=(id % 2 = 0 AND name <> 'x')" in dblog(config, "status").stdout


def test_a_table_dropped_while_its_dump_runs_fails_that_dump_and_the_capture_goes_on(db, tmp_path):
    doomed = f"{db.ns}.doomed"
    with db.connect() as c:
        cur = c.cursor()
        cur.execute(f"CREATE TABLE {doomed} (id int PRIMARY KEY, v varchar(20))")
        for i in range(1, 401):
            cur.execute(f"INSERT INTO {doomed} (id, v) VALUES (%s, %s)", (i, f"v{i}"))
        c.commit()
    config = db.source_config
    db.source_config = lambda source_id: dict(config(source_id), tables=[*db.tables(), doomed])
    r = Running(db, tmp_path, db.source_id).start()
    try:
        d = r.dump([doomed], chunk_size=20, delay_ms=300)  # about 6 s for the whole table
        wait(lambda: r.status(d).progress.get(doomed) and r.status(d).progress[doomed].chunks >= 2, 30, "2 chunks", r)
        with db.connect() as c:
            c.cursor().execute(f"DROP TABLE {doomed}")
            c.commit()
        wait(lambda: r.status(d).status is DumpStatus.FAILED, 30, "the dump to fail", r)
        error = r.status(d).error
        assert f"table {doomed} no longer exists" in error and "Fix:" in error, error
        assert not r.status(d).progress[doomed].done
        # The capture goes on: a change of another table written after the failure arrives.
        with db.connect() as c:
            c.cursor().execute(f"INSERT INTO {db.ns}.accounts (id, name) VALUES (777, 'after the failure')")
            c.commit()
        t = f"{db.ns}.accounts"
        wait(lambda: any(e.key == (777,) and e.origin is Origin.LOG for e in r.events(t)), 30, "a later event", r)
        ok = r.dump([f"{db.ns}.accounts"])  # and a later dump runs
        wait(lambda: r.status(ok).status is DumpStatus.DONE, 30, "a later dump", r)
        r.check()
    finally:
        r.stop()


def test_a_table_dump_under_a_steady_insert_load_ends(db, tmp_path):
    """Dumps finish: a thread inserts new keys at the end of the (composite) key space for the
    whole dump; the dump ends, and its rows are at most those present at its start."""
    db.seed(random.Random(5), 1500)
    orders = f"{db.ns}.orders"
    r = Running(db, tmp_path, db.source_id).start()
    stop, inserted = threading.Event(), [0]

    def append():
        with db.connect() as c:
            cur = c.cursor()
            n = 0
            while not stop.is_set():
                for _ in range(10):
                    n += 1
                    cur.execute(
                        f"INSERT INTO {orders} (region, order_no, status, amount) VALUES ('zz', %s, 'new', 1.000)",
                        (n,),
                    )
                c.commit()
                inserted[0] = n
                time.sleep(0.02)

    writer = threading.Thread(target=append, daemon=True)
    try:
        writer.start()
        wait(lambda: inserted[0] >= 50, 30, "the insert load to start")
        d = r.dump([orders], chunk_size=50, delay_ms=20)
        wait(lambda: orders in r.status(d).progress, 30, "the first chunk", r)
        # The bound was read before the first chunk: at most this many rows were there then.
        present_at_start = 1500 + inserted[0]
        wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the dump of a growing table to end", r)
        appended_at_end = inserted[0]
        stop.set()
        writer.join(30)
        appended_total = inserted[0]  # the writer finishes the batch it was in when stopped
        progress = r.status(d).progress[orders]
        dumped = [e for e in r.events(orders) if e.op is Op.READ and e.dump_id == d]
        assert len(dumped) == progress.rows <= present_at_start, (len(dumped), present_at_start, appended_at_end)
        assert progress.done and progress.upper_key is not None and progress.upper_key[0] == "zz"
        bound_no = progress.upper_key[1]  # the last appended key when the dump started
        assert len(dumped) <= 1500 + bound_no
        assert all(e.key <= progress.upper_key for e in dumped)
        assert appended_at_end > bound_no  # inserts went on past the bound while it ran ...

        def appended_in_the_log():  # ... and they all reach the changelog through the log
            return len({e.key for e in r.events(orders) if e.origin is Origin.LOG and e.key[0] == "zz"})

        wait(lambda: appended_in_the_log() == appended_total, 30, "the appended rows through the log", r)
    finally:
        stop.set()
        r.stop()
