"""MySQLSource against a real MariaDB/MySQL server (scripts/services up mysql)."""

from __future__ import annotations

import json
import math
import os
import random
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest

pymysql = pytest.importorskip("pymysql")
pytest.importorskip("pymysqlreplication")
from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.row_event import TableMapEvent  # noqa: E402

from airflow_provider_dblog.core.batch import LogRows  # noqa: E402
from airflow_provider_dblog.core.errors import ConfigurationError, PositionLostError, RequestError  # noqa: E402
from airflow_provider_dblog.core.events import ChangeEvent, Op, Position, SchemaEvent, WatermarkEvent  # noqa: E402
from airflow_provider_dblog.core.row_text import dumps, loads_row  # noqa: E402
from airflow_provider_dblog.core.text_column import TextColumn  # noqa: E402
from airflow_provider_dblog.sources.mysql import chunk_select as mysql_module  # noqa: E402
from airflow_provider_dblog.sources.mysql import select_native as mysql_select_native  # noqa: E402
from airflow_provider_dblog.sources.mysql.source import MySQLSource  # noqa: E402

pytestmark = pytest.mark.integration

_ENV = (
    "DBLOG_MYSQL_HOST",
    "DBLOG_MYSQL_PORT",
    "DBLOG_MYSQL_USER",
    "DBLOG_MYSQL_PASSWORD",
    "DBLOG_MYSQL_ROOT_USER",
    "DBLOG_MYSQL_ROOT_PASSWORD",
)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env() -> dict:
    missing = [k for k in _ENV if not os.environ.get(k)]
    if missing:
        pytest.skip(
            f'MySQL test server not configured ({", ".join(missing)} unset): run `eval "$(scripts/services env)"`'
        )
    return {k: os.environ[k] for k in _ENV}


@pytest.fixture(scope="module")
def root(env):
    conn = pymysql.connect(
        host=env["DBLOG_MYSQL_HOST"],
        port=int(env["DBLOG_MYSQL_PORT"]),
        user=env["DBLOG_MYSQL_ROOT_USER"],
        password=env["DBLOG_MYSQL_ROOT_PASSWORD"],
        autocommit=True,
        charset="utf8mb4",
    )
    yield conn
    conn.close()


def sql(conn, statement: str, params=None) -> list:
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return list(cur.fetchall())


@pytest.fixture
def db(root):
    name = f"dblog_it_{uuid.uuid4().hex[:8]}"
    sql(root, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    sql(root, f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def make_source(env, root):
    made: list[MySQLSource] = []

    def make(user=None, password=None, **kwargs) -> MySQLSource:
        kwargs.setdefault("source_id", f"it-{uuid.uuid4().hex[:10]}")
        kwargs.setdefault("host", env["DBLOG_MYSQL_HOST"])
        src = MySQLSource(
            port=int(env["DBLOG_MYSQL_PORT"]),
            user=user or env["DBLOG_MYSQL_USER"],
            password=password or env["DBLOG_MYSQL_PASSWORD"],
            **kwargs,
        )
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()
    for source_id in {src.source_id for src in made}:  # keep the shared table small
        sql(root, "DELETE FROM dblog.watermarks WHERE source_id = %s", [source_id])


def collect(src: MySQLSource, until: Callable[[list], bool], timeout: float = 15.0) -> list:
    items: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items += src.poll(1000, 0.2)
        if until(items):
            return items
    raise AssertionError(f"log items did not arrive in {timeout}s; got {items!r}")


def changes(items: list) -> list[ChangeEvent]:
    return [i for i in items if isinstance(i, ChangeEvent)]


def has_watermark(uuid_: str) -> Callable[[list], bool]:
    return lambda items: any(isinstance(i, WatermarkEvent) and i.uuid == uuid_ for i in items)


def started(src: MySQLSource) -> MySQLSource:
    src.open()
    src.start_log(None)
    return src


# -- the log --------------------------------------------------------------------------------
def test_log_events_in_commit_order(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v varchar(20))")
    src = started(make_source(tables=[f"{db}.t"]))
    sql(root, f"INSERT INTO `{db}`.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")  # one rows event
    sql(root, f"UPDATE `{db}`.t SET v = 'b2' WHERE id = 2")
    sql(root, f"UPDATE `{db}`.t SET id = 10 WHERE id = 1")  # primary-key update
    sql(root, f"DELETE FROM `{db}`.t WHERE id = 3")
    src.write_watermark("end")
    items = collect(src, has_watermark("end"))

    schema_at = next(i for i, x in enumerate(items) if isinstance(x, SchemaEvent))
    assert items[schema_at].schema.table == f"{db}.t"
    assert schema_at < next(i for i, x in enumerate(items) if isinstance(x, ChangeEvent))
    ev = changes(items)
    assert [(e.op, e.key) for e in ev] == [
        (Op.CREATE, (1,)),
        (Op.CREATE, (2,)),
        (Op.CREATE, (3,)),
        (Op.UPDATE, (2,)),
        (Op.UPDATE, (10,)),
        (Op.DELETE, (3,)),
    ]
    assert ev[0].after == {"id": 1, "v": "a"} and ev[0].before is None
    assert ev[3].before == {"id": 2, "v": "b"} and ev[3].after == {"id": 2, "v": "b2"}
    assert ev[4].before == {"id": 1, "v": "a"} and ev[4].after == {"id": 10, "v": "a"}
    assert ev[5].before == {"id": 3, "v": "c"} and ev[5].after is None
    positions = [e.position for e in items if not isinstance(e, SchemaEvent)]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # The three rows of the multi-row INSERT share one rows event but not a position.
    assert len({e.position.coord[:-6] for e in ev[:3]}) == 1
    assert [int(e.position.coord[-6:]) for e in ev[:3]] == [0, 1, 2]
    assert ev[0].txid == ev[2].txid != ev[3].txid
    assert all(e.schema_id == items[schema_at].schema.schema_id() for e in ev)
    assert all(abs(e.commit_ts / 1e6 - time.time()) < 600 for e in ev)


def test_watermarks_of_this_source_only(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    src = started(make_source(tables=[f"{db}.t"]))
    other = f"other-{uuid.uuid4().hex[:6]}"
    sql(root, "INSERT INTO dblog.watermarks VALUES (%s, 'foreign-1', NOW(6))", [other])
    sql(root, "UPDATE dblog.watermarks SET value = 'foreign-2' WHERE source_id = %s", [other])
    src.write_watermark("lw-1")
    sql(root, f"INSERT INTO `{db}`.t VALUES (1)")
    src.write_watermark("hw-1")
    items = collect(src, has_watermark("hw-1"))
    sql(root, "DELETE FROM dblog.watermarks WHERE source_id = %s", [other])
    wms = [i for i in items if isinstance(i, WatermarkEvent)]
    assert [w.uuid for w in wms] == ["lw-1", "hw-1"]
    ev = changes(items)
    assert wms[0].position < ev[0].position < wms[1].position
    status = src.log_status()
    assert status["reader_file"] and status["server_file"] >= status["reader_file"]
    assert status["lag_bytes"] >= 0 and status["server_pos"] > 4


def test_truncate_statements_of_captured_tables_are_table_events_in_order(root, db, make_source):
    """MariaDB logs TRUNCATE as a statement: each form (qualified or in the current database,
    backticks or not, with or without TABLE) of a captured table gives one op-t event at its
    place in the log; other tables' truncates give nothing; the capture goes on."""
    for name in ("t", "u", "free"):
        sql(root, f"CREATE TABLE `{db}`.{name} (id int PRIMARY KEY)")
    src = started(make_source(tables=[f"{db}.t", f"{db}.u"]))
    sql(root, f"INSERT INTO `{db}`.t VALUES (1), (2)")
    sql(root, f"INSERT INTO `{db}`.u VALUES (1)")
    sql(root, f"TRUNCATE TABLE `{db}`.`t`")
    sql(root, f"INSERT INTO `{db}`.t VALUES (3)")
    sql(root, f"INSERT INTO `{db}`.free VALUES (1)")
    sql(root, f"TRUNCATE {db}.free")  # not captured
    sql(root, f"USE `{db}`")
    try:
        sql(root, "TRUNCATE u")  # unqualified: the statement's current database
        sql(root, "INSERT INTO u VALUES (2)")
        sql(root, "truncate table `t`")
    finally:
        sql(root, "USE mysql")
    sql(root, f"INSERT INTO `{db}`.t VALUES (4)")
    got: list = []
    for _ in range(100):
        got += changes(src.poll(100, 0.2))
        if len(got) >= 9:
            break
    assert [(e.table.split(".")[1], e.op, e.key) for e in got] == [
        ("t", Op.CREATE, (1,)),
        ("t", Op.CREATE, (2,)),
        ("u", Op.CREATE, (1,)),
        ("t", Op.TRUNCATE, ()),
        ("t", Op.CREATE, (3,)),
        ("u", Op.TRUNCATE, ()),
        ("u", Op.CREATE, (2,)),
        ("t", Op.TRUNCATE, ()),
        ("t", Op.CREATE, (4,)),
    ]
    for e in got:
        if e.op is Op.TRUNCATE:
            assert e.before is None and e.after is None and e.commit_ts and e.txid
    positions = [e.position for e in got]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert changes(src.poll(100, 0.5)) == []


# -- canonical values ----------------------------------------------------------------------
TYPES = """
    id int PRIMARY KEY, i int, ub bigint unsigned, d decimal(12,2), dn decimal(20,10),
    vc varchar(20), tx text, b1 tinyint(1), dt date, dtm datetime(6), dt0 datetime,
    ts timestamp(6) NULL DEFAULT NULL, j json, bl blob, db double, f float,
    e enum('x','Y z'), s set('a','b','c'), bt bit(10), bn binary(4), tm time(3), y year,
    ch char(5), u uuid, ip inet6, lt text CHARACTER SET latin1
"""
ROWS = [
    "(1, -2147483648, 18446744073709551615, 12.30, -0.0000000001, 'héllo ✓', 'long text 🚀', 2,"
    " '2024-02-29', '2024-01-02 03:04:05.123456', '1999-12-31 23:59:59', '2024-01-02 03:04:05.5',"
    ' \'{"k": [1, 2.5, "x", null, {"n": true}], "é": "ü"}\', x\'00ff80fe\', 0.1, 0.1234567,'
    " 'Y z', 'c,a', b'1000000001', 'ab', '-838:59:59.5', 2024, 'ab  ',"
    " '123e4567-e89b-12d3-a456-426614174000', '::ffff:1.2.3.4', 'café')",
    "(2, 0, 0, -99.99, 0, '', '', 0, '1000-01-01', '2000-01-01 00:00:00', '2000-01-01 00:00:00',"
    " '1970-01-01 00:00:01', '[]', x'', 1.7976931348623157e308, 3.4e38, 'x', '', b'0', x'00',"
    " '00:00:00', 0, '', 'f81d4fae-7dec-11d0-a765-00a0c91e6bf6', '2001:db8::1', '')",
    "(3" + ", NULL" * 25 + ")",
]


def test_canonical_values_log_equals_select(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t ({TYPES})")
    src = started(make_source(tables=[f"{db}.t"]))
    schema = src.table_schema(f"{db}.t")
    types = {c.name: c.type for c in schema.columns}
    assert types["j"] == "json" and types["ub"] == "bigint(20) unsigned" and types["d"] == "decimal(12,2)"
    assert types["ts"] == "timestamp(6)" and types["bl"] == "blob" and types["e"] == "enum('x','Y z')"
    for row in ROWS:
        sql(root, f"INSERT INTO `{db}`.t VALUES {row}")
    sql(root, f"UPDATE `{db}`.t SET i = i + 1 WHERE id = 1")
    src.write_watermark("done")
    ev = changes(collect(src, has_watermark("done")))
    selected = {r["id"]: r for r in src.select_chunk(schema, None, 100).rows}
    latest = {e.key[0]: e.after for e in ev}
    assert latest == selected  # the crux: one canonical value per stored value
    assert ev[3].before == {**selected[1], "i": selected[1]["i"] - 1}
    json.dumps(selected)  # canonical values are JSON-compatible

    one = selected[1]
    assert one["ub"] == 2**64 - 1 and one["d"] == "12.30" and one["dn"] == "-0.0000000001"
    assert one["vc"] == "héllo ✓" and one["b1"] == 2 and one["dt"] == "2024-02-29"
    assert one["dtm"] == "2024-01-02T03:04:05.123456" and one["dt0"] == "1999-12-31T23:59:59"
    assert one["ts"] == "2024-01-02T03:04:05.500000+00:00"
    assert one["j"] == {"k": [1, 2.5, "x", None, {"n": True}], "é": "ü"}
    assert one["bl"] == {"$b64": "AP+A/g=="} and one["bn"] == {"$b64": "YWIAAA=="}
    assert one["db"] == 0.1 and one["f"] == 0.12345670163631439  # the stored float32, exactly
    assert one["e"] == "Y z" and one["s"] == "a,c" and one["bt"] == 513
    assert one["tm"] == "-838:59:59.500000" and one["y"] == 2024 and one["ch"] == "ab"
    assert one["u"] == "123e4567-e89b-12d3-a456-426614174000" and one["ip"] == "::ffff:1.2.3.4"
    assert one["lt"] == "café"
    two = selected[2]
    assert two["s"] == "" and two["bn"] == {"$b64": "AAAAAA=="} and two["bl"] == {"$b64": ""} and two["y"] == 0
    assert two["db"] == 1.7976931348623157e308 and two["f"] == 3.3999999521443642e38 and two["dn"] == "0.0000000000"
    assert selected[3] == {"id": 3, **{c: None for c in types if c != "id"}}


def test_timestamp_is_utc_whatever_the_process_time_zone(root, db, env):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, ts timestamp(6) NULL, dt datetime)")
    script = textwrap.dedent(f"""
        import time, pymysql
        from airflow_provider_dblog.core.events import ChangeEvent, WatermarkEvent
        from airflow_provider_dblog.sources.mysql.source import MySQLSource
        assert time.localtime(0).tm_hour != 0, "TZ not applied"
        src = MySQLSource(source_id="tz-{db}", host="{env["DBLOG_MYSQL_HOST"]}",
                          port={env["DBLOG_MYSQL_PORT"]}, user="{env["DBLOG_MYSQL_USER"]}",
                          password="{env["DBLOG_MYSQL_PASSWORD"]}", tables=["{db}.t"])
        src.open(); src.start_log(None)
        c = pymysql.connect(host="{env["DBLOG_MYSQL_HOST"]}", port={env["DBLOG_MYSQL_PORT"]},
                            user="{env["DBLOG_MYSQL_ROOT_USER"]}",
                            password="{env["DBLOG_MYSQL_ROOT_PASSWORD"]}", autocommit=True)
        c.cursor().execute("SET time_zone = '+05:00'")
        c.cursor().execute("INSERT INTO `{db}`.t VALUES (1, '2024-06-01 05:00:00.25', '2024-06-01 05:00:00')")
        src.write_watermark("tz")
        items, deadline = [], time.time() + 15
        while not any(isinstance(i, WatermarkEvent) for i in items) and time.time() < deadline:
            items += src.poll(100, 0.2)
        log_row = [i for i in items if isinstance(i, ChangeEvent)][0].after
        sel_row = src.select_chunk(src.table_schema("{db}.t"), None, 10).rows[0]
        print(log_row["ts"], sel_row["ts"], log_row["dt"], sel_row["dt"])
        src.close()
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TZ": "America/New_York", "PYTHONPATH": str(REPO)},
    )
    sql(root, "DELETE FROM dblog.watermarks WHERE source_id = %s", [f"tz-{db}"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["2024-06-01T00:00:00.250000+00:00"] * 2 + ["2024-06-01T05:00:00"] * 2


def test_schema_change_emits_a_schema_event_and_replays_old_rows(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v int)")
    src = started(make_source(tables=[f"{db}.t"]))
    sql(root, f"INSERT INTO `{db}`.t VALUES (1, 1)")
    sql(root, f"ALTER TABLE `{db}`.t ADD COLUMN w varchar(5) DEFAULT 'd'")
    sql(root, f"INSERT INTO `{db}`.t VALUES (2, 2, 'x')")
    src.write_watermark("s")
    items = collect(src, has_watermark("s"))
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["SchemaEvent", "ChangeEvent", "SchemaEvent", "ChangeEvent", "WatermarkEvent"]
    old, new = items[0].schema, items[2].schema
    assert old.column_names() == ["id", "v"] and new.column_names() == ["id", "v", "w"]
    assert items[1].after == {"id": 1, "v": 1} and items[1].schema_id == old.schema_id()
    assert items[3].after == {"id": 2, "v": 2, "w": "x"} and items[3].schema_id == new.schema_id()
    assert src.table_schema(f"{db}.t") == new  # the cache follows the table map
    src.close()
    # After a restart the rows written before the ALTER decode with the binlog's columns.
    again = make_source(source_id=src.source_id, tables=[f"{db}.t"])
    again.open()
    again.start_log(items[1].position)
    assert collect(again, has_watermark("s")) == items


def test_a_table_map_is_parsed_once_per_definition(root, db, make_source, monkeypatch):
    """Each one-row transaction carries the table's map: the library parses it once per table
    id and definition (sources/mysql/table_maps.py); the map of an ALTER TABLE is parsed, and
    every row decodes with its own columns."""
    parsed: list[str] = []
    real = TableMapEvent._sync_column_info  # the last step of the library's parse

    def counted(self):
        parsed.append(self.table)
        return real(self)

    monkeypatch.setattr(TableMapEvent, "_sync_column_info", counted)
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v int)")
    src = started(make_source(tables=[f"{db}.t"]))
    start = sql(root, "SHOW MASTER STATUS")[0][:2]
    for i in range(20):  # autocommit: a transaction, and a table map, each
        sql(root, f"INSERT INTO `{db}`.t VALUES ({i}, {i})")
    sql(root, f"ALTER TABLE `{db}`.t ADD COLUMN w varchar(5) DEFAULT 'd'")
    for i in range(20, 40):
        sql(root, f"INSERT INTO `{db}`.t VALUES ({i}, {i}, 'x{i}')")
    src.write_watermark("m")
    items = collect(src, has_watermark("m"))
    old = [{"id": i, "v": i} for i in range(20)]
    assert [e.after for e in changes(items)] == old + [{"id": i, "v": i, "w": f"x{i}"} for i in range(20, 40)]
    assert [len(i.schema.columns) for i in items if isinstance(i, SchemaEvent)] == [2, 3]
    assert parsed.count("t") == 2
    # Another reader of the library in this process (no CACHE_MARK) gets every map, as before.
    other = BinLogStreamReader(
        connection_settings={
            "host": root.host,
            "port": root.port,
            "user": root.user.decode() if isinstance(root.user, bytes) else root.user,
            "passwd": root.password.decode() if isinstance(root.password, bytes) else root.password,
        },
        server_id=910_000 + os.getpid() % 10_000,
        log_file=start[0],
        log_pos=int(start[1]),
        resume_stream=True,
        blocking=False,
        only_schemas=[db],
        only_events=[TableMapEvent],
    )
    try:
        assert sum(ev.table == "t" for ev in other) == 40
    finally:
        other.close()


# -- chunks --------------------------------------------------------------------------------
def test_composite_key_chunks_walk_in_key_order(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.c (a int, b varchar(10), v int, PRIMARY KEY (a, b))")
    rows = [(a, b, a * 10) for a in (-1, 0, 1, 2, 3) for b in ("", "A", "a0", "b", "zz")][:23]
    with root.cursor() as cur:
        cur.executemany(f"INSERT INTO `{db}`.c VALUES (%s, %s, %s)", rows)
    src = make_source(tables=[f"{db}.c"])
    src.open()
    schema = src.table_schema(f"{db}.c")
    assert schema.key == ("a", "b")
    expected = [(a, b) for a, b, _ in sql(root, f"SELECT a, b, v FROM `{db}`.c ORDER BY a, b")]
    for size in (1, 2, 7):
        seen, last = [], None
        while True:
            chunk = src.select_chunk(schema, last, size).rows
            assert len(chunk) <= size
            if not chunk:
                break
            seen += [(r["a"], r["b"]) for r in chunk]
            last = schema.key_of(chunk[-1])
        assert seen == expected, f"chunk size {size}"
    sql(root, f"ANALYZE TABLE `{db}`.c")
    assert 0 < src.estimate_rows(f"{db}.c") < 100
    got = src.select_keys(schema, [(2, "b"), (-1, ""), (9, "missing")]).rows
    assert got == [{"a": -1, "b": "", "v": -10}, {"a": 2, "b": "b", "v": 20}]


def test_chunk_keys_of_decimal_datetime_and_binary_types(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.k (d decimal(10,3), t timestamp(6), bn varbinary(4), PRIMARY KEY (d, t, bn))")
    sql(
        root,
        f"INSERT INTO `{db}`.k VALUES (1.5, '2024-01-01 00:00:00.5', x'00'), "
        f"(1.5, '2024-01-01 00:00:00.5', x'01'), (1.5, '2024-01-01 00:00:01', x'00'), (2, '2020-01-01', x'')",
    )
    src = make_source(tables=[f"{db}.k"])
    src.open()
    schema = src.table_schema(f"{db}.k")
    first = src.select_chunk(schema, None, 1).rows
    rest = src.select_chunk(schema, schema.key_of(first[0]), 10).rows
    assert len(first + rest) == 4 and first[0]["bn"] == {"$b64": "AA=="}
    assert src.select_keys(schema, [schema.key_of(r) for r in rest]).rows == rest


# -- restart -------------------------------------------------------------------------------
def test_restart_mid_transaction_loses_nothing(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v int)")
    src = started(make_source(tables=[f"{db}.t"]))
    sql(root, "BEGIN")
    for i in range(6):
        sql(root, f"INSERT INTO `{db}`.t VALUES ({i}, {i})")
    sql(root, f"UPDATE `{db}`.t SET v = v + 1")
    sql(root, "COMMIT")
    sql(root, f"INSERT INTO `{db}`.t VALUES (100, 0)")
    src.write_watermark("w1")
    first = [i for i in collect(src, has_watermark("w1")) if not isinstance(i, SchemaEvent)]
    k = 4  # a row event in the middle of the transaction
    assert first[k].txid == first[0].txid == first[8].txid
    src.close()

    again = make_source(source_id=src.source_id, tables=[f"{db}.t"])
    again.open()
    again.start_log(first[k].position)
    second = [i for i in collect(again, has_watermark("w1")) if not isinstance(i, SchemaEvent)]
    after_k = [i for i in second if i.position > first[k].position]
    assert after_k == first[k + 1 :]
    assert all(i in first for i in second)  # anything earlier is a duplicate, not new


def test_close_stops_the_reader_promptly(db, root, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    src = started(make_source(tables=[f"{db}.t"]))
    reader = src._log.reader
    t0 = time.monotonic()
    src.close()
    assert time.monotonic() - t0 < 3 and not reader.is_alive()


# -- clear errors --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, bad",
    [
        ("binlog_format", "STATEMENT"),
        ("binlog_row_image", "MINIMAL"),
        ("binlog_row_metadata", "MINIMAL"),
    ],
)
def test_wrong_global_binlog_settings_are_refused(root, db, make_source, name, bad):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    old = sql(root, f"SELECT @@GLOBAL.{name}")[0][0]
    try:
        sql(root, f"SET GLOBAL {name} = '{bad}'")
        with pytest.raises(ConfigurationError) as err:
            make_source(tables=[f"{db}.t"]).open()
    finally:
        sql(root, f"SET GLOBAL {name} = '{old}'")
    assert name in err.value.cause and bad in err.value.cause
    assert f"SET GLOBAL {name}=" in err.value.fix and "my.cnf" in err.value.fix


@pytest.mark.parametrize("grants", ["", "BINLOG MONITOR", "REPLICATION SLAVE"])
def test_missing_replication_privilege_names_the_grant(root, db, make_source, grants):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    user, password = f"dblog_np_{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    sql(root, f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'")
    try:
        sql(root, f"GRANT SELECT ON `{db}`.* TO '{user}'@'%'")
        sql(root, f"GRANT SELECT, INSERT, UPDATE, CREATE ON dblog.* TO '{user}'@'%'")
        if grants:
            sql(root, f"GRANT {grants} ON *.* TO '{user}'@'%'")
        with pytest.raises(ConfigurationError) as err:
            make_source(user=user, password=password, tables=[f"{db}.t"]).open()
        assert "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.*" in err.value.fix
        assert user in err.value.fix and password not in str(err.value)
        # With both privileges the same user is accepted.
        sql(root, f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'")
        make_source(user=user, password=password, tables=[f"{db}.t"]).open()
    finally:
        sql(root, f"DROP USER '{user}'@'%'")


def test_table_without_primary_key(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.nopk (code varchar(10) NOT NULL, v int, UNIQUE KEY (code))")
    with pytest.raises(ConfigurationError) as err:
        make_source(tables=[f"{db}.nopk"]).open()
    assert "no primary key" in err.value.cause and "key_columns" in err.value.fix
    src = started(make_source(tables=[f"{db}.nopk"], key_columns={f"{db}.nopk": ["code"]}))
    assert src.table_schema(f"{db}.nopk").key == ("code",)
    sql(root, f"INSERT INTO `{db}`.nopk VALUES ('x', 1)")
    src.write_watermark("k")
    ev = changes(collect(src, has_watermark("k")))
    assert [(e.op, e.key) for e in ev] == [(Op.CREATE, ("x",))]
    with pytest.raises(ConfigurationError):
        make_source(tables=[f"{db}.nopk"], key_columns={f"{db}.nopk": ["nope"]}).open()


def test_unknown_tables(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    with pytest.raises(ConfigurationError) as err:
        make_source(tables=[f"{db}.t", f"{db}.missing"]).open()
    assert f"{db}.missing" in err.value.cause
    src = make_source(databases=[db])
    src.open()
    assert src.tables() == [f"{db}.t"]
    with pytest.raises(RequestError):
        src.table_schema(f"{db}.missing")


def test_purged_position_is_lost(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    src = started(make_source(tables=[f"{db}.t"]))
    sql(root, f"INSERT INTO `{db}`.t VALUES (1)")
    src.write_watermark("p")
    old = changes(collect(src, has_watermark("p")))[0].position
    src.close()
    for _ in range(3):
        sql(root, "FLUSH BINARY LOGS")
    number = int(old.coord[:6])
    deadline = time.monotonic() + 10
    while int(sql(root, "SHOW BINARY LOGS")[0][0].rsplit(".", 1)[1]) <= number:
        # A dump thread still reading the old file (ours, just closed) blocks the purge.
        assert time.monotonic() < deadline, "PURGE BINARY LOGS did not remove the old file"
        sql(root, f"PURGE BINARY LOGS TO '{sql(root, 'SHOW BINARY LOGS')[-1][0]}'")
        time.sleep(0.2)
    again = make_source(source_id=src.source_id, tables=[f"{db}.t"])
    again.open()
    with pytest.raises(PositionLostError) as err:
        again.start_log(old)
    assert "purged" in err.value.cause and "dump" in err.value.fix


def test_reader_errors_are_raised_by_poll(root, db, make_source):
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    src = make_source(tables=[f"{db}.t"])
    src.open()
    file, _ = sql(root, "SHOW MASTER STATUS")[0][:2]
    number = int(file.rsplit(".", 1)[1])
    # Offset 5 is inside the binlog header event: the server refuses to stream from there.
    src.start_log(Position(f"{number:06d}{5:012d}{5:012d}{0:06d}"))
    with pytest.raises(PositionLostError):
        collect(src, lambda items: False, timeout=10)


# -- GTID positions (use_gtid) ------------------------------------------------------------------
def test_gtid_positions_resume_mid_transaction_with_the_same_positions(root, db, make_source):
    from airflow_provider_dblog.sources.mysql.gtid import decode_gtid_coord

    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v varchar(20))")
    src = started(make_source(tables=[f"{db}.t"], use_gtid=True))
    sql(root, f"INSERT INTO `{db}`.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    sql(root, "BEGIN")
    sql(root, f"UPDATE `{db}`.t SET v = 'x' WHERE id = 1")
    sql(root, f"UPDATE `{db}`.t SET v = 'y' WHERE id > 1")  # a second rows event, rows 1 and 2
    sql(root, "COMMIT")
    src.write_watermark("g1")
    first = changes(collect(src, has_watermark("g1")))
    coords = [decode_gtid_coord(e.position.coord) for e in first]
    assert [(c.rowno) for c in coords] == [0, 1, 2, 0, 1, 2]
    assert coords[0].counter < coords[3].counter and coords[3].gtid == first[3].txid
    assert [e.position for e in first] == sorted(e.position for e in first)
    src.close()
    # Started again after the second row of the update transaction: the whole transaction is
    # read again (its table map included) with the same positions; the engine drops the first two.
    again = make_source(source_id=src.source_id, tables=[f"{db}.t"], use_gtid=True)
    again.open()
    again.start_log(first[4].position)
    resent = changes(collect(again, has_watermark("g1")))
    assert [e.position for e in resent[:3]] == [e.position for e in first[3:]]
    with pytest.raises(ConfigurationError, match="use_gtid"):  # GTID checkpoints need use_gtid
        no_gtid = make_source(source_id=src.source_id, tables=[f"{db}.t"])
        no_gtid.open()
        no_gtid.start_log(first[4].position)


def test_a_server_without_the_checkpoints_transaction_stops_with_the_fix(root, db, make_source):
    from airflow_provider_dblog.sources.mysql.gtid import encode_gtid_coord

    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY)")
    src = make_source(tables=[f"{db}.t"], use_gtid=True)
    src.open()
    (state,) = sql(root, "SELECT @@gtid_binlog_pos")[0]
    domain, _server, seq = (int(x) for x in state.split(",")[0].split("-"))
    ahead = Position(encode_gtid_coord(0, seq + 1000, 0, f"{domain}-1-{seq + 1000}"))
    with pytest.raises(PositionLostError) as err:
        src.start_log(ahead)
    assert "does not contain" in err.value.cause and "dump --all" in err.value.fix
    other = Position(encode_gtid_coord(0, seq, 0, f"{domain}-77-{seq}"))  # server 77 never wrote it
    with pytest.raises(PositionLostError) as err:
        src.start_log(other)
    assert "diverged" in err.value.cause and "dump --all" in err.value.fix


def test_a_host_list_needs_gtid_positions(env, make_source):
    with pytest.raises(ConfigurationError, match="use_gtid"):
        make_source(host=f"127.0.0.1:{env['DBLOG_MYSQL_PORT']},127.0.0.1:1")


# The columns of TYPES the compiled chunk-row converter handles (not SET, TIME, UUID, INET6).
NATIVE_TYPES = """
    id int PRIMARY KEY, i int, ub bigint unsigned, d decimal(12,2), dn decimal(20,10),
    vc varchar(20), tx text, b1 tinyint(1), dt date, dtm datetime(6), dt0 datetime,
    ts timestamp(6) NULL DEFAULT NULL, j json, bl blob, db double, f float,
    e enum('x','Y z'), bt bit(10), bn binary(4), y year, ch char(5), lt text CHARACTER SET latin1
"""
NATIVE_ROWS = [
    "(1, -2147483648, 18446744073709551615, 12.30, -0.0000000001, 'héllo ✓', 'long text 🚀', 2,"
    " '2024-02-29', '2024-01-02 03:04:05.123456', '1999-12-31 23:59:59', '2024-01-02 03:04:05.5',"
    ' \'{"k": [1, 2.5, "x", null, {"n": true}], "big": 123456789012345678901234567890}\', x\'00ff80fe\','
    " 0.1, 0.1234567, 'Y z', b'1000000001', 'ab', 2024, 'ab  ', 'café €')",
    "(2, 0, 0, -99.99, 0, '', '', 0, '1000-01-01', '2000-01-01 00:00:00', '2000-01-01 00:00:00',"
    " '1970-01-01 00:00:01', '[]', x'', 1.7976931348623157e308, 3.4e38, 'x', b'0', x'00', 0, '', '')",
    # Zero dates (sql_mode allows them here): None on both paths.
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '0000-00-00', '0000-00-00 00:00:00',"
    " '0000-00-00 00:00:00', NULL, NULL, NULL, -0.0, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "(4" + ", NULL" * 21 + ")",
]


def test_native_chunk_rows_equal_pymysqls_and_the_logs(root, db, make_source, caplog, monkeypatch):
    caplog.set_level("INFO", logger="airflow_provider_dblog.sources.mysql.select_native")
    sql(root, f"CREATE TABLE `{db}`.t ({NATIVE_TYPES})")
    src = started(make_source(tables=[f"{db}.t"]))
    schema = src.table_schema(f"{db}.t")
    sql(root, "SET SESSION sql_mode = ''")
    for row in NATIVE_ROWS:
        sql(root, f"INSERT INTO `{db}`.t VALUES {row}")
    src.write_watermark("done")
    logged = {e.key[0]: e.after for e in changes(collect(src, has_watermark("done")))}
    assert src._chunks.native.on and src._chunks.native.plan(schema) is not None
    with caplog.at_level("INFO", logger="airflow_provider_dblog.sources.mysql.select_native"):
        native = src.select_chunk(schema, None, 100).rows
    assert not [r for r in caplog.records if "converted in Python" in r.getMessage()]
    src._chunks.native.on = False
    python = src.select_chunk(schema, None, 100).rows
    assert native == python
    assert {r["id"]: r for r in native} == logged
    one = native[0]
    assert one["j"]["big"] == 123456789012345678901234567890 and one["bn"] == {"$b64": "YWIAAA=="}
    assert one["dtm"] == "2024-01-02T03:04:05.123456" and one["ts"] == "2024-01-02T03:04:05.500000+00:00"
    assert native[1]["dt0"] == "2000-01-01T00:00:00" and native[2]["dt"] is None and native[2]["dtm"] is None
    # As JSON texts (the Delta output's chunks, core/row_text.py), made two rows at a time: the
    # same rows and keys, by the extension, by PyMySQL, and for a filtered chunk.
    for module in (mysql_module, mysql_select_native):
        monkeypatch.setattr(module, "PART_ROWS", 2)
    for on in (True, False):
        src._chunks.native.on = on
        texted = src.select_chunk(schema, None, 100, texts=True)
        assert texted.texts and [loads_row(t) for t in texted.rows] == native
        assert texted.keys == schema.keys_of(native) and len(native) > 2
    filtered = src.select_chunk(schema, None, 100, where="id >= 2", texts=True)
    assert [loads_row(t) for t in filtered.rows] == [r for r in native if r["id"] >= 2]
    # Read from the connection's bytes by the extension (mysql_select_native.query_texts): row
    # 1's JSON integer beyond 64 bits sends the chunk back to the packets (logged); without it,
    # in 7-byte blocks, the same texts and keys byte for byte as from PyMySQL's values.
    src._chunks.native.on = True
    read_by_extension = []
    real_query_texts = mysql_module.query_texts

    monkeypatch.setattr(mysql_module, "query_texts", lambda *a: _spied(read_by_extension, real_query_texts, *a))
    again = src.select_chunk(schema, None, 100, texts=True)
    assert read_by_extension == [False] and "selected again as packets" in caplog.text
    assert [loads_row(t) for t in again.rows] == native
    sql(root, f"UPDATE `{db}`.t SET j = JSON_REMOVE(j, '$.big') WHERE id = 1")
    monkeypatch.setattr(mysql_select_native, "READ_BLOCK", 7)
    read = src.select_chunk(schema, None, 100, texts=True)
    assert read_by_extension == [False, True]
    src._chunks.native.on = False
    by_pymysql = src.select_chunk(schema, None, 100, texts=True)
    assert (read.rows, read.keys) == (by_pymysql.rows, by_pymysql.keys) and len(read.rows) == 4
    assert isinstance(read.rows, TextColumn) and list(read.key_texts) == [dumps(list(k)) for k in read.keys]
    src._chunks.native.on = True
    assert src.select_chunk(schema, (2,), 100, texts=True).keys == [(3,), (4,)]  # the connection goes on


def test_native_chunk_key_texts_are_its_keys_json(root, db, make_source):
    """The keys' JSON texts the extension writes from the row packets (the changelog's key
    column) are what the writer makes of the key tuples, for a key of many kinds."""
    sql(
        root,
        f"CREATE TABLE `{db}`.ck (s varchar(20), dt datetime(6), n decimal(10,3), d date, b bigint unsigned, "
        "v int, PRIMARY KEY (s, dt, n, d, b))",
    )
    sql(
        root,
        f"INSERT INTO `{db}`.ck VALUES ('a\\tb\"é\\\\', '2024-01-02 03:04:05.5', 12.3, '2024-02-29', "
        "18446744073709551615, 1), ('', '1970-01-01 00:00:00', -0.5, '1000-01-01', 0, 2)",
    )
    src = started(make_source(tables=[f"{db}.ck"]))
    schema = src.table_schema(f"{db}.ck")
    read = src.select_chunk(schema, None, 10, texts=True)
    assert isinstance(read.rows, TextColumn) and len(read.keys) == 2
    assert list(read.key_texts) == [dumps(list(k)) for k in read.keys]
    assert read.keys[1][0] == 'a\tb"é\\' and read.key_texts[1].startswith(
        '["a\\tb\\"é\\\\","2024-01-02T03:04:05.500000"'
    )
    src._chunks.native.on = False
    assert src.select_chunk(schema, None, 10, texts=True).keys == read.keys


def _spied(calls: list, real, *args):
    got = real(*args)
    calls.append(got is not None)
    return got


# Stored values the text protocol prints rounded (290509.125 as 290509): each must reach the
# changelog as the value itself, the float32 widened to its double.
EXACT_FLOATS = [290509.125, 298887968.0, 0.10000000149011612, 1.401298464324817e-45, 1.1754942106924411e-38]
EXACT_FLOATS += [3.4028234663852886e38, -1.0000001192092896, -12.688735961914062, 0.0]
EXACT_DOUBLES = [0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308, -12.688735961914062, 1e16, 0.0]


def test_approximate_numbers_are_the_stored_values_in_log_and_dump(root, db, make_source, monkeypatch):
    """FLOAT and DOUBLE, through the binlog (compiled decoder, mysql-replication, row texts)
    and the chunk SELECT (extension, PyMySQL, texts): every value is the one the server reads
    back as CAST(f AS DOUBLE), bit for bit."""
    rng = random.Random(17)
    floats = EXACT_FLOATS + [struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0] for _ in range(300)]
    doubles = EXACT_DOUBLES + [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(300)]
    rows = [(i, f, d) for i, (f, d) in enumerate(zip(floats, doubles)) if math.isfinite(f) and math.isfinite(d)]
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, f float, db double)")
    sources = {}
    for name, native, texts in (("native", "1", False), ("python", "0", False), ("texts", "1", True)):
        monkeypatch.setenv("DBLOG_NATIVE_ROWS", native)
        src = make_source(tables=[f"{db}.t"])
        src.open()
        src.start_log(None, texts=texts)
        sources[name] = src
    monkeypatch.delenv("DBLOG_NATIVE_ROWS")
    with root.cursor() as cur:
        cur.executemany(f"INSERT INTO `{db}`.t VALUES (%s, %s, %s)", rows)
    stored = {i: (f, d) for i, f, d in sql(root, f"SELECT id, CAST(f AS DOUBLE), db FROM `{db}`.t")}
    assert [stored[i][0] for i, _, _ in rows[:3]] == [290509.125, 298887968.0, 0.10000000149011612]

    def bits(values: list) -> dict:
        return {r["id"]: (struct.pack("<d", r["f"]), struct.pack("<d", r["db"])) for r in values}

    want = {i: (struct.pack("<d", f), struct.pack("<d", d)) for i, (f, d) in stored.items()}
    for name, src in sources.items():
        src.write_watermark("done")
        items = collect(src, has_watermark("done"))
        flat = [e for i in items for e in (i.events() if isinstance(i, LogRows) else [i])]
        logged = [e.after for e in changes(flat)]
        logged = [loads_row(a) if isinstance(a, str) else a for a in logged]
        assert bits(logged) == want, f"log ({name})"
    src = sources["native"]
    schema = src.table_schema(f"{db}.t")
    for on in (True, False):
        src._chunks.native.on = on
        assert bits(src.select_chunk(schema, None, 1000).rows) == want, f"chunk (extension: {on})"
        texted = src.select_chunk(schema, None, 1000, texts=True)
        assert bits([loads_row(t) for t in texted.rows]) == want, f"chunk texts (extension: {on})"


def test_connections_without_tls_settings_share_one_preferred_tls_context(env, db, make_source):
    """Issue 39 part 6: with no TLS settings PyMySQL prefers TLS and built a new context for
    each connection, loading the system's CA bundle (about 0.3 s) that the unverified context
    never reads; a new leader's takeover paid it for every connection it opened. One context
    per process now, and the connections are still encrypted when the server offers TLS."""
    from airflow_provider_dblog.sources.mysql.catalog import Session

    src = make_source(tables=[f"{db}.t"])
    first, second = Session(src._settings).conn(), Session(src._settings).conn()
    try:
        assert first.ctx is second.ctx
        with first.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            assert cur.fetchone()[1], "the connection is not encrypted"
    finally:
        first.close()
        second.close()
