"""Chunks read from a MariaDB replica while the log is read from the primary (``chunk_replica``,
docs/sources.md "Chunks from a replica"), with each kind of watermarks and its documented
grants: with read-only watermarks nothing is written anywhere.

The replica is made stale on purpose: its SQL thread is stopped, every row is then changed on
the primary, and the dump starts while writers go on. A chunk read from the stale replica
without waiting would put the old rows into the changelog after the log's newer ones, and
``dblog verify`` would find them. The dump must not progress until the replica runs again,
then finish, and the changelog must equal the primary. Per-user statistics (``userstat``)
show where the chunks were read: the capture's user read the table's rows on the replica and
not on the primary.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pymysql
import pytest

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .test_documented_grants import documented_sql, output_keys
from .test_gtid_failover import caught_up, pair, root  # noqa: F401 (pair: the fixture)
from .test_read_only_dumps import _write

pytestmark = pytest.mark.integration

ROWS = 2000


def rows_read(port: int, user: str) -> int:
    """Rows the user's statements read on the server (information_schema.USER_STATISTICS)."""
    with root(port) as c, c.cursor() as cur:
        cur.execute("SELECT ROWS_READ FROM information_schema.USER_STATISTICS WHERE USER = %s", (user,))
        row = cur.fetchone()
        return int(row[0]) if row else 0


def dump_rows(dump) -> int:
    return sum(t.rows for t in dump.progress.values())


@pytest.mark.parametrize(
    "watermarks, grants", [("log", "MariaDB, read-only dumps"), ("table", "MySQL / MariaDB")], ids=["log", "table"]
)
def test_chunks_from_a_lagging_replica(pair, tmp_path, monkeypatch, watermarks, grants):  # noqa: F811
    primary, replica = pair
    tag = uuid.uuid4().hex[:8]
    db, user, password, wm = f"rc_{tag}", f"dblog_rc_{tag}", uuid.uuid4().hex, f"dblog_{tag}"
    table = f"{db}.orders"
    with root(primary) as c, c.cursor() as cur:
        cur.execute(f"CREATE DATABASE {db}")
        cur.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, v varchar(4000), n int)")
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, 0)", [(i, f"v{i}") for i in range(1, ROWS + 1)])
        cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
        for statement in documented_sql(grants):  # the docs' grants, replicated to the replica too
            statement = statement.replace("'dblog'@'%'", f"'{user}'@'%'").replace("shop.*", f"{db}.*")
            cur.execute(statement.replace("dblog.*", f"{wm}.*"))
    caught_up(primary, replica)
    for port in (primary, replica):
        with root(port) as c, c.cursor() as cur:
            cur.execute("SET GLOBAL userstat = 1")
    monkeypatch.setenv("DBLOG_RC_PASSWORD", password)  # the capture child's environment
    source = {
        "type": "mysql",
        "id": f"rc{tag}",
        "host": "127.0.0.1",
        "port": primary,
        "user": user,
        "password_env": "DBLOG_RC_PASSWORD",
        "tables": [table],
        "watermarks": watermarks,
        "watermark_schema": wm,
        "chunk_replica": f"127.0.0.1:{replica}",
    }
    url = f"jsonl://{tmp_path / 'out'}"
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", url)
    state = LocalStateStore(str(tmp_path / "state.db"))
    capture = Capture(config, tmp_path / "capture.log", faults=("--window-delay-ms", "20"))
    capture.start()
    stop = threading.Event()
    writers: list[threading.Thread] = []
    try:
        wait_for(lambda: " started at " in capture.tail(), 60, "the capture to start", capture.assert_alive)
        with root(replica) as c, c.cursor() as cur:
            cur.execute("STOP SLAVE SQL_THREAD")
        with root(primary) as c, c.cursor() as cur:  # the replica's rows are all stale now
            cur.execute(f"UPDATE {table} SET n = n + 1000, v = CONCAT(v, 's')")
        counts = {"txns": 0}

        def connect():
            return pymysql.connect(host="127.0.0.1", port=primary, user="root", password="root")

        writers = [
            threading.Thread(target=_write, args=("mysql", connect, table, stop, seed, counts), daemon=True)
            for seed in (1, 2)
        ]
        for w in writers:
            w.start()
        read_on_primary = rows_read(primary, user)
        dump_id = dblog(config, "dump", "--table", table, "--chunk-size", "37").stdout.strip()
        time.sleep(5)
        stalled = state.get_dump(dump_id)
        assert stalled.status is DumpStatus.PENDING or stalled.status is DumpStatus.RUNNING, stalled
        assert not any(t.chunks for t in stalled.progress.values()), f"a chunk came from the stopped replica: {stalled}"
        with root(replica) as c, c.cursor() as cur:
            cur.execute("START SLAVE SQL_THREAD")

        def done() -> bool:
            d = state.get_dump(dump_id)
            assert d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), (d.error, capture.tail())
            return d.status is DumpStatus.DONE

        wait_for(done, 180, "the dump from the replica", capture.assert_alive, detail=capture.detail)
        stop.set()
        for w in writers:
            w.join(30)
        assert counts["txns"] > 50, counts
        # The chunks read the table on the replica, not on the primary.
        dumped = dump_rows(state.get_dump(dump_id))
        on_replica, on_primary = rows_read(replica, user), rows_read(primary, user) - read_on_primary
        print(
            f"rows dumped {dumped}, read by the capture's user on the replica {on_replica}, on the primary {on_primary}"
        )
        assert dumped > ROWS / 3 and on_replica >= dumped, (dumped, on_replica)
        # On the primary: nothing but the watermark row (one read per UPDATE, two per chunk).
        chunks = sum(t.chunks for t in state.get_dump(dump_id).progress.values())
        assert on_primary <= (2 * chunks if watermarks == "table" else 0) + 10, (dumped, chunks, on_primary)
        with root(primary) as c, c.cursor() as cur:
            cur.execute(f"INSERT INTO {table} VALUES (999999, 'sentinel', 0)")
        wait_for(
            lambda: (999999,) in output_keys(url, source["id"], table, "c"),
            60,
            "the sentinel in the changelog",
            capture.assert_alive,
            detail=capture.detail,
        )
        caught_up(primary, replica)  # verify reads the replica too
        result = dblog(config, "verify", "--table", table, check=False)
        assert result.returncode == 0 and " 0 mismatches" in result.stdout, result.stdout + result.stderr
        if watermarks == "log":  # nothing was created
            with root(primary) as c, c.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (wm,))
                assert cur.fetchone()[0] == 0
    finally:
        stop.set()
        for w in writers:
            w.join(30)
        capture.close()


def test_oracle_workload_with_read_only_chunks_from_a_replica_that_stops_and_starts(pair, tmp_path):  # noqa: F811
    """The convergence oracle's workload (writers, TRUNCATEs, ALTER TABLEs) on the pair's
    primary, read-only dumps of every table read on the replica, whose SQL thread stops and
    starts at random moments (lag of up to 3 s). The changelog must equal the primary's tables."""
    from airflow_provider_dblog.outputs import make_output

    from .test_gtid_failover import PairAdapter
    from .test_oracle import RANDOM_SEED, Workload, capture_status, sentinel_arrived

    seed = RANDOM_SEED
    print(f"\nchunks from a replica: seed {seed} (rerun with DBLOG_ORACLE_SEED={seed})")
    primary, replica = pair
    rng = random.Random(seed)
    db = PairAdapter(primary)
    source_id = f"rcoracle_{uuid.uuid4().hex[:6]}"
    db.create()
    db.seed(rng, 300)
    source = db.tls_source_config(
        source_id, host="127.0.0.1", port=primary, watermarks="log", chunk_replica=f"127.0.0.1:{replica}"
    )
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", f"delta://{tmp_path / 'lake'}")
    state = LocalStateStore(str(tmp_path / "state.db"))
    out = make_output(f"delta://{tmp_path / 'lake'}")
    out.open()
    capture = Capture(config, tmp_path / "capture.log", faults=("--window-delay-ms", "20"))
    capture.start()
    stops = 0
    try:
        wait_for(lambda: capture_status(state, source_id), 90, "the capture to start", capture.assert_alive)
        dumps = []
        with Workload(db, seed, schema_changes=True) as load:
            deadline = time.monotonic() + 20
            dumps.append(dblog(config, "dump", "--all", "--chunk-size", "20").stdout.strip())
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(0.5, 2))
                with root(replica) as c, c.cursor() as cur:
                    cur.execute("STOP SLAVE SQL_THREAD")
                    stops += 1
                    time.sleep(rng.uniform(0.2, 3))
                    cur.execute("START SLAVE SQL_THREAD")
                if len(dumps) == 1 and time.monotonic() > deadline - 10:
                    dumps.append(dblog(config, "dump", "--all", "--chunk-size", "30").stdout.strip())
        assert load.txns > 50, f"workload too small: {load.txns} transactions, errors {load.errors[:3]}"
        assert len(load.altered) == len(db.schema_changes()), load.altered

        def all_done():
            ds = [state.get_dump(d) for d in dumps]
            failed = [d for d in ds if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)]
            assert not failed, f"dump failed: {failed[0].error}"
            return all(d.status is DumpStatus.DONE for d in ds)

        wait_for(all_done, 240, "the dumps from the replica", capture.assert_alive, detail=capture.detail)
        sentinel_arrived(db, out, source_id, capture)
        assert capture.stop() == 0, capture.tail()
        caught_up(primary, replica)  # verify reads the replica too
        result = dblog(config, "verify", check=False)
        print(result.stdout)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}\n{capture.tail()}"
        assert result.stdout.count(" 0 mismatches") == len(db.tables()), result.stdout
        print(f"chunks from a replica: {load.txns} transactions, the replica's SQL thread stopped {stops} times")
    finally:
        capture.close()
        out.close()
