"""The engine (core/engine.py) on an in-memory source and changelog (tests/unit/memory_capture.py):
order and convergence with writes inside chunk windows, stale watermarks after a restart,
redelivered events, checkpoints only after the output commit, reconnects and their deadline,
a bad request that fails only its dump, and a TRUNCATE inside a chunk window. The real databases are in tests/integration."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest

from airflow_provider_dblog.core.batch import DumpRows, LogRows
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus, TableProgress
from airflow_provider_dblog.core.engine import Engine, EngineConfig
from airflow_provider_dblog.core.errors import DBLogError, PositionLostError, StaleEpochError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema, WatermarkEvent
from airflow_provider_dblog.core.protocols import CatalogFingerprints, CatalogSchemas, ChunkResult
from airflow_provider_dblog.core.row_text import ChunkTexts, as_row, dumps
from airflow_provider_dblog.core.schema_step import FULL_CHECK_EVERY
from airflow_provider_dblog.core.schema_watch import schema_key
from airflow_provider_dblog.core.verify import replay
from airflow_provider_dblog.state.lease import make_lease
from airflow_provider_dblog.state.local import LocalStateStore

from .memory_capture import SCHEMA, SOURCE_ID, TABLE, MemoryChangelog, MemoryDatabase, MemorySource

FAST = dict(
    poll_timeout=0.005, flush_interval=0.005, control_interval=0.01, status_interval=0.05, heartbeat_interval=None
)


def wait_until(check, timeout=20.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


class Running:
    """An engine in a thread: ``stop()`` ends it and re-raises what it raised."""

    def __init__(self, source, output, state, **config):
        self.engine = Engine(source, output, state, EngineConfig(**{**FAST, **config}))
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self.engine.run(self._stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test by stop()
            self.error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def stop(self):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error


@pytest.fixture
def db():
    d = MemoryDatabase()
    for i in range(1, 201):
        d.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    return d


def dump_done(state, dump_id):
    return lambda: state.get_dump(dump_id).status is DumpStatus.DONE


def dump_to_done(source, out, state, chunk_size, in_window=None):
    """A running engine that has dumped the table in ``chunk_size`` chunks (``in_window``:
    the source's hook for writes inside each chunk's window); the caller stops it."""
    run = Running(source, out, state)
    wait_until(lambda: source.opens == 1, what="the engine to open the source")
    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=chunk_size))
    wait_until(dump_done(state, spec.dump_id), what="the dump to finish")
    return run, spec


def test_dump_under_writes_in_its_windows_converges_in_order(db, state):
    """Invariants 1-3: writes between LW and HW (updates, deletes, inserts of chunk keys and of
    keys beyond) must remove those keys from the chunk; dump rows sit at their HW position."""
    source, out = MemorySource(db), MemoryChangelog()
    n = {"chunk": 0}

    def concurrent_writes(schema, selected):
        n["chunk"] += 1
        c = n["chunk"]
        if selected:
            first = selected[0]["id"]
            db.upsert(TABLE, {"id": first, "v": f"updated in window {c}"})  # stale in the chunk now
            if len(selected) > 2:
                db.delete(TABLE, (selected[2]["id"],))  # deleted in the window
        db.upsert(TABLE, {"id": 1000 + c, "v": "inserted in window"})

    run, spec = dump_to_done(source, out, state, 17, concurrent_writes)
    db.upsert(TABLE, {"id": 5, "v": "after the dump"})
    wait_until(lambda: out.events and out.events[-1].key == (5,), what="the last update")
    run.stop()

    positions = [e.position for e in out.events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)  # invariant 1
    assert replay(out.events) == db.snapshot(TABLE)  # invariant 3 (and 2: no stale chunk row wins)
    dumped = [e for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ]
    assert dumped and all(e.op is Op.READ and e.dump_id == spec.dump_id for e in dumped)
    # No time travel: no dump row for a key that changed inside its window.
    changed_in_window = {
        e.key
        for e in out.events
        if e.origin is Origin.LOG and e.after and str(e.after.get("v", "")).startswith("updated in window")
    }
    for e in dumped:
        later = [x for x in out.events if x.key == e.key and x.position > e.position]
        assert e.key not in changed_in_window or later or e.after["v"].startswith("updated")
    assert n["chunk"] >= 200 // 17
    assert state.get_checkpoint(SOURCE_ID) == out.events[-1].position


def test_stale_watermarks_and_redelivered_events_after_a_restart_are_dropped(db, state):
    """A window open at a crash is abandoned: its LW/HW come through the log later with UUIDs
    nobody waits for and must not emit anything; events up to the checkpoint are not written
    again; the dump continues after its last durable chunk."""
    source, out = MemorySource(db), MemoryChangelog()
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=50))
    state.save_progress(spec.dump_id, TABLE, TableProgress((100,), 100, 2, False, 0))
    checkpoint = db.log[149].position  # the first 150 inserts are durable already
    state.set_checkpoint(SOURCE_ID, checkpoint)
    db.watermark("lw-of-a-window-abandoned-by-a-crash")
    db.upsert(TABLE, {"id": 120, "v": "between the stale watermarks"})
    db.watermark("hw-of-a-window-abandoned-by-a-crash")

    run = Running(source, out, state)
    wait_until(dump_done(state, spec.dump_id), what="the dump to finish")
    run.stop()

    assert all(e.position > checkpoint for e in out.events)  # nothing before the checkpoint again
    assert all(not isinstance(e, WatermarkEvent) for e in out.events)
    dumped = sorted(e.key[0] for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ)
    assert dumped == list(range(101, 201))  # after the last durable chunk's key, each once
    logged = [e.key[0] for e in out.events if e.origin is Origin.LOG]
    assert logged == list(range(151, 201)) + [120]


def test_checkpoint_waits_for_the_output_commit(db, state):
    """Invariant 5: while the output has not acknowledged a commit, no checkpoint moves."""
    source, out = MemorySource(db), MemoryChangelog()
    out.gate = threading.Event()
    run = Running(source, out, state)
    wait_until(lambda: out.commits or source.opens, what="the engine to start")
    time.sleep(0.2)
    assert state.get_checkpoint(SOURCE_ID) is None and source.acknowledged is None
    out.gate.set()
    wait_until(lambda: state.get_checkpoint(SOURCE_ID) == db.log[-1].position, what="the checkpoint")
    run.stop()
    assert source.acknowledged == db.log[-1].position
    assert [e.key[0] for e in out.events] == list(range(1, 201))


def test_a_lost_connection_reconnects_and_loses_nothing(db, state):
    source, out = MemorySource(db), MemoryChangelog()
    down = threading.Event()
    source.unavailable = down.is_set
    run = Running(source, out, state, reconnect_max_backoff=0.05)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    down.set()
    for i in range(201, 211):
        db.upsert(TABLE, {"id": i, "v": "while the server was away"})
    wait_until(lambda: run.engine.reconnects == 1, what="the engine to notice")
    time.sleep(0.3)
    down.clear()
    wait_until(lambda: len(out.events) == 210, what="the events written during the outage")
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=100))
    wait_until(dump_done(state, spec.dump_id), what="a dump after the reconnect")
    run.stop()
    assert source.opens >= 2
    log_keys = [e.key[0] for e in out.events if e.origin is Origin.LOG]
    assert log_keys == list(range(1, 211))  # each once, in order
    assert replay(out.events) == db.snapshot(TABLE)


def test_an_output_outage_holds_the_log_reports_itself_and_loses_nothing(db, state):
    """Issue 34 part 4: while the output refuses writes the engine reads no more of the log
    than the writer's budget holds, keeps publishing its status (the outage in it, as a
    warning too), moves no checkpoint, and once the output is back writes every event once."""
    source, out = MemorySource(db), MemoryChangelog()
    down = threading.Event()
    out.down = down.is_set
    run = Running(source, out, state, writer_buffer=50, writer_batch=20, poll_batch=10, output_outage_timeout=0)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    wait_until(lambda: state.get_checkpoint(SOURCE_ID) == db.log[-1].position, what="the checkpoint")
    checkpoint = state.get_checkpoint(SOURCE_ID)
    down.set()
    for i in range(201, 501):
        db.upsert(TABLE, {"id": i, "v": "while the output was down"})

    def status():
        return json.loads(state.get_value(status_key(SOURCE_ID)) or "{}")

    wait_until(lambda: (status().get("output_outage") or {}).get("attempts", 0) >= 2, what="the outage reported")
    first = status()
    assert 50 <= first["buffered"] <= 50 + 10  # the budget, plus at most one poll's overshoot
    assert 1 <= first["in_flight"] <= 20  # the batch being retried: at most writer_batch
    assert [w for w in first["warnings"] if "refuses writes since" in w and "the broker is down" in w]
    assert "for as long as it takes" in first["warnings"][-1]
    wait_until(lambda: status()["updated_at"] > first["updated_at"], what="a later report during the outage")
    assert status()["buffered"] <= 60 and state.get_checkpoint(SOURCE_ID) == checkpoint
    down.clear()
    wait_until(lambda: len(out.events) == 500, what="the events held during the outage")
    wait_until(lambda: status().get("output_outage") is None, what="the outage's end reported")
    run.stop()
    assert out.refused >= 2
    assert [e.key[0] for e in out.events if e.origin is Origin.LOG] == list(range(1, 501))  # each once, in order


def test_a_commit_that_does_not_answer_is_reported_while_under_way(db, state, monkeypatch):
    """A broker that stopped answering fails a commit only at the call's timeout (30 s for
    Kafka); the status report says so from SLOW_COMMIT on, the call still under way."""
    from airflow_provider_dblog.core import status_report

    monkeypatch.setattr(status_report, "SLOW_COMMIT", 0.05)
    source, out = MemorySource(db), MemoryChangelog()
    out.gate = threading.Event()
    run = Running(source, out, state)

    def status():
        return json.loads(state.get_value(status_key(SOURCE_ID)) or "{}")

    try:
        wait_until(lambda: status().get("output_commit_pending_seconds", 0) > 0.05, what="the pending commit")
        st = status()
        assert [w for w in st["warnings"] if "has not answered the commit begun at" in w and "(200 events)" in w]
        assert st["output_outage"] is None  # nothing failed: it is only slow so far
    finally:
        out.gate.set()
    wait_until(lambda: status().get("output_commit_pending_seconds") == 0.0, what="the commit's end reported")
    assert not [w for w in status()["warnings"] if "has not answered" in w]
    run.stop()


def test_reconnect_gives_up_after_the_deadline_with_the_cause(db, state):
    source, out = MemorySource(db), MemoryChangelog()
    down = threading.Event()
    source.unavailable = down.is_set
    run = Running(source, out, state, reconnect_timeout=1.0, reconnect_max_backoff=0.1)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    down.set()
    started = time.monotonic()
    wait_until(run.done, timeout=10, what="the engine to give up")
    assert time.monotonic() - started >= 1.0
    with pytest.raises(DBLogError, match="could not reconnect within 1 s") as info:
        run.stop()
    assert "in-memory server is down" in str(info.value)
    assert run.engine.reconnects == 1


def test_a_capture_started_while_the_database_is_down_waits_for_it(db, state):
    """A capture (re)started while its database is still down or starting up waits for it
    within the reconnect timeout, as a reconnect does, instead of ending at once."""
    source, out = MemorySource(db), MemoryChangelog()
    down = threading.Event()
    down.set()
    source.unavailable = down.is_set
    run = Running(source, out, state, reconnect_max_backoff=0.05)
    time.sleep(0.5)
    assert not run.done() and not out.events, "the capture ended, or read, while the database was down"
    down.clear()
    wait_until(lambda: len(out.events) == 200, what="the events once the database is up")
    run.stop()
    assert [e.key[0] for e in out.events if e.origin is Origin.LOG] == list(range(1, 201))


def test_a_capture_started_while_the_database_is_down_gives_up_after_the_deadline(db, state):
    source, out = MemorySource(db), MemoryChangelog()
    source.unavailable = lambda: True
    run = Running(source, out, state, reconnect_timeout=1.0, reconnect_max_backoff=0.1)
    wait_until(run.done, timeout=10, what="the engine to give up")
    with pytest.raises(DBLogError, match="within 1 s") as info:
        run.stop()
    assert "in-memory server is down" in str(info.value)


def test_a_bad_request_fails_its_dump_and_the_capture_goes_on(db, state):
    """Invariant 9: an unknown table fails that dump with the cause; later events still flow
    and a following good dump runs."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    bad = DumpSpec.new(SOURCE_ID, ["app.dropped"])
    state.add_dump(bad, DumpControl())
    wait_until(lambda: state.get_dump(bad.dump_id).status is DumpStatus.FAILED, what="the bad dump to fail")
    db.upsert(TABLE, {"id": 500, "v": "after the failure"})
    good = DumpSpec.new(SOURCE_ID, [TABLE], [(500,)])
    state.add_dump(good, DumpControl())
    wait_until(dump_done(state, good.dump_id), what="the good dump")
    run.stop()
    assert "app.dropped does not exist" in state.get_dump(bad.dump_id).error
    assert any(e.key == (500,) and e.origin is Origin.LOG for e in out.events)
    assert [e.key for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ] == [(500,)]


def test_a_dump_under_a_steady_insert_stream_ends(db, state):
    """Dumps finish: the table's greatest key when its dump starts bounds it. Every chunk
    window inserts more keys at the end of the key space than a chunk reads; without the bound
    the dump would chase them for ever. They reach the changelog through the log."""
    source, out = MemorySource(db), MemoryChangelog()
    next_id = iter(range(10_000, 1_000_000))

    def append(schema, selected):
        for _ in range(25):
            db.upsert(TABLE, {"id": next(next_id), "v": "appended"})

    run = Running(source, out, state)
    wait_until(lambda: source.opens == 1, what="the engine to open the source")
    source.in_window = append
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=10))
    wait_until(dump_done(state, spec.dump_id), timeout=10, what="the dump of a growing table to end")
    source.in_window = None
    db.upsert(TABLE, {"id": 5, "v": "after the dump"})
    wait_until(lambda: out.events and out.events[-1].key == (5,), what="the last update")
    run.stop()
    dumped = [e.key[0] for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ]
    assert dumped and max(dumped) <= 200 and len(dumped) <= 200  # the rows present at the start
    assert state.get_dump(spec.dump_id).progress[TABLE].upper_key == (200,)
    assert replay(out.events) == db.snapshot(TABLE)  # the appended rows came through the log


def test_an_empty_table_dump_selects_nothing_and_clears_the_table(db, state):
    """A table emptied while nothing was captured: its dump's one chunk selects nothing and
    states the whole key space (op k), so the replay empties too."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    with db._lock:  # the gap: deletes the log never shows
        db.rows[TABLE].clear()
    selects = source.chunk_selects
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl())
    wait_until(dump_done(state, spec.dump_id), what="the dump of an empty table")
    run.stop()
    assert source.chunk_selects == selects
    progress = state.get_dump(spec.dump_id).progress[TABLE]
    assert (progress.upper_key, progress.chunks, progress.done, progress.bound_at is not None) == (None, 1, True, True)
    [r] = [e for e in out.events if e.op is Op.RANGE]
    assert (r.after["from"], r.after["to"]) == (None, None)
    assert replay(out.events) == db.snapshot(TABLE) == {}


def test_pause_holds_chunks_and_resume_continues(db, state):
    source, out = MemorySource(db), MemoryChangelog()
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=10, delay_ms=20))
    run = Running(source, out, state)
    wait_until(lambda: any(e.origin is Origin.DUMP for e in out.events), what="a first chunk")
    state.set_control(spec.dump_id, DumpControl(chunk_size=10, delay_ms=20).as_paused())
    wait_until(lambda: state.get_dump(spec.dump_id).status is DumpStatus.PAUSED, what="the pause")
    time.sleep(0.05)  # a chunk in flight at the pause may still close
    held = sum(e.origin is Origin.DUMP for e in out.events)
    time.sleep(0.3)
    assert sum(e.origin is Origin.DUMP for e in out.events) == held < 200
    state.set_control(spec.dump_id, DumpControl(chunk_size=10))
    wait_until(dump_done(state, spec.dump_id), what="the dump after resuming")
    run.stop()
    assert sorted(e.key[0] for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ) == list(range(1, 201))


def test_a_truncate_inside_a_chunk_window_drops_the_chunk_and_the_replay_equals_the_source(state):
    """A TRUNCATE of the table between a chunk's LW and HW: the chunk's rows may be gone, so it
    is dropped and selected again; rows inserted after the TRUNCATE survive, and another
    table's changes around it are all there."""
    other = TableSchema("app.other", (Column("k", "text", False), Column("n", "integer")), ("k",))
    db = MemoryDatabase((SCHEMA, other))
    for i in range(1, 201):
        db.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    db.upsert(other.table, {"k": "a", "n": 0})
    source, out = MemorySource(db), MemoryChangelog()
    windows = []

    def in_window(schema, selected):
        windows.append([r["id"] for r in selected])
        if len(windows) == 3:
            db.upsert(other.table, {"k": "a", "n": 1})
            truncated_at.append(db.truncate(TABLE))
            for i in (5, 1000, 1001):
                db.upsert(TABLE, {"id": i, "v": "after the truncate"})
            db.upsert(other.table, {"k": "b", "n": 2})

    truncated_at: list = []
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 201, what="the initial events")
    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=20))
    wait_until(dump_done(state, spec.dump_id), what="the dump to finish")
    db.upsert(TABLE, {"id": 6, "v": "last"})
    wait_until(lambda: out.events[-1].key == (6,), what="the last insert")
    run.stop()

    positions = [e.position for e in out.events]
    assert positions == sorted(positions)
    (t,) = [e for e in out.events if e.op is Op.TRUNCATE]
    assert t.table == TABLE and t.key == () and t.position == truncated_at[0]
    # The third chunk was selected again (finding nothing left of the table's key range).
    assert windows[:3] == [list(range(1, 21)), list(range(21, 41)), list(range(41, 61))]
    assert windows[3:] == [[]] and state.get_dump(spec.dump_id).progress[TABLE].rows == 40
    assert all(e.position < t.position for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ)
    mine = [e for e in out.events if e.table == TABLE]
    assert (
        replay(mine)
        == db.snapshot(TABLE)
        == {
            (5,): {"id": 5, "v": "after the truncate"},
            (6,): {"id": 6, "v": "last"},
            (1000,): {"id": 1000, "v": "after the truncate"},
            (1001,): {"id": 1001, "v": "after the truncate"},
        }
    )
    assert replay(e for e in out.events if e.table == other.table) == db.snapshot(other.table)
    assert [e.after["n"] for e in out.events if e.table == other.table] == [0, 1, 2]


def test_a_dump_removes_rows_deleted_while_nothing_was_captured(db, state):
    """Range repair (issue 11, part 6): rows deleted without a log event (a gap: a reset
    position, a lost slot) are gone from the replay once a table dump has passed over them;
    rows inserted inside a chunk's window survive, rows updated in the gap are dumped."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    with db._lock:  # the gap: changes the log never shows
        for i in (3, 40, 41, 42, 77, 150, 199, 200):  # 199, 200: above the dump's bound
            del db.rows[TABLE][(i,)]
        db.rows[TABLE][(10,)] = {"id": 10, "v": "updated in the gap"}
    windows = []

    def in_window(schema, selected):
        windows.append(len(selected))
        if len(windows) == 2:
            db.upsert(TABLE, {"id": 60, "v": "back inside a window"})  # not in the source at LW
            db.delete(TABLE, (61,))
            db.upsert(TABLE, {"id": 300, "v": "above the bound, after it was fixed"})

    with db._lock:
        del db.rows[TABLE][(60,)]
    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=30))
    wait_until(dump_done(state, spec.dump_id), what="the dump to finish")
    run.stop()

    ranges = [e for e in out.events if e.op is Op.RANGE]
    # one per chunk, and the last chunk's second one: above the dump's upper bound
    assert len(ranges) == len(windows) + 1 and ranges[0].after["from"] is None and ranges[-1].after["to"] is None
    assert [r.position.sub for r in ranges] == [0] * len(windows) + [1] and all(r.key == () for r in ranges)
    assert (
        ranges[-2].after["to"] == ranges[-1].after["from"] == [198]
        and ranges[-2].position.coord == ranges[-1].position.coord
    )
    assert replay(out.events) == db.snapshot(TABLE)
    assert (60,) in db.snapshot(TABLE) and (300,) in db.snapshot(TABLE)
    assert (3,) not in replay(out.events) and (200,) not in replay(out.events)
    assert state.get_dump(spec.dump_id).progress[TABLE].upper_key == (198,)


def test_a_key_list_dump_deletes_listed_keys_the_source_no_longer_has(db, state):
    """A repair of listed keys: a key deleted while nothing was captured is gone from the
    replay; a listed key the log changes inside the window keeps the log's version."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    with db._lock:  # the gap
        del db.rows[TABLE][(5,)]
        del db.rows[TABLE][(6,)]

    def in_window(schema, selected):
        db.upsert(TABLE, {"id": 6, "v": "back inside the window"})

    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE], [(5,), (6,), (7,)])
    state.add_dump(spec, DumpControl())
    wait_until(dump_done(state, spec.dump_id), what="the key-list dump")
    run.stop()
    [r] = [e for e in out.events if e.op is Op.RANGE]
    assert r.after["keys"] == [[5], [6], [7]]
    assert replay(out.events) == db.snapshot(TABLE)
    assert (5,) not in db.snapshot(TABLE) and db.snapshot(TABLE)[(6,)]["v"] == "back inside the window"


WIDER = TableSchema(TABLE, (Column("id", "integer", False), Column("w", "integer")), ("id",))


def test_a_schema_change_without_log_events_redumps_the_table(db, state):
    """Schema changes (issue 11, part 2): an ALTER TABLE that rewrites every row without a row
    event (an added column with a default; here v dropped and w added) is noticed in the
    catalog, the table is dumped again, and the replay equals the source in its new shape."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state, schema_check_interval=0.2)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    wait_until(lambda: state.get_value(schema_key(SOURCE_ID, TABLE)) is not None, what="the first schema record")
    db.alter(WIDER, lambda r: {"id": r["id"], "w": r["id"] * 7})
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="a re-dump request")
    [redump] = state.list_dumps(SOURCE_ID)
    wait_until(dump_done(state, redump.dump_id), what="the re-dump")
    db.upsert(TABLE, {"id": 1, "w": -1})  # the log goes on in the new shape
    wait_until(lambda: out.events[-1].key == (1,), what="a later change")
    run.stop()
    assert redump.spec.tables == (TABLE,)
    assert redump.spec.repair  # scheduled before table dumps (invariant 11)
    assert replay(out.events) == db.snapshot(TABLE)
    assert all(set(row) == {"id", "w"} for row in replay(out.events).values())


class _PrintedSource(MemorySource, CatalogFingerprints):
    """Catalog fingerprints (the schema's id), and a count of the catalog reads."""

    def __init__(self, db):
        super().__init__(db)
        self.catalog_reads = 0
        self.print_checks = 0

    def catalog_fingerprints(self, tables):
        self.print_checks += 1
        return {t: self.db.schemas[t].schema_id() for t in tables if t in self.db.schemas}

    def catalog_schema(self, table):
        self.catalog_reads += 1
        return super().catalog_schema(table)


def test_the_schema_check_reads_only_the_tables_whose_catalog_moved(db, state):
    """An idle capture's schema check reads no catalog while the fingerprints stay, all of it
    every FULL_CHECK_EVERY-th check, and a changed table at once (then it is dumped again)."""
    source, out = _PrintedSource(db), MemoryChangelog()
    run = Running(source, out, state, schema_check_interval=0.05)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    wait_until(lambda: source.print_checks >= 3 * FULL_CHECK_EVERY, what="many checks")
    run.stop()
    # One read at the first check, one per full check: not one per check.
    assert source.catalog_reads <= 2 + source.print_checks // (FULL_CHECK_EVERY - 1)
    assert source.catalog_reads < source.print_checks
    run = Running(source, out, state, schema_check_interval=0.05)
    db.alter(WIDER, lambda r: {"id": r["id"], "w": r["id"] * 7})
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="a re-dump request")
    run.stop()


class _BatchSource(_PrintedSource, CatalogSchemas):
    """Reads every asked table's catalog in one call (``catalog_schemas``), counted."""

    def __init__(self, db):
        super().__init__(db)
        self.batch_reads: list[list[str]] = []

    def catalog_schemas(self, tables):
        self.batch_reads.append(list(tables))
        out = {}
        for t in tables:
            try:
                out[t] = MemorySource.catalog_schema(self, t)
            except DBLogError as exc:
                out[t] = exc
        return out


def test_the_schema_check_reads_many_tables_catalog_in_one_call_when_the_source_can(db, state):
    """The first and every full check ask a CatalogSchemas source once for all the tables to
    read, never table by table; a change is still found (and dumped again)."""
    source, out = _BatchSource(db), MemoryChangelog()
    run = Running(source, out, state, schema_check_interval=0.05)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    wait_until(lambda: source.print_checks >= 2 * FULL_CHECK_EVERY, what="many checks")
    run.stop()
    assert source.catalog_reads == 0 and source.batch_reads  # no read of one table alone
    assert source.batch_reads[0] == source.tables()
    run = Running(source, out, state, schema_check_interval=0.05)
    db.alter(WIDER, lambda r: {"id": r["id"], "w": r["id"] * 7})
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="a re-dump request")
    run.stop()
    assert source.catalog_reads == 0


def test_a_chunk_naming_a_dropped_column_is_selected_again_in_the_new_shape(db, state):
    """A dump running while a column is dropped does not fail: the SELECT that names the
    column is aborted, the schema read again, and the dump goes on (and a re-dump follows)."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state, schema_check_interval=3600)  # only the failed SELECT notices
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    altered = []

    def in_window(schema, selected):
        if not altered:
            altered.append(1)
            db.alter(WIDER, lambda r: {"id": r["id"], "w": 0})

    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=50))
    wait_until(
        lambda: (
            all(d.status is DumpStatus.DONE for d in state.list_dumps(SOURCE_ID))
            and len(state.list_dumps(SOURCE_ID)) == 2
        ),
        what="the dump and the re-dump",
    )
    run.stop()
    assert state.get_dump(spec.dump_id).status is DumpStatus.DONE
    assert replay(out.events) == db.snapshot(TABLE)


def test_a_primary_key_change_clears_the_older_rows_and_redumps(db, state):
    """A new primary key names rows differently: the capture clears the table's older rows
    (op t, at a position of its own) and dumps it again under the new key."""
    rekeyed = TableSchema(TABLE, SCHEMA.columns, ("id", "v"))
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state, schema_check_interval=0.2)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    wait_until(lambda: state.get_value(schema_key(SOURCE_ID, TABLE)) is not None, what="the first schema record")
    db.alter(rekeyed, lambda r: r)
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="a re-dump request")
    [redump] = state.list_dumps(SOURCE_ID)
    wait_until(dump_done(state, redump.dump_id), what="the re-dump")
    db.upsert(TABLE, {"id": 1, "v": "new"})  # a new key (1, "new") next to (1, "initial 1")
    wait_until(lambda: out.events[-1].key == (1, "new"), what="a later change")
    run.stop()
    [t] = [e for e in out.events if e.op is Op.TRUNCATE]
    assert all(e.position > t.position for e in out.events if e.op is Op.READ)
    assert replay(out.events) == db.snapshot(TABLE) and len(db.snapshot(TABLE)) == 201


def _purge_while_stopped(db, state):
    """Capture the initial rows, stop; then the log moves on and what the checkpoint needs is
    purged, with rows deleted and updated in the gap."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: state.get_checkpoint(SOURCE_ID) is not None and len(out.events) == 200, what="a checkpoint")
    run.stop()
    for i in (3, 150, 200):
        db.delete(TABLE, (i,))
    db.upsert(TABLE, {"id": 7, "v": "changed in the gap"})
    source.purged_before = db._position()
    return source, out


def test_a_lost_position_stops_the_capture_by_default(db, state):
    source, out = _purge_while_stopped(db, state)
    run = Running(source, out, state)
    wait_until(run.done, what="the capture to stop")
    with pytest.raises(PositionLostError):
        run.stop()


def test_a_lost_position_recovers_with_a_full_dump_when_allowed(db, state):
    """Opt-in: the capture starts at the log's end and dumps every table; rows deleted and
    changed in the gap converge (range repair), later changes arrive through the log."""
    source, out = _purge_while_stopped(db, state)
    run = Running(source, out, state, redump_on_position_lost=True)
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="the recovery dump")
    [dump] = state.list_dumps(SOURCE_ID)
    wait_until(dump_done(state, dump.dump_id), what="the recovery dump to finish")
    db.upsert(TABLE, {"id": 500, "v": "after the recovery"})
    wait_until(lambda: out.events[-1].key == (500,), what="a later change")
    run.stop()
    assert dump.spec.tables is None and run.engine.position_recoveries == 1
    assert replay(out.events) == db.snapshot(TABLE)


def test_a_lost_position_recovery_converges_for_keys_without_ranges(state):
    """Issue 39 part 00: a table whose key has no ranges (text: its order in the database
    may differ from Python's and Spark's) keeps no row the gap deleted either: the recovery
    dump's last chunk states the whole table since the dump's bound."""
    other = TableSchema("app.names", (Column("k", "character varying(20)", False), Column("n", "integer")), ("k",))
    db = MemoryDatabase((SCHEMA, other))
    for i in range(1, 201):
        db.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    for i in range(60):
        db.upsert(other.table, {"k": f"name-{i}", "n": i})
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: state.get_checkpoint(SOURCE_ID) is not None and len(out.events) == 260, what="a checkpoint")
    run.stop()
    for i in (0, 7, 33, 59):  # the gap: deletes the log no longer holds
        db.delete(other.table, (f"name-{i}",))
    db.upsert(other.table, {"k": "name-8", "n": -8})
    source.purged_before = db._position()
    run = Running(source, out, state, redump_on_position_lost=True)
    wait_until(lambda: state.list_dumps(SOURCE_ID), what="the recovery dump")
    [dump] = state.list_dumps(SOURCE_ID)
    wait_until(dump_done(state, dump.dump_id), what="the recovery dump to finish")
    run.stop()
    mine = [e for e in out.events if e.table == other.table]
    [whole] = [e for e in mine if e.op is Op.RANGE]
    assert whole.after["from"] is None and whole.after["to"] is None
    assert replay(mine) == db.snapshot(other.table) and ("name-7",) not in replay(mine)
    assert replay(e for e in out.events if e.table == TABLE) == db.snapshot(TABLE)


def test_a_text_keyed_table_dump_removes_rows_deleted_while_nothing_was_captured(state):
    """Over several chunks: rows the earlier chunks emitted survive the last chunk's
    whole-table statement (they are newer than the bound), rows deleted in a gap go."""
    other = TableSchema("app.names", (Column("k", "text", False), Column("n", "integer")), ("k",))
    db = MemoryDatabase((other,))
    for i in range(100):
        db.upsert(other.table, {"k": f"name-{i:03}", "n": i})
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 100, what="the initial events")
    with db._lock:  # the gap
        for i in (0, 13, 50, 99):
            del db.rows[other.table][(f"name-{i:03}",)]
    spec = DumpSpec.new(SOURCE_ID, [other.table])
    state.add_dump(spec, DumpControl(chunk_size=13))
    wait_until(dump_done(state, spec.dump_id), what="the dump")
    run.stop()
    ranges = [e for e in out.events if e.op is Op.RANGE]
    assert len(ranges) == 1 and ranges[0].after["from"] is None and ranges[0].after["to"] is None
    assert state.get_dump(spec.dump_id).progress[other.table].chunks == 8
    assert replay(out.events) == db.snapshot(other.table) and len(db.snapshot(other.table)) == 96


def test_a_filtered_dump_emits_only_matching_rows_and_states_no_ranges(db, state):
    """Issue 15 part 1: a row filter selects only its rows, over several chunks, and makes no
    key-range statements (op k): keys outside the filter are not absent, so nothing is deleted."""
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    with db._lock:  # a gap: only a full dump's ranges would remove these
        del db.rows[TABLE][(4,)]
    spec = DumpSpec.new(SOURCE_ID, [TABLE], where="id % 3 == 0")
    state.add_dump(spec, DumpControl(chunk_size=7))
    wait_until(dump_done(state, spec.dump_id), what="the filtered dump")
    run.stop()
    dumped = [e for e in out.events if e.origin is Origin.DUMP]
    assert dumped and {e.key[0] % 3 for e in dumped} == {0}
    assert len(dumped) == len([k for k in db.snapshot(TABLE) if k[0] % 3 == 0]) == 66
    assert not any(e.op is Op.RANGE for e in out.events)
    assert (4,) in replay(out.events)  # a filtered dump deletes nothing
    assert state.get_dump(spec.dump_id).progress[TABLE].chunks >= 10


def test_an_adaptive_dump_backs_off_while_a_replica_lags_and_grows_again(db, state):
    """Issue 15 part 3: a dump with ``adaptive`` halves its chunks while the source reports a
    lagging replica and grows them again once the replica caught up; the status shows the
    pace and the signal that set it; the dump still converges."""
    from airflow_provider_dblog.core.dump_requests import status_key

    for i in range(201, 3001):
        db.upsert(TABLE, {"id": i, "v": f"more {i}"})
    source, out = MemorySource(db), MemoryChangelog()
    sizes, paces = [], []

    def in_window(schema, selected):
        sizes.append(len(selected))
        if len(sizes) == 4:
            source.replica_lag = 0.0  # caught up: read by the engine within 2 s

    source.in_window = in_window
    source.replica_lag = 60.0
    run = Running(source, out, state, replica_lag_interval=0.05)
    wait_until(lambda: len(out.events) == 3000, what="the initial events")
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=800, adaptive=True))

    def report():
        import json

        live = (json.loads(state.get_value(status_key(SOURCE_ID)) or "{}").get("dumps") or {}).get(spec.dump_id)
        if live:
            paces.append(live["pace"])
        return state.get_dump(spec.dump_id).status is DumpStatus.DONE

    wait_until(report, timeout=60, what="the adaptive dump")
    run.stop()
    assert sizes[:4] == [800, 400, 200, 100], sizes  # halved on each chunk while the replica lagged
    low = sizes.index(min(sizes))
    assert max(sizes[low:]) > 400, sizes  # and grown again once it caught up
    assert any(p["mode"] == "adaptive" and p["signal"].startswith("replica lag") for p in paces), paces
    assert replay(out.events) == db.snapshot(TABLE)


def test_a_dump_with_parallel_readers_covers_every_key_once_in_unbroken_ranges(state):
    """Issue 15 part 2: chunks of a dump with 3 readers are read as 3 key ranges at once.
    Rows the log never showed (written while nothing captured) reach the changelog only
    through the dump; inserts into a range between its split and its SELECT make that
    reader stop short, and the chunk must then end there (or rows would be skipped)."""
    db = MemoryDatabase()
    for i in range(1, 400, 2):
        db.upsert(TABLE, {"id": i, "v": f"initial {i}"})
    source, out = MemorySource(db), MemoryChangelog()
    run = Running(source, out, state)
    wait_until(lambda: len(out.events) == 200, what="the initial events")
    with db._lock:  # a gap: rows only a dump delivers
        for i in range(2, 400, 2):
            db.rows[TABLE][(i,)] = {"id": i, "v": f"gap {i}"}
    grew, splits = [], []

    def in_window(schema, selected):
        if len(schema.columns) == 1 and len(selected) >= 20:  # the key-only SELECT that splits
            splits.append(selected)
            if len(splits) % 2:  # every other chunk: its first range grows past its LIMIT
                db.upsert(TABLE, {"id": selected[3]["id"], "v": "updated between split and read"})
                new = selected[4]["id"] + 0.5  # a key between two existing ones
                db.upsert(TABLE, {"id": new, "v": "inserted between split and read"})
                grew.append(new)

    source.in_window = in_window
    spec = DumpSpec.new(SOURCE_ID, [TABLE])
    state.add_dump(spec, DumpControl(chunk_size=10, readers=3))
    wait_until(dump_done(state, spec.dump_id), what="the dump to finish")
    run.stop()

    assert replay(out.events) == db.snapshot(TABLE)  # every gap row arrived, none was skipped
    assert run.engine.parallel_reads > 0 and source.readers_asked == 2
    ranges = [e.after for e in out.events if e.op is Op.RANGE]
    assert ranges[0]["from"] is None and ranges[-1]["to"] is None
    assert all(a["to"] == b["from"] for a, b in zip(ranges, ranges[1:]))  # unbroken
    assert grew and len(ranges) < 399 // 10 * 3 // 4  # uncut chunks read 3 ranges in one window
    dumped = [e.key for e in out.events if e.op is Op.READ]
    assert len(dumped) == len(set(dumped))  # no key twice
    assert state.get_dump(spec.dump_id).to_dict()["readers"] == 3


class _BlockChangelog(MemoryChangelog):
    """Records, per dump block written, whether its rows came as JSON texts."""

    def __init__(self) -> None:
        super().__init__()
        self.block_texts: list[bool] = []

    def write(self, events, epoch=None):
        self.block_texts += [s.texts for s in getattr(events, "segments", ()) if isinstance(s, DumpRows)]
        super().write(events, epoch)


class _TextChangelog(_BlockChangelog):
    """The Delta changelog's promise: dump blocks may come as their rows' JSON texts."""

    takes_row_text = True


class _TextSource(MemorySource):
    """A source that reads chunks as texts itself, a part at a time (core/row_text.py)."""

    selects_row_text = True  # declares protocols.RowTextChunks

    def select_chunk(self, schema, after_key, limit, upper_key=None, where=None, texts=False):
        result = super().select_chunk(schema, after_key, limit, upper_key, where)
        if not texts:
            return result
        self.texted = getattr(self, "texted", 0) + 1
        collected = ChunkTexts(schema)
        for at in range(0, len(result.rows), 5):
            collected.add(result.rows[at : at + 5])
        return ChunkResult(collected.rows, result.invisible_txids, collected.keys, texts=True)


@pytest.mark.parametrize("source_texts", [False, True], ids=["engine-encodes", "source-encodes"])
def test_chunk_rows_reach_an_output_that_takes_texts_as_texts_and_converge(db, state, source_texts):
    """Rows of chunks wait as JSON text for an output that stores that text (issue 13's memory),
    encoded by the source or else by the engine; window writes still remove their keys."""
    source = _TextSource(db) if source_texts else MemorySource(db)
    out = _TextChangelog()

    def concurrent_writes(schema, selected):
        if selected:
            db.upsert(TABLE, {"id": selected[0]["id"], "v": "updated in window"})
            db.delete(TABLE, (selected[-1]["id"],))

    run, _ = dump_to_done(source, out, state, 17, concurrent_writes)
    run.stop()

    assert out.block_texts and all(out.block_texts)
    assert getattr(source, "texted", 0) == (12 if source_texts else 0)  # 200 rows, 17 a chunk
    assert replay(out.events) == db.snapshot(TABLE)
    dumped = [e for e in out.events if e.origin is Origin.DUMP and e.op is Op.READ]
    assert dumped and all(isinstance(e.after, dict) for e in dumped)


def test_chunk_rows_stay_dicts_for_an_output_that_does_not_take_texts(db, state):
    source, out = _TextSource(db), _BlockChangelog()
    run, _ = dump_to_done(source, out, state, 50)
    run.stop()
    assert out.block_texts and not any(out.block_texts) and not getattr(source, "texted", 0)
    assert replay(out.events) == db.snapshot(TABLE)


class _TextLogSource(MemorySource):
    """A source that gives the log's images as their JSON text when asked (start_log's
    ``texts``), and a key update's as dicts, as the real sources do."""

    logs_row_text = True  # declares protocols.RowTextLog
    log_texts: bool | None = None

    def start_log(self, after, from_end=False, floor=None, texts=False):
        self.log_texts = texts
        super().start_log(after, from_end, floor)

    def poll(self, max_items, timeout):
        items = super().poll(max_items, timeout)
        if not self.log_texts:
            return items
        return [
            dataclasses.replace(i, before=i.before and dumps(i.before), after=i.after and dumps(i.after))
            if isinstance(i, ChangeEvent) and not (i.before and i.after and SCHEMA.key_of(i.before) != i.key)
            else i
            for i in items
        ]


@pytest.mark.parametrize("takes_text", [True, False], ids=["text-output", "dict-output"])
def test_log_images_reach_an_output_that_takes_texts_as_texts_and_key_updates_still_split(db, state, takes_text):
    source = _TextLogSource(db)
    out = _TextChangelog() if takes_text else _BlockChangelog()
    run = Running(source, out, state)
    wait_until(lambda: source.opens == 1, what="the engine to open the source")
    db.upsert(TABLE, {"id": 1000, "v": "a"})
    db.upsert(TABLE, {"id": 1000, "v": "b"})
    with db._lock:  # UPDATE ... SET id = 1001 WHERE id = 1000
        before = db.rows[TABLE].pop((1000,))
        db.rows[TABLE][(1001,)] = after = {"id": 1001, "v": "b"}
        db.log.append(ChangeEvent(SOURCE_ID, TABLE, Op.UPDATE, (1001,), before, after, db._position()))
    end = db.delete(TABLE, (1,))
    wait_until(lambda: any(e.position == end for e in out.events), what="the log to be written")
    run.stop()

    assert source.log_texts is takes_text
    log = [e for e in out.events if e.origin is Origin.LOG]
    as_dicts = [(e.op, e.key) for e in log if str not in (type(e.before), type(e.after))]
    # Text for every change but the key update, split into a delete and a create of dicts.
    assert len(log) == 200 + 5
    assert as_dicts == ([(Op.DELETE, (1000,)), (Op.CREATE, (1001,))] if takes_text else [(e.op, e.key) for e in log])
    assert [(e.op, e.key) for e in log if e.key in ((1000,), (1001,))][-2:] == [
        (Op.DELETE, (1000,)),
        (Op.CREATE, (1001,)),
    ]
    assert replay(out.events) == db.snapshot(TABLE)


class _LogBlockSource(_TextLogSource):
    """Like the MySQL reader with texts: consecutive text changes of one table, op and
    transaction come as one LogRows block (a key update stays an event of dicts)."""

    def poll(self, max_items, timeout):
        out: list = []
        for i in super().poll(max_items, timeout):
            text = isinstance(i, ChangeEvent) and all(x is None or isinstance(x, str) for x in (i.before, i.after))
            if not text or i.op is Op.TRUNCATE:
                out.append(i)
                continue
            last = out[-1] if out else None
            same = (i.table, i.op, i.txid, i.commit_ts, i.schema_id)
            if isinstance(last, LogRows) and (last.table, last.op, last.txid, last.commit_ts, last.schema_id) == same:
                last.keys.append(i.key)
                last.befores.append(i.before)
                last.afters.append(i.after)
                last.positions.append(i.position)
            else:
                out.append(
                    LogRows(
                        i.source_id,
                        *same[:2],
                        i.schema_id,
                        i.commit_ts,
                        i.txid,
                        [i.key],
                        [i.before],
                        [i.after],
                        [i.position],
                    )
                )
        return out


class _LogBlockChangelog(_TextChangelog):
    """Counts the log blocks that reached the output whole."""

    def __init__(self) -> None:
        super().__init__()
        self.log_blocks = 0

    def write(self, events, epoch=None):
        self.log_blocks += sum(isinstance(s, LogRows) for s in getattr(events, "segments", ()))
        super().write(events, epoch)


def test_log_blocks_pass_whole_outside_windows_and_change_by_change_inside(db, state):
    """A block of changes reaches the output as one block while no chunk of its table is in
    flight; inside a window its changes must still drop their keys from the chunk, or a
    stale chunk row would win (the replay would differ from the source)."""
    source, out = _LogBlockSource(db), _LogBlockChangelog()
    n = {"chunk": 0}

    def concurrent_writes(schema, selected):
        n["chunk"] += 1
        if selected:
            for row in selected[:2]:  # one block of two updates of chunk keys, inside the window
                db.upsert(TABLE, {"id": row["id"], "v": f"updated in window {n['chunk']}"})
            if len(selected) > 2:
                db.delete(TABLE, (selected[2]["id"],))

    run, spec = dump_to_done(source, out, state, 17, concurrent_writes)
    for i in range(300, 340):  # a burst outside any window: blocks pass whole
        db.upsert(TABLE, {"id": i, "v": "burst"})
    wait_until(lambda: out.events and out.events[-1].key == (339,), what="the burst")
    run.stop()

    positions = [e.position for e in out.events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert replay(out.events) == db.snapshot(TABLE)
    assert out.log_blocks > 0
    updated = {
        e.key
        for e in out.events
        if e.origin is Origin.LOG and "updated in window" in (as_row(e.after) or {}).get("v", "")
    }
    assert len(updated) >= 2 * (200 // 17)
    assert state.get_checkpoint(SOURCE_ID) == out.events[-1].position


def test_a_log_block_across_the_checkpoint_loses_only_what_is_durable(db, state):
    """After a restart the first block straddles the checkpoint (the fixture's 200 inserts
    come as one block): only its changes after the checkpoint are written again."""
    source, out = _LogBlockSource(db), _LogBlockChangelog()
    checkpoint = db.log[149].position
    state.set_checkpoint(SOURCE_ID, checkpoint)
    db.upsert(TABLE, {"id": 120, "v": "after the checkpoint"})
    run = Running(source, out, state, poll_batch=1000)
    wait_until(lambda: out.events and out.events[-1].key == (120,), what="the log after the checkpoint")
    run.stop()

    assert [e.key[0] for e in out.events] == list(range(151, 201)) + [120]
    assert all(e.position > checkpoint for e in out.events)


def test_every_part_that_writes_the_state_is_fenced_once_the_engine_leads(db, state):
    """Once the engine holds the lease, it and every part holding the store (the scheduler,
    the schema watch, the TOAST repairs) write through the lease holder's view, so a newer
    epoch refuses them. A deposed leader's TOAST repair dump once went through the plain
    store (found by tests/integration/test_fencing.py)."""
    lease = make_lease(state, SOURCE_ID, "a")
    engine = Engine(MemorySource(db), MemoryChangelog(), state, EngineConfig(**FAST), lease=lease)
    assert lease.acquire(threading.Event()) == 1
    engine._fence_state()
    assert [name for name, part in vars(engine).items() if getattr(part, "state", None) is state] == []
    os.unlink(lease.lock_path)  # a newer holder takes the next epoch (as in test_local_lease.py)
    other = LocalStateStore(state.path)
    try:
        assert make_lease(other, SOURCE_ID, "b").acquire(threading.Event()) == 2
        with pytest.raises(StaleEpochError):
            engine.toast.repairs.queue([(TABLE, (1,))])
        with pytest.raises(StaleEpochError):
            engine.schema_watch.state.add_dump(DumpSpec.new(SOURCE_ID, [TABLE]))
        with pytest.raises(StaleEpochError):
            engine.scheduler.state.set_checkpoint(SOURCE_ID, Position("0000000000000001"))
        assert state.list_dumps(SOURCE_ID) == []
    finally:
        other.close()
