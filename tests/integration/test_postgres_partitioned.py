"""Partitioned tables on a real PostgreSQL 15 (issue 10 part 3), with both plugins.

A partitioned table is captured and dumped as one table under its own name, with a key that
includes the partition key. Partitions created, attached and detached while the capture runs
and a dump of the table is under way leave a changelog whose replay equals the table. A
partition dropped before the capture saw it leave, and a TRUNCATE of one partition, are
reported as warnings, and a dump of the table repairs them (integer keys: range repair). The
start-up check names the ALTER PUBLICATION that makes a publication publish via the root.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid

import pytest

from airflow_provider_dblog.config import make_source
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import Op, Origin
from airflow_provider_dblog.core.verify import replay

from .databases import PostgresAdapter
from .test_engine import Running, source_rows, wait

pytestmark = pytest.mark.integration
PLUGINS = ["pgoutput", "wal2json"]


class PartitionedDB(PostgresAdapter):
    """A schema of its own with one partitioned table, readings (id, bucket) PARTITION BY
    RANGE (bucket): p0 [0, 10), p1 [10, 20) itself partitioned by RANGE (id) into p1a and
    p1b, p2 [20, 30). Captured with the given plugin."""

    def __init__(self, plugin: str):
        super().__init__()
        self.plugin = plugin
        self.t = f"{self.ns}.readings"

    def tables(self) -> list[str]:
        return [self.t]

    def source_config(self, source_id: str) -> dict:
        return {**super().source_config(source_id), "plugin": self.plugin}

    def sql(self, *statements: str, params=None) -> list:
        with self.connect() as c:
            cur = c.cursor()
            for s in statements:
                cur.execute(s, params)
            rows = cur.fetchall() if cur.description else []
            c.commit()
        return rows

    def create(self) -> None:
        t = self.t
        self.sql(
            f"CREATE SCHEMA {self.ns}",
            f"""CREATE TABLE {t} (id bigint, bucket int, value numeric(10,2), note text,
                PRIMARY KEY (id, bucket)) PARTITION BY RANGE (bucket)""",
            f"CREATE TABLE {t}_p0 PARTITION OF {t} FOR VALUES FROM (0) TO (10)",
            f"CREATE TABLE {t}_p1 PARTITION OF {t} FOR VALUES FROM (10) TO (20) PARTITION BY RANGE (id)",
            f"CREATE TABLE {t}_p1a PARTITION OF {t}_p1 FOR VALUES FROM (MINVALUE) TO (150)",
            f"CREATE TABLE {t}_p1b PARTITION OF {t}_p1 FOR VALUES FROM (150) TO (MAXVALUE)",
            f"CREATE TABLE {t}_p2 PARTITION OF {t} FOR VALUES FROM (20) TO (30)",
            # rows 1..300, bucket id % 30: a hundred in each of p0, p1 (both leaves), p2
            f"INSERT INTO {t} SELECT i, i % 30, i * 1.25, 'seed' FROM generate_series(1, 300) i",
        )

    def keys_in(self, table: str) -> set:
        return {tuple(r) for r in self.sql(f"SELECT id, bucket FROM {table}")}


@pytest.fixture(params=PLUGINS)
def pdb(request):
    d = PartitionedDB(request.param)
    d.create()
    d.source_id = f"part_{request.param[:3]}_{uuid.uuid4().hex[:6]}"
    yield d
    d.drop(d.source_id)


class Writer:
    """Random inserts, updates, deletes and cross-partition updates through the partitioned
    table until stopped (a statement that finds no partition, after a detach, is rolled back)."""

    def __init__(self, db: PartitionedDB, seed: int):
        self.db, self.rng, self.stop, self.txns = db, random.Random(seed), threading.Event(), 0
        self.ids = iter(range(10_000, 10**6))
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t, rng = self.db.t, self.rng
        c = self.db.connect()
        try:
            while not self.stop.is_set():
                cur = c.cursor()
                try:
                    # Not p3's rows (negative ids): the test follows them from the attach on.
                    cur.execute(f"SELECT id FROM {t} WHERE id > 0 ORDER BY random() LIMIT 1")
                    some = (cur.fetchone() or (0,))[0]
                    r = rng.random()
                    if r < 0.35:
                        cur.execute(f"INSERT INTO {t} VALUES (%s, %s, 1, 'w')", (next(self.ids), rng.randrange(30)))
                    elif r < 0.65:
                        cur.execute(f"UPDATE {t} SET value = value + 1, note = 'u' WHERE id = %s", (some,))
                    elif r < 0.8:
                        cur.execute(f"DELETE FROM {t} WHERE id = %s", (some,))
                    else:  # the partition key is part of the key: the row moves, its key changes
                        cur.execute(f"UPDATE {t} SET bucket = %s WHERE id = %s", (rng.randrange(10, 30), some))
                    c.commit()
                    self.txns += 1
                except Exception:  # noqa: BLE001 - no partition for the row, a lock timeout: next
                    c.rollback()
                time.sleep(rng.uniform(0.005, 0.03))
        finally:
            c.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def status(r: Running) -> dict:
    return json.loads(r.state.get_value(status_key(r.source_id)) or "{}")


def all_dumps_done(r: Running, at_least: int) -> bool:
    dumps = r.state.list_dumps(r.source_id)
    failed = [d for d in dumps if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)]
    assert not failed, failed[0].error
    return len(dumps) >= at_least and all(d.status is DumpStatus.DONE for d in dumps)


def sentinel(db: PartitionedDB, r: Running, key: tuple) -> None:
    """Insert a row and wait until it is in the changelog: so is every earlier change."""
    db.sql(f"INSERT INTO {db.t} VALUES (%s, %s, 0, 'sentinel')", params=key)
    wait(lambda: any(e.key == key for e in r.events(db.t)), 60, "the sentinel row", r)


def test_partitions_created_attached_and_detached_during_a_dump_converge(pdb, tmp_path):
    """Under a write load that also moves rows between partitions, while a dump of the table
    runs: a partition is created and filled, a table with rows (its columns in another order,
    one dropped) is attached, and a partition with rows is detached and then written to. The
    changelog names only the partitioned table; the attached rows arrive as dump rows, the
    detached ones are removed by a key-list statement (op k), none by a delete; replay equals
    the table."""
    t = pdb.t
    pdb.sql(
        f"CREATE TABLE {t}_p3 (note text, extra int, value numeric(10,2), bucket int, id bigint, "
        "PRIMARY KEY (id, bucket))",
        f"ALTER TABLE {t}_p3 DROP COLUMN extra",
        # Keys below every key of readings: the table dump is past them when p3 is attached.
        f"INSERT INTO {t}_p3 (id, bucket, value, note) SELECT -i, 30 + i % 10, i, 'loose' FROM generate_series(1, 40) i",
    )
    r = Running(pdb, tmp_path, pdb.source_id).start()
    try:
        with Writer(pdb, seed=7) as writer:
            d = r.dump([t], chunk_size=13, delay_ms=200)
            wait(lambda: (p := r.status(d).progress.get(t)) is not None and p.chunks >= 2, 30, "the dump to start", r)
            pdb.sql(
                f"CREATE TABLE {t}_p4 PARTITION OF {t} FOR VALUES FROM (40) TO (50)",
                f"INSERT INTO {t} SELECT i, 40 + i % 10, i, 'new partition' FROM generate_series(2001, 2010) i",
            )
            pdb.sql(
                f"ALTER TABLE {t} ATTACH PARTITION {t}_p3 FOR VALUES FROM (30) TO (40)",
                f"UPDATE {t} SET note = 'after attach' WHERE id = -1",
                f"DELETE FROM {t} WHERE id = -2",
            )
            time.sleep(1.5)  # the writer changes p0's rows through the table a while longer
            pdb.sql(f"ALTER TABLE {t} DETACH PARTITION {t}_p0")
            assert r.status(d).status is not DumpStatus.DONE, "the dump ended before the partitions changed"
            detached = pdb.keys_in(f"{t}_p0")
            # Changes of the stand-alone table are no changes of readings.
            pdb.sql(f"UPDATE {t}_p0 SET note = 'detached'", f"INSERT INTO {t}_p0 VALUES (3001, 5, 0, 'detached')")
            wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the table dump", r)
        assert writer.txns > 50, writer.txns
        leaves = lambda: status(r).get("log", {}).get("partitions")  # noqa: E731
        wait(lambda: leaves() == {t: 5}, 30, "the capture to see p1a, p1b, p2, p3 and p4", r)
        # The table dump, and key-list dumps for the rows of p3 and p4 (joined) and p0 (left).
        wait(lambda: all_dumps_done(r, 4), 120, "the partitions' key-list dumps", r)
        sentinel(pdb, r, (4001, 25))
        wait(lambda: all_dumps_done(r, 4), 60, "every dump", r)
    finally:
        r.stop()

    events = r.events(t)
    assert replay(events) == source_rows(pdb, pdb.source_id, t)
    for leaf in ("p0", "p1", "p1a", "p1b", "p2", "p3", "p4"):
        assert r.events(f"{t}_{leaf}") == [], leaf  # nothing under a partition's name
    assert {e.op for e in events} >= {Op.CREATE, Op.UPDATE, Op.DELETE, Op.READ, Op.RANGE}
    key_dumps = {x.dump_id for x in r.state.list_dumps(r.source_id) if x.spec.keys is not None}
    # Rows that came with p3 and were not changed since: read by a key-list dump (the table
    # dump was past their keys).
    reads = {e.key for e in events if e.origin is Origin.DUMP and e.op is Op.READ and e.dump_id in key_dumps}
    untouched = {(-i, 30 + i % 10) for i in range(3, 41)}
    assert untouched <= reads and not untouched & {e.key for e in events if e.origin is Origin.LOG}
    assert replay(events)[(-1, 31)]["note"] == "after attach" and (-2, 32) not in replay(events)
    # p0's rows left with it: a key-list chunk says they are gone (op k), no delete does.
    listed = {tuple(k) for e in events if e.op is Op.RANGE for k in (e.after or {}).get("keys", [])}
    assert detached and detached <= listed
    assert not detached & {e.key for e in events if e.op is Op.DELETE}
    assert not (detached | {(3001, 5)}) & set(replay(events))
    assert all(row["note"] != "detached" for row in replay(events).values())


def test_what_the_log_cannot_tell_is_warned_about_and_a_dump_of_the_table_converges(pdb, tmp_path):
    """DROP TABLE of a partition removes its rows without a log event, so does TRUNCATE of a
    partition without its table (pgoutput does not send it, wal2json does), and a partition
    attached that the capture's role may not read on its own brings rows whose keys cannot be
    listed: the capture warns with the fix, and a dump of the table (integer keys: its chunks
    state their key ranges) makes the changelog equal the table again."""
    t = pdb.t
    pdb.sql(
        f"CREATE TABLE {t}_p3 (LIKE {t})",
        f"INSERT INTO {t}_p3 SELECT -i, 35, i, 'unreadable' FROM generate_series(1, 20) i",
        f"REVOKE SELECT ON {t}_p3 FROM CURRENT_USER",  # the root's SELECT does not cover it
    )
    r = Running(pdb, tmp_path, pdb.source_id).start()
    try:
        d = r.dump([t], chunk_size=40)
        wait(lambda: r.status(d).status is DumpStatus.DONE, 60, "the first dump", r)
        pdb.sql(
            f"DROP TABLE {t}_p2",
            f"TRUNCATE {t}_p1a",
            f"ALTER TABLE {t} ATTACH PARTITION {t}_p3 FOR VALUES FROM (30) TO (40)",
            f"UPDATE {t} SET note = 'after' WHERE id = 1",
        )

        def warned() -> bool:
            text = " ".join(status(r).get("warnings", []))
            return (
                f"{t}_p2 left {t} and was dropped" in text
                and f"GRANT SELECT ON {t}_p3" in text
                and (pdb.plugin == "pgoutput" or f"TRUNCATE of partition {t}_p1a" in text)
            )

        wait(warned, 30, "the warnings", r)
        assert f"dblog dump --table {t}" in " ".join(status(r)["warnings"])
        wait(lambda: any(e.op is Op.UPDATE and e.after["note"] == "after" for e in r.events(t)), 30, "the update", r)
        source = source_rows(pdb, pdb.source_id, t)
        stale = set(replay(r.events(t))) - set(source)
        assert len(stale) == 150, len(stale)  # p2's hundred rows and p1a's fifty
        assert len(set(source) - set(replay(r.events(t)))) == 20  # p3's
        repair = r.dump([t], chunk_size=40)
        wait(lambda: r.status(repair).status is DumpStatus.DONE, 60, "the repair dump", r)
    finally:
        r.stop()
    assert replay(r.events(t)) == source_rows(pdb, pdb.source_id, t)


def test_the_table_its_key_and_its_partitions_in_the_catalog(pdb):
    """Without a table list the partitioned table is captured, not its partitions; its key
    includes the partition key; its row estimate adds up its partitions; capturing a partition
    together with its table is refused."""
    t = pdb.t
    pdb.sql(f"ANALYZE {t}")
    src = make_source({**pdb.source_config(pdb.source_id), "tables": None})
    src.open()
    try:
        mine = [x for x in src.tables() if x.startswith(pdb.ns + ".")]
        assert mine == [t]
        assert src.table_schema(t).key == ("id", "bucket")
        assert src.estimate_rows(t) == 300
        schema = src.table_schema(t)
        rows = src.select_chunk(schema, None, 1000).rows
        assert len(rows) == 300 and rows == sorted(rows, key=lambda row: (row["id"], row["bucket"]))
    finally:
        src.close()
    with pytest.raises(ConfigurationError) as err:
        make_source({**pdb.source_config(pdb.source_id), "tables": [t, f"{t}_p1a"]}).open()
    assert f"{t}_p1a is a partition of {t}" in err.value.cause and f"remove {t}_p1a" in err.value.fix


def test_a_publication_not_published_via_the_root_is_refused_with_the_alter_to_run(pdb):
    """pgoutput: a publication that would send each partition's changes under the partition's
    name stops the start with the ALTER PUBLICATION that fixes it; after it, the start passes."""
    if pdb.plugin != "pgoutput":
        pytest.skip("wal2json reads no publication")
    pub = f"dblog_{pdb.source_id}"
    with pdb.superconnect() as c:  # a publication made by hand, the default way
        c.cursor().execute(f'CREATE PUBLICATION "{pub}" FOR TABLE {pdb.t}, dblog.watermarks')
        c.commit()
    src = make_source(pdb.source_config(pdb.source_id))
    with pytest.raises(ConfigurationError) as err:
        src.open()
    src.close()
    assert "publish_via_partition_root" in err.value.cause and pdb.t in err.value.cause
    assert err.value.fix == f'run ALTER PUBLICATION "{pub}" SET (publish_via_partition_root = true);'
    with pdb.superconnect() as c:
        c.cursor().execute(err.value.fix.removeprefix("run "))
        c.commit()
    src = make_source(pdb.source_config(pdb.source_id))
    src.open()
    src.close()


def test_the_oracle_workload_with_its_partitioned_table_converges(tmp_path):
    """The helper the convergence oracle can run with (PostgresAdapter.partitioned): its
    random transactions, partitions created among them, under a capture and a dump of every
    table; each table's replay equals the source."""
    db = PostgresAdapter()
    db.partitioned = True
    source_id = f"part_oracle_{uuid.uuid4().hex[:6]}"
    ledger = f"{db.ns}.ledger"
    db.create()
    try:
        db.seed(random.Random(5), 120)
        r = Running(db, tmp_path, source_id).start()
        ids, stop, txns = iter(range(10**6, 2 * 10**6)), threading.Event(), [0]

        def write(seed: int) -> None:
            rng, c = random.Random(seed), db.connect()
            try:
                while not stop.is_set():
                    try:
                        db.random_transaction(c, rng, lambda: next(ids))
                        txns[0] += 1
                    except Exception:  # noqa: BLE001 - deadlocks, a partition created twice: next
                        c.rollback()
            finally:
                c.close()

        def partitions() -> int:
            with db.connect() as c:
                cur = c.cursor()
                cur.execute("SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", (ledger,))
                return cur.fetchone()[0]

        writers = [threading.Thread(target=write, args=(s,), daemon=True) for s in (1, 2)]
        try:
            for w in writers:
                w.start()
            d = r.dump(None, chunk_size=25, delay_ms=30)
            wait(lambda: r.status(d).status is DumpStatus.DONE, 120, "the dump of every table", r)
            wait(lambda: partitions() > len(db.LEDGER_REGIONS), 120, "the workload to create a partition", r)
            time.sleep(1)
        finally:
            stop.set()
            for w in writers:
                w.join(30)
        try:
            assert txns[0] > 50, txns
            sentinel_key = (7 * 10**6, "eu")
            with db.connect() as c:
                c.cursor().execute(f"INSERT INTO {ledger} (id, region) VALUES (%s, %s)", sentinel_key)
                c.commit()
            wait(lambda: any(e.key == sentinel_key for e in r.events(ledger)), 60, "the sentinel row", r)
            wait(lambda: all_dumps_done(r, 1), 120, "every dump", r)
        finally:
            r.stop()
        for t in db.tables():
            assert replay(r.events(t)) == source_rows(db, source_id, t), t
        assert any(e.origin is Origin.DUMP for e in r.events(ledger))
    finally:
        db.drop(source_id)
