"""Read-only watermarks on MariaDB (sources/mysql/log_markers.py): which markers are due at a
binlog position, and their positions among the transactions' around them."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.sources.mysql.log import encode_coord
from airflow_provider_dblog.sources.mysql.log_markers import BinlogMarkers


def _pos(m):
    return m.position


def test_markers_are_due_at_or_past_their_position_in_order():
    m = BinlogMarkers(encode_coord)
    m.add("hw", 17, 900)
    m.add("lw", 17, 500)
    m.add("next-file", 18, 4)
    assert m.due(17, 499) == []
    assert [w.uuid for w in m.due(17, 500)] == ["lw"]
    assert [w.uuid for w in m.due(18, 4)] == ["hw", "next-file"] and not m


def test_a_marker_sorts_after_transactions_before_it_and_before_one_starting_at_it():
    m = BinlogMarkers(encode_coord)
    m.add("lw", 17, 500)
    (wm,) = m.due(17, 500)
    before = encode_coord(17, 420, 480, 3)  # a transaction that started before 500
    at = encode_coord(17, 500, 540, 0)  # one starting at 500: its events lie past it
    assert before < wm.position.coord < at


def test_markers_of_one_position_get_growing_positions_across_calls():
    """An idle server: LW and HW of a chunk read at the same position, given out by two
    heartbeats; HW must still sort after LW."""
    m = BinlogMarkers(encode_coord)
    m.add("lw", 17, 500)
    (lw,) = m.due(17, 500)
    m.add("hw", 17, 500)
    (hw,) = m.due(17, 500)
    m.add("a", 17, 500)
    m.add("b", 17, 500)
    a, b = m.due(17, 600)
    assert lw.position < hw.position < a.position < b.position


def _mysql(**kw):
    from airflow_provider_dblog.sources.mysql.source import MySQLSource

    return MySQLSource(source_id="m", host="127.0.0.1", port=3306, user="u", password="p", **kw)


def test_read_only_watermarks_are_refused_with_gtid_positions():
    assert _mysql(watermarks="log").watermarks == "log"
    with pytest.raises(ConfigurationError, match="needs file positions") as err:
        _mysql(watermarks="log", use_gtid=True)
    assert "use_gtid = false" in err.value.fix


def test_a_chunk_replica_is_one_host_of_a_single_host_source():
    from airflow_provider_dblog.config_keys import check_value
    from airflow_provider_dblog.sources.mysql.source import MySQLSource

    source = _mysql(chunk_replica="10.0.0.2", watermarks="log")
    assert str(source._chunk_replica) == "10.0.0.2:3306"  # the source's port by default
    assert source._chunk_replica.settings.user == "u" and source._chunk_replica.settings.host == "10.0.0.2"
    with pytest.raises(ConfigurationError, match="not one host"):
        _mysql(chunk_replica="a:3306,b:3306")
    with pytest.raises(ConfigurationError, match="several hosts and a chunk_replica") as err:
        MySQLSource(source_id="m", host="a,b", port=3306, user="u", password="p", use_gtid=True, chunk_replica="c")
    assert "list one host" in err.value.fix
    # the config names and checks it like any [source] key
    with pytest.raises(ConfigurationError, match="chunk_replica_timeout"):
        check_value("source", "chunk_replica_timeout", 0)


def test_read_only_watermarks_are_refused_on_mysql_with_the_fix():
    from airflow_provider_dblog.sources.mysql.checks import StartupChecks

    with pytest.raises(ConfigurationError, match="needs MariaDB") as err:
        StartupChecks(None, None, False).snapshot_position()  # MySQL: refused before any query
    assert 'watermarks = "table"' in err.value.fix


def test_the_reader_queue_is_bounded_in_changes_not_events():
    """A rows event is one queued item of up to hundreds of changes: the bound counts changes,
    so a fast reader cannot queue millions of them ahead of the writer."""
    import queue

    from airflow_provider_dblog.core.batch import LogRows
    from airflow_provider_dblog.core.events import Op, Position
    from airflow_provider_dblog.sources.mysql.log import ChangeQueue, Items

    def block(n):
        keys = [(i,) for i in range(n)]
        pos = [Position(f"{i:040d}") for i in range(n)]
        return LogRows("s", "d.t", Op.CREATE, "sid", None, "1", keys, [None] * n, ["{}"] * n, pos)

    q = ChangeQueue(maxsize=300)
    q.put_nowait(Items([block(250)], None))
    q.put_nowait(Items([block(100)], None))  # below the bound when put: queued whole
    with pytest.raises(queue.Full):
        q.put_nowait(Items([block(1)], None))
    q.get_nowait()
    assert q.qsize() == 100
    q.put_nowait(Items([block(150), block(1)], None))
    assert q.qsize() == 251


def test_a_marker_the_idle_reader_has_passed_is_queued_at_once_and_never_out_of_order():
    """offer_markers (the engine's thread, right after a read-only watermark is taken): a
    marker at or before the reader's position goes into the queue now, not at the next event
    or heartbeat. Never inside a transaction, never while an event is being queued (the
    reader holds its lock), never into a full queue, and a marker not taken stays waiting."""
    import threading

    from airflow_provider_dblog.sources.mysql.log import BinlogReader, ChangeQueue

    reader = object.__new__(BinlogReader)  # its state, without a thread or a connection
    reader._markers = BinlogMarkers(encode_coord)
    reader._emit_lock = threading.Lock()
    reader._out = ChangeQueue(maxsize=2)
    reader.file, reader.pos, reader.event_ts, reader._group_open = "mysql-bin.000003", 900, None, False

    reader._markers.add("ahead", 3, 1000)  # the binlog has not got there yet
    assert not reader.offer_markers() and reader._out.empty()
    reader._markers.add("lw", 3, 900)
    reader._group_open = True  # inside a transaction: it waits for the transaction's end
    assert not reader.offer_markers()
    reader._group_open = False
    with reader._emit_lock:  # the reader is queueing an event: it waits for the next one
        assert not reader.offer_markers()
    assert reader.offer_markers()
    (lw,) = reader._out.get_nowait()
    assert lw.uuid == "lw"
    reader._out.put_nowait(["x"])
    reader._out.put_nowait(["y"])  # full
    reader.pos = 1000
    assert not reader.offer_markers()  # the consumer would wait on itself: not taken, still due
    reader._out.get_nowait()
    assert reader.offer_markers()
    reader._out.get_nowait()
    (ahead,) = reader._out.get_nowait()
    assert ahead.uuid == "ahead"
