"""Dump rows and log rows as blocks (core/batch.py): they must read exactly like the per-row
events they replace, in the writer, the bookkeeping of every output, and the Delta
changelog's columns."""

import pyarrow as pa
import pytest

from airflow_provider_dblog.core.batch import DumpRows, EventBatch, LogRows, spans_of
from airflow_provider_dblog.core.events import ChangeEvent, Op, Origin, Position
from airflow_provider_dblog.core.writer import Writer, _estimate
from airflow_provider_dblog.outputs._common import Bookkeeping
from airflow_provider_dblog.outputs.delta import changelog_batch

from .test_writer import MemoryOutput, Tag, drain

HW = Position("0000000000000A00", 0)


def block(n, first_sub=1, start=0):
    keys = [(start + i,) for i in range(n)]
    rows = [{"id": start + i, "v": f"r{start + i}", "big": 2**63 - 1 - i} for i in range(n)]
    return DumpRows("src", "public.t", "d1", "sch1", HW, first_sub, keys, rows)


def log_ev(coord, key):
    return ChangeEvent(
        "src",
        "public.t",
        Op.UPDATE,
        (key,),
        {"id": key},
        {"id": key, "v": "x"},
        Position(coord),
        commit_ts=1_700_000_000_000_000,
        txid="77",
    )


def test_block_reads_as_the_events_it_replaces():
    b = block(3, first_sub=5)
    evs = b.events()
    assert [e.position for e in evs] == [HW.with_sub(5), HW.with_sub(6), HW.with_sub(7)]
    assert all(
        e.op is Op.READ and e.origin is Origin.DUMP and e.dump_id == "d1" and e.schema_id == "sch1" and e.before is None
        for e in evs
    )
    assert [(e.key, e.after) for e in evs] == list(zip(b.keys, b.rows))
    head, tail = b.split(2)
    assert head.events() + tail.events() == evs
    assert (tail.first_position, tail.last_position) == (HW.with_sub(7), HW.with_sub(7))


def test_event_batch_is_a_sequence_of_its_events_in_order():
    before, after = [log_ev("0000000000000900", 9)], [log_ev("0000000000000B00", 1)]
    b = block(4)
    batch = EventBatch([before, b, [], after])
    flat = before + b.events() + after
    assert len(batch) == 6 and list(batch) == flat and batch == flat
    assert batch[0] == flat[0] and batch[3] == flat[3] and batch[-1] == flat[-1] and batch[1:3] == flat[1:3]
    with pytest.raises(IndexError):
        batch[6]
    assert spans_of(batch) == {"src": (flat[0].position, flat[-1].position)} == spans_of(flat)


def test_bookkeeping_keeps_the_block_when_all_is_fresh_and_filters_a_partial_retry():
    batch = EventBatch([[log_ev("0000000000000900", 9)], block(4)])
    book = Bookkeeping()
    assert book.fresh(batch) is batch
    book.adopt(book.advanced(batch, epoch=3))
    assert book.positions["src"] == HW.with_sub(4) and book.epochs["src"] == 3
    assert book.fresh(batch) == []  # a retry of a durable batch writes nothing
    partial = Bookkeeping()
    partial.merge_position("src", HW.with_sub(2))
    assert [e.position.sub for e in partial.fresh(batch)] == [3, 4]


def test_delta_columns_of_a_block_equal_those_of_its_events():
    b = block(5, first_sub=3)
    segments = [[log_ev("0000000000000900", 9)], b, [log_ev("0000000000000B00", 1)]]
    fast = changelog_batch(EventBatch(segments), epoch=4)
    slow = changelog_batch(list(EventBatch(segments)), epoch=4)
    assert fast.schema == slow.schema
    drop = [c for c in fast.column_names if c != "written_at"]
    assert fast.select(drop).to_pylist() == slow.select(drop).to_pylist()
    assert fast.column("position").to_pylist()[1] == HW.with_sub(3).encode()


def test_delta_columns_fall_back_for_integers_beyond_64_bits():
    b = DumpRows("src", "public.t", "d1", None, HW, 1, [(2**70,)], [{"id": 2**70}])
    t = changelog_batch(EventBatch([b]), epoch=None)
    assert t.column("key").to_pylist() == [f"[{2**70}]"] and t.column("after").to_pylist() == [f'{{"id":{2**70}}}']
    assert t.column("epoch").type == pa.int64() and t.column("epoch").null_count == 1


def test_writer_splits_a_block_bigger_than_a_batch_and_keeps_order_and_markers():
    out = MemoryOutput()
    w = Writer(out, max_buffer=1000, max_batch=4, flush_interval=0.01)
    w.start()
    b = block(10)
    w.put_many([log_ev("0000000000000900", 9), b, Tag("chunk"), log_ev("0000000000000B00", 1), Tag("end")])
    assert drain(w, 2) == ["chunk", "end"]
    w.close()
    assert sum(len(x) for x in out.batches) == 12
    assert all(len(x) <= 4 for x in out.batches)
    written = [e for x in out.batches for e in x]
    assert written == [log_ev("0000000000000900", 9)] + b.events() + [log_ev("0000000000000B00", 1)]
    assert w.buffered() == 0 and w.events_written == 12


def log_block(op, n, start=0, coord="0000000000000C00"):
    """A binlog rows event's changes as text (texts of ``op``'s images, None where none)."""
    keys = [(start + i,) for i in range(n)]
    before = [None if op is Op.CREATE else f'{{"id":{start + i},"v":"old"}}' for i in range(n)]
    after = [None if op is Op.DELETE else f'{{"id":{start + i},"v":"new \\u00e9"}}' for i in range(n)]
    positions = [Position(f"{coord}{i:04d}") for i in range(n)]
    return LogRows("src", "public.t", op, "sch1", 1_700_000_000_000_000, "77", keys, before, after, positions)


@pytest.mark.parametrize("op", [Op.CREATE, Op.UPDATE, Op.DELETE])
def test_a_log_block_reads_as_its_events_and_splits_in_order(op):
    b = log_block(op, 5)
    evs = b.events()
    assert [b.event(i) for i in range(5)] == evs
    assert [(e.key, e.before, e.after, e.position) for e in evs] == list(zip(b.keys, b.befores, b.afters, b.positions))
    assert all(
        (e.source_id, e.table, e.op, e.commit_ts, e.txid, e.origin, e.dump_id, e.schema_id)
        == ("src", "public.t", op, 1_700_000_000_000_000, "77", Origin.LOG, None, "sch1")
        for e in evs
    )
    head, tail = b.split(2)
    assert head.events() + tail.events() == evs and (len(head), len(tail)) == (2, 3)
    assert (tail.first_position, tail.last_position) == (b.positions[2], b.positions[4])
    batch = EventBatch([[log_ev("0000000000000900", 9)], b])
    assert list(batch) == [log_ev("0000000000000900", 9)] + evs and batch[3] == evs[2]
    assert spans_of(batch) == {"src": (Position("0000000000000900"), b.positions[-1])}


def test_delta_columns_of_log_blocks_equal_those_of_their_events():
    """Blocks of many changes and of one (a one-row transaction's), and events, in a row."""
    segments = [
        log_block(Op.CREATE, 3),
        [log_ev("0000000000000D00", 9)],
        log_block(Op.DELETE, 2, 10, "0000000000000E00"),
        log_block(Op.UPDATE, 1, 40, "0000000000000F00"),
        log_block(Op.CREATE, 1, 41, "0000000000000F10"),
    ]
    segments.insert(1, log_block(Op.UPDATE, 4, 20, "0000000000000C80"))
    segments.insert(0, log_block(Op.DELETE, 1, 50, "0000000000000B00"))
    fast = changelog_batch(EventBatch(segments), epoch=None)
    slow = changelog_batch(list(EventBatch(segments)), epoch=None)
    drop = [c for c in fast.column_names if c != "written_at"]
    assert fast.schema == slow.schema
    assert fast.select(drop).to_pylist() == slow.select(drop).to_pylist()
    assert fast.column("op").to_pylist()[:5] == ["d", "c", "c", "c", "u"]
    assert fast.column("op").to_pylist()[-2:] == ["u", "c"] and fast.num_rows == 1 + 3 + 4 + 1 + 2 + 1 + 1


def test_the_writer_counts_a_log_block_as_its_changes_and_splits_it():
    b = log_block(Op.UPDATE, 10)
    events, nbytes = _estimate([b])
    assert events == 10 and nbytes >= 10 * len(b.afters[0])
    out = MemoryOutput()
    w = Writer(out, max_buffer=1000, max_batch=4, flush_interval=0.01)
    w.start()
    w.put_many([b, Tag("end")])
    assert drain(w, 1) == ["end"]
    w.close()
    assert [len(x) for x in out.batches] == [4, 4, 2]
    assert [e for x in out.batches for e in x] == b.events()


def test_positions_are_encoded_as_position_encode_writes_them():
    from airflow_provider_dblog.outputs.delta import _encoded_positions

    log = [Position(f"0000000000000C00{i:010d}") for i in range(3)]  # sub 0: coordinate + suffix
    mixed = log + [HW.with_sub(7)]
    for positions in (log, mixed, []):
        assert _encoded_positions(positions).to_pylist() == [p.encode() for p in positions]
