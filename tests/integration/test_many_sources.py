"""A fleet in small (issue 33): five sources of twenty tables each, three PostgreSQL schemas
and two MariaDB databases, captured at once by five ``dblog capture`` processes whose state
shares one ZooKeeper (a chroot each), under a write load spread over all hundred tables and a
``dump --all`` of every source. Each source's changelog must hold what its source holds:
``dblog verify`` finds no difference for any of them, and no capture reads another's tables.

The full size (20 sources × 50 tables) and its costs are a benchmark: bench/many_sources.py.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_provider_dblog.config import make_state
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.outputs import make_output

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env

pytestmark = pytest.mark.integration

KINDS = ("postgres", "mysql", "postgres", "mysql", "postgres")
TABLES = 20
ROWS = 12


class Fleet:
    def __init__(self, tmp_path):
        self.zk = env("DBLOG_ZK_HOSTS")
        self.root = f"/dblog_fleet_{uuid.uuid4().hex[:8]}"
        self.dbs = []
        for i, kind in enumerate(KINDS):
            db = ADAPTERS[kind]()
            db.source_id = f"fleet{i}_{uuid.uuid4().hex[:6]}"
            db.names = [f"{db.ns}.t{j:02d}" for j in range(TABLES)]
            db.config = tmp_path / f"{db.source_id}.toml"
            db.state = f"zk://{self.zk}{self.root}/{db.source_id}"
            self.dbs.append(db)
        self.lake = f"delta://{tmp_path / 'lake'}"  # one root: a changelog table per source and table
        self.caps: list[Capture] = []

    def create(self, db) -> None:
        c = db.connect()
        try:
            cur = c.cursor()
            cur.execute(f"CREATE {'SCHEMA' if db.kind == 'postgres' else 'DATABASE'} {db.ns}")
            for name in db.names:
                cur.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v int NOT NULL, s varchar(20))")
                rows = ",".join(f"({k}, {k}, 's{k}')" for k in range(1, ROWS + 1))
                cur.execute(f"INSERT INTO {name} VALUES {rows}")
            c.commit()
        finally:
            c.close()
        config = {**db.source_config(db.source_id), "tables": db.names}
        write_config(db.config, config, db.state, self.lake)


class Load(threading.Thread):
    """Inserts, updates and deletes over every table of every source, one row per transaction."""

    def __init__(self, dbs):
        super().__init__(daemon=True)
        self.dbs, self.done, self.error, self.writes = dbs, threading.Event(), None, 0

    def run(self):
        rng = random.Random(33)
        conns = [db.connect() for db in self.dbs]
        try:
            while not self.done.is_set():
                i = rng.randrange(len(self.dbs))
                db, c = self.dbs[i], conns[i]
                table, key = rng.choice(db.names), rng.randint(1, ROWS * 2)
                cur = c.cursor()
                op = rng.random()
                if op < 0.4:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                    cur.execute(f"INSERT INTO {table} VALUES (%s, %s, 'w')", (key, self.writes))
                elif op < 0.8:
                    cur.execute(f"UPDATE {table} SET v = %s, s = 'u' WHERE id = %s", (self.writes, key))
                else:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (key,))
                c.commit()
                self.writes += 1
                time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            self.error = e
        finally:
            for c in conns:
                c.close()


def changelog_keys(lake: str, source_id: str, table: str) -> set:
    out = make_output(lake)
    out.open()
    try:
        return {e.key for e in out.scan(source_id, table)}
    finally:
        out.close()


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path)
    try:
        for db in f.dbs:
            f.create(db)
        yield f
    finally:
        for cap in f.caps:
            if cap.proc is not None and cap.proc.poll() is None:
                cap.stop()
        for db in f.dbs:
            db.drop(db.source_id)


def test_five_sources_of_twenty_tables_captured_at_once_each_converge(fleet, tmp_path):
    for db in fleet.dbs:
        cap = Capture(db.config, tmp_path / f"{db.source_id}.log")
        cap.start()
        fleet.caps.append(cap)

    def alive():
        for cap in fleet.caps:
            cap.assert_alive()

    def checkpointed(db) -> bool:
        try:
            store = make_state({"url": db.state}, create=False)  # a store only its capture makes
        except ConfigurationError:
            return False
        try:
            return store.get_checkpoint(db.source_id) is not None
        finally:
            store.close()

    wait_for(
        lambda: all(map(checkpointed, fleet.dbs)), 120, "every capture's first checkpoint", alive=alive, interval=1
    )
    stores = [make_state({"url": db.state}, create=False) for db in fleet.dbs]
    try:
        load = Load(fleet.dbs)
        load.start()
        dumps = [dblog(db.config, "dump", "--all", "--chunk-size", "5").stdout.strip() for db in fleet.dbs]
        wait_for(
            lambda: all(s.get_dump(d).status is DumpStatus.DONE for s, d in zip(stores, dumps)),
            300,
            "every source's dump --all",
            alive=alive,
            interval=0.5,
        )
        time.sleep(2)  # writes after the dumps too
        load.done.set()
        load.join(30)
        assert load.error is None, load.error
        assert load.writes > 100
        for db in fleet.dbs:  # a marker row written last, in a table of each source
            c = db.connect()
            c.cursor().execute(f"INSERT INTO {db.names[-1]} VALUES (999999, 0, 'end')")
            c.commit()
            c.close()
        for db in fleet.dbs:
            wait_for(
                lambda db=db: (999999,) in changelog_keys(fleet.lake, db.source_id, db.names[-1]),
                120,
                f"{db.source_id}'s last row in the changelog",
                alive=alive,
                interval=0.5,
            )
    finally:
        for s in stores:
            s.close()
    with ThreadPoolExecutor(len(KINDS)) as pool:  # the five at once, as the captures ran
        stopped = list(pool.map(lambda cap: cap.stop(), fleet.caps))
        assert stopped == [0] * len(KINDS)  # each ran to the end and stopped cleanly
        verifies = list(pool.map(lambda db: dblog(db.config, "verify", check=False), fleet.dbs))
    # a changelog table per source: no capture ever lost a commit to another (in one shared
    # table, about one commit in two was retried: docs/benchmarks.md, captures sharing a root)
    lake = fleet.lake[len("delta://") :]
    assert sorted(os.listdir(f"{lake}/changelogs")) == sorted(db.source_id for db in fleet.dbs)
    for db, cap in zip(fleet.dbs, fleet.caps):
        text = cap.log_path.read_text(errors="replace")
        assert "changelog commit retried" not in text and "commits retried" not in text, (db.source_id, cap.tail())
    for db, verified in zip(fleet.dbs, verifies):
        assert verified.returncode == 0, (db.source_id, verified.stdout[-3000:], verified.stderr[-3000:])
        assert verified.stdout.count(", 0 mismatches") == TABLES, verified.stdout  # each of its tables compared
