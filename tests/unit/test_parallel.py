"""Parallel chunk reads (core/parallel.py): where the key ranges are cut, and how the
readers' results make one chunk that covers an unbroken key range."""

from __future__ import annotations

from airflow_provider_dblog.core.parallel import combine, split_points
from airflow_provider_dblog.core.protocols import ChunkResult


def rows(*ids):
    return [{"id": i} for i in ids]


def key_of(row):
    return (row["id"],)


def test_split_points_every_size_keys_at_most_readers_minus_one():
    keys = [(i,) for i in range(1, 31)]
    assert split_points(keys, 10, 4) == [(10,), (20,), (30,)]
    assert split_points(keys, 10, 3) == [(10,), (20,)]
    assert split_points(keys[:25], 10, 4) == [(10,), (20,)]  # fewer rows left: fewer readers
    assert split_points(keys[:9], 10, 4) == []  # less than one range: one reader
    assert split_points([], 10, 2) == []


def test_every_range_read_to_its_end_is_one_chunk_and_a_short_last_range_ends_the_table():
    results = [ChunkResult(rows(1, 2, 3)), ChunkResult(rows(4, 5, 6), frozenset({"t1"})), ChunkResult(rows(7))]
    chunk, short = combine(results, [(3,), (6,), (100,)], 3, key_of)
    assert [r["id"] for r in chunk.rows] == [1, 2, 3, 4, 5, 6, 7]
    assert short and chunk.invisible_txids == {"t1"}
    # The last range full: more of the table follows (unless it reached the upper bound,
    # which progress_after checks).
    chunk, short = combine([ChunkResult(rows(1, 2)), ChunkResult(rows(3, 4))], [(2,), (50,)], 2, key_of)
    assert not short and len(chunk.rows) == 4


def test_a_range_that_grew_after_the_split_ends_the_chunk_at_its_last_row():
    """Rows inserted into range 1 after the split: its LIMIT stops before its end (5), so the
    rows of range 2 are dropped; the next chunk starts after 4 and reads 5.. again."""
    results = [ChunkResult(rows(1, 2, 3, 4)), ChunkResult(rows(6, 7, 8, 9), frozenset({"t2"}))]
    chunk, short = combine(results, [(5,), (9,)], 4, key_of)
    assert [r["id"] for r in chunk.rows] == [1, 2, 3, 4]
    assert not short
    # Deleted rows make a range short: it was still read to its end.
    chunk, short = combine([ChunkResult(rows(1, 3)), ChunkResult(rows(6, 7, 8, 9))], [(5,), (20,)], 4, key_of)
    assert [r["id"] for r in chunk.rows] == [1, 3, 6, 7, 8, 9] and not short
