"""Read-only watermarks on PostgreSQL (sources/postgres/log_markers.py): where a WAL-position
watermark enters the decoded stream, on recorded pgoutput messages."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.events import ChangeEvent, Op, WatermarkEvent
from airflow_provider_dblog.core.watermark import ChunkAborted, ChunkDone, WatermarkWindow
from airflow_provider_dblog.sources.postgres.chunk_select import SnapshotInvisible
from airflow_provider_dblog.sources.postgres.log import make_position
from airflow_provider_dblog.sources.postgres.log_markers import LogMarkers, marker_lsn, marker_position

from .test_pgoutput import ORDERS_REL, _decoder, begin, commit, insert

SEG = 16 * 1024 * 1024


def _items(dec, *messages, wal_end=None):
    dec.pgoutput_many(list(messages))
    if wal_end is not None:
        dec.markers_passed(wal_end)
    out = list(dec.pending)
    dec.pending.clear()
    return out


def _shape(items):
    return [("wm", i.uuid) if isinstance(i, WatermarkEvent) else ("ev", i.txid) for i in items if hasattr(i, "txid")]


def test_a_marker_goes_before_the_first_transaction_committed_at_or_after_it():
    dec = _decoder()
    dec.markers.add("lw", 0x600)
    items = _items(
        dec,
        begin(0x500, 1, 10),
        ORDERS_REL,
        insert(100, "1", "a"),
        commit(0x500, 0x530, 1),
        begin(0x600, 2, 11),  # its commit record starts at the marker: after it
        insert(100, "2", "b"),
        commit(0x600, 0x630, 2),
    )
    assert _shape(items) == [("ev", "10"), ("wm", "lw"), ("ev", "11")]
    wm = next(i for i in items if isinstance(i, WatermarkEvent))
    before, after = [i.position for i in items if isinstance(i, ChangeEvent)]
    assert before < wm.position < after and wm.position == marker_position(0x600, 1)


def test_an_idle_log_gives_the_marker_once_the_server_reports_it_passed():
    dec = _decoder()
    dec.markers.add("hw", 0x700)
    assert _items(dec, wal_end=0x6F8) == []  # not yet decoded up to it
    assert _shape(_items(dec, wal_end=0x700)) == [("wm", "hw")]
    assert not dec.markers


def test_a_marker_never_splits_a_transaction():
    """A keepalive inside a large transaction reports a WAL end past its commit; the marker
    then follows the whole transaction."""
    dec = _decoder()
    dec.markers.add("hw", 0x840)
    items = _items(dec, begin(0x800, 1, 12), ORDERS_REL, insert(100, "1", "a"), wal_end=0x900)
    assert _shape(items) == [("ev", "12")]  # the transaction is still open: no marker
    items = _items(dec, insert(100, "2", "b"), commit(0x800, 0x830, 1), wal_end=0x900)
    assert _shape(items) == [("ev", "12"), ("wm", "hw")]


def test_markers_of_one_position_keep_their_order_and_get_distinct_positions():
    dec = _decoder()
    dec.markers.add("lw", 0x700)
    dec.markers.add("hw", 0x700)  # an idle database: LW and HW read at the same position
    dec.markers.add("later", 0x900)
    items = _items(dec, wal_end=0x800)
    assert _shape(items) == [("wm", "lw"), ("wm", "hw")]
    assert items[0].position < items[1].position
    assert _shape(_items(dec, begin(0x900, 1, 13), ORDERS_REL, insert(100, "1", "a"), commit(0x900, 0x930, 1))) == [
        ("wm", "later"),
        ("ev", "13"),
    ]


def test_marker_positions_sort_between_the_transactions_around_them():
    # commit records are 8-byte aligned: the last one before 0x700 starts at 0x6F8 at most
    assert make_position(0x6F8, 99) < marker_position(0x700, 1) < marker_position(0x700, 2) < make_position(0x700, 1)


@pytest.mark.parametrize(
    "insert_lsn, lsn",
    [
        (0x1000_0050, 0x1000_0050),  # inside a page: as it is
        (0x1000_0053, 0x1000_0058),  # aligned up (no commit record starts in between)
        (0x1000_2018, 0x1000_2000),  # past a page header: the page boundary the decoder reports
        (SEG * 3 + 40, SEG * 3),  # past a segment's long page header
        (SEG * 3 + 8192 + 40, SEG * 3 + 8192 + 40),  # 40 bytes into an ordinary page: a record end
    ],
)
def test_marker_lsn_is_where_an_idle_servers_decoding_ends(insert_lsn, lsn):
    assert marker_lsn(insert_lsn, 8192, SEG) == lsn


def test_markers_due_by_commit_or_by_wal_end():
    m = LogMarkers()
    m.add("a", 10)
    m.add("b", 20)
    assert [w.uuid for w in m.due(None, before_commit=9)] == []
    assert [w.uuid for w in m.due(None, before_commit=15)] == ["a"]
    assert [w.uuid for w in m.due(19)] == []
    assert [w.uuid for w in m.due(25)] == ["b"] and not m


# -- the snapshot's invisible transactions without an xid of the SELECT's own ----------------
def test_snapshot_invisible_holds_the_list_and_every_xid_from_xmax():
    inv = SnapshotInvisible.of("100:105:100,103")
    assert set(inv) == {"100", "103"}  # what the window looks for among passed transactions
    assert "100" in inv and "103" in inv and "105" in inv and "9999" in inv
    assert "101" not in inv and "104" not in inv and "99" not in inv and None not in inv
    wrapped = SnapshotInvisible.of(f"{2**32 - 3}:{2**32 - 2}:")  # xid8 near a 32-bit wraparound
    assert str(2**32 - 2) in wrapped and "5" in wrapped and str(2**32 - 3) not in wrapped


def test_snapshot_invisible_of_parallel_readers_is_what_either_missed():
    a, b = SnapshotInvisible.of("100:105:101"), SnapshotInvisible.of("98:102:99")
    both = frozenset() | a | b  # core/parallel.combine's union
    assert isinstance(both, SnapshotInvisible) and set(both) == {"99", "101"}
    assert "102" in both and "104" in both and "100" not in both


def test_the_window_aborts_a_chunk_whose_invisible_transaction_was_passed_on():
    window = WatermarkWindow()
    window.process(ChangeEvent("s", "t", Op.CREATE, (1,), None, {"id": 1}, make_position(0x100, 1), None, "101"))
    out = window.open("lw", "hw", "t", [((1,), {"id": 1})], SnapshotInvisible.of("100:105:101"))
    assert len(out) == 1 and isinstance(out[0], ChunkAborted)
    # one from xmax on cannot have been passed on before: the window opens, and its event
    # (before LW in the stream) still removes the key
    window = WatermarkWindow()
    assert window.open("lw", "hw", "t", [((1,), {"id": 1})], SnapshotInvisible.of("100:105:")) == []
    window.process(ChangeEvent("s", "t", Op.UPDATE, (1,), None, {"id": 1}, make_position(0x100, 1), None, "107"))
    window.process(WatermarkEvent("lw", marker_position(0x200, 1)))
    (done,) = window.process(WatermarkEvent("hw", marker_position(0x200, 2)))
    assert isinstance(done, ChunkDone) and done.keys == []


# -- configuration --------------------------------------------------------------------------
def _pg(**kw):
    from airflow_provider_dblog.sources.postgres.source import PostgresSource

    args = dict(source_id="s", host="127.0.0.1", port=5432, user="u", password="p", dbname="d")
    return PostgresSource(**args, **kw)


def test_read_only_watermarks_are_refused_where_they_cannot_be_exact():
    from airflow_provider_dblog.core.errors import ConfigurationError
    from airflow_provider_dblog.sources import descriptor

    assert _pg(watermarks="log").watermarks == "log"
    with pytest.raises(ConfigurationError, match="needs the pgoutput plugin") as err:
        _pg(watermarks="log", plugin="wal2json")
    assert 'plugin = "pgoutput"' in err.value.fix
    with pytest.raises(ConfigurationError, match="unknown watermarks"):
        _pg(watermarks="rows")
    src = {"type": "mysql", "id": "m", "host": "h", "user": "u", "watermarks": "log", "use_gtid": True}
    with pytest.raises(ConfigurationError, match="needs file positions"):
        descriptor("mysql").make(src, dict(source_id="m", host="h", password="p", user="u"))


def test_the_config_check_names_the_watermark_kinds():
    from airflow_provider_dblog.config import check_config
    from airflow_provider_dblog.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="watermarks") as err:
        check_config({"source": {"type": "postgres", "watermarks": "read-only"}}, "the test")
    assert "log" in str(err.value) + str(err.value.fix)
