"""Canonical value conversion and positions of the MySQL source (no server needed)."""

from __future__ import annotations

import datetime
import decimal

import pytest

pytest.importorskip("pymysqlreplication")

from airflow_provider_dblog.core.events import Column  # noqa: E402
from airflow_provider_dblog.sources.mysql.log import decode_coord, encode_coord, file_number  # noqa: E402
from airflow_provider_dblog.sources.mysql.values import (  # noqa: E402
    column_kind,
    from_binlog,
    from_select,
    select_expression,
    to_param,
)


def col(t: str) -> Column:
    return Column("c", t)


@pytest.mark.parametrize(
    "col_type, binlog, select, canonical",
    [
        ("int(11)", -5, -5, -5),
        ("bigint(20) unsigned", 2**64 - 1, 2**64 - 1, 2**64 - 1),
        ("tinyint(1)", 2, 2, 2),
        ("decimal(12,2)", decimal.Decimal("12.30"), decimal.Decimal("12.30"), "12.30"),
        ("decimal(20,10)", decimal.Decimal("-1E-10"), decimal.Decimal("-1E-10"), "-0.0000000001"),
        ("float", 0.12345670163631439, 0.12345670163631439, 0.12345670163631439),
        ("float", 290509.125, 290509.125, 290509.125),
        ("double", 0.1, 0.1, 0.1),
        ("bit(10)", "1000000001", b"\x02\x01", 513),
        ("binary(4)", b"ab", b"ab\x00\x00", {"$b64": "YWIAAA=="}),
        ("varbinary(4)", "", b"", {"$b64": ""}),
        ("year(4)", 1900, 0, 0),
        ("year(4)", 2024, 2024, 2024),
        ("set('a','b','c')", {"c", "a"}, "a,c", "a,c"),
        ("enum('x','y')", "y", "y", "y"),
        ("date", datetime.date(2024, 2, 29), datetime.date(2024, 2, 29), "2024-02-29"),
        ("date", None, "0000-00-00", None),
        (
            "datetime(6)",
            datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
            datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
            "2024-01-02T03:04:05.000006",
        ),
        ("datetime", None, "0000-00-00 00:00:00", None),
        (
            "timestamp(6)",
            datetime.datetime(2024, 1, 2, 3, 4, 5),
            datetime.datetime(2024, 1, 2, 3, 4, 5),
            "2024-01-02T03:04:05+00:00",
        ),
        ("timestamp", datetime.datetime(1970, 1, 1), "0000-00-00 00:00:00", None),
        (
            "time(3)",
            datetime.timedelta(days=-35, seconds=3600, microseconds=500000),
            datetime.timedelta(days=-35, seconds=3600, microseconds=500000),
            "-838:59:59.500000",
        ),
        ("time", datetime.timedelta(hours=25, seconds=1), datetime.timedelta(hours=25, seconds=1), "25:00:01"),
        ("json", {b"k": [b"v", 1]}, '{"k": ["v", 1]}', {"k": ["v", 1]}),
        ("json", '{"k": 1}', '{"k": 1}', {"k": 1}),
        ("text", "é", "é", "é"),
        ("blob", b"\xff", b"\xff", {"$b64": "/w=="}),
        (
            "uuid",
            b"\x12>Eg\xe8\x9b\x12\xd3\xa4VBf\x14\x17@",
            "123e4567-e89b-12d3-a456-426614174000",
            "123e4567-e89b-12d3-a456-426614174000",
        ),
        ("inet6", b"\x00" * 10 + b"\xff\xff\x01\x02\x03\x04", "::ffff:1.2.3.4", "::ffff:1.2.3.4"),
    ],
)
def test_both_paths_give_the_same_canonical_value(col_type, binlog, select, canonical):
    assert from_binlog(col(col_type), binlog) == canonical
    assert from_select(col(col_type), select) == canonical


def test_null_and_empty_set():
    assert from_binlog(col("set('a')"), None, "empty set") == ""
    assert from_binlog(col("set('a')"), None, "null") is None
    assert from_select(col("set('a')"), "") == ""
    assert from_select(col("int"), None) is None


def test_kinds_and_select_expressions():
    assert column_kind("double precision") == ("double", None)
    assert column_kind("binary(16)") == ("binary", 16)
    assert column_kind("varchar(20)") == ("text", None)
    assert select_expression(lambda n: f"`{n}`", Column("f", "float")) == "CAST(`f` AS DOUBLE) AS `f`"
    assert select_expression(lambda n: f"`{n}`", Column("f", "double")) == "`f`"


def test_key_values_become_comparable_parameters():
    assert to_param(col("decimal(5,2)"), "1.50") == decimal.Decimal("1.50")
    assert to_param(col("timestamp(6)"), "2024-01-01T00:00:00.5+00:00") == "2024-01-01 00:00:00.5"
    assert to_param(col("varbinary(3)"), {"$b64": "AAE="}) == b"\x00\x01"
    assert to_param(col("int"), 7) == 7


def test_coordinates_sort_in_log_order():
    coords = [
        encode_coord(1, 900, 950, 3),
        encode_coord(2, 4, 100, 0),
        encode_coord(2, 4, 100, 1),
        encode_coord(2, 4, 200, 0),
        encode_coord(10, 4, 5, 0),
    ]
    assert coords == sorted(coords)
    assert decode_coord(coords[2]) == (2, 4, 100, 1)
    assert file_number("mysql-bin.000042") == 42
    with pytest.raises(ValueError):
        encode_coord(10**6, 0, 0, 0)
    with pytest.raises(ValueError):
        decode_coord("12")


def time2_bytes(text: str, fsp: int) -> bytes:
    """TIME(fsp) as MySQL writes it into a rows event (my_time_packed_to_binary): the
    time packed as (h << 12 | m << 6 | s) << 24 | microseconds, signed, then the integer part
    and the fraction (1/100 s in 1 byte, 1/10,000 s in 2, µs in 3) offset together."""
    sign = -1 if text.startswith("-") else 1
    hms, _, frac = text.lstrip("-").partition(".")
    h, m, s = (int(x) for x in hms.split(":"))
    micro = int(frac.ljust(6, "0")) if frac else 0
    n = (fsp + 1) // 2
    unit = {0: 1, 1: 10_000, 2: 100, 3: 1}[n]
    packed = sign * ((h << 12 | m << 6 | s) << (8 * n) | micro // unit)
    return (packed + (0x800000 << (8 * n))).to_bytes(3 + n, "big")


NEGATIVE_TIMES = [
    ("-00:00:01.5", 1),
    ("-12:34:56.7", 1),
    ("-00:00:00.01", 2),
    ("-10:00:00.1", 2),
    ("-838:59:59.999", 3),
    ("-12:34:56.7890", 4),
    ("-00:00:00.99999", 5),
    ("-01:00:00.000001", 6),
    ("-12:34:56.789012", 6),
    ("-838:59:59", 0),
    ("12:34:56.789012", 6),
    ("00:00:00.01", 2),
]


@pytest.mark.parametrize("text, fsp", NEGATIVE_TIMES)
def test_a_negative_time_with_a_fraction_is_read_from_the_binlog_exactly(text, fsp):
    """mysql-replication's own TIME2 reader on the bytes MySQL writes, then from_binlog: the
    canonical text equals the value stored (mysql-replication alone turns -12:34:56.7 into
    -12:34:56.3; from_binlog undoes it)."""
    from types import SimpleNamespace

    from pymysqlreplication.packet import BinLogPacketWrapper
    from pymysqlreplication.row_event import RowsEvent

    class Packet:
        read_int_be_by_size = BinLogPacketWrapper.read_int_be_by_size
        read_int24_be = BinLogPacketWrapper.read_int24_be

        def __init__(self, data: bytes):
            self.data = data

        def read(self, n: int) -> bytes:
            out, self.data = self.data[:n], self.data[n:]
            return out

    event = RowsEvent.__new__(RowsEvent)
    event.packet = Packet(time2_bytes(text, fsp))
    value = event._RowsEvent__read_time2(SimpleNamespace(fsp=fsp))
    assert event.packet.data == b""
    want = text if "." not in text else text.split(".")[0] + "." + text.split(".")[1].ljust(6, "0")
    assert from_binlog(col(f"time({fsp})"), value) == want
