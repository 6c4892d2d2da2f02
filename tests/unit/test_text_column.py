"""core/text_column.py: a chunk's texts as an Arrow string array read like a list of them;
the window and the Delta columns take it as they take a list."""

from __future__ import annotations

import struct

import pyarrow as pa

from airflow_provider_dblog.core.batch import DumpRows, EventBatch
from airflow_provider_dblog.core.events import ChangeEvent, Op, Position, WatermarkEvent
from airflow_provider_dblog.core.row_text import dumps
from airflow_provider_dblog.core.text_column import TextColumn
from airflow_provider_dblog.core.watermark import ChunkRows, WatermarkWindow
from airflow_provider_dblog.outputs.delta import changelog_batch

HW = Position("0000000000000A00", 0)


def piece(texts: list[str]) -> tuple[int, bytes, bytes]:
    """What the extension hands over (native/src/text_column.rs): n, native i32 offsets, data."""
    data = "".join(texts).encode()
    ends, at = [0], 0
    for t in texts:
        at += len(t.encode())
        ends.append(at)
    return len(texts), struct.pack(f"={len(ends)}i", *ends), data


def column(texts: list[str], cut: int = 0) -> TextColumn:
    pieces = [piece(texts[:cut]), piece(texts[cut:])] if cut else [piece(texts)]
    return TextColumn.from_pieces(pieces)


TEXTS = ['{"id":1,"v":"é"}', '{"id":2,"v":""}', '{"id":3,"v":null}', '{"id":4,"v":"\\t"}']


def test_a_text_column_reads_as_the_list_of_its_texts_in_one_piece_or_two():
    for cut in (0, 1, 3):
        c = column(TEXTS, cut)
        assert len(c) == 4 and list(c) == TEXTS and c == TEXTS and TEXTS == c
        assert c[0] == TEXTS[0] and c[-1] == TEXTS[-1]
        assert c[1:3] == TEXTS[1:3] and c[3:] == TEXTS[3:] and c[:0] == []
        assert c.take([0, 3]) == [TEXTS[0], TEXTS[3]]
        assert c != TEXTS[:3]
    assert isinstance(column(TEXTS, 2).array, pa.ChunkedArray) and isinstance(column(TEXTS).array, pa.Array)


def keys_and_columns():
    keys = [(i,) for i in range(1, 5)]
    return keys, column(TEXTS, 2), column([dumps(list(k)) for k in keys])


def ev(i: int, key: int) -> ChangeEvent:
    return ChangeEvent("src", "public.t", Op.UPDATE, (key,), None, {"id": key}, Position(f"{i:016X}"))


def test_the_window_removes_keys_from_text_columns_and_keeps_an_untouched_chunk_as_it_is():
    keys, rows, key_texts = keys_and_columns()
    w = WatermarkWindow()
    w.open("lw", "hw", "public.t", ChunkRows(keys, rows, key_texts))
    w.process(WatermarkEvent("lw", Position("0000000000000001")))
    (done,) = w.process(WatermarkEvent("hw", Position("0000000000000002")))
    assert done.rows is rows and done.key_texts is key_texts and done.keys == keys  # nothing copied
    w.open("lw2", "hw2", "public.t", ChunkRows(keys, rows, key_texts))
    w.process(WatermarkEvent("lw2", Position("0000000000000003")))
    w.process(ev(4, 2))
    w.process(ev(5, 9))  # a key the chunk has not
    (done,) = w.process(WatermarkEvent("hw2", Position("0000000000000006")))
    assert done.keys == [(1,), (3,), (4,)] and done.selected == 4
    assert isinstance(done.rows, TextColumn) and done.rows == [TEXTS[0], TEXTS[2], TEXTS[3]]
    assert done.key_texts == ["[1]", "[3]", "[4]"]


def test_delta_columns_of_a_text_column_block_equal_those_of_its_list_of_texts():
    keys, rows, key_texts = keys_and_columns()
    arrow = DumpRows("src", "public.t", "d1", "sch1", HW, 1, keys, rows, True, key_texts)
    listed = DumpRows("src", "public.t", "d1", "sch1", HW, 1, keys, list(TEXTS), True)
    head, tail = arrow.split(3)
    assert head.key_texts == ["[1]", "[2]", "[3]"] and tail.rows == TEXTS[3:] and tail.first_sub == 4
    fast = changelog_batch(EventBatch([head, tail]), epoch=2)
    slow = changelog_batch(EventBatch([listed]), epoch=2)
    drop = [c for c in fast.column_names if c != "written_at"]
    assert fast.select(drop).to_pylist() == slow.select(drop).to_pylist()
    assert [e.after for e in arrow.events()] == [e.after for e in listed.events()]
    assert arrow.event(3).after == {"id": 4, "v": "\t"}
