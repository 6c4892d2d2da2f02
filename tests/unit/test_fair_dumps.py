"""Fair dumps (invariant 11, issue 39) with the engine on the in-memory source: a repair of a
few keys does not wait for a long backfill, and one dump's delay does not slow another. The
scheduler's rules themselves are tested on a fake clock in test_scheduler.py."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from airflow_provider_dblog.core.dump_requests import read_status
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus
from airflow_provider_dblog.core.events import Op
from airflow_provider_dblog.core.verify import replay

from .memory_capture import SOURCE_ID, TABLE, MemoryChangelog, MemoryDatabase, MemorySource
from .test_engine import Running, dump_done, wait_until


def _database() -> MemoryDatabase:
    db = MemoryDatabase()
    for i in range(1, 201):
        db.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    return db


@contextmanager
def _capturing(state) -> Iterator[tuple[MemoryDatabase, MemoryChangelog]]:
    """An engine running on the test table (200 rows) into a memory changelog."""
    db = _database()
    out = MemoryChangelog()
    run = Running(MemorySource(db), out, state)
    try:
        yield db, out
    finally:
        run.stop()


def _chunks(out: MemoryChangelog, dump_id: str) -> int:
    """The dump's chunks in the changelog so far (each chunk's rows share its HW)."""
    return len({e.position.coord for e in list(out.events) if e.dump_id == dump_id})


def _request(state, keys=None, **control) -> str:
    spec = DumpSpec.new(SOURCE_ID, [TABLE], keys)
    state.add_dump(spec, DumpControl(**control))
    return spec.dump_id


def test_a_five_key_repair_finishes_while_a_paced_backfill_runs(state):
    """The issue's case: a table dump of 40 chunks, one every 100 ms, then a repair of 5 keys.
    The repair is done within a chunk or two of the backfill, not after its last chunk."""
    with _capturing(state) as (db, out):
        backfill = _request(state, chunk_size=5, delay_ms=100)
        wait_until(lambda: _chunks(out, backfill) >= 1, what="the backfill's first chunk")
        for i in (3, 50, 120):
            db.upsert(TABLE, {"id": i, "v": f"changed {i}"})
        before = _chunks(out, backfill)
        repair = _request(state, keys=[(3,), (50,), (120,), (199,), (404,)])
        wait_until(dump_done(state, repair), what="the repair")
        during = _chunks(out, backfill) - before
        assert state.get_dump(backfill).status is DumpStatus.RUNNING
        assert during <= 2, f"the repair waited for {during} chunks of the backfill"
        wait_until(dump_done(state, backfill), what="the backfill")
    repaired = {e.key for e in out.events if e.dump_id == repair and e.op is Op.READ}
    assert repaired == {(3,), (50,), (120,), (199,)}  # 404 is not in the table
    assert replay(out.events) == db.snapshot(TABLE)


def test_a_throttled_dump_does_not_slow_another_and_status_says_why_it_waits(state):
    """A dump throttled to one chunk a minute holds back nobody: a second dump of 20 chunks
    ends while the first has had at most two, and ``dblog status`` shows the first waiting
    for its own delay."""
    with _capturing(state) as (db, out):
        slow = _request(state, chunk_size=5, delay_ms=60_000)
        wait_until(lambda: _chunks(out, slow) >= 1, what="the throttled dump's first chunk")
        fast = _request(state, chunk_size=10)
        wait_until(dump_done(state, fast), what="the other dump")
        assert _chunks(out, slow) <= 2
        assert state.get_dump(slow).status is DumpStatus.RUNNING

        def waiting():
            dumps = {d["dump_id"]: d for d in read_status(state, SOURCE_ID)["dumps"]}
            return (dumps[slow].get("waiting") or {}).get("why")

        wait_until(lambda: waiting() == "delay", what="the status to show the delay")
    assert replay(out.events) == db.snapshot(TABLE)
