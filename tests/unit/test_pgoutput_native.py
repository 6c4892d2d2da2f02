"""The compiled pgoutput row decoder (native/src/pgoutput.rs) against the Python decoder, on
hand-built protocol-1 messages (no server): every event equal, and the messages it hands
back (unchanged TOAST, odd timestamps, binary values) decoded by the Python path."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from airflow_provider_dblog.core.batch import LogRows
from airflow_provider_dblog.core.events import ChangeEvent, Column, TableSchema
from airflow_provider_dblog.sources.postgres import pgoutput, pgoutput_native
from airflow_provider_dblog.sources.postgres.catalog import TableInfo
from airflow_provider_dblog.sources.postgres.log import LogDecoder
from airflow_provider_dblog.sources.postgres.pgoutput import UNCHANGED_TOAST

from .test_pgoutput import begin, commit, delete, insert, relation, update

pytestmark = pytest.mark.skipif(not pgoutput_native.enabled(), reason="native/ was not built")

# (name, type OID, type name): one column of each kind, and some that keep their text.
COLUMNS = [
    ("id", 23, "integer"),
    ("b", 20, "bigint"),
    ("n", 1700, "numeric"),
    ("t", 25, "text"),
    ("bo", 16, "boolean"),
    ("d", 1082, "date"),
    ("ts", 1114, "timestamp without time zone"),
    ("tsz", 1184, "timestamp with time zone"),
    ("u", 2950, "uuid"),
    ("j", 114, "json"),
    ("jb", 3802, "jsonb"),
    ("by", 17, "bytea"),
    ("f", 701, "double precision"),
    ("r", 700, "real"),
    ("arr", 1007, "integer[]"),
    ("ip", 869, "inet"),
]
TABLE = "public.every"
SCHEMA = TableSchema(TABLE, tuple(Column(n, t, n != "id") for n, _, t in COLUMNS), ("id",))
REL = relation(300, "public", "every", [(1 if n == "id" else 0, n, oid, -1) for n, oid, _ in COLUMNS])
TYPES = {oid: name for _, oid, name in COLUMNS}

ROW = (
    "1",
    "9007199254740993",
    "12.30",
    'héllo "q" \\ ✓',
    "t",
    "2024-02-29",
    "2024-01-02 03:04:05.12",
    "2024-01-02 01:04:05.123456+00",
    "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
    '{"a": [1, 2.5, null], "big": 123456789012345678901234567890}',
    '{"a": {"k": 0.1}, "z": 1}',
    "\\xdeadbeef00",
    "-1e+300",
    "1.5",
    "{1,NULL,3}",
    "10.0.0.1",
)
NULLS = ("2",) + (None,) * (len(COLUMNS) - 1)
SPECIAL = ("3", None, "NaN", "", "false", None, "infinity", "2024-01-02 03:04:05", None, "[]", "null", "\\x")
SPECIAL += ("Infinity", "-Infinity", "{}", "::1")
# What the Python path decides: a timestamp with another offset, BC dates, a binary value,
# an unchanged TOAST column.
ODD_TS = ("4",) + (None,) * 6 + ("2024-01-02 03:04:05+02", None, None, None, None, None, None, None, None)
BC = ("5",) + (None,) * 5 + ("0044-03-15 12:00:00 BC", None, None, None, None, None, None, None, None, None)
BINARY = ("6", b"\x00\x00\x00\x00\x00\x00\x00\x07") + (None,) * (len(COLUMNS) - 2)


def _decoder() -> LogDecoder:
    info = TableInfo(SCHEMA, 1, {n: t for n, _, t in COLUMNS}, "d", ("id",))
    return LogDecoder(
        "src1", "dblog.watermarks", {TABLE}, lambda t, refresh=False: info, TYPES.__getitem__, lambda o, m: TYPES[o]
    )


MESSAGES = [
    begin(0x900, 10, 5),
    REL,
    insert(300, *ROW),
    insert(300, *NULLS),
    insert(300, *SPECIAL),
    update(300, new=ROW[:1] + ("7",) + ROW[2:], old=("1",) + (None,) * (len(COLUMNS) - 1)),
    update(300, new=ROW, old=ROW, kind="O"),
    update(300, new=("2",) + (UNCHANGED_TOAST,) + NULLS[2:]),
    insert(300, *ODD_TS),
    insert(300, *BC),
    delete(300, ("1",) + (None,) * (len(COLUMNS) - 1)),
    delete(300, SPECIAL, kind="O"),
    commit(0x900, 0x930, 10),
]


def _events(native: bool, monkeypatch) -> tuple[list, int]:
    calls = []
    real = pgoutput.decode
    monkeypatch.setattr(pgoutput, "decode", lambda data, enc="utf-8": calls.append(data[:1]) or real(data, enc))
    dec = _decoder()
    dec._native.on = native
    for m in MESSAGES:
        dec.pgoutput(m)
    monkeypatch.setattr(pgoutput, "decode", real)
    return list(dec.pending), sum(c in (b"I", b"U", b"D") for c in calls)


def test_the_native_decoder_gives_the_python_decoders_events(monkeypatch):
    python, python_rows = _events(False, monkeypatch)
    native, fallbacks = _events(True, monkeypatch)
    assert python_rows == 10
    assert len(native) == 11 and native == python
    # To the Python path: the unchanged TOAST update, the +02 offset, the BC timestamp and the
    # two changes with an 'infinity' timestamp.
    assert fallbacks == 5
    first = native[1]
    assert first.after["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert first.after["j"]["big"] == 123456789012345678901234567890  # exact: not orjson's float
    assert first.after["ts"] == "2024-01-02T03:04:05.120000" and first.after["by"] == {"$b64": "3q2+7wA="}


def test_row_texts_are_the_text_the_output_writes_for_the_python_decoders_images(monkeypatch):
    """LogDecoder(texts=True) (start_log's texts): the same events, each image as the JSON
    text orjson writes for the Python path's dict, except where a dict is needed."""
    key_change = update(300, new=("8",) + NULLS[1:], old=NULLS[:1] + (None,) * (len(COLUMNS) - 1))
    odd = ("9", "-7", "NaN", "", "f", None, None, None, None, "[]", '{"a": 1e-7, "a": -0.0}', "\\x", "NaN", "-1.5e-07")
    odd_floats = insert(300, *odd, "{}", "::1")
    extra = [odd_floats, key_change]
    MESSAGES[-1:-1] = extra
    try:
        python, _ = _events(False, monkeypatch)
        dec = _decoder()
        dec._texts = True
        for m in MESSAGES:
            dec.pgoutput(m)
        texts = [e for i in dec.pending for e in (i.events() if isinstance(i, LogRows) else [i])]
    finally:
        del MESSAGES[-1 - len(extra) : -1]
    assert len(texts) == len(python) == 13
    as_text = []
    for i, (t, p) in enumerate(zip(texts, python)):
        if isinstance(t, ChangeEvent) and str in (type(t.before), type(t.after)):
            want = tuple(img and orjson.dumps(img).decode() for img in (p.before, p.after))
            assert (t.before, t.after) == want
            assert dataclasses.replace(t, before=p.before, after=p.after) == p
            as_text.append(i)
        else:
            assert t == p
    # As text: the inserts of NULLS and of odd values, and the key-only delete. As dicts: the images with the big
    # JSON integer, what the Python path decodes (infinity, +02, BC, unchanged TOAST), and the
    # update from key 2 to 8, whose key-only before the engine needs to split it.
    assert as_text == [2, 9, 11]
    assert texts[9].before == '{"id":1}' and texts[12].before == {"id": 2} and texts[12].key == (8,)
    assert '"jb":{"a":-0.0},"by":{"$b64":""},"f":"NaN","r":-1.500000053056283e-7,' in texts[11].after


def test_consecutive_text_changes_of_one_table_op_and_transaction_make_one_block(monkeypatch):
    """Like the binlog reader's rows events: a block per run of one table and op in a
    transaction, extended only while it is the last item queued; the same changes as the
    Python decoder's events, in order, and ``block_extra`` counts what the blocks add."""
    row = lambda k: (str(k),) + NULLS[1:]  # noqa: E731
    key_change = update(300, new=row(99), old=("7",) + (None,) * (len(COLUMNS) - 1))
    stream = [begin(0x900, 10, 5), REL, *(insert(300, *row(k)) for k in (1, 2, 3))]
    stream += [update(300, new=row(1)), update(300, new=row(2)), key_change, insert(300, *row(4))]
    stream += [delete(300, ("3",) + (None,) * (len(COLUMNS) - 1)), commit(0x900, 0x930, 10)]
    stream += [begin(0xA00, 11, 6), insert(300, *row(5)), insert(300, *row(6)), commit(0xA00, 0xA30, 11)]
    python = _decoder()
    python._native.on = False
    blocks = _decoder()
    blocks._texts = True
    for m in stream:
        python.pgoutput(m)
        blocks.pgoutput(m)
    items = list(blocks.pending)
    shape = [(i.op.value, len(i)) if isinstance(i, LogRows) else i.__class__.__name__ for i in items]
    assert shape == ["SchemaEvent", ("c", 3), ("u", 2), "ChangeEvent", ("c", 1), ("d", 1), ("c", 2)]
    assert blocks.block_extra == sum(len(i) - 1 for i in items if isinstance(i, LogRows)) == 4
    flat = [e for i in items[1:] for e in (i.events() if isinstance(i, LogRows) else [i])]
    want = list(python.pending)[1:]
    assert [(e.op, e.key, e.position, e.txid) for e in flat] == [(e.op, e.key, e.position, e.txid) for e in want]
    assert flat[1].key == (2,) and flat[1].after == orjson.dumps(want[1].after).decode()
    # A block handed out is never extended: the next change starts a new one.
    blocks.pgoutput(begin(0xB00, 12, 7))
    blocks.pgoutput(insert(300, *row(8)))
    handed = blocks.pending.pop()  # as poll hands it out, mid-transaction
    blocks.pgoutput(insert(300, *row(9)))
    assert handed.keys == [(8,)] and blocks.pending[-1].keys == [(9,)]


def _items(dec: LogDecoder) -> list:
    return [
        (i.op, i.table, i.txid, i.commit_ts, i.schema_id, list(i.keys), list(i.befores), list(i.afters))
        + (list(i.positions),)
        if isinstance(i, LogRows)
        else i
        for i in dec.pending
    ]


@pytest.mark.parametrize("split", [1, 3, 1000])
def test_runs_decoded_in_one_call_give_the_blocks_of_one_message_at_a_time(split):
    """LogDecoder.pgoutput_many (PgRowPlan.run_text: a run of one relation and op in one call)
    against pgoutput one message at a time, the stream cut into reads of ``split`` messages:
    the same items, blocks, positions and ``block_extra``, with key changes, unchanged TOAST,
    values only Python writes, other tables and the watermark table in between."""
    row = lambda k: (str(k),) + NULLS[1:]  # noqa: E731
    key_change = update(300, new=row(99), old=("7",) + (None,) * (len(COLUMNS) - 1))
    other = relation(301, "public", "other", [(1, "id", 23, -1)])
    toast = update(300, new=(row(2)[:3] + (UNCHANGED_TOAST,) + row(2)[4:]))
    stream = [begin(0x900, 10, 5), REL, other, *(insert(300, *row(k)) for k in (1, 2, 3))]
    stream += [insert(301, "5"), insert(300, *row(4)), insert(300, *ROW), insert(300, *row(6))]
    stream += [update(300, new=row(1)), update(300, new=row(2)), key_change, toast, update(300, new=row(3))]
    stream += [delete(300, ("3",) + (None,) * (len(COLUMNS) - 1)), delete(300, ("4",) + (None,) * (len(COLUMNS) - 1))]
    stream += [commit(0x900, 0x930, 10), begin(0xA00, 11, 6), insert(300, *row(5)), insert(300, *row(6))]
    stream += [commit(0xA00, 0xA30, 11)]
    # One-row transactions: Begin and Commit are two of every three messages.
    for t in range(3):
        stream += [begin(0xB00 + t, 12 + t, 7 + t), update(300, new=row(t + 1)), commit(0xB00 + t, 0xB10 + t, 12 + t)]
    one, runs = _decoder(), _decoder()
    one._texts = runs._texts = True
    for m in stream:
        one.pgoutput(m)
    ran = []
    real = runs._native.run_text
    runs._native.run_text = lambda *a: (r := real(*a)) and ran.append(r[0]) or r  # type: ignore[method-assign]
    for at in range(0, len(stream), split):
        runs.pgoutput_many(stream[at : at + split])
    assert _items(runs) == _items(one) and runs.block_extra == one.block_extra
    shape = [(i.op.value, len(i)) if isinstance(i, LogRows) else i.__class__.__name__ for i in runs.pending]
    # "other" is not captured; ROW's JSON integer, the key change and the TOAST are dicts.
    first = ["SchemaEvent", ("c", 4), "ChangeEvent", ("c", 1), ("u", 2), "ChangeEvent", "ChangeEvent"]
    assert shape == first + [("u", 1), ("d", 2), ("c", 2)] + [("u", 1)] * 3
    assert [(i.txid, i.commit_ts) for i in list(runs.pending)[-3:]] == [("7", 12 + P), ("8", 13 + P), ("9", 14 + P)]
    if split > 3:  # whole runs went to the extension in one call each
        assert ran == [3, 1, 1, 2, 1, 2, 2, 1, 1, 1]


P = pgoutput.PG_EPOCH_OFFSET_US


@pytest.mark.parametrize("message", [b"B" + bytes(19), b"B" + bytes(21), b"C" + bytes(24), b"C" + bytes(26)])
def test_a_begin_or_commit_of_another_length_fails_as_the_python_decoder_says(message):
    """pgoutput_many reads Begin and Commit without the message classes only at their exact
    lengths; any other is pgoutput.decode's to refuse, with its message."""
    with pytest.raises(pgoutput.DecodeError) as many:
        _decoder().pgoutput_many([message])
    with pytest.raises(pgoutput.DecodeError) as one:
        pgoutput.decode(message)
    assert str(many.value) == str(one.value)


def test_a_binary_value_is_refused_by_the_python_path_as_before(monkeypatch):
    dec = _decoder()
    dec.pgoutput(begin(0x900, 10, 5))
    dec.pgoutput(REL)
    with pytest.raises(pgoutput.DecodeError, match="binary tuple data"):
        dec.pgoutput(insert(300, *BINARY))


def test_chunk_rows_equal_the_python_converters_and_hand_back_what_they_cannot_make():
    from airflow_provider_dblog.sources.postgres.values import converter, pg_kind

    names = [n for n, _, _ in COLUMNS]
    types = [t for _, _, t in COLUMNS]
    kinds = [pg_kind(t) for t in types]
    # psycopg2 casts bool and the integers itself (no conversion left); the rest is text.
    convert = [k not in ("text", "int", "bool") for k in kinds]
    cast = {"int": int, "bool": lambda t: t == "t"}

    def as_fetched(row):
        return tuple(None if v is None else cast.get(k, str)(v) for k, v in zip(kinds, row))

    raw = [as_fetched(r) for r in (ROW, NULLS, SPECIAL[:6] + ("2024-01-02 03:04:05",) + SPECIAL[7:])]
    expected = [
        {n: (converter(t)(v) if f and v is not None else v) for n, t, f, v in zip(names, types, convert, r)}
        for r in raw
    ]
    native = pgoutput_native.NativePgRows()
    assert native.chunk_rows(names, kinds, convert, raw) == expected
    assert native.chunk_rows(names, kinds, convert, [as_fetched(SPECIAL)]) is None  # 'infinity': Python's
    assert native.chunk_rows(names, kinds, convert, [as_fetched(BC)]) is None


def test_a_real_is_the_float32_its_text_names_on_both_paths():
    """PostgreSQL prints a real as the shortest digits that read back as the stored float32
    (290509.125 as "290509.12"); both paths make that float32's exact double of the text,
    for a sample of every float32 bit pattern written the shortest way."""
    import math
    import random
    import struct

    from airflow_provider_dblog.sources.postgres.values import from_pg_text

    def shortest(x: float) -> str:  # the fewest digits that read back as the float32 x
        for p in range(1, 10):
            t = f"{x:.{p - 1}e}"
            if abs(float(t)) < 2.0**128 - 2.0**103 and struct.pack("<f", float(t)) == struct.pack("<f", x):
                return t
        raise AssertionError(x)

    rng = random.Random(3)
    raws = [struct.pack("<I", b) for b in (0x488DD9A4, 0x00000001, 0x007FFFFF, 0x7F7FFFFF, 0x80000000, 0xC14B0510)]
    raws += [rng.getrandbits(32).to_bytes(4, "little") for _ in range(3000)]
    values = [v for v in (struct.unpack("<f", r)[0] for r in raws) if math.isfinite(v)]
    texts = [shortest(v) for v in values] + ["290509.12", "2.9888797e+08", "1e-45", "-0"]
    rows = pgoutput_native.NativePgRows().chunk_rows(["r"], ["real"], [True], [(t,) for t in texts])
    assert rows is not None
    python = [from_pg_text("real", t) for t in texts]
    bits = lambda vs: [struct.pack("<d", v) for v in vs]  # noqa: E731
    assert (
        bits(r["r"] for r in rows)
        == bits(python)
        == bits(values + [290509.125, 298887968.0, 1.401298464324817e-45, -0.0])
    )
