"""The compiled rows decoder on hand-made row images: values, errors and fallbacks.

The differential test against mysql-replication on real binlog events is
tests/integration/test_mysql_rows_native.py; here each byte is written by hand (the formats
are those of MySQL's binlog documentation), so that the error handling can be driven too.
"""

from __future__ import annotations

import json
import logging
import math
import random
import struct
from types import SimpleNamespace

import pytest

native = pytest.importorskip("airflow_provider_dblog._rows_native")
orjson = pytest.importorskip("orjson")

from pymysqlreplication.constants import FIELD_TYPE  # noqa: E402

from airflow_provider_dblog.core.events import Column  # noqa: E402
from airflow_provider_dblog.sources.mysql import rows_native as mrn  # noqa: E402
from airflow_provider_dblog.sources.mysql.rows_native import (  # noqa: E402
    AS_BINARY,
    AS_JSON,
    AS_TEXT,
    DATE,
    DATETIME2,
    DECIMAL,
    ENUM,
    INT,
    SET,
    STRING,
    TIME2,
    TIMESTAMP2,
    NativeRows,
    Unsupported,
    _single_byte_table,
    column_spec,
)

WRITE, DELETE, UPDATE = 0, 1, 2


def image(nulls: list[bool], *values: bytes) -> bytes:
    """A row image: the NULL bitmap of the present columns, then the non-NULL values."""
    bitmap = bytearray((len(nulls) + 7) // 8)
    for i, is_null in enumerate(nulls):
        if is_null:
            bitmap[i // 8] |= 1 << (i % 8)
    return bytes(bitmap) + b"".join(values)


def var(text: bytes) -> bytes:
    return bytes([len(text)]) + text


ALL = b"\xff"  # every column present (up to 8 columns)
PLAN = native.Plan(
    ["id", "name", "amount"],
    [(INT, 4, 0, 0, None), (STRING, 1, AS_TEXT, 0, None), (DECIMAL, 14, 4, 0, None)],
)
# DECIMAL(14,4) 1234567890.1234 and its negative, as MySQL's documentation spells them.
POS = bytes.fromhex("810DFB38D204D2")
NEG = bytes.fromhex("7EF204C72DFB2D")


def decode(plan, body: bytes, kind: int = WRITE, present: bytes = ALL, after: bytes | None = None):
    data = b"HEADER" + body + b"CRC!"
    return plan.decode(data, 6, 6 + len(body), kind, present, after)


def test_write_delete_and_update_images():
    row1 = image([False, False, False], struct.pack("<i", 7), var("é".encode()), POS)
    row2 = image([False, True, False], struct.pack("<i", -1), NEG)
    assert decode(PLAN, row1 + row2) == [
        (None, {"id": 7, "name": "é", "amount": "1234567890.1234"}),
        (None, {"id": -1, "name": None, "amount": "-1234567890.1234"}),
    ]
    assert decode(PLAN, row2, DELETE) == [({"id": -1, "name": None, "amount": "-1234567890.1234"}, None)]
    # An update with a minimal row image: the key before, the changed column after.
    before = image([False], struct.pack("<i", 7))
    after = image([False], var(b"x"))
    assert decode(PLAN, before + after, UPDATE, b"\x01", b"\x02") == [
        ({"id": 7, "name": None, "amount": None}, {"id": None, "name": "x", "amount": None})
    ]
    assert decode(PLAN, b"") == []


def test_integer_widths_and_signedness():
    widths = [1, 2, 3, 4, 8]
    plan = native.Plan([f"c{i}" for i in range(10)], [(INT, w, u, 0, None) for w in widths for u in (0, 1)])
    body = image([False] * 10, *(b"\xff" * w for w in widths for _ in (0, 1)))
    ((_, row),) = decode(plan, body, present=b"\xff\x03")
    assert list(row.values()) == [v for w in widths for v in (-1, 2 ** (8 * w) - 1)]


def test_temporal_values():
    plan = native.Plan(
        ["d", "dt", "ts", "tm", "tmneg"],
        [(DATE, 0, 0, 0, None), (DATETIME2, 6, 0, 0, None), (TIMESTAMP2, 3, 0, 0, None)]
        + [(TIME2, 0, 0, 0, None), (TIME2, 0, 0, 0, None)],
    )
    date = (2024 << 9 | 2 << 5 | 29).to_bytes(3, "little")
    ym = 2024 * 13 + 1
    dt = ((1 << 39) | ym << 22 | 2 << 17 | 3 << 12 | 4 << 6 | 5).to_bytes(5, "big") + (123456).to_bytes(3, "big")
    ts = (1_700_000_000).to_bytes(4, "big") + (5000).to_bytes(2, "big")  # fsp 3: .500
    tm = (0x800000 | 838 << 12 | 59 << 6 | 59).to_bytes(3, "big")
    tmneg = (0x800000 - (1 << 12 | 2 << 6 | 3)).to_bytes(3, "big")  # -01:02:03
    ((_, row),) = decode(plan, image([False] * 5, date, dt, ts, tm, tmneg))
    assert row == {
        "d": "2024-02-29",
        "dt": "2024-01-02T03:04:05.123456",
        "ts": "2023-11-14T22:13:20.500000+00:00",
        "tm": "838:59:59",
        "tmneg": "-01:02:03",
    }
    # Zero date, zero datetime and the zero TIMESTAMP (epoch 0) are None.
    zero = image([False] * 5, b"\0\0\0", (1 << 39).to_bytes(5, "big") + b"\0\0\0", b"\0" * 6, tm, tm)
    ((_, row),) = decode(plan, zero)
    assert row["d"] is None and row["dt"] is None and row["ts"] is None


CP1252 = _single_byte_table("cp1252")


@pytest.mark.parametrize("latin1", ["cp1252", ("cp1252", CP1252)], ids=["python codec", "single-byte table"])
def test_binary_json_enum_and_set(latin1):
    plan = native.Plan(
        ["bn", "j", "e", "s", "l1", "lj"],
        [
            (STRING, 1, AS_BINARY, 4, None),
            (STRING, 4, AS_JSON, 0, None),
            (ENUM, 1, 0, 0, ["", "x", "Y z"]),
            (SET, 1, 0, 0, [(2, "c"), (0, "a")]),  # catalog order, bit of each member
            (STRING, 2, AS_TEXT, 0, latin1),
            (STRING, 1, AS_JSON, 0, latin1),
        ],
    )
    # The integer beyond 64 bits stays exact (orjson would read it as a float).
    doc = b'{"k": [1, 2.5, null], "n": 123456789012345678901234567890}'
    latin_doc = b'{"\xe9": [1e2, "\x80"]}'
    body = image(
        [False] * 6,
        var(b"ab"),
        struct.pack("<I", len(doc)) + doc,
        b"\x02",
        b"\x05",
        b"\x05\x00caf\xe9\x80",
        var(latin_doc),
    )
    ((_, row),) = decode(plan, body)
    assert row == {
        "bn": {"$b64": "YWIAAA=="},
        "j": {"k": [1, 2.5, None], "n": 123456789012345678901234567890},
        "e": "Y z",
        "s": "c,a",
        "l1": "café€",
        "lj": {"é": [100.0, "€"]},
    }
    assert type(row["j"]["n"]) is int


def test_truncated_body_is_a_clear_error():
    row = image([False, False, False], struct.pack("<i", 7), var(b"abc"), POS)
    with pytest.raises(
        native.RowsDecodeError, match=r"truncated: column 2 \(amount\) needs 7 bytes at offset \d+, 3 left"
    ):
        decode(PLAN, row[:-4])
    with pytest.raises(native.RowsDecodeError, match="truncated: column 1 \\(name\\)"):
        decode(PLAN, row[:7])
    with pytest.raises(native.RowsDecodeError, match="outside its packet"):
        PLAN.decode(b"short", 0, 50, WRITE, ALL)
    with pytest.raises(native.RowsDecodeError, match="columns-present bitmap"):
        PLAN.decode(b"", 0, 0, WRITE, b"")


def test_values_it_does_not_reproduce_ask_for_the_python_path():
    with pytest.raises(native.Unsupported, match="column 1: a value is not valid UTF-8"):
        decode(PLAN, image([False, False, True], struct.pack("<i", 1), var(b"\xff")))
    enum = native.Plan(["e"], [(ENUM, 1, 0, 0, ["", "x"])])
    with pytest.raises(native.Unsupported, match="ENUM index"):
        decode(enum, image([False], b"\x05"))
    date = native.Plan(["d"], [(DATE, 0, 0, 0, None)])
    with pytest.raises(native.Unsupported, match="no calendar date"):
        decode(date, image([False], (2023 << 9 | 2 << 5 | 30).to_bytes(3, "little")))
    for extra in ("cp1252", ("cp1252", CP1252)):
        latin = native.Plan(["l"], [(STRING, 1, AS_TEXT, 0, extra)])
        with pytest.raises(native.Unsupported, match="character set cannot decode"):
            decode(latin, image([False], var(b"\x81")))  # undefined in cp1252, as in Python


def test_single_byte_tables_are_made_for_single_byte_character_sets_only():
    assert CP1252 == bytes(range(256)).decode("cp1252", "replace").replace("\ufffd", "\ufffe")
    assert _single_byte_table("iso8859-1") == "".join(map(chr, range(256)))
    assert _single_byte_table("gbk") is None and _single_byte_table("utf-16") is None
    with pytest.raises(ValueError, match="256 characters"):
        native.Plan(["l"], [(STRING, 1, AS_TEXT, 0, ("cp1252", "abc"))])


def test_bad_specs_are_refused():
    with pytest.raises(ValueError, match="integer width"):
        native.Plan(["a"], [(INT, 5, 0, 0, None)])
    with pytest.raises(ValueError, match="unknown column code"):
        native.Plan(["a"], [(99, 0, 0, 0, None)])
    with pytest.raises(ValueError, match="non-empty"):
        native.Plan([], [])


# -- the Python side: plans, fallbacks -------------------------------------------------------
def tm(type_: int, **attrs) -> SimpleNamespace:
    base = dict(type=type_, unsigned=False, character_set_name="utf8mb4", enum_values=None, set_values=None)
    return SimpleNamespace(**{**base, **attrs})


def test_column_specs_follow_the_catalog_kind():
    assert column_spec(Column("a", "bigint(20) unsigned"), tm(FIELD_TYPE.LONGLONG, unsigned=True)) == (
        INT,
        8,
        1,
        0,
        None,
    )
    assert column_spec(Column("b", "binary(4)"), tm(FIELD_TYPE.STRING, max_length=4, character_set_name="binary"))[
        :4
    ] == (STRING, 1, AS_BINARY, 4)
    assert column_spec(Column("t", "text"), tm(FIELD_TYPE.BLOB, length_size=2, character_set_name="latin1")) == (
        STRING,
        2,
        AS_TEXT,
        0,
        ("cp1252", CP1252),
    )
    assert column_spec(Column("s", "set('a','b')"), tm(FIELD_TYPE.SET, size=1, set_values=["b", "a"]))[4] == [
        (1, "a"),
        (0, "b"),
    ]
    for name, type_, t in [
        ("u", "uuid", FIELD_TYPE.STRING),
        ("g", "point", FIELD_TYPE.GEOMETRY),
        ("j", "json", FIELD_TYPE.JSON),  # MySQL's binary JSON
        ("o", "datetime", FIELD_TYPE.DATETIME),  # the pre-5.6 format
        ("i", "inet4", FIELD_TYPE.STRING),
    ]:
        with pytest.raises(Unsupported, match=f"column {name}"):
            column_spec(Column(name, type_), tm(t, max_length=16))


def fake_event(body: bytes, columns: list, event_type: int = 30) -> SimpleNamespace:
    header = b"H" * 9
    raw = SimpleNamespace(_data=header + body + b"CRC!", _position=len(header))
    wrapper = SimpleNamespace(packet=raw, read_bytes=20)
    wrapper._BinLogPacketWrapper__data_buffer = b""
    return SimpleNamespace(
        event_type=event_type,
        columns=columns,
        packet=wrapper,
        event_size=20 + len(body),
        columns_present_bitmap=b"\x03",
    )


def test_native_rows_decodes_from_the_packet_and_falls_back_once_per_reason(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=mrn.__name__)
    rows = NativeRows()
    cols = [Column("id", "int"), Column("v", "varchar(10)")]
    tms = [tm(FIELD_TYPE.LONG), tm(FIELD_TYPE.VARCHAR, max_length=40)]
    body = image([False, False], struct.pack("<i", 5), var(b"hi"))
    assert rows.rows(fake_event(body, tms), "db.t", cols) == [(None, {"id": 5, "v": "hi"})]

    other = [Column("id", "int"), Column("u", "uuid")]
    other_tms = [tm(FIELD_TYPE.LONG), tm(FIELD_TYPE.STRING, max_length=16, character_set_name="binary")]
    for _ in range(3):
        assert rows.rows(fake_event(body, other_tms), "db.o", other) is None
    assert rows.rows(fake_event(body, tms, event_type=39), "db.t", cols) is None  # partial JSON update
    assert rows.rows(fake_event(body[:-1], tms), "db.t", cols) is None  # truncated: warned, Python decodes
    monkeypatch.setenv("DBLOG_NATIVE_ROWS", "0")  # read by each reader as it starts
    assert NativeRows().rows(fake_event(body, tms), "db.t", cols) is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "rows of db.o are decoded in Python: column u: uuid (binlog type 254)",
        "rows events of type 39 are decoded in Python",
        "the native decoder rejected a rows event of db.t (rows event truncated: column 1 (v) needs 2 bytes "
        "at offset 15, 1 left); decoding it in Python",
        "binlog rows are decoded in Python: DBLOG_NATIVE_ROWS=0",
    ]


def test_a_changed_table_map_makes_a_new_plan():
    rows = NativeRows()
    cols = [Column("id", "int"), Column("v", "varchar(10)")]
    tms = [tm(FIELD_TYPE.LONG), tm(FIELD_TYPE.VARCHAR, max_length=40)]
    body = image([False, False], struct.pack("<i", 5), var(b"hi"))
    rows.rows(fake_event(body, tms), "db.t", cols)
    wide = [tm(FIELD_TYPE.LONGLONG), tm(FIELD_TYPE.VARCHAR, max_length=40)]
    wide_body = image([False, False], struct.pack("<q", 2**40), var(b"hi"))
    rows.forget("db.t")  # BinlogReader._table_map on a new signature
    assert rows.rows(fake_event(wide_body, wide), "db.t", [Column("id", "bigint"), cols[1]]) == [
        (None, {"id": 2**40, "v": "hi"})
    ]


def test_time2_reads_the_packed_number_so_negative_fractions_are_exact():
    from tests.unit.test_mysql_values import NEGATIVE_TIMES, time2_bytes

    for text, fsp in NEGATIVE_TIMES:
        plan = native.Plan(["tm"], [(TIME2, fsp, 0, 0, None)])
        ((_, row),) = decode(plan, image([False], time2_bytes(text, fsp)), present=b"\x01")
        want = text if "." not in text else text.split(".")[0] + "." + text.split(".")[1].ljust(6, "0")
        assert row == {"tm": want}, (text, fsp)


def decode_text(plan, body: bytes, key: list[int], kind: int = WRITE, present: bytes = ALL, after=None):
    data = b"HEADER" + body + b"CRC!"
    return plan.decode_text(data, 6, 6 + len(body), kind, present, key, after)


def same_as_dicts(plan, body: bytes, key: list[int], kind: int = WRITE, present: bytes = ALL, after=None) -> list:
    """decode_text's rows, checked against decode's: each image the text orjson writes for
    the dict (what the Delta output stores), each key the key columns' values."""
    texts = decode_text(plan, body, key, kind, present, after)
    dicts = decode(plan, body, kind, present, after)
    names = [list(img) for pair in dicts for img in pair if img][0] if dicts else []
    assert len(texts) == len(dicts)
    for (bk, ak, bt, at), (b, a) in zip(texts, dicts):
        assert (bt, at) == (b and orjson.dumps(b).decode(), a and orjson.dumps(a).decode())
        keys = [(img and tuple(img[names[k]] for k in key)) for img in (b, a)]
        assert (bk, ak) == tuple(keys)
    return texts


def test_row_texts_match_the_dicts_of_every_kind():
    row1 = image([False, False, False], struct.pack("<i", 7), var('é "q" \\ \x01\x1f\x7f\n\t'.encode()), POS)
    row2 = image([False, True, False], struct.pack("<i", -1), NEG)
    assert same_as_dicts(PLAN, row1 + row2, [0]) == [
        (None, (7,), None, '{"id":7,"name":"é \\"q\\" \\\\ \\u0001\\u001f\x7f\\n\\t","amount":"1234567890.1234"}'),
        (None, (-1,), None, '{"id":-1,"name":null,"amount":"-1234567890.1234"}'),
    ]
    assert same_as_dicts(PLAN, row2, [0, 2], DELETE)[0][:2] == ((-1, "-1234567890.1234"), None)
    before, after = image([False], struct.pack("<i", 7)), image([False], var(b"x"))
    ((bk, ak, _, _),) = same_as_dicts(PLAN, before + after, [0], UPDATE, b"\x01", b"\x02")
    assert (bk, ak) == ((7,), (None,))  # a minimal image: the after key is not in it
    assert decode_text(PLAN, b"", [0]) == []
    with pytest.raises(ValueError, match="key must list column indices"):
        decode_text(PLAN, b"", [3])


def test_row_texts_write_floats_as_orjson_does():
    plan = native.Plan(["d"], [(mrn.DOUBLE, 0, 0, 0, None)])
    rng = random.Random(13)
    values = [0.0, -0.0, 1.0, 0.1, 1e15, 1e16, 1.5e16, 123456789012345678.0, 1e-5, 1.5e-5, 1e-6, 1.234e-6, 1e-7]
    values += [5e-324, 1.7976931348623157e308, -2.5e-300, 1e100, 3.14e-10, 0.001, 1234567.0, 9007199254740993.0]
    values += [struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0] for _ in range(3000)]
    values += [rng.uniform(-1e6, 1e6) for _ in range(1000)] + [
        float(rng.randint(-(10**18), 10**18)) for _ in range(500)
    ]
    values = [v for v in values if math.isfinite(v)]
    body = b"".join(image([False], struct.pack("<d", v)) for v in values)
    texts = same_as_dicts(plan, body, [0])
    assert [json.loads(t)["d"] for _, _, _, t in texts] == values


# FLOAT bit patterns (as the binlog carries them) and the exact double of each, the canonical
# value: every JSON reader gets the stored float32 back from its text.
FLOAT_BITS = [
    (0x488DD9A4, 290509.125, "290509.125"),  # was 290509.1, another float32
    (0x4D8E8559, 298887968.0, "298887968.0"),  # was 298888000.0
    (0x3DCCCCCD, 0.10000000149011612, "0.10000000149011612"),  # 0.1f
    (0x00000001, 1.401298464324817e-45, "1.401298464324817e-45"),  # the least denormal
    (0x007FFFFF, 1.1754942106924411e-38, "1.1754942106924411e-38"),  # the largest denormal
    (0x00800000, 1.1754943508222875e-38, "1.1754943508222875e-38"),  # the least normal
    (0x7F7FFFFF, 3.4028234663852886e38, "3.4028234663852886e+38"),  # the largest float32
    (0x80000000, -0.0, "-0.0"),
    (0xBF800001, -1.0000001192092896, "-1.0000001192092896"),
    (0xC14B0510, -12.688735961914062, "-12.688735961914062"),  # a tie at 17 digits: the even one
]


@pytest.mark.parametrize("bits, value, text", FLOAT_BITS)
def test_a_float_is_its_stored_single_precision_value_exactly(bits, value, text):
    """Both decoders (the Python one reads mysql-replication's float, which is struct's) give
    the float32's own value, and the row text writes it so that it reads back the same."""
    from airflow_provider_dblog.sources.mysql.values import from_binlog

    raw = struct.pack("<I", bits)
    (python,) = struct.unpack("<f", raw)
    canonical = from_binlog(Column("f", "float"), python)
    plan = native.Plan(["f"], [(mrn.FLOAT, 0, 0, 0, None)])
    ((_, row),) = decode(plan, image([False], raw))
    assert struct.pack("<d", row["f"]) == struct.pack("<d", canonical) == struct.pack("<d", value)
    ((_, _, _, row_text),) = same_as_dicts(plan, image([False], raw), [0])
    assert row_text == '{"f":%s}' % text
    assert struct.pack("<f", json.loads(row_text)["f"]) == raw  # into a float32: the same bytes


def test_random_float_bit_patterns_decode_to_their_exact_value():
    rng = random.Random(11)
    raws = [rng.getrandbits(32).to_bytes(4, "little") for _ in range(3000)]
    raws = [r for r in raws if math.isfinite(struct.unpack("<f", r)[0])]  # MariaDB stores no NaN/inf
    plan = native.Plan(["f"], [(mrn.FLOAT, 0, 0, 0, None)])
    texts = same_as_dicts(plan, b"".join(image([False], r) for r in raws), [0])
    assert [struct.pack("<f", json.loads(t)["f"]) for _, _, _, t in texts] == raws
    assert [json.loads(t)["f"] for _, _, _, t in texts] == [struct.unpack("<f", r)[0] for r in raws]


def test_row_texts_of_json_columns_are_python_s_value_written_by_orjson():
    plan = native.Plan(["j"], [(STRING, 4, AS_JSON, 0, None)])
    docs = [
        '{"b": 1, "a": [1, 2.50, -0.0, 1e2, 1E-7, -3.5e+20], "b": {"x": null}}',  # duplicate key: first place, last value
        '{"a": {"k": 1, "k": [2, {"k": 3, "j": 4, "k": 5}]}, "a2": "\\"k\\""}',
        ' [true, false, null, "é\\u00e9\\n\\"\\\\\\/\\u001f\\ud83d\\ude80", 18446744073709551615, -9223372036854775808] ',
        '"plain"',
        "12",
        "1.0",
        "{}",
        "[[[[[[[[[[1]]]]]]]]]]",
    ]
    body = b"".join(image([False], struct.pack("<I", len(d.encode())) + d.encode()) for d in docs)
    texts = same_as_dicts(plan, body, [0])
    assert texts[0][3] == '{"j":{"b":{"x":null},"a":[1,2.5,-0.0,100.0,1e-7,-3.5e+20]}}'
    # Floats as Python reads them (serde_json's float_roundtrip), integers up to 18 digits.
    rng = random.Random(7)
    numbers = [repr(struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]) for _ in range(2000)]
    numbers += [f"{rng.uniform(-1, 1):.17g}" for _ in range(500)] + [
        str(rng.randint(-(10**18) + 1, 10**18 - 1)) for _ in range(500)
    ]
    numbers += ["1.7976931348623157e308", "5e-324", "2.2250738585072011e-308", "0.1e1", "100E-2"]
    numbers = [n for n in numbers if n not in ("nan", "inf", "-inf")]
    doc = "[" + ", ".join(numbers) + "]"
    same_as_dicts(plan, image([False], struct.pack("<I", len(doc)) + doc.encode()), [0])
    # What Python reads in ways no exact text is made for here: the dicts of decode.
    unlike = ("[123456789012345678901234567890]", "[-18446744073709551616]", "[-0]", '{"a": -0}', "[NaN]")
    for doc in unlike + ('["\\ud800"]', "[1e400]", "[" * 200 + "]" * 200):
        body = image([False], struct.pack("<I", len(doc)) + doc.encode())
        with pytest.raises(native.Unsupported, match="column 0: "):
            decode_text(plan, body, [0])
        decode(plan, body)  # the dict path takes it


def test_row_texts_of_binary_temporal_enum_set_and_single_byte_text():
    latin1 = ("cp1252", CP1252)
    plan = native.Plan(
        ["bn", "e", "s", "l1", "d", "dt", "tm"],
        [
            (STRING, 1, AS_BINARY, 4, None),
            (ENUM, 1, 0, 0, ["", "x", 'Y "z"']),
            (SET, 1, 0, 0, [(2, "c"), (0, "a\\")]),
            (STRING, 2, AS_TEXT, 0, latin1),
            (DATE, 0, 0, 0, None),
            (DATETIME2, 6, 0, 0, None),
            (TIME2, 3, 0, 0, None),
        ],
    )
    body = image(
        [False] * 4 + [True] * 3,
        var(b"ab"),
        b"\x02",
        b"\x05",
        b"\x05\x00caf\xe9\x80",
    )
    ((_, _, _, text),) = same_as_dicts(plan, body, [0])
    assert text == '{"bn":{"$b64":"YWIAAA=="},"e":"Y \\"z\\"","s":"c,a\\\\","l1":"café€","d":null,"dt":null,"tm":null}'
    codec = native.Plan(["t"], [(STRING, 1, AS_TEXT, 0, "gbk")])  # a multi-byte codec: Python decodes it
    with pytest.raises(native.Unsupported, match="only Python decodes"):
        decode_text(codec, image([False], var(b"ab")), [0])
