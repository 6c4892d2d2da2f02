"""One source with hundreds of tables (issue 33, part 4b, bounded; the 1,000-table figures are
bench/many_tables.py): a capture of 300 tables starts, dumps every table, follows changes in
some of them, and ``dblog verify`` finds every table equal to the source. What used to grow
with the table count is asserted not to:

* the statements the capture runs on the source between its start and its first status: the
  catalog is read in a few queries over every table (``CatalogSchemas``), not several per
  table (five per table on PostgreSQL and three on MariaDB before);
* the commits of the schema store: every table's schema in one commit, not one each;
* the status value the capture stores (what ``dblog status`` reads): no per-table part.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS

pytestmark = pytest.mark.integration

TABLES = 300
ROWS = 4


def statements_run(db) -> int:
    """The source server's count of statements (PostgreSQL: transactions of the database,
    flushed to the statistics within a second; MariaDB: ``Questions``, every client's): the
    tests run one at a time, so what moves it here is the capture."""
    c = db.connect()
    try:
        cur = c.cursor()
        if db.kind == "postgres":
            time.sleep(1.5)  # a backend flushes its counts at most once a second
            cur.execute("SELECT pg_stat_clear_snapshot()")
            cur.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
            return int(cur.fetchone()[0])
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_a_source_of_300_tables_starts_dumps_and_converges_at_a_flat_cost(kind, tmp_path):
    import deltalake

    db = ADAPTERS[kind]()
    source_id = f"mt_{kind}_{uuid.uuid4().hex[:6]}"
    names = [f"{db.ns}.t{i:03d}" for i in range(TABLES)]
    c = db.connect()
    capture = None
    try:
        cur = c.cursor()
        cur.execute(f"CREATE {'SCHEMA' if kind == 'postgres' else 'DATABASE'} {db.ns}")
        for name in names:
            cur.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v int NOT NULL, s varchar(20))")
            cur.execute(f"INSERT INTO {name} VALUES " + ",".join(f"({k}, {k}, 's{k}')" for k in range(1, ROWS + 1)))
        c.commit()
        c.close()  # a backend reports its statistics when it ends (else up to 10 s later, in the window)
        lake = tmp_path / "lake"
        config = write_config(
            tmp_path / "dblog.toml",
            {**db.source_config(source_id), "tables": names},
            tmp_path / "s.db",
            f"delta://{lake}",
        )
        state = LocalStateStore(str(tmp_path / "s.db"))
        before = statements_run(db)
        capture = Capture(config, tmp_path / "capture.log")
        capture.start()
        wait_for(lambda: state.get_value(status_key(source_id)), 120, "the first status", capture.assert_alive)
        started = statements_run(db) - before
        # Before the one-pass catalog reads: about 1,500 (PostgreSQL) and 900 (MariaDB) here.
        assert started < TABLES, f"{started} statements to start a capture of {TABLES} tables"

        dump_id = dblog(config, "dump", "--all").stdout.strip()

        def done() -> bool:
            d = state.get_dump(dump_id)
            assert d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), (d.error, capture.tail())
            return d.status is DumpStatus.DONE

        wait_for(done, 240, "dump --all of every table", capture.assert_alive, detail=capture.detail)
        c = db.connect()
        cur = c.cursor()
        rng = random.Random(300)
        changed = rng.sample(names, 20)
        for name in changed:
            cur.execute(f"UPDATE {name} SET v = v + 100 WHERE id = 1")
            cur.execute(f"DELETE FROM {name} WHERE id = 2")
            cur.execute(f"INSERT INTO {name} VALUES (99, 99, 'new')")
        c.commit()
        sentinel = names[-1]
        cur.execute(f"INSERT INTO {sentinel} VALUES (999, 0, 'sentinel')")
        c.commit()

        def arrived() -> bool:
            out = deltalake.DeltaTable(str(lake / "changelogs" / source_id)).to_pyarrow_table(
                columns=["table", "key"], filters=[("table", "=", sentinel)]
            )
            return "[999]" in out.column("key").to_pylist()

        wait_for(arrived, 60, "the sentinel in the changelog", capture.assert_alive, detail=capture.detail)
        result = dblog(config, "verify", "--ranges", check=False, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert result.stdout.count(" 0 mismatches") == TABLES, result.stdout[-3000:]

        # Every schema in one commit of the schema store (its creation, then one write).
        schemas = deltalake.DeltaTable(str(lake / "schemas"))
        assert schemas.version() <= 2, schemas.history()
        assert len(schemas.to_pyarrow_table(columns=["schema_id"])) >= TABLES
        status = state.get_value(status_key(source_id)) or ""
        assert len(status) < 2000, f"a status value of {len(status)} bytes for {TABLES} tables: {status}"
        assert capture.stop() == 0, capture.tail()
    finally:
        if capture is not None:
            capture.close()
        with contextlib.suppress(Exception):  # closed before the capture started
            c.close()
        db.drop(source_id)
