"""A capture whose user has exactly the privileges docs/sources.md lists ("Privileges"), no
more: the statements are read from the docs, so the docs and the product cannot drift apart.
The capture starts, writes its watermarks, dumps a table and captures a change."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

pymysql = pytest.importorskip("pymysql")

from tests.integration.capture_proc import Capture, dblog, wait_for, write_config  # noqa: E402
from tests.integration.databases import env, mysql_root, pg_admin  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def documented_sql(heading: str) -> list[str]:
    """The statements of the ```sql block after ``**heading**`` in docs/sources.md."""
    text = (REPO / "docs" / "sources.md").read_text()
    block = text[text.index(f"**{heading}**") :]
    block = block[block.index("```sql") + len("```sql") : block.index("```", block.index("```sql") + 6)]
    body = "\n".join(line.split("--", 1)[0] for line in block.splitlines())
    return [s.strip() for s in body.split(";") if s.strip()]


def output_keys(url: str, source_id: str, table: str, op: str) -> set:
    from airflow_provider_dblog.outputs import make_output

    out = make_output(url)
    out.open()
    try:
        return {e.key for e in out.scan(source_id, table) if e.op.value == op}
    finally:
        out.close()


def capture_dumps_and_follows(tmp_path, monkeypatch, source: dict, password: str, table: str, insert) -> None:
    """Start a capture as ``source`` says, dump ``table`` (keys 1..5 written before the
    capture: a first capture starts at the log's end, so they arrive by the dump), then run
    ``insert`` (key 6) and wait for it in the changelog."""
    monkeypatch.setenv("DBLOG_GRANTS_PASSWORD", password)  # the capture child's environment
    url = f"jsonl://{tmp_path / 'out'}"
    config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", url)
    capture = Capture(config, tmp_path / "capture.log")
    capture.start()
    try:
        # A dump is requested from a running capture's state store (one that exists).
        wait_for(lambda: " started at " in capture.tail(), 60, "the capture to start", capture.assert_alive)
        dblog(config, "dump", "--table", table)
        wait_for(
            lambda: output_keys(url, source["id"], table, "r") == {(i,) for i in range(1, 6)},
            120,
            "the dump's rows",
            alive=capture.assert_alive,
            detail=capture.detail,
        )
        insert()
        wait_for(
            lambda: (6,) in output_keys(url, source["id"], table, "c"),
            60,
            "the captured insert",
            alive=capture.assert_alive,
            detail=capture.detail,
        )
    finally:
        capture.close()


def test_mysql_capture_with_exactly_the_documented_grants(tmp_path, monkeypatch):
    root = mysql_root()
    tag = uuid.uuid4().hex[:8]
    db, wm, user, password = f"shop_{tag}", f"dblog_{tag}", f"dblog_{tag}", uuid.uuid4().hex
    cur = root.cursor()
    cur.execute(f"CREATE DATABASE {db}")
    cur.execute(f"CREATE TABLE {db}.orders (id int PRIMARY KEY, v varchar(20))")
    cur.executemany(f"INSERT INTO {db}.orders VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, 6)])
    cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    try:
        for statement in documented_sql("MySQL / MariaDB"):  # the docs' names, made this test's own
            statement = re.sub(r"\bdblog\.\*", f"{wm}.*", statement)
            statement = statement.replace("'dblog'@'%'", f"'{user}'@'%'").replace("shop.*", f"{db}.*")
            cur.execute(statement)
        source = {
            "type": "mysql",
            "id": f"g{tag}",
            "host": env("DBLOG_MYSQL_HOST"),
            "port": int(env("DBLOG_MYSQL_PORT")),
            "user": user,
            "password_env": "DBLOG_GRANTS_PASSWORD",
            "tables": [f"{db}.orders"],
            "watermark_schema": wm,
        }

        def insert() -> None:
            cur.execute(f"INSERT INTO {db}.orders VALUES (6, 'new')")

        capture_dumps_and_follows(tmp_path, monkeypatch, source, password, f"{db}.orders", insert)
    finally:
        cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
        cur.execute(f"DROP DATABASE IF EXISTS {db}")
        cur.execute(f"DROP DATABASE IF EXISTS {wm}")
        root.close()


@contextlib.contextmanager
def documented_pg_role(heading: str, columns: str, rows: dict[str, int]) -> Iterator[SimpleNamespace]:
    """A schema with tables ``orders`` and ``items`` (``columns``, an int key first and a text
    second; ``rows``: rows per table, ``(i, 'v' || i, 0, ...)`` for i from 1), and a new role given the statements under ``**heading**``
    of docs/sources.md and nothing else, the docs' names made this run's own. Yields the admin
    cursor, tag, schema, watermark schema, role, publication, password and database; drops them
    all afterwards (slots included)."""
    database = env("DBLOG_PG_DATABASE")
    admin = pg_admin()
    cur = admin.cursor()
    tag = uuid.uuid4().hex[:8]
    schema, wm, role, pub, password = f"shop_{tag}", f"dblog_{tag}", f"dblog_{tag}", f"pub_{tag}", uuid.uuid4().hex
    names = [  # the docs' names, made this test's own (longest first: dblog_shop before dblog)
        (r"\bdblog_shop\b", pub),
        (r"\bdblog\.watermarks\b", f"{wm}.watermarks"),
        (r"\bSCHEMA dblog\b", f"SCHEMA {wm}"),
        (r"\bdblog\b", role),
        (r"\bshop\.", f"{schema}."),
        (r"\bSCHEMA shop\b", f"SCHEMA {schema}"),
        (r"\bDATABASE app\b", f"DATABASE {database}"),
    ]
    cur.execute(f"CREATE SCHEMA {schema}")
    for t in ("orders", "items"):
        cur.execute(f"CREATE TABLE {schema}.{t} ({columns})")
        values = ", ".join(["i", "'v' || i", *(["0"] * (columns.count(",") - 1))])
        cur.execute(f"INSERT INTO {schema}.{t} SELECT {values} FROM generate_series(1, %s) i", (rows.get(t, 0),))
    cur.execute(f"CREATE ROLE {role} PASSWORD %s", (password,))
    try:
        for statement in documented_sql(heading):
            for pattern, name in names:
                statement = re.sub(pattern, name, statement)
            cur.execute(statement)
        yield SimpleNamespace(
            cur=cur, tag=tag, schema=schema, wm=wm, role=role, pub=pub, password=password, database=database
        )
    finally:
        cur.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE %s AND NOT active",
            (f"%{tag}%",),
        )
        cur.execute(f"DROP PUBLICATION IF EXISTS {pub}")
        cur.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cur.execute(f"DROP SCHEMA IF EXISTS {wm} CASCADE")
        cur.execute(f"DROP OWNED BY {role}")  # its grants, on the database too
        cur.execute(f"DROP ROLE IF EXISTS {role}")
        admin.close()


def test_postgres_capture_with_exactly_the_documented_grants(tmp_path, monkeypatch):
    with documented_pg_role("PostgreSQL", "id int PRIMARY KEY, v text", {"orders": 5}) as r:
        source = {
            "type": "postgres",
            "id": f"g{r.tag}",
            "host": env("DBLOG_PG_HOST"),
            "port": int(env("DBLOG_PG_PORT")),
            "user": r.role,
            "database": r.database,
            "password_env": "DBLOG_GRANTS_PASSWORD",
            "tables": [f"{r.schema}.orders", f"{r.schema}.items"],
            "watermark_schema": r.wm,
            "publication": r.pub,
        }

        def insert() -> None:
            r.cur.execute(f"INSERT INTO {r.schema}.orders VALUES (6, 'new')")

        capture_dumps_and_follows(tmp_path, monkeypatch, source, r.password, f"{r.schema}.orders", insert)
