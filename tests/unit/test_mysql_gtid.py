"""GTID positions of the MySQL/MariaDB source (sources/mysql/gtid.py, the reader's use of them).

MySQL 8 cannot be installed here, so its side is covered on protocol bytes: GTID events laid
out as MySQL writes them (Gtid_log_event: commit flag, 16-byte source UUID, 8-byte number,
logical clock), decoded by mysql-replication exactly as from a live stream, and the text
``SHOW BINLOG EVENTS`` prints for them.
"""

from __future__ import annotations

import struct
import uuid

import pymysql
import pytest
from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, NotImplementedEvent
from pymysqlreplication.packet import BinLogPacketWrapper

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.sources.mysql.catalog import ConnectionSettings
from airflow_provider_dblog.sources.mysql.gtid import (
    GtidOrderError,
    MariaDBHistory,
    MySQLHistory,
    decode_gtid_coord,
    encode_gtid_coord,
    era_after,
    gtid_of_event,
    history_of_event,
    locate,
    parse_gtid,
)
from airflow_provider_dblog.sources.mysql.log import BinlogReader, encode_coord

UUID_A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
UUID_B = "5a5a5a5a-0000-4000-8000-000000000001"


# -- coordinates -------------------------------------------------------------------------------
def test_coordinates_sort_by_era_counter_and_row_whatever_the_gtid():
    coords = [
        encode_gtid_coord(0, 41, 7, f"{UUID_B}:9"),
        encode_gtid_coord(0, 42, 0, f"{UUID_A}:1"),
        encode_gtid_coord(0, 42, 1, f"{UUID_A}:1"),
        encode_gtid_coord(0, 42, 10, f"{UUID_A}:1"),
        encode_gtid_coord(0, 1000, 0, "0-2-1000"),
        encode_gtid_coord(1, 3, 0, "0-3-3"),  # a later era: after everything before it
    ]
    assert sorted(coords) == coords
    assert sorted(Position(c) for c in reversed(coords)) == [Position(c) for c in coords]
    # GTID positions sort after every file position (a source switched to use_gtid)
    assert encode_coord(999999, 10**11, 10**11, 999999) < coords[0]
    c = decode_gtid_coord(coords[3])
    assert (c.era, c.counter, c.rowno, c.gtid) == (0, 42, 10, f"{UUID_A}:1")
    assert Position.parse(Position(coords[3]).encode()) == Position(coords[3])  # '.'-free


@pytest.mark.parametrize("bad", ["000001000000000004000000000004000000", "g0042/0-1-2", "g" + "0" * 32 + "/nope"])
def test_decoding_refuses_other_coordinates(bad):
    with pytest.raises(ValueError):
        decode_gtid_coord(bad)


def test_era_goes_up_only_when_the_new_server_is_behind_the_changelog():
    floor = encode_gtid_coord(3, 500, 2, "0-1-500")
    assert era_after(None, 10) == 0
    assert era_after("000001000000000004000000000004000000", 10) == 0  # file positions below "g"
    assert era_after(floor, 500) == 3  # next transaction: counter 501 > 500
    assert era_after(floor, 499) == 4  # a promoted replica that lost transaction 500


# -- histories ---------------------------------------------------------------------------------
def test_mariadb_history_counts_domains_and_refuses_going_backwards():
    h = MariaDBHistory.parse("0-1-100,1-7-5")
    assert h.counter() == 105
    assert h.contains(parse_gtid("0-2-100")) and not h.contains(parse_gtid("0-1-101"))
    assert not h.contains(parse_gtid("2-1-1"))
    assert h.advance(parse_gtid("0-2-101")) == 106  # a new primary (server 2) continues the domain
    assert str(h) == "0-2-101,1-7-5"
    with pytest.raises(GtidOrderError, match="gtid_strict_mode"):
        h.advance(parse_gtid("0-1-101"))


def test_mysql_gtid_sets_as_the_server_prints_them():
    h = MySQLHistory.parse(f"{UUID_A.upper()}:1-5:7,\n{UUID_B}:1-3")
    assert h.counter() == 9
    assert h.contains(parse_gtid(f"{UUID_A}:7")) and not h.contains(parse_gtid(f"{UUID_A}:6"))
    assert h.advance(parse_gtid(f"{UUID_A}:6")) == 10  # fills the hole: one interval again
    assert str(h) == f"{UUID_A}:1-7,{UUID_B}:1-3"
    assert h.advance(parse_gtid(f"{UUID_B}:4")) == 11
    with pytest.raises(GtidOrderError):
        h.advance(parse_gtid(f"{UUID_A}:3"))
    tagged = MySQLHistory.parse(f"{UUID_A}:1-3:tag1:1-2")  # MySQL 8.3+ tagged GTIDs
    assert tagged.counter() == 5 and tagged.contains(parse_gtid(f"{UUID_A}:tag1:2"))
    assert MySQLHistory.parse("").counter() == 0


# -- SHOW BINLOG EVENTS ------------------------------------------------------------------------
MARIADB_EVENTS = [  # recorded from MariaDB 10.11 (scripts/services), offsets and Info verbatim
    (4, "Format_desc", "Server ver: 10.11.19-MariaDB-0+deb12u1-log, Binlog ver: 4"),
    (256, "Gtid_list", "[0-1-228536]"),
    (299, "Binlog_checkpoint", "mysql-bin.000016"),
    (342, "Gtid", "GTID 0-1-228537"),
    (384, "Query", "CREATE DATABASE IF NOT EXISTS gt"),
    (647, "Gtid", "BEGIN GTID 0-1-228539"),
    (739, "Table_map", "table_id: 18 (gt.t)"),
    (830, "Xid", "COMMIT /* xid=32 */"),
    (861, "Gtid", "GTID 0-2-228540"),
]
MYSQL_EVENTS = [  # as MySQL 8 prints them
    (4, "Format_desc", "Server ver: 8.0.36, Binlog ver: 4"),
    (126, "Previous_gtids", f"{UUID_A}:1-40,\n{UUID_B}:1-3"),
    (197, "Gtid", f"SET @@SESSION.GTID_NEXT= '{UUID_A}:41'"),
    (276, "Query", "BEGIN"),
    (500, "Xid", "COMMIT /* xid=12 */"),
    (531, "Gtid", f"SET @@SESSION.GTID_NEXT= '{UUID_B}:4'"),
    (610, "Anonymous_Gtid", "SET @@SESSION.GTID_NEXT= 'ANONYMOUS'"),
]


def test_binlog_event_texts_of_both_servers():
    assert str(gtid_of_event("Gtid", "BEGIN GTID 0-1-228539")) == "0-1-228539"
    assert str(gtid_of_event("Gtid", "BEGIN GTID 0-1-5 cid=99")) == "0-1-5"
    assert str(gtid_of_event("Gtid", f"SET @@SESSION.GTID_NEXT= '{UUID_A.upper()}:41'")) == f"{UUID_A}:41"
    assert gtid_of_event("Query", "BEGIN") is None
    assert gtid_of_event("Anonymous_Gtid", "SET @@SESSION.GTID_NEXT= 'ANONYMOUS'") is None
    assert str(history_of_event("Gtid_list", "[0-1-41,1-2-7]")) == "0-1-41,1-2-7"
    assert history_of_event("Previous_gtids", MYSQL_EVENTS[1][2]).counter() == 43


def test_locate_finds_the_transaction_and_the_history_before_it():
    pos, before = locate(MARIADB_EVENTS, parse_gtid("0-1-228539"))
    assert pos == 647 and str(before) == "0-1-228537"  # 228538 is not in this excerpt
    assert locate(MARIADB_EVENTS, parse_gtid("0-1-228540")) is None  # another server's 228540
    pos, before = locate(MYSQL_EVENTS, parse_gtid(f"{UUID_B}:4"))
    assert pos == 531 and before.counter() == 44 and before.contains(parse_gtid(f"{UUID_A}:41"))


# -- the reader on protocol bytes --------------------------------------------------------------
class _Control:  # what mysql-replication asks of its control connection while decoding
    charset = "utf8mb4"

    def _get_dbms(self):
        return "mysql"


def _event(event_type: int, body: bytes, log_pos: int, server_id: int = 1):
    """A binlog event as the server sends it in a COM_BINLOG_DUMP stream (OK byte, 19-byte
    header, body; no checksum), decoded by mysql-replication's own packet wrapper."""
    size = 19 + len(body)
    header = struct.pack("<cIBIIIH", b"\x00", 1_700_000_000, event_type, server_id, size, log_pos, 0)
    packet = pymysql.protocol.MysqlPacket(header + body, "utf8")
    wrapper = BinLogPacketWrapper(
        packet,
        {},
        _Control(),
        (8, 0, 36),
        False,
        {GtidEvent, MariadbGtidEvent, NotImplementedEvent},
        None,
        None,
        None,
        None,
        False,
        False,
        False,
        False,
        False,
    )
    return wrapper.event


def mysql_gtid_event(source_uuid: str, gno: int, log_pos: int):
    # Gtid_log_event (type 33): flags, SID, GNO, logical-clock type 2, last_committed, sequence_number
    body = b"\x00" + uuid.UUID(source_uuid).bytes + struct.pack("<QBQQ", gno, 2, 7, 8)
    return _event(33, body, log_pos)


def mariadb_gtid_event(domain: int, server: int, seq: int, log_pos: int):
    # Gtid_log_event of MariaDB (type 162): seq_no, domain_id, flags2 (standalone DDL)
    return _event(162, struct.pack("<QIB", seq, domain, 1) + b"\x00" * 6, log_pos, server_id=server)


def reader(history):
    return BinlogReader(
        settings=ConnectionSettings("127.0.0.1", 3306, "u", "p"),
        server_id=9,
        log_file="binlog.000007",
        log_pos=4,
        schemas=["shop"],
        source_id="s",
        captured={"shop.t"},
        watermark_table="dblog.watermarks",
        schema_for=lambda table, columns: None,
        out=None,
        history=history,
        era=2,
    )


def test_mysql_gtid_events_make_positions_that_number_each_transactions_rows():
    r = reader(MySQLHistory.parse(f"{UUID_A}:1-40"))
    ev = mysql_gtid_event(UUID_A, 41, 500)
    assert isinstance(ev, GtidEvent) and ev.gtid == f"{UUID_A}:41"
    r._handle(ev)
    first = r._take_rows(600, 2) + r._take_rows(700, 1)  # two rows events of one transaction
    assert [decode_gtid_coord(p.coord).rowno for p in first] == [0, 1, 2]
    assert {(decode_gtid_coord(p.coord).era, decode_gtid_coord(p.coord).counter) for p in first} == {(2, 41)}
    assert r._txid() == f"{UUID_A}:41"
    r._handle(mysql_gtid_event(UUID_B, 1, 900))  # a new primary after a failover: its own UUID
    second = r._take_rows(950, 1)
    assert decode_gtid_coord(second[0].coord).counter == 42 and decode_gtid_coord(second[0].coord).rowno == 0
    assert first[-1] < second[0]
    assert str(r.history) == f"{UUID_A}:1-41,{UUID_B}:1"


def test_mariadb_gtid_events_count_by_sequence_number():
    r = reader(MariaDBHistory.parse("0-1-99"))
    ev = mariadb_gtid_event(0, 2, 100, 300)
    assert isinstance(ev, MariadbGtidEvent) and ev.gtid == "0-2-100"
    r._handle(ev)
    (p,) = r._take_rows(400, 1)
    assert decode_gtid_coord(p.coord).counter == 100 and decode_gtid_coord(p.coord).gtid == "0-2-100"
    with pytest.raises(GtidOrderError):  # a sequence number going back (no gtid_strict_mode)
        r._handle(mariadb_gtid_event(0, 1, 100, 500))


def test_transactions_without_gtid_stop_a_gtid_capture():
    r = reader(MySQLHistory())
    anonymous = _event(0x22, b"\x00" * 42, 500)  # Anonymous_gtid_log_event: gtid_mode=OFF
    assert isinstance(anonymous, NotImplementedEvent)
    with pytest.raises(ConfigurationError, match="gtid_mode is OFF"):
        r._handle(anonymous)
    # a tagged GTID event is decoded (test_mysql84_binlog.py); one it cannot read stops too
    with pytest.raises(ConfigurationError, match="tagged GTID event .* cannot decode"):
        r._handle(_event(0x2A, b"\x00" * 42, 600))


def test_file_positions_without_use_gtid_are_unchanged():
    r = reader(None)
    r._handle(mysql_gtid_event(UUID_A, 41, 500))
    (p,) = r._take_rows(600, 1)
    assert p.coord == encode_coord(7, 500 - (19 + 42), 600, 0)  # file 7, transaction start, event, row
