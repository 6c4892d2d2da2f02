"""Read-only dumps (``watermarks = "log"``, docs/sources.md "Read-only dumps"), on PostgreSQL
and MariaDB: a user with exactly the documented read-only grants (on PostgreSQL also every
transaction of it read-only, ``default_transaction_read_only``), so any write the capture
tried would fail. It dumps a
table while writers change it (each chunk's window stretched, so writes land inside it), then
once more on an idle database (the watermarks then arrive by the server's keepalives), and
``dblog verify`` finds the changelog equal to the table. Nothing was created in the database."""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import env, mysql_root
from .test_documented_grants import documented_pg_role, documented_sql, output_keys

pytestmark = pytest.mark.integration


UPSERT = {
    "postgres": "INSERT INTO {t} VALUES (%s, 'i', 0) ON CONFLICT (id) DO UPDATE SET n = -1",
    "mysql": "INSERT INTO {t} VALUES (%s, 'i', 0) ON DUPLICATE KEY UPDATE n = -1",
}
APPEND = {"postgres": "v || 'u'", "mysql": "CONCAT(v, 'u')"}


def _write(kind: str, connect, table: str, stop: threading.Event, seed: int, counts: dict) -> None:
    rng = random.Random(seed)
    conn = connect()
    try:
        while not stop.is_set():
            cur = conn.cursor()
            for _ in range(rng.randint(1, 4)):
                r, k = rng.random(), rng.randint(1, 2400)
                if r < 0.5:
                    cur.execute(f"UPDATE {table} SET v = {APPEND[kind]}, n = n + 1 WHERE id = %s", (k,))
                elif r < 0.75:
                    cur.execute(f"DELETE FROM {table} WHERE id = %s", (k,))
                else:
                    cur.execute(UPSERT[kind].format(t=table), (k,))
            conn.commit()
            counts["txns"] += 1
    finally:
        conn.close()


def dumps_under_writes_and_idle(tmp_path, kind: str, source: dict, connect, tables: list[str]) -> None:
    """A capture with ``source`` (read-only watermarks) dumps ``tables[0]`` while two writers
    change it (each chunk's window stretched so that writes land inside it), then
    ``tables[1]`` on an idle database; a sentinel insert, then ``dblog verify``."""
    table, idle_table = tables
    url = f"jsonl://{tmp_path / 'out'}"
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", url)
    state = LocalStateStore(str(tmp_path / "state.db"))
    capture = Capture(config, tmp_path / "capture.log", faults=("--window-delay-ms", "20"))
    capture.start()
    stop = threading.Event()
    try:
        wait_for(lambda: " started at " in capture.tail(), 60, "the capture to start", capture.assert_alive)
        counts = {"txns": 0}
        writers = [
            threading.Thread(target=_write, args=(kind, connect, table, stop, seed, counts), daemon=True)
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
        # Idle: no transaction moves the log past HW; the server's keepalive/heartbeat must.
        idle = dblog(config, "dump", "--table", idle_table, "--chunk-size", "10").stdout.strip()
        wait_for(lambda: done(idle), 60, "a dump on an idle database", capture.assert_alive, detail=capture.detail)
        conn = connect()
        conn.cursor().execute(f"INSERT INTO {table} VALUES (999999, 'sentinel', 0)")
        conn.commit()
        conn.close()
        wait_for(
            lambda: (999999,) in output_keys(url, source["id"], table, "c"),
            60,
            "the sentinel in the changelog",
            capture.assert_alive,
            detail=capture.detail,
        )
        result = dblog(config, "verify", "--table", table, "--table", idle_table, check=False)
        assert result.returncode == 0 and result.stdout.count(" 0 mismatches") == 2, result.stdout + result.stderr
    finally:
        stop.set()
        capture.close()


def test_postgres_read_only_dumps_under_writes_and_idle(tmp_path, monkeypatch):
    import psycopg2

    host, port = env("DBLOG_PG_HOST"), int(env("DBLOG_PG_PORT"))
    columns, rows = "id int PRIMARY KEY, v text, n int", {"orders": 2000, "items": 2000}
    with documented_pg_role("PostgreSQL, read-only dumps", columns, rows) as r:
        monkeypatch.setenv("DBLOG_RO_PASSWORD", r.password)  # the capture child's environment
        source = {
            "type": "postgres",
            "id": f"ro{r.tag}",
            "host": host,
            "port": port,
            "user": r.role,
            "database": r.database,
            "password_env": "DBLOG_RO_PASSWORD",
            "tables": [f"{r.schema}.orders", f"{r.schema}.items"],
            "watermark_schema": r.wm,  # the schema the capture would create without read-only dumps
            "publication": r.pub,
            "watermarks": "log",
        }
        dsn = dict(host=host, port=port, user=env("DBLOG_PG_SUPERUSER"), dbname=r.database)
        dsn["password"] = env("DBLOG_PG_SUPERUSER_PASSWORD")
        dumps_under_writes_and_idle(tmp_path, "postgres", source, lambda: psycopg2.connect(**dsn), source["tables"])
        # The capture created nothing: no watermark schema, and the role owns no object.
        r.cur.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (r.wm,))
        assert r.cur.fetchone()[0] == 0
        r.cur.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = %s)", (r.role,)
        )
        assert r.cur.fetchone()[0] == 0


def test_mariadb_read_only_dumps_under_writes_and_idle(tmp_path, monkeypatch):
    import pymysql

    host, port = env("DBLOG_MYSQL_HOST"), int(env("DBLOG_MYSQL_PORT"))
    root = mysql_root()
    cur = root.cursor()
    tag = uuid.uuid4().hex[:8]
    db, user, password, wm = f"ro_{tag}", f"dblog_ro_{tag}", uuid.uuid4().hex, f"dblog_{tag}"
    cur.execute(f"CREATE DATABASE {db}")
    for t in ("orders", "items"):
        cur.execute(f"CREATE TABLE {db}.{t} (id int PRIMARY KEY, v varchar(4000), n int)")
        cur.executemany(f"INSERT INTO {db}.{t} VALUES (%s, %s, 0)", [(i, f"v{i}") for i in range(1, 2001)])
    cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    try:
        for statement in documented_sql("MariaDB, read-only dumps"):  # the docs' names, made this test's own
            cur.execute(statement.replace("'dblog'@'%'", f"'{user}'@'%'").replace("shop.*", f"{db}.*"))
        monkeypatch.setenv("DBLOG_RO_PASSWORD", password)
        source = {
            "type": "mysql",
            "id": f"ro{tag}",
            "host": host,
            "port": port,
            "user": user,
            "password_env": "DBLOG_RO_PASSWORD",
            "tables": [f"{db}.orders", f"{db}.items"],
            "watermark_schema": wm,
            "watermarks": "log",
        }

        def connect():
            return pymysql.connect(
                host=host, port=port, user=env("DBLOG_MYSQL_ROOT_USER"), password=env("DBLOG_MYSQL_ROOT_PASSWORD")
            )

        dumps_under_writes_and_idle(tmp_path, "mysql", source, connect, source["tables"])
        cur.execute("SELECT count(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (wm,))
        assert cur.fetchone()[0] == 0  # no watermark database: nothing was created
    finally:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"DROP DATABASE IF EXISTS {wm}")
        root.close()
