"""Unchanged TOAST values end to end on PostgreSQL (issue 11, part 3).

Two tables with an incompressible 8 kB text column (stored out of line), one with REPLICA
IDENTITY FULL and one without. Rows written before the capture (never captured), rows
inserted while it runs, UPDATEs that leave the big column unchanged (twice on some keys, a
primary-key update, one after the big value itself changed). Then `dblog verify` must find
the real values in the replay, the FULL table's changelog must hold no placeholder at all,
the other table's keys without an earlier value must have been dumped by key, and (pgoutput)
the Spark mirrors must hold the real values too.
"""

from __future__ import annotations

import secrets
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.toast import unchanged_columns
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import PostgresAdapter
from .test_oracle import spark_module


def big() -> str:
    return secrets.token_hex(4000)  # 8000 random hex digits: pglz cannot shrink them enough


@pytest.mark.integration
# pgoutput's run (94 s) in make soak; the PostgreSQL oracle in make test has TOAST columns too.
@pytest.mark.parametrize("plugin", [pytest.param("pgoutput", marks=pytest.mark.soak), "wal2json"])
def test_unchanged_toast_values_reach_replay_verify_and_mirrors(plugin, tmp_path):
    db = PostgresAdapter()
    source_id = f"toast_{plugin}_{uuid.uuid4().hex[:6]}"
    full, plain = f"{db.ns}.docs_full", f"{db.ns}.docs_plain"
    capture = None
    with db.connect() as c:
        cur = c.cursor()
        cur.execute(f"CREATE SCHEMA {db.ns}")
        for t in (full, plain):
            cur.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, n int, big text, blob bytea)")
            for i in range(1, 7):  # before the capture: never in the changelog
                cur.execute(f"INSERT INTO {t} VALUES (%s, 0, %s, %s)", (i, big(), secrets.token_bytes(3000)))
        cur.execute(f"ALTER TABLE {full} REPLICA IDENTITY FULL")
        c.commit()
    try:
        config = write_config(
            tmp_path / "dblog.toml",
            dict(db.source_config(source_id), tables=[full, plain], plugin=plugin),
            tmp_path / "state.db",
            f"delta://{tmp_path / 'lake'}",
        )
        state = LocalStateStore(str(tmp_path / "state.db"))
        capture = Capture(config, tmp_path / "capture.log")
        capture.start()
        wait_for(lambda: state.get_value(status_key(source_id)) is not None, 90, "the capture", capture.assert_alive)
        with db.connect() as c:
            cur = c.cursor()
            for t in (full, plain):
                for i in (7, 8, 9):  # captured inserts
                    cur.execute(f"INSERT INTO {t} VALUES (%s, 0, %s, %s)", (i, big(), secrets.token_bytes(3000)))
                c.commit()
                cur.execute(f"UPDATE {t} SET n = n + 1")  # every row: big and blob unchanged
                c.commit()
                cur.execute(f"UPDATE {t} SET n = n + 1 WHERE id IN (1, 7)")
                cur.execute(f"UPDATE {t} SET big = %s WHERE id = 8", (big(),))
                cur.execute(f"UPDATE {t} SET n = 5 WHERE id = 8")
                cur.execute(f"UPDATE {t} SET id = 100 WHERE id = 2")  # key update, big unchanged
                cur.execute(f"UPDATE {t} SET id = 101 WHERE id = 9")
                c.commit()
            sentinel = str(uuid.uuid4())
            cur.execute(f"INSERT INTO {plain} VALUES (1000, 0, %s, NULL)", (sentinel,))
            c.commit()
        out = make_output(f"delta://{tmp_path / 'lake'}")
        out.open()
        wait_for(
            lambda: any(e.key == (1000,) for e in out.scan(source_id, plain)),
            120,
            "the last write to reach the changelog",
            capture.assert_alive,
            interval=1,
        )
        # The placeholders were queued before their events were written: all dumps exist now.
        dumps = state.list_dumps(source_id)
        wait_for(
            lambda: all(state.get_dump(d.dump_id).status is DumpStatus.DONE for d in dumps),
            120,
            "the key-list dumps",
            capture.assert_alive,
        )
        assert capture.stop() == 0, capture.tail()

        assert dumps and all(d.spec.tables == (plain,) for d in dumps)
        dumped = {k for d in dumps for k in d.spec.keys or ()}
        assert {(1,), (3,), (4,), (5,), (6,), (100,)} <= dumped  # never captured, or a new key
        full_events = list(out.scan(source_id, full))
        assert full_events and not any(unchanged_columns(e.after) for e in full_events)
        assert any(unchanged_columns(e.after) for e in out.scan(source_id, plain))

        result = dblog(config, "verify", check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count(" 0 mismatches") == 2, result.stdout

        if plugin == "pgoutput":
            lake = tmp_path / "lake"
            land = spark_module("land_changelog", "--lake", str(lake), "--source", source_id, "--no-register")
            assert land.returncode == 0, land.stdout[-3000:] + land.stderr[-3000:]
            mirrors = spark_module("verify_mirror", "--config", str(config), "--lake", str(lake))
            assert mirrors.returncode == 0, mirrors.stdout + mirrors.stderr[-3000:]
            assert mirrors.stdout.count(" 0 mismatches") == 2, mirrors.stdout
    finally:
        if capture is not None:
            capture.close()
        db.drop(source_id)
