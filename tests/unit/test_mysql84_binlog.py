"""MySQL 8.3+ / 8.4 / 9 binlog events the capture meets: tagged GTID events (type 42, decoded
by sources/mysql/tagged_gtid.py), partial JSON updates and compressed transactions (stops).

No MySQL 8 server runs here, so the events are bytes servers wrote, replayed through
mysql-replication's packet wrapper as a live stream would deliver them. The tagged GTID
events' layout: MySQL's serialization format (libs/mysql/serialization/readme.md) of the
fields in Gtid_event::define_fields (libs/mysql/binlog/event/control_events.h).
"""

from __future__ import annotations

import struct

import pymysql
import pytest
from pymysqlreplication.event import NotImplementedEvent
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import PartialUpdateRowsEvent
from pymysqlreplication.table import Table

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.sources.mysql.gtid import MySQLHistory, decode_gtid_coord, gtid_of_event, locate, parse_gtid
from airflow_provider_dblog.sources.mysql.log import STREAM_EVENTS
from airflow_provider_dblog.sources.mysql.tagged_gtid import TaggedGtidError, decode_tagged_gtid
from tests.unit.test_mysql_gtid import _Control, _event, reader

# A whole event as MySQL 9.1.0 sent it (`mysqlbinlog --hexdump`, posted in go-mysql-org/go-mysql
# issue 845): header (timestamp, type 0x2a, server 1, size 83, end 220908), body, CRC32.
# mysqlbinlog printed: last_committed=472 sequence_number=474
# original_committed_timestamp=1731444683060515 transaction_length=278.
MYSQL91_HEADER = bytes.fromhex("cbbf33672a0100000053000000ec5e03000000")
MYSQL91_BODY = bytes.fromhex(
    "027800000002aaaaaaaa888866664444222222222222"  # version 1, size 60, flags 0, UUID bytes
    "0473201b"  # gno 111111
    "06147365636f6e6474657374"  # tag "secondtest"
    "08c10e0ad10e0c7f23354861bd260610590412a3ff0a"  # clocks, timestamp, length, version 90100
)
MYSQL91_CRC = bytes.fromhex("ac3d0171")
MYSQL91_GTID = "55555555-4444-3333-2222-111111111111:secondtest:111111"
# A body Percona Server 8.4.11 wrote, GTID 77d1902c-01da-11f1-9a41-908d6e5f6e8d:test_tag:1,
# transaction_length 337 (a C++ binlog scanner's test data); flags 1 (may have statements).
PERCONA84_BODY = bytes.fromhex(
    "027c00000202"  # version 1, size 62, flags 1
    "ee450341025802690322c50369028241023502dcbedc3502"  # UUID bytes (each a variable-length integer)
    "04040610746573745f74616708000a040c7f003e8900fa5b0610450512dbd009"
)


def _stream_packet(header: bytes, body: bytes, crc: bytes):
    """The event as mysql-replication gets it from COM_BINLOG_DUMP (OK byte first), checksummed."""
    packet = pymysql.protocol.MysqlPacket(b"\x00" + header + body + crc, "utf8")
    flags = (False, False, False, False, False)
    allowed = {NotImplementedEvent}
    return BinLogPacketWrapper(packet, {}, _Control(), (9, 1, 0), True, allowed, None, None, None, None, *flags).event


def test_recorded_tagged_gtid_events_decode_to_what_mysqlbinlog_printed():
    mysql = decode_tagged_gtid(MYSQL91_BODY)
    assert mysql.gtid == MYSQL91_GTID
    assert (mysql.last_committed, mysql.sequence_number, mysql.transaction_length) == (472, 474, 278)
    assert mysql.immediate_commit_timestamp == mysql.original_commit_timestamp == 1731444683060515
    assert (mysql.immediate_server_version, mysql.flags, mysql.commit_group_ticket) == (90100, 0, None)
    percona = decode_tagged_gtid(PERCONA84_BODY + MYSQL91_CRC)  # a trailing checksum is not read
    assert percona.gtid == "77d1902c-01da-11f1-9a41-908d6e5f6e8d:test_tag:1"
    assert (percona.flags, percona.transaction_length, percona.immediate_server_version) == (1, 337, 80411)


def _varlen(value: int) -> bytes:
    """MySQL's variable-length unsigned integer (variable_length_integers.h)."""
    size = 9 if value >= 1 << 56 else max(1, (value.bit_length() + 6) // 7)
    if size == 9:
        return b"\xff" + value.to_bytes(8, "little")
    encoded = (value << size) | ((1 << (size - 1)) - 1)
    return encoded.to_bytes(size, "little")


def _zigzag(value: int) -> bytes:
    return _varlen((-value - 1) << 1 | 1 if value < 0 else value << 1)


def _message(fields: list[tuple[int, bytes]], last_non_ignorable: int = 0) -> bytes:
    payload = b"".join(_varlen(i) + v for i, v in fields)
    head = _varlen(1)
    size = len(head) + 1 + len(_varlen(last_non_ignorable)) + len(payload)
    size += len(_varlen(size)) - 1
    return head + _varlen(size) + _varlen(last_non_ignorable) + payload


UUID_BYTES = bytes(range(16))


def test_optional_fields_wide_integers_and_newer_ignorable_fields():
    body = _message(
        [
            (0, _varlen(1)),
            (1, b"".join(_varlen(b) for b in UUID_BYTES)),
            (2, _zigzag(2**62)),  # 9-byte integer
            (3, _varlen(3) + b"Abc"),
            (4, _zigzag(-1)),
            (5, _zigzag(7)),
            (6, _varlen(1_700_000_000_000_000)),
            (7, _varlen(1_600_000_000_000_000)),  # a replica's event: the original differs
            (8, _varlen(2**40)),
            (9, _varlen(90400)),
            (10, _varlen(80400)),
            (11, _varlen(12)),
            (12, _varlen(5)),  # a field of a newer server, ignorable (last_non_ignorable 0)
        ]
    )
    g = decode_tagged_gtid(body)
    assert g.gtid == f"00010203-0405-0607-0809-0a0b0c0d0e0f:abc:{2**62}"
    assert (g.last_committed, g.sequence_number, g.transaction_length) == (-1, 7, 2**40)
    assert (g.original_commit_timestamp, g.original_server_version, g.commit_group_ticket) == (
        1_600_000_000_000_000,
        80400,
        12,
    )


@pytest.mark.parametrize(
    "body, why",
    [
        (MYSQL91_BODY[:30], "says it has 60 bytes, the event body has 30"),
        (b"\x04" + MYSQL91_BODY[1:], "format version 2"),
        (_message([(1, bytes(16)), (2, _zigzag(1)), (12, b"\x00")], last_non_ignorable=12), "newer servers"),
        (_message([(1, bytes(16))]), "no source UUID or no transaction number"),
        (_message([(1, bytes(16)), (2, _zigzag(1)), (3, _varlen(40) + b"x")]), "string of 40 bytes"),
        (_message([(1, bytes(16)), (2, b"\x03")]), "past the event's end"),
    ],
    ids=["truncated", "version", "non-ignorable", "no-gno", "long-tag", "cut-integer"],
)
def test_tagged_gtid_events_it_cannot_read_are_refused(body, why):
    with pytest.raises(TaggedGtidError, match=why):
        decode_tagged_gtid(body)


def test_a_tagged_gtid_in_the_stream_positions_its_transaction_by_that_gtid():
    ev = _stream_packet(MYSQL91_HEADER, MYSQL91_BODY, MYSQL91_CRC)
    assert isinstance(ev, NotImplementedEvent)  # mysql-replication 1.0.17 does not decode type 42
    source = "55555555-4444-3333-2222-111111111111:secondtest"
    r = reader(MySQLHistory.parse(f"55555555-4444-3333-2222-111111111111:1-9,{source}:1-111110"))
    r._handle(ev)
    (p,) = r._take_rows(220908, 1)
    coord = decode_gtid_coord(p.coord)
    assert (coord.gtid, coord.counter, coord.rowno) == (MYSQL91_GTID, 9 + 111111, 0)
    assert Position.parse(p.encode()) == p
    assert r._txid() == MYSQL91_GTID and r._txn_start == 220825  # mysqlbinlog: "# at 220825"
    assert str(r.history).endswith(f"{source}:1-111111")


def test_with_file_positions_a_tagged_transaction_keeps_its_gtid_and_start():
    r = reader(None)
    r._handle(_stream_packet(MYSQL91_HEADER, MYSQL91_BODY, MYSQL91_CRC))
    assert r._txid() == MYSQL91_GTID and r._group_open and r._txn_start == 220825


def test_an_undecodable_tagged_gtid_event_stops_the_capture_naming_the_fix():
    r = reader(None)
    with pytest.raises(ConfigurationError) as err:
        r._handle(_event(0x2A, MYSQL91_BODY[:30], 600))
    assert "tagged GTID event" in err.value.cause and "gtid_next = 'AUTOMATIC'" in err.value.fix


def test_show_binlog_events_rows_of_tagged_gtids_count_in_the_history():
    # SHOW BINLOG EVENTS (offset, Event_type, Info) on MySQL 8.4: a tagged GTID's type is
    # Gtid_tagged_log_event, its Info the SET statement mysqlbinlog prints for it.
    u = "55555555-4444-3333-2222-111111111111"
    events = [
        (4, "Format_desc", "Server ver: 8.4.3, Binlog ver: 4"),
        (126, "Previous_gtids", f"{u}:1-3"),
        (157, "Gtid", f"SET @@SESSION.GTID_NEXT= '{u}:4'"),
        (236, "Query", "BEGIN"),
        (400, "Gtid_tagged_log_event", f"SET @@SESSION.GTID_NEXT= '{u}:secondtest:1'"),
        (483, "Query", "BEGIN"),
        (700, "Gtid", f"SET @@SESSION.GTID_NEXT= '{u}:5'"),
    ]
    assert gtid_of_event(events[4][1], events[4][2]) == parse_gtid(f"{u}:secondtest:1")
    found = locate(events, parse_gtid(f"{u}:5"))
    assert found is not None
    offset, before = found
    assert offset == 700 and before.counter() == 5 and str(before) == f"{u}:1-4,{u}:secondtest:1"


def _partial_update(schema: str, table: str):
    """An Update_rows_partial event (type 39) of table id 5 with one column, as mysql-replication
    decodes it from the stream (its rows are read only when asked for)."""
    # table id (6 bytes), flags (statement end), extra data length, 1 column, both bitmaps
    body = (5).to_bytes(6, "little") + struct.pack("<HH", 1, 2) + b"\x01\x01\x01"
    size = 19 + len(body)
    header = struct.pack("<cIBIIIH", b"\x00", 1_700_000_000, 0x27, 1, size, 900, 0)
    packet = pymysql.protocol.MysqlPacket(header + body, "utf8")
    tables = {5: Table(5, schema, table, [], primary_key="id")}
    flags = (False, False, False, False, False)
    allowed = {PartialUpdateRowsEvent}
    return BinLogPacketWrapper(
        packet, tables, _Control(), (8, 4, 3), False, allowed, None, None, None, None, *flags
    ).event


def test_partial_json_updates_of_captured_tables_stop_the_capture():
    ev = _partial_update("shop", "t")
    assert isinstance(ev, PartialUpdateRowsEvent)
    with pytest.raises(ConfigurationError) as err:
        reader(None)._handle(ev)
    assert "PARTIAL_JSON" in err.value.cause and "binlog_row_value_options = ''" in err.value.fix
    assert reader(None)._handle(_partial_update("shop", "other")) == []  # not captured: not read


def test_the_reader_asks_the_library_for_partial_updates():
    # The library drops event types its caller does not list: without this, silently.
    assert PartialUpdateRowsEvent in STREAM_EVENTS


def test_compressed_transactions_stop_the_capture_naming_the_setting():
    # Transaction_payload_event (type 40): binlog_transaction_compression = ON, session or global.
    with pytest.raises(ConfigurationError) as err:
        reader(None)._handle(_event(0x28, b"\x00" * 20, 700))
    assert "binlog_transaction_compression" in err.value.cause
    assert "SET GLOBAL binlog_transaction_compression = OFF" in err.value.fix
