"""The compiled rows decoder against mysql-replication + from_binlog, on real binlog events.

Every rows event of the test tables is decoded twice from the same packet: first by the
native decoder (mysql_rows_native.NativeRows), then by mysql-replication's Python decoder and
the reader's converters (the path that runs without the extension). The two must agree value
for value and type for type. The tables hold every column type DBLog supports, with edge
values: NULLs, integer limits, huge and tiny decimals, zero dates, fsp 0..6, negative times,
utf8mb4/latin1/cp1252 text, binary padding, enum/set, bit, year, JSON (nested, null, big
numbers), updates with full and minimal row images, and an event large enough for the
decoder to release the GIL.
"""

from __future__ import annotations

import os
import uuid
from typing import Optional

import pytest

orjson = pytest.importorskip("orjson")
pymysql = pytest.importorskip("pymysql")
pytest.importorskip("pymysqlreplication")
from pymysqlreplication import BinLogStreamReader  # noqa: E402
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent  # noqa: E402

from airflow_provider_dblog.core import row_text  # noqa: E402
from airflow_provider_dblog.core.batch import LogRows  # noqa: E402
from airflow_provider_dblog.sources.mysql import rows_native as mysql_rows_native  # noqa: E402
from airflow_provider_dblog.sources.mysql.rows_native import NativeRows  # noqa: E402
from airflow_provider_dblog.sources.mysql.source import MySQLSource  # noqa: E402
from airflow_provider_dblog.sources.mysql.values import binlog_converters  # noqa: E402

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not mysql_rows_native.enabled(), reason="the native rows decoder is not built"),
]

_ENV = ("DBLOG_MYSQL_HOST", "DBLOG_MYSQL_PORT", "DBLOG_MYSQL_ROOT_USER", "DBLOG_MYSQL_ROOT_PASSWORD")

# Every kind the decoder handles, several widths and precisions of each.
ALL_TYPES = """
    id int PRIMARY KEY,
    ti tinyint, tiu tinyint unsigned, b1 tinyint(1), si smallint, siu smallint unsigned,
    mi mediumint, miu mediumint unsigned, i int, iu int unsigned, bi bigint, biu bigint unsigned,
    d122 decimal(12,2), d2010 decimal(20,10), d6530 decimal(65,30), d650 decimal(65,0),
    d55 decimal(5,5), d100 decimal(10,0), d99 decimal(9,9), d189 decimal(18,9), d10 decimal(1,0),
    f float, db double,
    vc varchar(20), vc300 varchar(300), ch char(5), ch255 char(255), tt tinytext, tx text,
    mt mediumtext, lt longtext, l1 varchar(20) CHARACTER SET latin1, l1t text CHARACTER SET latin1,
    asc1 varchar(10) CHARACTER SET ascii, u3 varchar(10) CHARACTER SET utf8mb3,
    bn binary(4), vb varbinary(10), tb tinyblob, bl blob, mb mediumblob, lb longblob,
    dt date, dtm0 datetime, dtm1 datetime(1), dtm2 datetime(2), dtm3 datetime(3), dtm4 datetime(4),
    dtm5 datetime(5), dtm6 datetime(6),
    ts0 timestamp NULL DEFAULT NULL, ts1 timestamp(1) NULL DEFAULT NULL, ts3 timestamp(3) NULL DEFAULT NULL,
    ts6 timestamp(6) NULL DEFAULT NULL,
    tm0 time, tm1 time(1), tm2 time(2), tm3 time(3), tm4 time(4), tm5 time(5), tm6 time(6),
    y year, bt1 bit(1), bt10 bit(10), bt64 bit(64),
    e enum('x','Y z','é'), s set('a','b','c','it''s'), j json
"""
NINES = "9" * 35 + "." + "9" * 30
ROWS = [
    dict(
        id=1,
        ti=-128,
        tiu=255,
        b1=2,
        si=-32768,
        siu=65535,
        mi=-8388608,
        miu=16777215,
        i=-2147483648,
        iu=4294967295,
        bi=-(2**63),
        biu=2**64 - 1,
        d122="12.30",
        d2010="-0.0000000001",
        d6530=NINES,
        d650="9" * 65,
        d55="0.12345",
        d100="-1234567890",
        d99="-0.000000001",
        d189="123456789.123456789",
        d10="-9",
        f=0.1234567,
        db=0.1,
        vc="héllo ✓",
        vc300="ü" * 300,
        ch="ab",
        ch255="€" * 255,
        tt="tiny",
        tx="long text 🚀",
        mt="m" * 70000,
        lt="🚀" * 10,
        l1="café €",
        l1t="ÿ" * 300,
        asc1="plain",
        u3="ñandú",
        bn=b"ab",
        vb=b"\x00\xff",
        tb=b"\x00",
        bl=b"\x00\xff\x80\xfe",
        mb=b"\x01" * 70000,
        lb=b"",
        dt="2024-02-29",
        dtm0="1999-12-31 23:59:59",
        dtm1="2024-01-02 03:04:05.1",
        dtm2="2024-01-02 03:04:05.12",
        dtm3="2024-01-02 03:04:05.123",
        dtm4="2024-01-02 03:04:05.1234",
        dtm5="2024-01-02 03:04:05.12345",
        dtm6="2024-01-02 03:04:05.123456",
        ts0="1970-01-01 00:00:01",
        ts1="2024-06-01 00:00:00.5",
        ts3="2038-01-19 03:14:07.999",
        ts6="2001-02-03 04:05:06.000001",
        tm0="-838:59:59",
        tm1="-00:00:01.5",
        tm2="12:34:56.78",
        tm3="-838:59:59.5",
        tm4="-00:00:00.0001",
        tm5="00:00:00.00001",
        tm6="-12:34:56.789012",
        y=2024,
        bt1=1,
        bt10=513,
        bt64=2**64 - 1,
        e="Y z",
        s="c,a,it's",
        j='{"k": [1, 2.5, "x", null, {"n": true}], "é": "ü", "big": 123456789012345678901234567890}',
    ),
    dict(
        id=2,
        ti=127,
        tiu=0,
        b1=0,
        si=32767,
        siu=0,
        mi=8388607,
        miu=0,
        i=2147483647,
        iu=0,
        bi=2**63 - 1,
        biu=0,
        d122="-99.99",
        d2010="0",
        d6530="-" + NINES,
        d650="-" + "9" * 65,
        d55="-0.00001",
        d100="0",
        d99="0.999999999",
        d189="-0.000000001",
        d10="0",
        f=3.4e38,
        db=1.7976931348623157e308,
        vc="",
        vc300="",
        ch="",
        ch255="",
        tt="",
        tx="",
        mt="",
        lt="",
        l1="",
        l1t="",
        asc1="",
        u3="",
        bn=b"\x00",
        vb=b"",
        tb=b"",
        bl=b"",
        mb=b"",
        lb=b"\xff" * 3,
        dt="1000-01-01",
        dtm0="1000-01-01 00:00:00",
        dtm1="9999-12-31 23:59:59.9",
        dtm2="2000-01-01 00:00:00.01",
        dtm3="2000-01-01 00:00:00",
        dtm4="2000-01-01 00:00:00.0001",
        dtm5="2000-01-01 00:00:00",
        dtm6="9999-12-31 23:59:59.999999",
        ts0="2038-01-19 03:14:07",
        ts1="1970-01-01 00:00:01.1",
        ts3="1970-01-01 00:00:01",
        ts6="2024-01-01 00:00:00",
        tm0="838:59:59",
        tm1="838:59:59.9",
        tm2="-00:00:00.01",
        tm3="00:00:00",
        tm4="-838:59:59.9999",
        tm5="-01:00:00.00001",
        tm6="838:59:59.000000",
        y=0,
        bt1=0,
        bt10=0,
        bt64=0,
        e="x",
        s="",
        j="null",
    ),
    dict(
        id=3,
        f=-1.17549435e-38,
        db=-0.0,
        y=1901,
        dt="9999-12-31",
        j='"just a string"',
        e="é",
        s="b",
        tm0="00:00:00",
        d122="0.01",
        bt10=1,
        bn=b"abcd",
    ),
    dict(id=4, f=12345665.0, y=2155, j="[]", d122="9999999999.99", tm3="-00:00:00.001"),
    dict(id=5, f=16777215.0, j="{}", d122="-9999999999.99"),
    dict(id=6, f=1e-45, j='[1.5e300, -0.0, 1e-320, "\\u00e9\\ud83d\\ude80", {"a": {"b": [[], {}]}}]'),
    dict(id=7),  # every other column NULL
]


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
    name = f"dblog_nat_{uuid.uuid4().hex[:8]}"
    sql(root, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    sql(root, f"DROP DATABASE IF EXISTS `{name}`")


def insert(root, table: str, row: dict) -> None:
    cols = list(row)
    placeholders = ", ".join("%s" for _ in cols)
    sql(root, f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})", [row[c] for c in cols])


def schemas(env, db: str, tables: list[str]) -> dict:
    src = MySQLSource(
        source_id=f"nat-{uuid.uuid4().hex[:8]}",
        host=env["DBLOG_MYSQL_HOST"],
        port=int(env["DBLOG_MYSQL_PORT"]),
        user=env["DBLOG_MYSQL_ROOT_USER"],
        password=env["DBLOG_MYSQL_ROOT_PASSWORD"],
        tables=[f"{db}.{t}" for t in tables],
    )
    src.open()
    try:
        return {f"{db}.{t}": src.table_schema(f"{db}.{t}") for t in tables}
    finally:
        src.close()


def both_paths(env, db: str, start: tuple, schema_of: dict, texts: Optional[list] = None) -> tuple[list, list]:
    """(native results, Python results) per rows event since ``start``; a native result is
    None where the decoder fell back. ``texts`` collects (table, the decoder's text result)
    per event too (NativeRows.texts)."""
    stream = BinLogStreamReader(
        connection_settings={
            "host": env["DBLOG_MYSQL_HOST"],
            "port": int(env["DBLOG_MYSQL_PORT"]),
            "user": env["DBLOG_MYSQL_ROOT_USER"],
            "passwd": env["DBLOG_MYSQL_ROOT_PASSWORD"],
        },
        server_id=900_000 + os.getpid() % 10_000,
        log_file=start[0],
        log_pos=start[1],
        resume_stream=True,
        blocking=False,
        only_schemas=[db],
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    native, python = [], []
    decoder = NativeRows()
    try:
        for ev in stream:
            table = f"{ev.schema}.{ev.table}"
            schema = schema_of[table]
            decoder.forget(table)  # a fresh plan for every event's table map
            if texts is not None:
                names = schema.column_names()
                key = [names.index(k) for k in schema.key]
                texts.append((table, decoder.texts(ev, table, schema.columns, key)))
            native.append((table, decoder.rows(ev, table, schema.columns)))  # before ev.rows moves the packet
            names, fns = schema.column_names(), binlog_converters(schema.columns)

            def conv(values: dict, nones: dict, names=names, fns=fns) -> dict:
                return {n: f(v, nones.get(k)) for n, f, (k, v) in zip(names, fns, values.items())}

            if isinstance(ev, UpdateRowsEvent):
                rows = [
                    (
                        conv(r["before_values"], r["before_none_sources"]),
                        conv(r["after_values"], r["after_none_sources"]),
                    )
                    for r in ev.rows
                ]
            elif isinstance(ev, WriteRowsEvent):
                rows = [(None, conv(r["values"], r["none_sources"])) for r in ev.rows]
            else:
                rows = [(conv(r["values"], r["none_sources"]), None) for r in ev.rows]
            python.append((table, rows))
    finally:
        stream.close()
    return native, python


def typed(value):
    """A value with its exact type, nested, so that 1 == 1.0 == True do not compare equal."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [typed(v) for v in value]
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


def canonical_time(text):
    """The server's TIME text ('-00:00:00.01') in the canonical form ('-00:00:00.010000')."""
    if text is None or "." not in text:
        return text
    whole, frac = text.split(".")
    return whole if not frac.strip("0") else f"{whole}.{frac.ljust(6, '0')}"


def master_position(root) -> tuple:
    row = sql(root, "SHOW MASTER STATUS")[0]
    return row[0], row[1]


def test_native_decoder_equals_python_on_every_type(env, root, db):
    t = f"`{db}`.t"
    sql(root, f"CREATE TABLE {t} ({ALL_TYPES})")
    sql(root, f"CREATE TABLE `{db}`.other (id int PRIMARY KEY, u uuid, ip inet6, ip4 inet4, g point)")
    start = master_position(root)
    sql(root, "SET time_zone = '+00:00'")
    for row in ROWS:
        insert(root, t, row)
    # The server's own text of every TIME value as inserted (negative ones with fractions too).
    tms = [f"tm{k}" for k in range(7)]

    def stored_times() -> dict:
        return {r[0]: r[1:] for r in sql(root, f"SELECT id, {', '.join(f'CAST({c} AS CHAR)' for c in tms)} FROM {t}")}

    stored = stored_times()
    sql(root, f"UPDATE {t} SET i = i DIV 2, vc = 'changed', j = JSON_ARRAY(1, 'two') WHERE id IN (1, 2)")
    sql(root, f"UPDATE {t} SET id = id + 1000 WHERE id = 3")  # key change
    sql(root, "SET SESSION binlog_row_image = 'MINIMAL'")
    try:
        sql(root, f"UPDATE {t} SET vc = 'minimal', d122 = NULL WHERE id = 1")
        sql(root, f"DELETE FROM {t} WHERE id = 4")
    finally:
        sql(root, "SET SESSION binlog_row_image = 'FULL'")
    sql(root, "SET SESSION sql_mode = ''")  # zero dates and the empty enum value
    try:
        sql(
            root,
            f"INSERT INTO {t} (id, dt, dtm0, dtm6, ts0, e) VALUES (100, '0000-00-00', '0000-00-00 00:00:00',"
            " '2024-00-00 00:00:00', '0000-00-00 00:00:00', 'nope'), (101, '2024-01-00', NULL, NULL, NULL, 'x')",
        )
    finally:
        sql(root, "SET SESSION sql_mode = DEFAULT")
    # One event over the GIL-release threshold (32 KiB): 2,000 rows in one statement.
    sql(
        root,
        f"INSERT INTO {t} (id, i, d122, vc, dtm6, tm3, j, s, bl) SELECT seq + 10000, seq, seq / 7, CONCAT('v', seq),"
        " TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, SEC_TO_TIME(CAST(seq AS SIGNED) - 1000 + 0.25),"
        f" JSON_OBJECT('n', seq), IF(seq % 2, 'a,b', ''), UNHEX(HEX(seq)) FROM `{db}`.seq_1_to_2000",
    )
    sql(root, f"UPDATE {t} SET i = -i WHERE id > 10000")
    stored.update(stored_times())
    sql(root, f"DELETE FROM {t} WHERE id > 10000")
    sql(root, f"DELETE FROM {t} WHERE id < 10000")
    sql(root, f"INSERT INTO `{db}`.other VALUES (1, UUID(), '2001:db8::1', '1.2.3.4', POINT(1, 2))")

    schema_of = schemas(env, db, ["t", "other"])
    texts: list = []
    native, python = both_paths(env, db, start, schema_of, texts)

    assert len(native) == len(python) >= 14
    decoded = 0
    for (table, got), (_, want) in zip(native, python):
        if table.endswith(".other"):
            assert got is None  # uuid / inet6 / inet4 / geometry: mysql-replication decodes them
            continue
        assert got is not None, "the native decoder fell back on a supported table"
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert typed(g) == typed(w)
        decoded += len(got)
    assert decoded > 6000
    # Both paths give the stored TIME values (mysql-replication alone misreads negative ones
    # with a fraction, e.g. -12:34:56.789012 as -12:34:56.210988).
    times = 0
    for table, got in native:
        for before, after in got or []:
            if table.endswith(".t") and before is None:
                assert [after[c] for c in tms] == [canonical_time(v) for v in stored[after["id"]]], after["id"]
                times += sum(1 for c in tms if after[c] and after[c].startswith("-") and "." in after[c])
    assert times > 900  # negative times with fractions were among them
    # A value for every column kind was seen (not only NULLs).
    firsts = next(got for table, got in native if table.endswith(".t"))
    assert all(firsts[0][1][c] is not None for c in ("f", "d6530", "j", "bt64", "tm6", "ts6", "l1", "ch255"))

    # The JSON-text decoding (start_log's texts) of the same events: the text the Delta output
    # writes for the Python path's dicts, byte for byte, and the keys of both images.
    key_of = schema_of[f"{db}.t"].key_getter()
    as_text, as_dicts = 0, 0
    for (table, got), (_, want) in zip(texts, python):
        if table.endswith(".other"):
            assert got is None
            continue
        if got is None:  # dicts only where a value has no exact text here: a JSON integer beyond 64 bits
            assert any("123456789012345678901234567890" in row_text.dumps(img) for pair in want for img in pair if img)
            as_dicts += 1
            continue
        assert len(got) == len(want)
        for (before_key, after_key, before, after), (b, a) in zip(got, want):
            assert (before, after) == (b and orjson.dumps(b).decode(), a and orjson.dumps(a).decode())
            assert (before_key, after_key) == (b and key_of(b), a and key_of(a))
            as_text += 1
    assert as_text > 6000 and as_dicts == 2  # row 1's insert, and its update's before image


def read_log(env, root, db: str, tables: list[str], statements: list[str], **start_log) -> list:
    """The items a MySQLSource capturing ``tables`` reads while ``statements`` run, up to its
    watermark written after them."""
    src = MySQLSource(
        source_id=f"nat-{uuid.uuid4().hex[:8]}",
        host=env["DBLOG_MYSQL_HOST"],
        port=int(env["DBLOG_MYSQL_PORT"]),
        user=env["DBLOG_MYSQL_ROOT_USER"],
        password=env["DBLOG_MYSQL_ROOT_PASSWORD"],
        tables=[f"{db}.{t}" for t in tables],
    )
    src.open()
    try:
        src.start_log(None, **start_log)
        for statement in statements:
            sql(root, statement)
        src.write_watermark("end")
        items: list = []
        for _ in range(100):
            items += src.poll(100, 0.2)
            if any(getattr(i, "uuid", None) == "end" for i in items):
                return items
        raise AssertionError("the watermark did not come back")
    finally:
        sql(root, "DELETE FROM dblog.watermarks WHERE source_id = %s", [src.source_id])
        src.close()


def test_reader_uses_the_native_decoder_and_falls_back_per_table(env, root, db, caplog):
    """The capture itself (BinlogReader): the supported table through the decoder, a table
    with a type it does not handle through mysql-replication, both with canonical values."""
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v varchar(10), d decimal(6,2))")
    sql(root, f"CREATE TABLE `{db}`.o (id int PRIMARY KEY, u uuid)")
    caplog.set_level("INFO", logger="airflow_provider_dblog.sources.mysql.rows_native")
    items = read_log(
        env,
        root,
        db,
        ["t", "o"],
        [
            f"INSERT INTO `{db}`.t VALUES (1, 'a', 1.5), (2, NULL, -2)",
            f"INSERT INTO `{db}`.o VALUES (1, '123e4567-e89b-12d3-a456-426614174000')",
        ],
    )
    after = [i.after for i in items if getattr(i, "after", None) is not None]
    assert after == [
        {"id": 1, "v": "a", "d": "1.50"},
        {"id": 2, "v": None, "d": "-2.00"},
        {"id": 1, "u": "123e4567-e89b-12d3-a456-426614174000"},
    ]
    fallbacks = [r.getMessage() for r in caplog.records if "decoded in Python" in r.getMessage()]
    assert len(fallbacks) == 1 and f"{db}.o" in fallbacks[0] and "uuid" in fallbacks[0]


def test_reader_gives_row_texts_when_asked(env, root, db):
    """start_log(texts=True): images as their changelog JSON text, except where a dict is
    needed: an update that changes the key (the engine splits it), a value with no exact
    text here (a JSON integer beyond 64 bits), a table mysql-replication decodes."""
    sql(root, f"CREATE TABLE `{db}`.t (id int PRIMARY KEY, v varchar(10), j json)")
    sql(root, f"CREATE TABLE `{db}`.o (id int PRIMARY KEY, u uuid)")
    statements = [
        f"""INSERT INTO `{db}`.t VALUES (1, 'a"\\\\', '{{"x": [1, 2.50]}}'), (2, NULL, NULL)""",
        f"UPDATE `{db}`.t SET v = 'b' WHERE id = 1",
        f"UPDATE `{db}`.t SET id = 3 WHERE id = 2",
        f"DELETE FROM `{db}`.t WHERE id = 1",
        f"INSERT INTO `{db}`.t VALUES (4, 'big', '[123456789012345678901234567890]')",
        f"INSERT INTO `{db}`.o VALUES (1, '123e4567-e89b-12d3-a456-426614174000')",
    ]
    items = read_log(env, root, db, ["t", "o"], statements, texts=True)
    # A rows event's text changes come as one block; the others as events.
    assert [(b.op.value, len(b)) for b in items if isinstance(b, LogRows)] == [("c", 2), ("u", 1), ("d", 1)]
    items = [e for i in items for e in (i.events() if isinstance(i, LogRows) else [i])]
    changes = [(i.op.value, i.key, i.before, i.after) for i in items if getattr(i, "op", None) is not None]
    row1 = '{"id":1,"v":"a\\"\\\\","j":{"x":[1,2.5]}}'
    row1b = '{"id":1,"v":"b","j":{"x":[1,2.5]}}'
    assert changes == [
        ("c", (1,), None, row1),
        ("c", (2,), None, '{"id":2,"v":null,"j":null}'),
        ("u", (1,), row1, row1b),
        ("u", (3,), {"id": 2, "v": None, "j": None}, {"id": 3, "v": None, "j": None}),
        ("d", (1,), row1b, None),
        ("c", (4,), None, {"id": 4, "v": "big", "j": [123456789012345678901234567890]}),
        ("c", (1,), None, {"id": 1, "u": "123e4567-e89b-12d3-a456-426614174000"}),
    ]
