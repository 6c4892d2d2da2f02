"""pgoutput protocol-1 decoding, canonical PostgreSQL values and the log decoder, on
hand-built messages (no server)."""

from __future__ import annotations

import struct

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, SchemaEvent, TableSchema, WatermarkEvent
from airflow_provider_dblog.sources.postgres import pgoutput
from airflow_provider_dblog.sources.postgres.catalog import TableInfo
from airflow_provider_dblog.sources.postgres.chunk_select import invisible_xids
from airflow_provider_dblog.sources.postgres.log import (
    LogDecoder,
    commit_lsn_of,
    format_lsn,
    make_position,
    parse_lsn,
)
from airflow_provider_dblog.sources.postgres.pgoutput import UNCHANGED_TOAST, DecodeError, decode
from airflow_provider_dblog.sources.postgres.server_setup import plugin_allowed, plugin_not_allowed_error
from airflow_provider_dblog.sources.postgres.slot_log import wal2json_table_filter
from airflow_provider_dblog.sources.postgres.values import from_pg_text, parse_wal2json, timestamp_us, wal2json_text

PG_EPOCH = 946_684_800 * 1_000_000


# -- builders ---------------------------------------------------------------------------
def s(text: str) -> bytes:
    return text.encode() + b"\0"


def tup(*values) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        elif isinstance(v, bytes):
            out += b"b" + struct.pack("!i", len(v)) + v
        else:
            raw = v.encode()
            out += b"t" + struct.pack("!i", len(raw)) + raw
    return out


def begin(final_lsn: int, ts_pg_us: int, xid: int) -> bytes:
    return b"B" + struct.pack("!QqI", final_lsn, ts_pg_us, xid)


def commit(commit_lsn: int, end_lsn: int, ts_pg_us: int) -> bytes:
    return b"C" + struct.pack("!bQQq", 0, commit_lsn, end_lsn, ts_pg_us)


def relation(relid: int, ns: str, name: str, cols, ident: str = "d") -> bytes:
    out = b"R" + struct.pack("!I", relid) + s(ns) + s(name) + ident.encode() + struct.pack("!h", len(cols))
    for flags, cname, oid, typmod in cols:
        out += struct.pack("!b", flags) + s(cname) + struct.pack("!Ii", oid, typmod)
    return out


def insert(relid: int, *values) -> bytes:
    return b"I" + struct.pack("!I", relid) + b"N" + tup(*values)


def update(relid: int, new, old=None, kind: str = "K") -> bytes:
    out = b"U" + struct.pack("!I", relid)
    if old is not None:
        out += kind.encode() + tup(*old)
    return out + b"N" + tup(*new)


def delete(relid: int, old, kind: str = "K") -> bytes:
    return b"D" + struct.pack("!I", relid) + kind.encode() + tup(*old)


# -- the decoder ------------------------------------------------------------------------
def test_begin_commit_origin_type():
    b = decode(begin(0x1_0000_00A0, 123, 4_000_000_000))
    assert b == pgoutput.Begin(final_lsn=0x1_0000_00A0, commit_ts=PG_EPOCH + 123, xid=4_000_000_000)
    c = decode(commit(0x10, 0x40, 5))
    assert c == pgoutput.Commit(flags=0, commit_lsn=0x10, end_lsn=0x40, commit_ts=PG_EPOCH + 5)
    assert decode(b"O" + struct.pack("!Q", 77) + s("node_a")) == pgoutput.Origin(77, "node_a")
    assert decode(b"Y" + struct.pack("!I", 16400) + s("public") + s("mood")) == pgoutput.Type(16400, "public", "mood")


def test_relation():
    r = decode(relation(16385, "public", "orders", [(1, "id", 23, -1), (0, "amount", 1700, 786438)], "f"))
    assert isinstance(r, pgoutput.Relation)
    assert (r.relid, r.namespace, r.name, r.replica_identity) == (16385, "public", "orders", "f")
    assert [(c.name, c.type_oid, c.type_modifier, c.is_key) for c in r.columns] == [
        ("id", 23, -1, True),
        ("amount", 1700, 786438, False),
    ]
    assert r.qualified_name == "public.orders"
    assert decode(relation(1, "", "pg_x", [])).qualified_name == "pg_catalog.pg_x"


def test_insert_with_null_and_utf8():
    m = decode(insert(7, "1", None, "héllo ✓"))
    assert m == pgoutput.Insert(7, ("1", None, "héllo ✓"))


def test_update_without_old_tuple():
    m = decode(update(7, new=("1", "b")))
    assert m == pgoutput.Update(7, None, None, ("1", "b"))


def test_update_with_key_tuple_and_unchanged_toast():
    m = decode(update(7, new=("2", UNCHANGED_TOAST), old=("1", None), kind="K"))
    assert m.old_kind == "K" and m.old == ("1", None)
    assert m.new == ("2", UNCHANGED_TOAST)


def test_update_with_full_old_tuple():
    m = decode(update(7, new=("1", "new"), old=("1", "old"), kind="O"))
    assert (m.old_kind, m.old, m.new) == ("O", ("1", "old"), ("1", "new"))


def test_delete_key_and_full():
    assert decode(delete(7, ("5", None))) == pgoutput.Delete(7, "K", ("5", None))
    assert decode(delete(7, ("5", "x"), kind="O")) == pgoutput.Delete(7, "O", ("5", "x"))


def test_truncate_and_message():
    t = decode(b"T" + struct.pack("!ib", 2, 3) + struct.pack("!II", 10, 11))
    assert t == pgoutput.Truncate((10, 11), cascade=True, restart_identity=True)
    m = decode(b"M" + struct.pack("!bQ", 1, 99) + s("dblog") + struct.pack("!i", 3) + b"abc")
    assert m == pgoutput.LogicalMessage(True, 99, "dblog", b"abc")


def test_binary_tuple_value_is_kept_as_bytes():
    assert decode(insert(1, b"\x00\x01")).new == (b"\x00\x01",)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"Z", "unknown pgoutput message type"),
        (begin(1, 2, 3)[:-1], "truncated"),
        (begin(1, 2, 3) + b"x", "trailing"),
        (b"I" + struct.pack("!I", 1) + b"X" + tup("1"), "new tuple"),
        (b"D" + struct.pack("!I", 1) + b"N" + tup("1"), "old tuple"),
        (b"I" + struct.pack("!I", 1) + b"N" + struct.pack("!h", 1) + b"q", "column kind"),
        (b"O" + struct.pack("!Q", 1) + b"abc", "unterminated"),
    ],
)
def test_malformed_messages_are_rejected(data, message):
    with pytest.raises(DecodeError, match=message):
        decode(data)


# -- canonical values -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "type_name, text, value",
    [
        ("integer", "-42", -42),
        ("bigint", "9007199254740993", 9007199254740993),
        ("smallint", "7", 7),
        ("numeric(12,2)", "12.30", "12.30"),
        ("numeric", "NaN", "NaN"),
        ("double precision", "0.1", 0.1),
        ("double precision", "NaN", "NaN"),
        ("real", "-Infinity", "-Infinity"),
        # real: the float32 PostgreSQL's shortest text reads as, widened exactly
        ("real", "290509.12", 290509.125),
        ("real", "0.1", 0.10000000149011612),
        ("real", "2.9888797e+08", 298887968.0),
        ("real", "3.4028235e+38", 3.4028234663852886e38),
        ("real", "1e-45", 1.401298464324817e-45),
        ("real", "-0", -0.0),
        ("boolean", "t", True),
        ("boolean", "false", False),
        ("character varying(20)", "abc", "abc"),
        ("character(5)", "ab   ", "ab   "),
        ("bytea", "\\xdeadbeef", {"$b64": "3q2+7w=="}),
        ("date", "2024-01-02", "2024-01-02"),
        ("timestamp without time zone", "2024-01-02 03:04:05", "2024-01-02T03:04:05"),
        ("timestamp(3) without time zone", "2024-01-02 03:04:05.12", "2024-01-02T03:04:05.120000"),
        ("timestamp with time zone", "2024-01-02 01:04:05.123456+00", "2024-01-02T01:04:05.123456+00:00"),
        ("timestamp with time zone", "2024-01-02 01:04:05+05:30", "2024-01-01T19:34:05+00:00"),
        ("timestamp with time zone", "infinity", "infinity"),
        ("uuid", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        ("jsonb", '{"a": [1, 2.5]}', {"a": [1, 2.5]}),
        ("integer[]", "{1,2}", "{1,2}"),
        ("interval", "1 day", "1 day"),
        ("inet", "10.0.0.1", "10.0.0.1"),
    ],
)
def test_from_pg_text(type_name, text, value):
    assert from_pg_text(type_name, text) == value


def test_a_real_text_on_a_float32_midpoint_is_rounded_by_the_text_not_the_double():
    """float("1.00000005960464478") is 1 + 2**-24, halfway between the float32s 1 and
    1 + 2**-23; the text lies above it, so float4in reads 1 + 2**-23 (ties-to-even on the
    double would give 1.0)."""
    assert from_pg_text("real", "1.00000005960464478") == 1 + 2**-23
    assert from_pg_text("real", "1.000000059604644775390625") == 1.0  # the midpoint: to even
    assert from_pg_text("real", "1.0000000596046447") == 1.0
    assert from_pg_text("real", "-1.00000005960464478") == -(1 + 2**-23)


def test_null_is_none():
    assert from_pg_text("integer", None) is None


def test_wal2json_values_give_the_same_canonical_values():
    msg = parse_wal2json('{"a": 12.30, "b": 9007199254740993, "c": true, "d": "deadbeef", "e": null, "f": 1e400}')
    assert from_pg_text("numeric(12,2)", wal2json_text("numeric(12,2)", msg["a"])) == "12.30"
    assert from_pg_text("bigint", wal2json_text("bigint", msg["b"])) == 9007199254740993
    assert from_pg_text("boolean", wal2json_text("boolean", msg["c"])) is True
    assert from_pg_text("bytea", wal2json_text("bytea", msg["d"])) == {"$b64": "3q2+7w=="}
    assert wal2json_text("integer", msg["e"]) is None
    assert wal2json_text("numeric", msg["f"]) == "1e400"  # never through a float


def test_wal2json_table_filter_escapes_special_characters():
    assert wal2json_table_filter(["public.a", "dblog.watermarks"]) == "public.a,dblog.watermarks"
    assert wal2json_table_filter(['my schema."a,b.c*"']) == "my\\ schema.a\\,b\\.c\\*"


def test_timestamp_us():
    assert timestamp_us("1970-01-01 00:00:01.5+00") == 1_500_000
    assert timestamp_us(None) is None


def test_positions_sort_in_commit_order_and_give_back_the_commit_lsn():
    a, b, c = make_position(0xFF, 2), make_position(0x100, 1), make_position(0x1_0000_0000, 1)
    assert a < b < c and a.encode() < b.encode() < c.encode()
    assert commit_lsn_of(c) == 0x1_0000_0000
    assert make_position(5, 1) < make_position(5, 10)
    assert parse_lsn("1/A0") == 0x1_0000_00A0 and format_lsn(0x1_0000_00A0) == "1/A0"


def test_invisible_xids_cover_the_in_progress_list_and_everything_from_xmax():
    assert invisible_xids("100:105:100,103", 107) == {"100", "103", "105", "106"}
    assert invisible_xids("5:5:", 6) == {"5"}
    assert invisible_xids(f"{2**32 + 7}:{2**32 + 8}:{2**32 + 7}", 2**32 + 8) == {"7"}  # xid8 -> xid


def test_output_plugin_libraries_check():
    assert plugin_allowed("pgoutput, wal2json", "wal2json")
    assert plugin_allowed("*", "wal2json")
    assert not plugin_allowed("pgoutput", "wal2json")
    err = plugin_not_allowed_error("wal2json", "pgoutput")
    assert "output_plugin_libraries" in str(err) and "'pgoutput,wal2json'" in err.fix


# -- the log decoder ------------------------------------------------------------------------
ORDERS = TableSchema("public.orders", (Column("id", "integer", False), Column("note", "text")), ("id",))


def _decoder():
    info = TableInfo(ORDERS, 1, {"id": "integer", "note": "text"}, "d", ("id",))
    types = {23: "integer", 25: "text", 1184: "timestamp with time zone"}
    return LogDecoder(
        "src1",
        "dblog.watermarks",
        {"public.orders"},
        lambda t, refresh=False: info,
        types.__getitem__,
        lambda oid, mod: {23: "integer", 25: "text"}[oid],
    )


def _feed(dec, *messages):
    for m in messages:
        dec.pgoutput(m)
    out = list(dec.pending)
    dec.pending.clear()
    return out


ORDERS_REL = relation(100, "public", "orders", [(1, "id", 23, -1), (0, "note", 25, -1)])
WM_REL = relation(
    200, "dblog", "watermarks", [(1, "source_id", 25, -1), (0, "value", 25, -1), (0, "updated_at", 1184, -1)]
)


def test_log_decoder_changes_positions_and_watermarks():
    dec = _decoder()
    items = _feed(
        dec,
        begin(0x500, 10, 77),
        ORDERS_REL,
        WM_REL,
        insert(100, "1", "a"),
        update(100, new=("2", UNCHANGED_TOAST), old=("1", None)),
        delete(100, ("2", None)),
        insert(200, "other", "u-other", None),  # another source's watermark: dropped
        update(200, new=("src1", "u-1", None)),
        commit(0x500, 0x530, 10),
    )
    assert isinstance(items[0], SchemaEvent) and items[0].schema == ORDERS
    c, u, d, wm = items[1:]
    assert [e.op for e in (c, u, d)] == [Op.CREATE, Op.UPDATE, Op.DELETE]
    assert c.key == (1,) and c.after == {"id": 1, "note": "a"} and c.before is None
    assert u.key == (2,) and u.before == {"id": 1} and u.after == {"id": 2, "note": {"$unchanged_toast": True}}
    assert d.key == (2,) and d.before == {"id": 2} and d.after is None
    assert all(e.txid == "77" and e.commit_ts == PG_EPOCH + 10 for e in (c, u, d))
    assert [e.position for e in (c, u, d)] == [make_position(0x500, i) for i in (1, 2, 3)]
    # The other source's watermark row still takes index 4: indexes count every change.
    assert wm == WatermarkEvent("u-1", make_position(0x500, 5), "77")


def truncate(*relids: int, options: int = 0) -> bytes:
    return b"T" + struct.pack("!ib", len(relids), options) + b"".join(struct.pack("!I", r) for r in relids)


def test_log_decoder_truncate_is_a_table_event_per_captured_table_in_order():
    dec = _decoder()
    other = relation(300, "public", "other", [(1, "id", 23, -1)])
    items = _feed(
        dec,
        begin(0x500, 10, 77),
        ORDERS_REL,
        other,
        WM_REL,
        insert(100, "1", "a"),
        truncate(300, 100, 200, options=1),  # CASCADE over a table not captured and the watermarks
        insert(100, "2", "b"),
        commit(0x500, 0x530, 10),
    )
    assert isinstance(items[0], SchemaEvent)
    c1, t, c2 = items[1:]
    assert t.op is Op.TRUNCATE and t.table == "public.orders" and t.key == () and t.before is None and t.after is None
    assert t.txid == "77" and t.commit_ts == PG_EPOCH + 10 and t.schema_id == ORDERS.schema_id()
    # Every table the message names takes an index, captured or not: a resend gets the same.
    assert [e.position for e in (c1, t, c2)] == [make_position(0x500, i) for i in (1, 3, 5)]


def test_log_decoder_wal2json_truncate():
    dec = _decoder()
    dec.wal2json('{"action":"B","xid":77,"timestamp":"2000-01-01 00:00:00.00001+00","lsn":"0/500","nextlsn":"0/530"}')
    dec.wal2json('{"action":"T","xid":77,"lsn":"0/480","schema":"public","table":"other"}')
    dec.wal2json('{"action":"T","xid":77,"lsn":"0/480","schema":"public","table":"orders"}')
    items = list(dec.pending)
    assert isinstance(items[0], SchemaEvent)
    (t,) = items[1:]
    assert t.op is Op.TRUNCATE and t.key == () and t.position == make_position(0x500, 2) and t.txid == "77"


def test_log_decoder_refuses_a_delete_without_key():
    dec = _decoder()
    with pytest.raises(ConfigurationError, match="REPLICA IDENTITY"):
        _feed(dec, begin(0x500, 10, 77), ORDERS_REL, delete(100, ()))


def test_log_decoder_wal2json_matches_pgoutput():
    dec = _decoder()
    dec.wal2json('{"action":"B","xid":77,"timestamp":"2000-01-01 00:00:00.00001+00","lsn":"0/500","nextlsn":"0/530"}')
    dec.wal2json(
        '{"action":"U","xid":77,"lsn":"0/480","schema":"public","table":"orders",'
        '"columns":[{"name":"id","typeoid":23,"value":2}],'
        '"identity":[{"name":"id","typeoid":23,"value":1}]}'
    )
    dec.wal2json(
        '{"action":"U","xid":77,"lsn":"0/490","schema":"public","table":"orders",'
        '"columns":[{"name":"id","typeoid":23,"value":2},{"name":"note","typeoid":25,"value":"x"}],'
        '"identity":[{"name":"id","typeoid":23,"value":2}]}'
    )
    items = list(dec.pending)
    assert isinstance(items[0], SchemaEvent)
    u1, u2 = items[1:]
    assert isinstance(u1, ChangeEvent) and u1.position == make_position(0x500, 1)
    assert u1.key == (2,) and u1.before == {"id": 1} and u1.after == {"id": 2, "note": {"$unchanged_toast": True}}
    assert u1.commit_ts == PG_EPOCH + 10
    # Same key, identity = key only: like pgoutput, no before image.
    assert u2.before is None and u2.after == {"id": 2, "note": "x"} and u2.position == make_position(0x500, 2)


# -- unchanged TOAST values (issue 11, part 3) ---------------------------------------------
ORDERS_REL_FULL = relation(100, "public", "orders", [(1, "id", 23, -1), (0, "note", 25, -1)], ident="f")


def test_unchanged_toast_with_replica_identity_full_is_taken_from_the_old_row():
    dec = _decoder()
    big = "ab" * 2000
    items = _feed(
        dec,
        begin(0x500, 10, 77),
        ORDERS_REL_FULL,
        # REPLICA IDENTITY FULL: the old row ('O') carries the TOASTed value, the new one 'u'.
        update(100, new=("1", UNCHANGED_TOAST), old=("1", big), kind="O"),
        # the key changes too: the new key's row still gets the value
        update(100, new=("2", UNCHANGED_TOAST), old=("1", big), kind="O"),
        commit(0x500, 0x530, 10),
    )
    u1, u2 = items[1:]
    assert u1.key == (1,) and u1.before == {"id": 1, "note": big} and u1.after == {"id": 1, "note": big}
    assert u2.key == (2,) and u2.after == {"id": 2, "note": big}
    assert dec.unchanged_toast == []  # nothing left to dump


def test_unchanged_toast_without_replica_identity_full_is_a_placeholder_and_queued_for_a_dump():
    dec = _decoder()
    items = _feed(
        dec,
        begin(0x500, 10, 77),
        ORDERS_REL,
        update(100, new=("1", UNCHANGED_TOAST)),
        update(100, new=("1", "changed")),
        commit(0x500, 0x530, 10),
    )
    u1, u2 = items[1:]
    assert u1.after == {"id": 1, "note": {"$unchanged_toast": True}} and u2.after == {"id": 1, "note": "changed"}
    assert dec.unchanged_toast == [("public.orders", (1,), make_position(0x500, 1))]


def test_wal2json_unchanged_toast_with_replica_identity_full_is_taken_from_the_identity():
    dec = _decoder()
    big = "cd" * 2000
    dec.wal2json('{"action":"B","xid":77,"timestamp":"2000-01-01 00:00:00.00001+00","lsn":"0/500","nextlsn":"0/530"}')
    # wal2json leaves an unchanged TOASTed column out of "columns"; with REPLICA IDENTITY
    # FULL the identity is the whole old row, the value included.
    dec.wal2json(
        '{"action":"U","xid":77,"lsn":"0/480","schema":"public","table":"orders",'
        '"columns":[{"name":"id","typeoid":23,"value":1}],'
        '"identity":[{"name":"id","typeoid":23,"value":1},{"name":"note","typeoid":25,"value":"' + big + '"}]}'
    )
    dec.wal2json(
        '{"action":"U","xid":77,"lsn":"0/490","schema":"public","table":"orders",'
        '"columns":[{"name":"id","typeoid":23,"value":2}],'
        '"identity":[{"name":"id","typeoid":23,"value":2}]}'
    )
    u1, u2 = list(dec.pending)[1:]
    assert u1.after == {"id": 1, "note": big} and u1.before == {"id": 1, "note": big}
    assert u2.after == {"id": 2, "note": {"$unchanged_toast": True}}
    assert dec.unchanged_toast == [("public.orders", (2,), make_position(0x500, 2))]
