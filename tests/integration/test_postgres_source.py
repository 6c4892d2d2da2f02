"""PostgresSource against a real PostgreSQL 15 (scripts/services up pg), for both plugins."""

from __future__ import annotations

import logging
import math
import os
import random
import struct
import time
import uuid
from typing import Callable

import pytest

psycopg2 = pytest.importorskip("psycopg2")

from airflow_provider_dblog.core.errors import (  # noqa: E402
    ConfigurationError,
    PositionLostError,
    RequestError,
)
from airflow_provider_dblog.core.events import ChangeEvent, Op, SchemaEvent, WatermarkEvent  # noqa: E402
from airflow_provider_dblog.core.row_text import dumps, loads_row  # noqa: E402
from airflow_provider_dblog.core.text_column import TextColumn  # noqa: E402
from airflow_provider_dblog.sources import native  # noqa: E402
from airflow_provider_dblog.sources.postgres import chunk_copy as postgres_copy  # noqa: E402
from airflow_provider_dblog.sources.postgres import chunk_select  # noqa: E402
from airflow_provider_dblog.sources.postgres.log import commit_lsn_of, parse_lsn  # noqa: E402
from airflow_provider_dblog.sources.postgres.source import PostgresSource  # noqa: E402

from .pg_tmpcluster import TmpCluster, has_setting  # noqa: E402

pytestmark = pytest.mark.integration

_ENV = (
    "DBLOG_PG_HOST",
    "DBLOG_PG_PORT",
    "DBLOG_PG_USER",
    "DBLOG_PG_PASSWORD",
    "DBLOG_PG_DATABASE",
    "DBLOG_PG_SUPERUSER",
    "DBLOG_PG_SUPERUSER_PASSWORD",
)
PLUGINS = ["pgoutput", "wal2json"]


@pytest.fixture(scope="module")
def env() -> dict:
    missing = [k for k in _ENV if not os.environ.get(k)]
    if missing:
        pytest.skip(
            f'PostgreSQL test server not configured ({", ".join(missing)} unset): run `eval "$(scripts/services env)"`'
        )
    return {k: os.environ[k] for k in _ENV}


def _connect(env, superuser: bool = False, **kw):
    conn = psycopg2.connect(
        host=env["DBLOG_PG_HOST"],
        port=int(env["DBLOG_PG_PORT"]),
        dbname=env["DBLOG_PG_DATABASE"],
        user=env["DBLOG_PG_SUPERUSER" if superuser else "DBLOG_PG_USER"],
        password=env["DBLOG_PG_SUPERUSER_PASSWORD" if superuser else "DBLOG_PG_PASSWORD"],
        **kw,
    )
    conn.autocommit = True
    return conn


@pytest.fixture(scope="module")
def admin(env):
    conn = _connect(env, superuser=True)
    yield conn
    conn.close()


@pytest.fixture
def db(env):
    """A connection as the capture's role (owner of the test tables)."""
    conn = _connect(env)
    yield conn
    conn.close()


def run(conn, sql: str, params=None) -> list:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall() if cur.description else []


def drop_slot(admin, slot: str) -> None:
    for _ in range(50):  # a closed walsender may take a moment to release its slot
        try:
            run(admin, "SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        except psycopg2.errors.ObjectInUse:
            time.sleep(0.1)


@pytest.fixture
def ns(db, admin):
    """A fresh schema; every slot/publication a test source made is dropped afterwards."""
    name = "pgs_" + uuid.uuid4().hex[:8]
    run(db, f"CREATE SCHEMA {name}")
    yield name
    run(db, f"DROP SCHEMA IF EXISTS {name} CASCADE")
    for (slot,) in run(
        admin, "SELECT slot_name FROM pg_replication_slots WHERE slot_name LIKE %s", (f"dblog_{name}%",)
    ):
        drop_slot(admin, slot)
    for (pub,) in run(admin, "SELECT pubname FROM pg_publication WHERE pubname LIKE %s", (f"dblog_{name}%",)):
        run(admin, f'DROP PUBLICATION "{pub}"')
    if run(admin, "SELECT to_regclass('dblog.watermarks')")[0][0]:
        run(admin, "DELETE FROM dblog.watermarks WHERE source_id LIKE %s", (f"{name}%",))


@pytest.fixture
def make_source(env, ns) -> Callable[..., PostgresSource]:
    opened: list[PostgresSource] = []

    def make(tables, plugin="pgoutput", suffix="", open_=True, **kw) -> PostgresSource:
        kw.setdefault("user", env["DBLOG_PG_USER"])
        kw.setdefault("password", env["DBLOG_PG_PASSWORD"])
        src = PostgresSource(
            source_id=f"{ns}{suffix}",
            host=env["DBLOG_PG_HOST"],
            port=int(env["DBLOG_PG_PORT"]),
            dbname=env["DBLOG_PG_DATABASE"],
            tables=tables,
            plugin=plugin,
            **kw,
        )
        opened.append(src)
        if open_:
            src.open()
        return src

    yield make
    for s in opened:
        s.close()


def collect(src: PostgresSource, n: int, timeout: float = 15.0, kinds=(ChangeEvent, WatermarkEvent)) -> list:
    """Poll until ``n`` items of ``kinds`` arrived (fails on timeout)."""
    out: list = []
    deadline = time.monotonic() + timeout
    while len([i for i in out if isinstance(i, kinds)]) < n:
        assert time.monotonic() < deadline, f"only {out} after {timeout}s"
        out.extend(src.poll(100, 0.5))
    return [i for i in out if isinstance(i, kinds)]


def quiet(src: PostgresSource, seconds: float = 1.0) -> list:
    out: list = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        out.extend(i for i in src.poll(100, 0.2) if not isinstance(i, SchemaEvent))
    return out


# -- the log ---------------------------------------------------------------------------------
@pytest.mark.parametrize("plugin", PLUGINS)
def test_changes_arrive_in_commit_order_with_increasing_positions(plugin, make_source, db, env, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    src = make_source([t], plugin)
    src.start_log(None)

    other = _connect(env)
    other.autocommit = False
    try:
        run(other, f"INSERT INTO {t} VALUES (100, 'early begin, late commit')")  # txn A begins first
        run(db, f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")  # txn B commits first
        other.commit()  # then A
    finally:
        other.close()
    run(db, f"UPDATE {t} SET v = 'a2' WHERE id = 1")
    run(db, f"DELETE FROM {t} WHERE id = 2")
    run(db, f"UPDATE {t} SET id = 10 WHERE id = 1")  # primary-key update

    events = collect(src, 6)
    assert all(isinstance(e, ChangeEvent) for e in events)
    assert [(e.op, e.key) for e in events] == [
        (Op.CREATE, (1,)),
        (Op.CREATE, (2,)),
        (Op.CREATE, (100,)),
        (Op.UPDATE, (1,)),
        (Op.DELETE, (2,)),
        (Op.UPDATE, (10,)),
    ]
    positions = [e.position for e in events]
    assert positions == sorted(positions) and len(set(positions)) == 6
    assert [p.encode() for p in positions] == sorted(p.encode() for p in positions)
    c1, c2, a, u, d, k = events
    assert c1.position.coord[:16] == c2.position.coord[:16] and c1.txid == c2.txid  # one transaction
    assert c1.after == {"id": 1, "v": "a"} and c1.before is None and c1.table == t
    assert u.after == {"id": 1, "v": "a2"} and u.before is None  # key unchanged: no old image
    assert d.before == {"id": 2} and d.after is None
    assert k.before == {"id": 1} and k.after == {"id": 10, "v": "a2"}  # new key, old key in before
    assert all(e.commit_ts and abs(e.commit_ts / 1e6 - time.time()) < 120 for e in events)
    assert len({e.schema_id for e in events}) == 1 and events[0].schema_id == src.table_schema(t).schema_id()


@pytest.mark.parametrize("plugin", PLUGINS)
def test_schema_events_announce_a_table_and_its_changes(plugin, make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
    src = make_source([t], plugin)
    first = src.table_schema(t)
    src.start_log(None)
    run(db, f"INSERT INTO {t} VALUES (1, 'a')")
    run(db, f"ALTER TABLE {t} ADD COLUMN n numeric(5,1) NOT NULL DEFAULT 0")
    run(db, f"INSERT INTO {t} VALUES (2, 'b', 2.5)")
    items = collect(src, 4, kinds=(ChangeEvent, SchemaEvent))
    assert [type(i) for i in items] == [SchemaEvent, ChangeEvent, SchemaEvent, ChangeEvent]
    assert items[0].schema == first and items[1].schema_id == first.schema_id()
    second = items[2].schema
    assert second.columns[-1].name == "n" and second.columns[-1].type == "numeric(5,1)"
    assert items[3].schema_id == second.schema_id() != first.schema_id()
    assert items[3].after == {"id": 2, "v": "b", "n": "2.5"}
    assert src.table_schema(t) == second


@pytest.mark.parametrize("plugin", PLUGINS)
def test_watermarks_are_recognised_only_for_this_source(plugin, make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    src = make_source([t], plugin)
    neighbour = make_source([t], plugin, suffix="_other")  # shares dblog.watermarks
    src.start_log(None)
    lw, hw = uuid.uuid4().hex, uuid.uuid4().hex
    src.write_watermark(lw)
    neighbour.write_watermark("not-mine")
    run(db, f"INSERT INTO {t} VALUES (1)")
    src.write_watermark(hw)
    items = collect(src, 3)
    assert [type(i) for i in items] == [WatermarkEvent, ChangeEvent, WatermarkEvent]
    assert (items[0].uuid, items[2].uuid) == (lw, hw)
    assert items[0].position < items[1].position < items[2].position
    assert items[0].txid and items[0].txid != items[2].txid
    assert not [i for i in quiet(src, 0.5)]


ALL_TYPES = """
    id int PRIMARY KEY, b bigint, n numeric(12,2), t text, vc varchar(20), ch char(5), bo boolean,
    d date, ts timestamp, tsz timestamptz, u uuid, j json, jb jsonb, by bytea, f float8, r real,
    sm smallint, arr int[], ip inet, iv interval
"""
ROWS = [
    "(1, 9007199254740993, 12.30, 'héllo \"q\" \\\\ ✓', 'vc', 'ab', true, '2024-02-29', "
    "'2024-01-02 03:04:05.12', '2024-01-02 03:04:05.123456+02', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', "
    '\'{"a": [1, 2.50, null], "b": "x"}\', \'{"z": 1, "a": {"k": 0.1}}\', \'\\xdeadbeef00\', 0.1, 1.5, '
    "-3, '{1,NULL,3}', '10.0.0.1', '1 day 02:00:00')",
    "(2, -1, -0.05, '', '', '', false, '0001-01-01', '2024-01-02 03:04:05', '1999-12-31 23:59:59+00', "
    "'00000000-0000-0000-0000-000000000000', '[]', 'null', '\\x', -1e300, -2.5, 0, '{}', '::1', '0')",
    "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL)",
    # What COPY's text format escapes (tab, newline, backslash, other control characters).
    "(5, NULL, NULL, E'a\\tb\\nc\\\\d\\re\\x01f\\bg\\fh\\x0bi\\\\N', E'\\\\N', E'\\t', NULL, NULL, "
    'NULL, NULL, NULL, \'{"k": "a\\tb\\\\\\n"}\', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)',
]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_log_and_chunk_give_identical_canonical_rows(plugin, make_source, db, ns, monkeypatch):
    t = f"{ns}.types"
    run(db, f"CREATE TABLE {t} ({ALL_TYPES})")
    src = make_source([t], plugin)
    schema = src.table_schema(t)
    assert [(c.name, c.type) for c in schema.columns][:12] == [
        ("id", "integer"),
        ("b", "bigint"),
        ("n", "numeric(12,2)"),
        ("t", "text"),
        ("vc", "character varying(20)"),
        ("ch", "character(5)"),
        ("bo", "boolean"),
        ("d", "date"),
        ("ts", "timestamp without time zone"),
        ("tsz", "timestamp with time zone"),
        ("u", "uuid"),
        ("j", "json"),
    ]
    assert schema.key == ("id",) and not schema.columns[0].nullable and schema.columns[1].nullable
    src.start_log(None)
    rows = list(ROWS)
    if plugin == "pgoutput":  # wal2json prints NaN as JSON null (documented limitation)
        rows.append(
            "(4, NULL, 'NaN', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
            "'Infinity', '-Infinity', NULL, NULL, NULL, NULL)"
        )
    for r in rows:
        run(db, f"INSERT INTO {t} VALUES {r}")
    logged = {e.key: e.after for e in collect(src, len(rows))}
    dumped = src.select_chunk(schema, None, 100).rows
    assert [tuple([r["id"]]) for r in dumped] == sorted(logged)
    for row in dumped:
        assert logged[(row["id"],)] == row, f"log and chunk differ for id {row['id']}"
    # As JSON texts (the Delta output's chunks, core/row_text.py), fetched two rows at a time
    # from a cursor: the same rows and keys, also for a filtered chunk.
    # Read by COPY into the texts (sources/postgres/chunk_copy.py) two rows a part when the extension
    # is there, and byte for byte the texts the cursor gives.
    monkeypatch.setattr(chunk_select, "PART_ROWS", 2)
    monkeypatch.setattr(postgres_copy, "PART_ROWS", 2)
    assert src._chunks.copy.on == (native.extension is not None)
    texted = src.select_chunk(schema, None, 100, texts=True)
    assert texted.texts and [loads_row(t) for t in texted.rows] == dumped and len(dumped) > 2
    assert texted.keys == schema.keys_of(dumped)
    filtered = src.select_chunk(schema, None, 100, where="id >= 2", texts=True)
    assert [loads_row(t) for t in filtered.rows] == [r for r in dumped if r["id"] >= 2]
    if src._chunks.copy.on:  # the texts in an Arrow array, the keys' JSON texts with them
        assert isinstance(texted.rows, TextColumn)
        assert list(texted.key_texts) == [dumps(list(k)) for k in texted.keys]
    monkeypatch.setattr(src._chunks.copy, "_copier", None)
    by_cursor = src.select_chunk(schema, None, 100, texts=True)
    assert (by_cursor.rows, by_cursor.keys) == (texted.rows, texted.keys)
    assert by_cursor.key_texts is None and isinstance(by_cursor.rows, list)
    escaped = logged[(5,)]
    assert escaped["t"] == "a\tb\nc\\d\re\x01f\bg\fh\vi\\N" and escaped["vc"] == "\\N"
    assert escaped["ch"] == "\t    "
    assert escaped["j"] == {"k": "a\tb\\\n"}
    one = logged[(1,)]
    assert one["b"] == 9007199254740993 and one["n"] == "12.30" and one["ch"] == "ab   "
    assert one["t"] == 'héllo "q" \\\\ ✓' and one["bo"] is True and one["d"] == "2024-02-29"
    assert one["ts"] == "2024-01-02T03:04:05.120000" and one["tsz"] == "2024-01-02T01:04:05.123456+00:00"
    assert one["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11" and one["jb"] == {"a": {"k": 0.1}, "z": 1}
    assert one["j"] == {"a": [1, 2.5, None], "b": "x"} and one["by"] == {"$b64": "3q2+7wA="}
    assert one["f"] == 0.1 and one["r"] == 1.5 and one["arr"] == "{1,NULL,3}" and one["ip"] == "10.0.0.1"
    assert logged[(2,)]["f"] == -1e300 and logged[(2,)]["by"] == {"$b64": ""} and logged[(2,)]["jb"] is None
    assert all(v is None for k, v in logged[(3,)].items() if k != "id")
    if plugin == "pgoutput":
        assert logged[(4,)]["n"] == "NaN" and logged[(4,)]["f"] == "Infinity" and logged[(4,)]["r"] == "-Infinity"


def test_a_chunk_copys_key_texts_are_its_keys_json(make_source, db, ns):
    """The keys' JSON texts the COPY writes (the changelog's key column) are what the writer
    makes of the key tuples (``dumps(list(key))``), for a key of many kinds and escapes."""
    if native.extension is None:
        pytest.skip("the compiled extension is not built")
    t = f"{ns}.ck"
    run(
        db,
        f"CREATE TABLE {t} (t text, ts timestamptz, n numeric, u uuid, d date, b bigint, f float8, v int, "
        "PRIMARY KEY (t, ts, n, u, d, b, f))",
    )
    run(
        db,
        f"INSERT INTO {t} VALUES (E'a\\tb\"é\\\\', '2024-01-02 03:04:05.5+02', 12.30, "
        "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '2024-02-29', -9007199254740993, 0.1, 1), "
        "('', '1970-01-01 00:00:00+00', -0.000, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12', '0001-01-01', 0, -1e300, 2)",
    )
    src = make_source([t], "pgoutput")
    schema = src.table_schema(t)
    copied = src.select_chunk(schema, None, 10, texts=True)
    assert isinstance(copied.rows, TextColumn) and len(copied.keys) == 2
    assert list(copied.key_texts) == [dumps(list(k)) for k in copied.keys]
    assert copied.keys[1][0] == 'a\tb"é\\' and copied.key_texts[0].startswith('["","1970-01-01T00:00:00+00:00",')


def test_a_chunk_copy_cannot_write_exactly_is_read_by_the_cursor(make_source, db, ns, caplog, monkeypatch):
    """A value the COPY path does not write exactly as the cursor path (a timestamp of
    'infinity') sends that chunk to the cursor: same texts, logged once; a COPY the server
    fails raises what the cursor would; the connection serves the next chunk either way."""
    if native.extension is None:
        pytest.skip("the compiled extension is not built")
    t = f"{ns}.inf"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, ts timestamp)")
    run(db, f"INSERT INTO {t} VALUES (1, '2024-01-01'), (2, 'infinity'), (3, NULL)")
    src = make_source([t], "pgoutput")
    schema = src.table_schema(t)
    with caplog.at_level(logging.INFO, logger=postgres_copy.__name__):
        got = src.select_chunk(schema, None, 10, texts=True)
    assert f"read by a cursor instead of COPY: {t}: column 1" in caplog.text
    assert got.keys == [(1,), (2,), (3,)] and loads_row(got.rows[0]) == {"id": 1, "ts": "2024-01-01T00:00:00"}
    assert src.select_chunk(schema, (2,), 10, texts=True).keys == [(3,)]  # by COPY again
    with pytest.raises(RequestError, match="row filter"):
        src.select_chunk(schema, None, 10, where="no_such_column = 1", texts=True)
    copied = src.select_chunk(schema, (2,), 10, texts=True)
    monkeypatch.setattr(src._chunks.copy, "_copier", None)
    assert got.rows == src.select_chunk(schema, None, 10, texts=True).rows
    assert copied.rows == src.select_chunk(schema, (2,), 10, texts=True).rows


@pytest.mark.parametrize("plugin", PLUGINS)
def test_unchanged_toasted_value_is_marked(plugin, make_source, db, ns):
    t = f"{ns}.docs"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, big text, n int)")
    src = make_source([t], plugin)
    src.start_log(None)
    # md5 text does not compress, so 12 kB is stored out of line (TOASTed).
    run(db, f"INSERT INTO {t} SELECT 1, string_agg(md5(g::text), ''), 1 FROM generate_series(1, 400) g")
    run(db, f"UPDATE {t} SET n = 2 WHERE id = 1")
    ins, upd = collect(src, 2)
    assert len(ins.after["big"]) == 12800
    assert upd.after == {"id": 1, "big": {"$unchanged_toast": True}, "n": 2}


@pytest.mark.parametrize("plugin", PLUGINS)
def test_unchanged_toasted_value_comes_from_the_old_row_with_replica_identity_full(plugin, make_source, db, ns):
    t = f"{ns}.docs_full"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, big text, n int)")
    run(db, f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    src = make_source([t], plugin)
    src.start_log(None)
    run(db, f"INSERT INTO {t} SELECT 1, string_agg(md5(g::text), ''), 1 FROM generate_series(1, 400) g")
    run(db, f"UPDATE {t} SET n = 2 WHERE id = 1")
    run(db, f"UPDATE {t} SET id = 3 WHERE id = 1")  # the new key's row gets the value too
    ins, upd, moved = collect(src, 3)
    big = ins.after["big"]
    assert len(big) == 12800 and upd.before["big"] == big
    assert upd.after == {"id": 1, "big": big, "n": 2}
    assert moved.key == (3,) and moved.after == {"id": 3, "big": big, "n": 2}
    assert src.take_unchanged_toast() == []  # nothing to dump


@pytest.mark.parametrize("plugin", PLUGINS)
def test_truncate_is_a_table_event_per_captured_table_in_order(plugin, make_source, db, ns):
    """A multi-table TRUNCATE that CASCADEs, and a plain one: one op-t event per captured
    table named (key (), no images), at its place in the log; the capture goes on."""
    a, b, child, free = f"{ns}.items", f"{ns}.other", f"{ns}.child", f"{ns}.free"
    run(db, f"CREATE TABLE {a} (id int PRIMARY KEY)")
    run(db, f"CREATE TABLE {b} (id int PRIMARY KEY)")
    run(db, f"CREATE TABLE {child} (id int PRIMARY KEY, item int REFERENCES {a})")
    run(db, f"CREATE TABLE {free} (id int PRIMARY KEY)")  # not captured
    src = make_source([a, b, child], plugin)
    src.start_log(None)
    run(db, f"INSERT INTO {a} VALUES (1), (2)")
    run(db, f"INSERT INTO {child} VALUES (7, 1)")
    run(db, f"INSERT INTO {b} VALUES (1)")
    run(db, f"TRUNCATE {a}, {free} CASCADE")  # names items and free, cascades to child
    run(db, f"INSERT INTO {a} VALUES (3)")
    run(db, f"TRUNCATE {b}")
    run(db, f"INSERT INTO {b} VALUES (4)")
    got = collect(src, 9)
    assert all(isinstance(e, ChangeEvent) for e in got)
    assert [(e.table, e.op, e.key) for e in got[:4]] == [
        (a, Op.CREATE, (1,)),
        (a, Op.CREATE, (2,)),
        (child, Op.CREATE, (7,)),
        (b, Op.CREATE, (1,)),
    ]
    cascade = got[4:6]  # one transaction: both tables, in the order PostgreSQL lists them
    assert {e.table for e in cascade} == {a, child} and {e.op for e in cascade} == {Op.TRUNCATE}
    assert len({e.txid for e in cascade}) == 1 and len({commit_lsn_of(e.position) for e in cascade}) == 1
    assert [(e.table, e.op, e.key) for e in got[6:]] == [
        (a, Op.CREATE, (3,)),
        (b, Op.TRUNCATE, ()),
        (b, Op.CREATE, (4,)),
    ]
    for t in (e for e in got if e.op is Op.TRUNCATE):
        assert t.key == () and t.before is None and t.after is None and t.schema_id and t.commit_ts
    positions = [e.position for e in got]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert quiet(src) == []  # the TRUNCATE of a table not captured gives nothing


# -- chunks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 2, 7])
def test_composite_key_chunks_walk_the_table_in_key_order(chunk, make_source, db, ns):
    t = f"{ns}.orders"
    run(
        db, f"CREATE TABLE {t} (region text, no int, ts timestamptz, amount numeric(8,2), PRIMARY KEY (region, no, ts))"
    )
    run(
        db,
        f"""INSERT INTO {t} SELECT r, n, '2024-01-01'::timestamptz + n * interval '1.5 second', n
                FROM unnest(ARRAY['eu','us','ap','Zz','a b']) r, generate_series(1, 5) n""",
    )
    src = make_source([t])
    schema = src.table_schema(t)
    assert schema.key == ("region", "no", "ts")
    expected = [(r, n, ts) for r, n, ts in run(db, f"SELECT region, no, ts::text FROM {t} ORDER BY region, no, ts")]
    seen, after = [], None
    while True:
        rows = src.select_chunk(schema, after, chunk).rows
        assert len(rows) <= chunk
        seen.extend(schema.key_of(r) for r in rows)
        if len(rows) < chunk:
            break
        after = schema.key_of(rows[-1])
    assert len(seen) == len(set(seen)) == 25
    assert [k[:2] for k in seen] == [e[:2] for e in expected]
    assert expected[0][:2] == ("Zz", 1) and seen[0][2] == "2024-01-01T00:00:01.500000+00:00"
    wanted = [seen[3], seen[17], ("nope", 1, "2024-01-01T00:00:00+00:00")]
    got = src.select_keys(schema, wanted).rows
    assert [schema.key_of(r) for r in got] == sorted(wanted[:2], key=seen.index)


def test_chunk_reports_transactions_its_snapshot_cannot_see(make_source, db, env, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    src = make_source([t])
    src.start_log(None)
    early, late = _connect(env), _connect(env)
    early.autocommit = late.autocommit = False
    try:
        run(early, f"INSERT INTO {t} VALUES (7)")
        xid_early = run(early, "SELECT txid_current() % 4294967296")[0][0]
        run(db, f"INSERT INTO {t} VALUES (8)")  # completes with a later xid: early is in the xip list
        run(late, f"INSERT INTO {t} VALUES (9)")  # at or past the snapshot's xmax: not in xip
        xid_late = run(late, "SELECT txid_current() % 4294967296")[0][0]
        result = src.select_chunk(src.table_schema(t), None, 10)
        assert [r["id"] for r in result.rows] == [8]
        assert {str(xid_early), str(xid_late)} <= result.invisible_txids
        texted = src.select_chunk(src.table_schema(t), None, 10, texts=True)  # through a cursor
        assert texted.rows == ['{"id":8}'] and {str(xid_early), str(xid_late)} <= texted.invisible_txids
        early.commit()
        late.commit()
    finally:
        early.close()
        late.close()
    events = collect(src, 3)
    assert [e.txid for e in events][1:] == [str(xid_early), str(xid_late)]  # the log names them alike
    assert not {str(xid_early), str(xid_late)} & src.select_chunk(src.table_schema(t), None, 10).invisible_txids


# -- restarts and acknowledgements ---------------------------------------------------------------
@pytest.mark.parametrize("plugin", PLUGINS)
def test_restart_after_a_position_delivers_every_later_event(plugin, make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
    src = make_source([t], plugin)
    src.start_log(None)
    with db.cursor() as cur:
        for i in range(1, 4):  # three transactions of three changes
            cur.execute(
                f"BEGIN; INSERT INTO {t} VALUES ({i}, 0); UPDATE {t} SET v = 1 WHERE id = {i}; "
                f"INSERT INTO {t} VALUES ({i + 10}, 0); COMMIT"
            )
    first = collect(src, 9)
    src.close()
    for k in (0, 4, 8):  # start, middle, and end of a transaction
        again = make_source([t], plugin)
        again.start_log(first[k].position)
        expected = first[k + 1 :]
        # k's whole transaction comes again (k % 3 + 1 events up to k), then the rest.
        got = [e for e in collect(again, len(expected) + k % 3 + 1) if e.position > first[k].position]
        assert [(e.position, e.op, e.key, e.after) for e in got] == [
            (e.position, e.op, e.key, e.after) for e in expected
        ]
        assert quiet(again, 0.5) == []
        again.close()


def _confirmed(admin, slot) -> int:
    return parse_lsn(
        run(admin, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,))[0][0]
    )


@pytest.mark.parametrize("plugin", PLUGINS)
def test_acknowledge_confirms_the_slot_up_to_that_transaction_only(plugin, make_source, db, admin, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    src = make_source([t], plugin)
    src.start_log(None)
    for i in range(3):
        run(db, f"INSERT INTO {t} VALUES ({i})")
    e1, e2, e3 = collect(src, 3)
    before = _confirmed(admin, src.slot_name)
    assert before < commit_lsn_of(e2.position)
    src.acknowledge(e2.position)
    deadline = time.monotonic() + 10
    while _confirmed(admin, src.slot_name) != commit_lsn_of(e2.position):
        assert time.monotonic() < deadline, "the slot never reached the acknowledged commit"
        src.poll(10, 0.2)
    quiet(src, 1.5)  # keepalives and status updates come and go
    assert _confirmed(admin, src.slot_name) == commit_lsn_of(e2.position) < commit_lsn_of(e3.position)
    src.close()

    again = make_source([t], plugin)
    again.start_log(e2.position)  # still available
    got = [e for e in collect(again, 2) if e.position > e2.position]
    assert [e.key for e in got][:1] == [(2,)]
    again.close()

    # A checkpoint behind what the slot confirmed is lost, not silently skipped.
    late = make_source([t], plugin)
    with pytest.raises(PositionLostError, match="confirmed up to"):
        late.start_log(e1.position)


def test_dropped_slot_means_position_lost(make_source, db, admin, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    src = make_source([t])
    src.start_log(None)
    run(db, f"INSERT INTO {t} VALUES (1)")
    (event,) = collect(src, 1)
    src.close()
    for _ in range(50):
        try:
            run(admin, "SELECT pg_drop_replication_slot(%s)", (src.slot_name,))
            break
        except psycopg2.errors.ObjectInUse:
            time.sleep(0.1)
    run(admin, "CHECKPOINT")
    again = make_source([t])  # open() creates a new slot, which starts at the end of the log
    with pytest.raises(PositionLostError) as err:
        again.start_log(event.position)
    assert "did not exist" in err.value.cause and "dblog dump --all" in err.value.fix


def test_slot_in_use_is_refused_with_its_name(make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    first = make_source([t])
    first.start_log(None)
    second = make_source([t])  # opening next to a running capture is fine (e.g. the CLI)
    assert second.table_schema(t).key == ("id",)
    with pytest.raises(ConfigurationError, match=f"slot {first.slot_name} is in use"):
        second.start_log(None)


# -- configuration errors ----------------------------------------------------------------------
def test_table_without_primary_key(make_source, db, ns):
    t = f"{ns}.nopk"
    run(db, f"CREATE TABLE {t} (a int NOT NULL, b text)")
    with pytest.raises(ConfigurationError, match="no primary key") as err:
        make_source([t])
    assert "key_columns" in err.value.fix and "ADD PRIMARY KEY" in err.value.fix
    with pytest.raises(ConfigurationError, match="replica identity") as err:
        make_source([t], key_columns={t: ["a"]})
    assert "REPLICA IDENTITY FULL" in err.value.fix
    with pytest.raises(ConfigurationError, match=r"\['zz'\]"):
        make_source([t], key_columns={t: ["zz"]})
    run(db, f"ALTER TABLE {t} REPLICA IDENTITY FULL")
    src = make_source([t], key_columns={t: ["a"]})
    assert src.table_schema(t).key == ("a",)
    src.start_log(None)
    run(db, f"INSERT INTO {t} VALUES (2, 'x'), (1, 'y')")
    run(db, f"DELETE FROM {t} WHERE a = 2")
    events = collect(src, 3)
    assert [(e.op, e.key) for e in events] == [(Op.CREATE, (2,)), (Op.CREATE, (1,)), (Op.DELETE, (2,))]
    assert events[2].before == {"a": 2, "b": "x"}
    assert [r["a"] for r in src.select_chunk(src.table_schema(t), None, 10).rows] == [1]


def test_unknown_tables(make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    with pytest.raises(ConfigurationError, match="nope"):
        make_source([t, f"{ns}.nope"])
    src = make_source([t])
    with pytest.raises(RequestError, match="does not exist"):
        src.table_schema(f"{ns}.nope")
    with pytest.raises(RequestError, match="schema-qualified"):
        src.table_schema("nope")


def test_publication_without_the_watermark_table(make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    run(db, f'CREATE PUBLICATION "dblog_{ns}" FOR TABLE {t}')
    with pytest.raises(ConfigurationError) as err:
        make_source([t])
    assert "dblog.watermarks" in err.value.cause
    assert f'ALTER PUBLICATION "dblog_{ns}" ADD TABLE "dblog"."watermarks"' in err.value.fix


def test_publication_missing_a_captured_table(make_source, db, ns):
    t, u = f"{ns}.items", f"{ns}.more"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    run(db, f"CREATE TABLE {u} (id int PRIMARY KEY)")
    src = make_source([t])  # creates the publication for t only
    src.close()
    with pytest.raises(ConfigurationError) as err:
        make_source([t, u])
    assert f'ADD TABLE "{ns}"."more"' in err.value.fix


def test_role_without_replication(make_source, admin, env, ns):
    role, password = f"{ns}_norepl", uuid.uuid4().hex
    run(admin, f"CREATE ROLE {role} LOGIN PASSWORD %s", (password,))
    try:
        run(admin, f"GRANT USAGE ON SCHEMA {ns} TO {role}")
        with pytest.raises(ConfigurationError) as err:
            make_source([], user=role, password=password)
        assert "REPLICATION" in err.value.cause and f'ALTER ROLE "{role}" REPLICATION' in err.value.fix
        assert password not in str(err.value)
    finally:
        run(admin, f"DROP OWNED BY {role}")
        run(admin, f"DROP ROLE {role}")


def test_wrong_password_names_no_secret(make_source):
    with pytest.raises(ConfigurationError, match="cannot connect") as err:
        make_source([], password="wrong-secret-123")
    assert "wrong-secret-123" not in str(err.value)


def _tmp_source(cluster: TmpCluster, plugin: str = "pgoutput", tables=()) -> PostgresSource:
    d = cluster.dsn
    return PostgresSource(
        source_id="tmp",
        host=d["host"],
        port=d["port"],
        user=d["user"],
        password=d["password"],
        dbname=d["dbname"],
        tables=list(tables),
        plugin=plugin,
    )


def test_wal_level_not_logical():
    with TmpCluster({"wal_level": "replica"}) as cluster:
        src = _tmp_source(cluster)
        try:
            with pytest.raises(ConfigurationError) as err:
                src.open()
        finally:
            src.close()
    assert "wal_level is 'replica'" in err.value.cause
    assert "ALTER SYSTEM SET wal_level = logical" in err.value.fix and "restart" in err.value.fix


@pytest.mark.skipif(
    not has_setting("output_plugin_libraries"),
    reason="this PostgreSQL build has no output_plugin_libraries setting "
    "(stock PostgreSQL 15 loads any installed output plugin)",
)
def test_output_plugin_not_allowed():
    with TmpCluster({"wal_level": "logical", "output_plugin_libraries": "'pgoutput'"}) as cluster:
        src = _tmp_source(cluster, plugin="wal2json")
        try:
            with pytest.raises(ConfigurationError) as err:
                src.open()
        finally:
            src.close()
    assert "output_plugin_libraries" in err.value.cause
    assert "output_plugin_libraries = 'pgoutput,wal2json'" in err.value.fix


def test_output_plugin_not_installed():
    # An empty library path hides the installed wal2json from this throw-away server.
    with TmpCluster({"wal_level": "logical", "dynamic_library_path": "'/nonexistent'"}) as cluster:
        src = _tmp_source(cluster, plugin="wal2json")
        try:
            with pytest.raises(ConfigurationError) as err:
                src.open()
        finally:
            src.close()
    assert "output plugin wal2json is not installed" in err.value.cause
    assert "postgresql-<major version>-wal2json" in err.value.fix


def test_slot_whose_wal_was_removed_means_position_lost():
    settings = {
        "wal_level": "logical",
        "max_slot_wal_keep_size": "'1MB'",
        "wal_keep_size": "0",
        "max_wal_size": "'32MB'",
        "min_wal_size": "'32MB'",
    }
    with TmpCluster(settings) as cluster:
        conn = psycopg2.connect(**cluster.dsn)
        conn.autocommit = True
        src = again = None
        try:
            run(conn, "CREATE TABLE public.items (id int PRIMARY KEY, pad text)")
            src = _tmp_source(cluster, tables=["public.items"])
            src.open()
            src.start_log(None)
            run(conn, "INSERT INTO public.items VALUES (0, 'x')")
            (event,) = collect(src, 1)
            src.close()
            status = None
            for i in range(20):  # write WAL past max_slot_wal_keep_size and let checkpoints remove it
                run(
                    conn,
                    "INSERT INTO public.items SELECT g, repeat('x', 500) FROM generate_series(%s, %s) g",
                    (i * 2000 + 1, i * 2000 + 2000),
                )
                run(conn, "SELECT pg_switch_wal()")
                run(conn, "CHECKPOINT")
                status = run(conn, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'dblog_tmp'")[0][0]
                if status == "lost":
                    break
            assert status == "lost"
            again = _tmp_source(cluster, tables=["public.items"])
            again.open()
            with pytest.raises(PositionLostError, match="wal_status 'lost'"):
                again.start_log(event.position)
        finally:
            for s in (src, again):
                if s is not None:
                    s.close()
            conn.close()


def test_log_status_and_estimates(make_source, db, ns):
    t = f"{ns}.items"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY)")
    run(db, f"INSERT INTO {t} SELECT generate_series(1, 500)")
    run(db, f"ANALYZE {t}")
    src = make_source([t])
    assert src.estimate_rows(t) == 500
    st = src.log_status()
    assert st["slot_confirmed_flush"] and parse_lsn(st["server_lsn"]) >= parse_lsn(st["slot_confirmed_flush"])
    assert st["lag_bytes"] >= 0
    assert src.tables() == [t]


REALS = [290509.125, 298887968.0, 0.10000000149011612, 1.401298464324817e-45, 3.4028234663852886e38, -0.0]
DOUBLES = [0.1, 0.30000000000000004, 5e-324, 1.7976931348623157e308, -12.688735961914062, -0.0]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_approximate_numbers_are_the_stored_values_in_log_and_dump(plugin, make_source, db, ns, monkeypatch):
    """real and double precision through the log (compiled and Python decoders) and a chunk
    (cursor and COPY texts): every value is the one the server reads back as float8, bit for
    bit (PostgreSQL prints 290509.125::real as 290509.12, another double)."""
    rng = random.Random(23)
    reals = REALS + [struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0] for _ in range(300)]
    doubles = DOUBLES + [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(300)]
    rows = [(i, r, d) for i, (r, d) in enumerate(zip(reals, doubles)) if math.isfinite(r) and math.isfinite(d)]
    t = f"{ns}.approx"
    run(db, f"CREATE TABLE {t} (id int PRIMARY KEY, r real, d double precision)")
    sources = {}
    for name, native_rows in (("native", "1"), ("python", "0")):
        monkeypatch.setenv("DBLOG_NATIVE_ROWS", native_rows)
        sources[name] = make_source([t], plugin, suffix=name)
        sources[name].start_log(None)
    monkeypatch.delenv("DBLOG_NATIVE_ROWS")
    with db.cursor() as cur:
        cur.executemany(f"INSERT INTO {t} VALUES (%s, %s::float8::real, %s::float8)", rows)
    stored = {i: (r, d) for i, r, d in run(db, f"SELECT id, r::float8, d FROM {t}")}
    assert [stored[i][0] for i in range(3)] == [290509.125, 298887968.0, 0.10000000149011612]
    want = {i: (struct.pack("<d", r), struct.pack("<d", d)) for i, (r, d) in stored.items()}

    def bits(values) -> dict:
        return {v["id"]: (struct.pack("<d", v["r"]), struct.pack("<d", v["d"])) for v in values}

    for name, src in sources.items():
        assert bits(e.after for e in collect(src, len(rows))) == want, f"log ({name})"
    src = sources["native"]
    schema = src.table_schema(t)
    assert bits(src.select_chunk(schema, None, 1000).rows) == want, "chunk"
    assert bits(loads_row(r) for r in src.select_chunk(schema, None, 1000, texts=True).rows) == want, "texts"
    monkeypatch.setattr(src._chunks.copy, "_copier", None)
    assert bits(loads_row(r) for r in src.select_chunk(schema, None, 1000, texts=True).rows) == want, "cursor"
