"""A consumer nobody here wrote: Kafka Connect's own worker (Apache Kafka's jars) running
Debezium's JDBC sink connector (Maven Central), reading a PostgreSQL capture's topics in
``format=debezium&schemas=true`` through Kafka Connect's JsonConverter, into a separate
PostgreSQL database (issue 34 part 3; docs/kafka.md, "Kafka Connect sinks").

The source gets the convergence oracle's workload: concurrent inserts, updates, deletes and
primary-key updates, TRUNCATEs, ALTER TABLEs (add, rename, retype, drop) and dumps of all
tables while it runs. Then every target table must equal its source table, row by row and
column by column (the source's current columns: the sink's ``schema.evolution=basic`` adds
columns and never drops one). The worker is ``scripts/services``' ``connect``.
"""

from __future__ import annotations

import datetime
import json
import random
import re
import subprocess
import time
import urllib.request
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import REPO, Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env, pg_admin
from .test_oracle import WORKLOAD_SECONDS, Workload

pytestmark = pytest.mark.integration

SERVICES = str(REPO / "scripts" / "services")
SEED = 20261128


@pytest.fixture(scope="module")
def connect_url():
    up = subprocess.run([SERVICES, "up", "connect"], capture_output=True, text=True, timeout=900)
    assert up.returncode == 0, up.stderr
    yield env("DBLOG_CONNECT_URL")
    subprocess.run([SERVICES, "down", "connect"], capture_output=True, timeout=120)


def rest(url: str, method: str = "GET", body: dict | None = None) -> dict | list | None:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        text = resp.read()
    return json.loads(text) if text else None


def columns(conn, schema: str, table: str) -> list[str]:
    cur = conn.cursor()
    cur.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
        "ORDER BY ordinal_position",
        (schema, table),
    )
    return [r[0] for r in cur.fetchall()]


def rows(conn, qualified: str, cols: list[str], key: list[str]) -> dict:
    cur = conn.cursor()
    cur.execute(f"SELECT {', '.join(cols)} FROM {qualified}")
    out = {}
    for r in cur.fetchall():
        row = {c: normal(v) for c, v in zip(cols, r)}
        out[tuple(row[k] for k in key)] = row
    return out


def normal(value):
    """One form for values the two databases may hold in different column types (the sink
    creates its own: uuid or text, json or jsonb or text, timestamptz for MySQL's UTC
    TIMESTAMP)."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return str(value) if type(value).__name__ == "UUID" else value


def differences(src, dst, ns: str, table: str, key: list[str]) -> str:
    cols = columns(src, ns, table)
    if not columns(dst, "public", table):
        return f"{table}: not created by the sink"
    want, got = rows(src, f"{ns}.{table}", cols, key), rows(dst, f"public.{table}", cols, key)
    if want == got:
        return ""
    missing = sorted(set(want) - set(got), key=str)[:3]
    extra = sorted(set(got) - set(want), key=str)[:3]
    changed = [k for k in want if k in got and want[k] != got[k]]
    shown = [
        (k, {c: (repr(want[k][c])[:60], repr(got[k][c])[:60]) for c in cols if want[k][c] != got[k][c]})
        for k in changed[:3]
    ]
    return (
        f"{table}: {len(want)} source rows, {len(got)} target rows; missing {missing}, extra {extra}, "
        f"{len(changed)} differing, e.g. (key, column: (source, target)) {shown}"
    )


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["postgres", pytest.param("mysql", marks=pytest.mark.soak)])
def test_debeziums_jdbc_sink_mirrors_every_table_from_our_topics(kind, connect_url, tmp_path):
    from confluent_kafka.admin import AdminClient

    bootstrap = env("DBLOG_KAFKA_BOOTSTRAP")
    rng = random.Random(SEED)
    db = ADAPTERS[kind]()
    sid = f"ksink_{uuid.uuid4().hex[:6]}"
    target = f"sink_{uuid.uuid4().hex[:6]}"
    connector = f"jdbc-{sid}"
    admin = pg_admin()
    admin.cursor().execute(f"CREATE DATABASE {target} OWNER {env('DBLOG_PG_USER')}")
    db.create()
    capture = None
    try:
        db.seed(rng, 200)
        # One partition per table topic (the broker's default is 3): a TRUNCATE is copied
        # into every partition, and a sink task interleaves partitions, so with several a
        # copy could be applied after another key's later insert (docs/kafka.md).
        # tombstones too (Debezium's default): the sink must take them
        url = f"kafka://{bootstrap}?format=debezium&schemas=true&tombstones=true&partitions=1&connector=" + (
            f"postgresql&database={db.db}" if kind == "postgres" else "mysql"
        )
        config = write_config(tmp_path / "dblog.toml", db.source_config(sid), tmp_path / "state.db", url)
        state = LocalStateStore(str(tmp_path / "state.db"))
        capture = Capture(config, tmp_path / "capture.log")
        capture.start()
        wait_for(
            lambda: state.get_value(status_key(sid)), 90, "the capture", capture.assert_alive, detail=capture.detail
        )
        rest(
            f"{connect_url}/connectors/{connector}/config",
            "PUT",
            {
                "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
                "tasks.max": "1",
                "topics.regex": re.escape(f"{sid}.{db.ns}.") + ".*",
                "connection.url": f"jdbc:postgresql://{env('DBLOG_PG_HOST')}:{env('DBLOG_PG_PORT')}/{target}",
                "connection.username": env("DBLOG_PG_USER"),
                "connection.password": env("DBLOG_PG_PASSWORD"),
                "insert.mode": "upsert",
                "primary.key.mode": "record_key",
                "delete.enabled": "true",
                "truncate.enabled": "true",
                "schema.evolution": "basic",
                "collection.name.format": "${source.table}",
            },
        )
        dumps = [dblog(config, "dump", "--all", "--chunk-size", "23").stdout.strip()]
        with Workload(db, SEED, schema_changes=True) as load:
            time.sleep(WORKLOAD_SECONDS)  # long enough for both TRUNCATEs and every ALTER TABLE
        assert load.txns > 30 and len(load.truncates) == 2, (load.txns, load.truncates, load.errors[:3])
        assert len(load.altered) == len(db.schema_changes()), load.altered

        def dumps_done():
            ds = [state.get_dump(d) for d in dumps]
            assert not [d for d in ds if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)], ds
            return all(d.status is DumpStatus.DONE for d in state.list_dumps(sid))

        wait_for(dumps_done, 240, "all dumps to finish", capture.assert_alive, detail=capture.detail)

        def sink_running() -> None:
            capture.assert_alive()
            st = rest(f"{connect_url}/connectors/{connector}/status")
            assert isinstance(st, dict)
            failed = [t for t in st["tasks"] if t["state"] == "FAILED"]
            assert st["connector"]["state"] != "FAILED" and not failed, json.dumps(st)[:4000]

        src = db.connect()
        if kind == "postgres":
            src.autocommit = True
        else:
            src.autocommit(True)  # PyMySQL: else one REPEATABLE READ snapshot for ever
        dst = ADAPTERS["postgres"]().connect_to(target)
        dst.autocommit = True
        keys = {"accounts": ["id"], "orders": ["region", "order_no"], "notes": ["uid"]}
        last: list[str] = []

        def converged() -> bool:
            last[:] = [d for t, k in keys.items() if (d := differences(src, dst, db.ns, t, k))]
            return not last

        wait_for(converged, 240, "every target table to equal its source", sink_running, 2, lambda: "\n".join(last))
        kafka = AdminClient({"bootstrap.servers": bootstrap})
        topics = kafka.list_topics(timeout=30).topics
        assert {len(topics[f"{sid}.{t}"].partitions) for t in db.tables()} == {1}  # partitions=1 made them
        counts = {t: len(rows(src, f"{db.ns}.{t}", k, k)) for t, k in keys.items()}
        assert all(counts.values()), counts
        print(f"connect sink: {load.txns} transactions, truncates {load.truncates}, altered {load.altered}, {counts}")
        # Our own reader of the same topics: `dblog verify` compares them in their form
        # (Debezium's types, connect_schema.TableConnectSchema.source_form) with the source.
        checked = dblog(config, "verify", check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.count(" 0 mismatches") == len(db.tables()), checked.stdout
        assert capture.stop() == 0, capture.tail()
        src.close()
        dst.close()
    finally:
        try:
            rest(f"{connect_url}/connectors/{connector}", "DELETE")
        except Exception as exc:  # noqa: BLE001 - never created, or the worker is gone
            print(f"deleting the connector: {exc}")
        if capture is not None:
            capture.close()
        db.drop(sid)
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {target} WITH (FORCE)")
        admin.close()
