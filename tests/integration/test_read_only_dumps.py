"""Read-only dumps on PostgreSQL (``watermarks = "log"``, docs/sources.md "Read-only dumps"):
a role with exactly the documented read-only grants, and every transaction of it read-only
(``default_transaction_read_only``), so any write the capture tried would fail. It dumps a
table while writers change it (each chunk's window stretched, so writes land inside it), then
once more on an idle database (the watermarks then arrive by the server's keepalives), and
``dblog verify`` finds the changelog equal to the table. Nothing was created in the database."""

from __future__ import annotations

import random
import re
import threading
import uuid

import pytest

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import env, pg_admin
from .test_documented_grants import documented_sql, output_keys

pytestmark = pytest.mark.integration


def _write(admin_dsn: dict, table: str, stop: threading.Event, seed: int, counts: dict) -> None:
    import psycopg2

    rng = random.Random(seed)
    conn = psycopg2.connect(**admin_dsn)
    try:
        while not stop.is_set():
            with conn, conn.cursor() as cur:
                for _ in range(rng.randint(1, 4)):
                    r, k = rng.random(), rng.randint(1, 2400)
                    if r < 0.5:
                        cur.execute(f"UPDATE {table} SET v = v || 'u', n = n + 1 WHERE id = %s", (k,))
                    elif r < 0.75:
                        cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
                    else:
                        cur.execute(
                            f"INSERT INTO {table} VALUES (%s, 'i', 0) ON CONFLICT (id) DO UPDATE SET n = -1", (k,)
                        )
            counts["txns"] += 1
    finally:
        conn.close()


def test_postgres_read_only_dumps_under_writes_and_idle(tmp_path, monkeypatch):
    host, port, database = env("DBLOG_PG_HOST"), int(env("DBLOG_PG_PORT")), env("DBLOG_PG_DATABASE")
    admin = pg_admin()
    cur = admin.cursor()
    tag = uuid.uuid4().hex[:8]
    schema, role, pub, password = f"ro_{tag}", f"dblog_ro_{tag}", f"pub_{tag}", uuid.uuid4().hex
    wm = f"dblog_{tag}"  # the watermark schema the capture would create without read-only dumps
    names = [
        (r"\bdblog_shop\b", pub),
        (r"\bdblog\b", role),
        (r"\bshop\.", f"{schema}."),
        (r"\bSCHEMA shop\b", f"SCHEMA {schema}"),
    ]
    table = f"{schema}.orders"
    cur.execute(f"CREATE SCHEMA {schema}")
    for t in ("orders", "items"):
        cur.execute(f"CREATE TABLE {schema}.{t} (id int PRIMARY KEY, v text, n int)")
    cur.execute(f"INSERT INTO {table} SELECT i, 'v' || i, 0 FROM generate_series(1, 2000) i")
    cur.execute(f"CREATE ROLE {role} PASSWORD %s", (password,))
    source_id = f"ro{tag}"
    stop = threading.Event()
    try:
        for statement in documented_sql("PostgreSQL, read-only dumps"):
            for pattern, name in names:
                statement = re.sub(pattern, name, statement)
            cur.execute(statement)
        monkeypatch.setenv("DBLOG_RO_PASSWORD", password)  # the capture child's environment
        source = {
            "type": "postgres",
            "id": source_id,
            "host": host,
            "port": port,
            "user": role,
            "database": database,
            "password_env": "DBLOG_RO_PASSWORD",
            "tables": [table, f"{schema}.items"],
            "watermark_schema": wm,
            "publication": pub,
            "watermarks": "log",
        }
        config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", f"jsonl://{tmp_path / 'out'}")
        state = LocalStateStore(str(tmp_path / "state.db"))
        # Widen each chunk's window (SELECT .. HW) so that writes land inside it.
        capture = Capture(config, tmp_path / "capture.log", faults=("--window-delay-ms", "20"))
        capture.start()
        try:
            wait_for(lambda: " started at " in capture.tail(), 60, "the capture to start", capture.assert_alive)
            admin_dsn = dict(admin.get_dsn_parameters(), password=env("DBLOG_PG_SUPERUSER_PASSWORD"))
            admin_dsn = {k: admin_dsn[k] for k in ("host", "port", "user", "password", "dbname")}
            counts = {"txns": 0}
            writers = [
                threading.Thread(target=_write, args=(admin_dsn, table, stop, seed, counts), daemon=True)
                for seed in (1, 2)
            ]
            for w in writers:
                w.start()

            def done(dump_id: str) -> bool:
                d = state.get_dump(dump_id)
                assert d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), (d.error, capture.tail())
                return d.status is DumpStatus.DONE

            busy = dblog(config, "dump", "--table", table, "--chunk-size", "37").stdout.strip()
            wait_for(lambda: done(busy), 180, "the dump under writes", capture.assert_alive, detail=capture.detail)
            stop.set()
            for w in writers:
                w.join(30)
            assert counts["txns"] > 50, counts
            # Idle: no transaction moves the log past HW; the server's keepalive must.
            idle = dblog(config, "dump", "--table", f"{schema}.items", "--chunk-size", "10").stdout.strip()
            wait_for(lambda: done(idle), 60, "a dump on an idle database", capture.assert_alive, detail=capture.detail)
            cur.execute(f"INSERT INTO {table} VALUES (999999, 'sentinel', 0)")
            wait_for(
                lambda: (999999,) in output_keys(f"jsonl://{tmp_path / 'out'}", source_id, table, "c"),
                60,
                "the sentinel in the changelog",
                capture.assert_alive,
                detail=capture.detail,
            )
            result = dblog(config, "verify", "--table", table, check=False)
            assert result.returncode == 0 and "0 mismatches" in result.stdout, result.stdout + result.stderr
            stats = state.get_dump(busy)
            assert stats.status is DumpStatus.DONE
        finally:
            capture.close()
        # The capture created nothing: no watermark schema, and the role owns no object.
        cur.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (wm,))
        assert cur.fetchone()[0] == 0
        cur.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = %s)", (role,)
        )
        assert cur.fetchone()[0] == 0
    finally:
        stop.set()
        cur.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE %s AND NOT active",
            (f"%{tag}%",),
        )
        cur.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cur.execute(f"DROP OWNED BY {role}")
        cur.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()
