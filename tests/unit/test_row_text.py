"""Chunk rows kept as their changelog JSON text (core/row_text.py): the encoding round-trips
every canonical value exactly, the blocks give the same events in both forms, and the Delta
changelog stores the same columns either way."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.batch import DumpRows, EventBatch
from airflow_provider_dblog.core.dumps import TableProgress
from airflow_provider_dblog.core.events import Column, Position, TableSchema
from airflow_provider_dblog.core.row_text import ChunkTexts, dumps, encode_rows, loads_row
from airflow_provider_dblog.core.scheduler import ChunkPlan
from airflow_provider_dblog.core.writer import approx_bytes

SCHEMA = TableSchema("db.t", (Column("a", "int", False), Column("b", "int", False), Column("v", "text")), ("a", "b"))
ROWS = [
    {"a": 1, "b": 2**70, "v": 'héllo "q" \\ ✓'},  # beyond 64 bits: the standard library's path
    {"a": 1, "b": -(2**63), "v": None},
    {"a": 2, "b": 0, "v": {"$b64": "3q2+7wA="}},
    {"a": 3, "b": 1, "v": {"doc": [1, 2.5, None, True, "1234567890123456789012"], "f": -1e300}},
    {"a": 4, "b": 9007199254740993, "v": "0.1"},
]


def test_texts_give_back_every_canonical_value_exactly():
    texts = [dumps(r) for r in ROWS]
    assert [loads_row(t) for t in texts] == ROWS
    assert loads_row(texts[0])["b"] == 2**70 and isinstance(loads_row(texts[3])["v"]["f"], float)
    rows = [dict(r) for r in ROWS]
    encode_rows(rows)
    assert rows == texts  # in place, the same encoding as every output's
    with pytest.raises(ValueError, match="not a JSON object"):
        loads_row("[1, 2]")


def test_a_chunk_collected_in_parts_has_its_keys_and_texts_in_order():
    collected = ChunkTexts(SCHEMA)
    for part in (ROWS[:2], ROWS[2:3], ROWS[3:]):
        collected.add([dict(r) for r in part])
    assert collected.keys == SCHEMA.keys_of(ROWS) == [(1, 2**70), (1, -(2**63)), (2, 0), (3, 1), (4, 9007199254740993)]
    assert collected.rows == [dumps(r) for r in ROWS]


def test_blocks_of_texts_give_the_same_events_as_blocks_of_dicts():
    hw = Position("0000000a")
    keys = SCHEMA.keys_of(ROWS)
    plain = DumpRows("src", "db.t", "d1", "sch1", hw, 1, keys, [dict(r) for r in ROWS])
    texts = DumpRows("src", "db.t", "d1", "sch1", hw, 1, keys, [dumps(r) for r in ROWS], texts=True)
    assert texts.events() == plain.events() and texts.event(3) == plain.event(3)
    head, tail = texts.split(2)
    assert head.texts and tail.texts and head.events() + tail.events() == plain.events()
    assert list(EventBatch([texts])) == plain.events()
    assert approx_bytes(texts.rows[0]) < approx_bytes(plain.rows[0])  # the writer's estimate sees the text


def test_the_delta_changelog_stores_the_same_columns_for_texts_and_dicts():
    delta = pytest.importorskip("airflow_provider_dblog.outputs.delta")
    hw = Position("0000000a")
    keys = SCHEMA.keys_of(ROWS)
    plain = DumpRows("src", "db.t", "d1", "sch1", hw, 1, keys, [dict(r) for r in ROWS])
    texts = DumpRows("src", "db.t", "d1", "sch1", hw, 1, keys, [dumps(r) for r in ROWS], texts=True)
    a = delta.changelog_batch(EventBatch([plain]), 3).drop_columns(["written_at"])
    b = delta.changelog_batch(EventBatch([texts]), 3).drop_columns(["written_at"])
    assert a.equals(b) and a.column("after").to_pylist()[0] == dumps(ROWS[0])
    assert delta.DeltaChangelogOutput.takes_row_text


def test_progress_from_keys_is_progress_from_rows():
    start = TableProgress(None, 0, 0, False, 0)
    plan = ChunkPlan("d1", "db.t", start, 3)
    for rows in (ROWS[:2], ROWS[:3], []):
        assert plan.progress_of(len(rows), SCHEMA.key_of(rows[-1]) if rows else None) == plan.progress_after(
            rows, SCHEMA
        )
