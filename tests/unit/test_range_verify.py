"""core/range_verify.find_drift against an in-memory source: the bisection finds exactly what
a whole-table comparison finds, and reads only small ranges around it."""

from __future__ import annotations

import random

import pytest

from airflow_provider_dblog.core.range_verify import find_drift
from airflow_provider_dblog.core.verify import compare


def inside(key, low, high):
    return (low is None or key > low) and (high is None or key <= high)


def row_hash(row):
    return hash(tuple(sorted(row.items()))) & (2**60 - 1)


class FakeSource:
    def __init__(self, rows):
        self.rows, self.read_rows = rows, 0

    def digest(self, low, high):
        got = [r for k, r in self.rows.items() if inside(k, low, high)]
        return len(got), sum(row_hash(r) for r in got)

    def read(self, low, high):
        got = {k: r for k, r in self.rows.items() if inside(k, low, high)}
        self.read_rows += len(got)
        return got


def other(rows):
    """The other side's hashes and row lookup, as find_drift takes them."""
    return {k: row_hash(r) for k, r in rows.items()}, lambda keys: {k: rows[k] for k in keys}


def table(n):
    return {(i,): {"id": i, "v": f"v{i}"} for i in range(1, n + 1)}


def test_equal_tables_cost_one_digest_per_span_and_no_read():
    src = FakeSource(table(10_000))
    found, stats = find_drift(src.digest, src.read, *other(table(10_000)), span=1000)
    assert found == [] and stats.rows_read == 0 and stats.digests == 10


@pytest.mark.parametrize("seed", range(5))
def test_drift_is_found_like_a_whole_compare_reading_little(seed):
    rng = random.Random(seed)
    source, replay = table(20_000), table(20_000)
    for k in rng.sample(sorted(source), 5):
        del replay[k]  # missing in the replay
    for k in rng.sample(sorted(source), 5):
        replay[k] = {**replay.get(k, source[k]), "v": "stale"}  # different (or extra, if deleted above)
    for i in range(3):
        replay[(30_000 + i,)] = {"id": 30_000 + i, "v": "gone"}  # deleted in the source
    del source[(1,)]  # the lowest key: below every replay cut
    src = FakeSource(source)
    found, stats = find_drift(src.digest, src.read, *other(replay), span=1000, leaf=16)
    assert [(m.key, m.kind) for m in found] == [(m.key, m.kind) for m in compare(source, replay)]
    assert stats.ranges_read <= len(found) and stats.rows_read <= 16 * len(found) + len(found)


def test_an_empty_replay_reads_the_source_once():
    src = FakeSource(table(50))
    found, stats = find_drift(src.digest, src.read, *other({}), span=1000)
    assert {m.kind for m in found} == {"missing"} and len(found) == 50 and stats.rows_read == 50
