"""The dump scheduler (core/scheduler.py) on a real local state store and a fake clock:
lifecycle (pause, resume, cancel, fail, done), throttle changes, the back-off after an aborted
chunk, and progress that is stored only once durable and resumed after a restart."""

from __future__ import annotations

import pytest

from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, DumpStatus, TableProgress
from airflow_provider_dblog.core.errors import RequestError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.core.scheduler import REQUEST_CHECK, DumpScheduler, describe_wait
from airflow_provider_dblog.state.local import LocalStateStore

from .memory_capture import SCHEMA, SOURCE_ID, TABLE


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    return Clock()


def scheduler(state, clock, tables=(TABLE, "app.other")) -> DumpScheduler:
    return DumpScheduler(state, SOURCE_ID, lambda: list(tables), lambda t: 1000, control_interval=0.5, clock=clock)


def request(state, tables=(TABLE,), keys=None, **control) -> str:
    spec = DumpSpec.new(SOURCE_ID, list(tables) if tables else None, keys)
    state.add_dump(spec, DumpControl(**control))
    return spec.dump_id


def rows(*ids):
    return [{"id": i, "v": str(i)} for i in ids]


def finish(s: DumpScheduler, plan, selected):
    """What the engine does for a chunk whose window closes normally: emit, then durable."""
    s.opened(plan)
    marker = s.emitted(plan, plan.progress_after(selected, SCHEMA), len(selected))
    s.durable(marker)
    return marker


def status(state, dump_id) -> DumpStatus:
    return state.get_dump(dump_id).status


def test_range_chunks_continue_from_the_last_key_and_finish_the_dump(state, clock):
    dump_id = request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert (plan.dump_id, plan.table, plan.start.last_key, plan.size, plan.keys) == (dump_id, TABLE, None, 2, None)
    assert status(state, dump_id) is DumpStatus.RUNNING
    finish(s, plan, rows(1, 2))
    plan = s.next_chunk()
    assert plan.start.last_key == (2,) and plan.start.rows == 2
    marker = finish(s, plan, rows(3))  # short chunk: the table is done
    assert marker.dump_done
    assert s.next_chunk() is None
    assert status(state, dump_id) is DumpStatus.DONE
    assert state.get_dump(dump_id).progress[TABLE] == TableProgress((3,), 3, 2, True, 0)


def test_row_estimates_are_kept_for_the_tables_of_unfinished_dumps_only(state, clock):
    """The estimates go into every status report: a table whose dumps are all finished leaves
    them, or a source of 1,000 tables would report 1,000 estimates for ever after `dump --all`."""
    dump_id = request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert s.estimates == {TABLE: 1000}
    finish(s, plan, rows(1))  # short chunk: the dump is done
    assert status(state, dump_id) is DumpStatus.DONE
    clock.advance(1)
    assert s.next_chunk() is None
    assert s.estimates == {}
    request(state, tables=("app.other",))
    clock.advance(1)
    s.next_chunk()
    assert s.estimates == {"app.other": 1000}


def test_progress_is_stored_only_when_durable_and_a_restart_resumes_there(state, clock):
    request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    marker = s.emitted(plan, plan.progress_after(rows(1, 2), SCHEMA), 2)
    (stored,) = state.list_dumps(SOURCE_ID)
    assert stored.progress == {}  # emitted but not yet durable (invariant 5)
    s.durable(marker)
    plan = s.next_chunk()
    s.emitted(plan, plan.progress_after(rows(3, 4), SCHEMA), 2)  # emitted, never durable: lost in a crash
    restarted = scheduler(state, clock)
    assert restarted.next_chunk().start.last_key == (2,)  # the last durable chunk, not the emitted one


def test_pause_and_resume(state, clock):
    dump_id = request(state)
    s = scheduler(state, clock)
    state.set_control(dump_id, DumpControl().as_paused())
    assert s.next_chunk() is None
    assert status(state, dump_id) is DumpStatus.PAUSED
    clock.advance(10)
    assert s.next_chunk() is None  # stays paused, no chunk
    state.set_control(dump_id, DumpControl().as_resumed())
    assert s.next_chunk() is None  # not read again before the next look at dumps_version
    clock.advance(REQUEST_CHECK)
    assert s.next_chunk() is not None
    assert status(state, dump_id) is DumpStatus.RUNNING


class WithoutVersion:
    """A store without ``dumps_version``: its requests are read every control interval."""

    def __init__(self, store) -> None:
        self._store = store

    def __getattr__(self, name):
        if name == "dumps_version":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_a_request_is_read_at_once_and_a_store_without_a_version_every_control_interval(state, clock, tmp_path):
    s = scheduler(state, clock)
    assert s.next_chunk() is None  # nothing asked: the requests are read
    other = LocalStateStore(str(tmp_path / "state.db"))  # another process: the CLI, an Airflow task
    try:
        dump_id = request(other)
    finally:
        other.close()
    clock.advance(REQUEST_CHECK)
    assert s.next_chunk().dump_id == dump_id  # long before the control interval
    plain = scheduler(WithoutVersion(state), clock)
    assert plain.next_chunk().dump_id == dump_id
    second = request(state, tables=("app.other",))
    state.set_control(dump_id, DumpControl().as_cancelled())
    clock.advance(0.4)
    assert plain.next_chunk().dump_id == dump_id  # not read again yet
    clock.advance(0.1)
    assert plain.next_chunk().dump_id == second


def test_cancel_ends_the_dump_and_the_next_one_runs(state, clock):
    first = request(state)
    second = request(state, tables=("app.other",))
    s = scheduler(state, clock)
    assert s.next_chunk().dump_id == first
    state.set_control(first, DumpControl().as_cancelled())
    clock.advance(0.5)
    assert s.next_chunk().dump_id == second
    assert status(state, first) is DumpStatus.CANCELLED


def test_throttle_changes_chunk_size_and_delay_while_running(state, clock):
    dump_id = request(state, chunk_size=2)
    s = scheduler(state, clock)
    finish(s, s.next_chunk(), rows(1, 2))
    state.set_control(dump_id, DumpControl(chunk_size=2).throttled(chunk_size=5, delay_ms=300))
    clock.advance(0.5)
    plan = s.next_chunk()
    assert plan.size == 5
    finish(s, plan, rows(3, 4, 5, 6, 7))
    assert s.next_chunk() is None  # the delay after a chunk
    clock.advance(0.29)
    assert s.next_chunk() is None
    clock.advance(0.02)
    assert s.next_chunk().start.last_key == (7,)


def test_an_aborted_chunk_backs_off_doubling_up_to_a_second_and_a_normal_chunk_resets_it(state, clock):
    request(state)
    s = scheduler(state, clock)
    waits = []
    for _ in range(8):
        plan = s.next_chunk()
        assert plan is not None
        s.aborted(plan, "invisible transaction")
        start = clock.now
        while s.next_chunk() is None:
            clock.advance(0.01)
        waits.append(round(clock.now - start, 2))
    assert waits == [0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.0, 1.0]
    s.opened(plan)
    s.aborted(plan, "again")
    clock.advance(0.02)
    assert s.next_chunk() is not None  # back to 20 ms


def test_a_failed_request_fails_alone(state, clock):
    bad = request(state, tables=("app.gone",))
    good = request(state)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.dump_id == bad
    s.failed(plan, RequestError("table app.gone does not exist.", "name a captured table."))
    assert s.next_chunk().dump_id == good
    dump = state.get_dump(bad)
    assert dump.status is DumpStatus.FAILED and "app.gone does not exist" in dump.error


def test_key_list_dump_goes_through_its_keys_in_chunks(state, clock):
    dump_id = request(state, keys=[(i,) for i in range(5)], chunk_size=2)
    s = scheduler(state, clock)
    seen = []
    while (plan := s.next_chunk()) is not None:
        seen.append(plan.keys)
        finish(s, plan, rows(*(k[0] for k in plan.keys)))
    assert seen == [((0,), (1,)), ((2,), (3,)), ((4,),)]
    assert status(state, dump_id) is DumpStatus.DONE


def test_all_tables_in_order_and_a_dump_durable_before_its_status_is_finished_on_restart(state, clock):
    dump_id = request(state, tables=None, chunk_size=10)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.table == TABLE
    finish(s, plan, rows(1))
    plan = s.next_chunk()
    assert plan.table == "app.other"
    marker = s.emitted(plan, plan.progress_after([], SCHEMA), 0)
    assert marker.dump_done
    # A crash after the progress write but before the status write: a restart finishes it.
    state.save_progress(dump_id, marker.table, marker.progress)
    assert status(state, dump_id) is DumpStatus.RUNNING
    restarted = scheduler(state, clock)
    assert restarted.next_chunk() is None
    assert status(state, dump_id) is DumpStatus.DONE


def test_health_reports_rows_estimate_and_pause(state, clock):
    dump_id = request(state, chunk_size=2)
    s = scheduler(state, clock)
    finish(s, s.next_chunk(), rows(1, 2))
    health = s.health()[dump_id]
    assert (health["rows"], health["estimated_total"], health["paused"]) == (2, 1000, False)


def test_a_table_dump_stops_at_its_upper_bound_and_a_restart_keeps_it(state, clock):
    """Part of "dumps finish": the bound fixed at the start travels with the progress; the
    chunk that reaches it ends the table even when it is full."""
    dump_id = request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.needs_bound and plan.upper_key is None
    plan = plan.bounded((4,), Position("00000009"))  # what the engine does with Source.max_key
    assert not plan.needs_bound and plan.upper_key == (4,)
    finish(s, plan, rows(1, 2))
    restarted = scheduler(state, clock)  # the stored progress carries the bound
    plan = restarted.next_chunk()
    assert (plan.start.last_key, plan.upper_key, plan.needs_bound) == ((2,), (4,), False)
    assert plan.start.bound_at == Position("00000009").encode()
    marker = finish(restarted, plan, rows(3, 4))  # a full chunk, but it reached the bound
    assert marker.dump_done and marker.progress.done
    assert status(state, dump_id) is DumpStatus.DONE
    assert state.get_dump(dump_id).progress[TABLE] == TableProgress(
        (4,), 4, 2, True, 0, (4,), Position("00000009").encode()
    )


def test_an_empty_table_takes_one_chunk_that_selects_nothing(state, clock):
    """The chunk only states its range (the whole key space, for range repair)."""
    dump_id = request(state, tables=None)
    s = scheduler(state, clock)
    plan = s.next_chunk().bounded(None, Position("00000009"))
    assert not plan.selects_rows and not plan.needs_bound
    finish(s, plan, [])
    assert state.get_dump(dump_id).progress[TABLE] == TableProgress(
        None, 0, 1, True, 0, None, Position("00000009").encode()
    )
    assert s.next_chunk().table == "app.other"  # the dump goes on with its next table


# -- fair dumps (invariant 11) -----------------------------------------------------------------
def test_a_repair_goes_before_a_running_backfill_and_waits_only_for_the_chunk_in_flight(state, clock):
    """A key-list dump requested while a table dump runs gets the next chunk, and is done
    before the table dump takes another one (not after its last)."""
    backfill = request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.dump_id == backfill
    repair = request(state, keys=[(i,) for i in range(5)])  # while the backfill's chunk is in flight
    finish(s, plan, rows(1, 2))
    clock.advance(REQUEST_CHECK)
    plan = s.next_chunk()
    assert plan.dump_id == repair and plan.keys == tuple((i,) for i in range(5))
    assert s.health()[repair]["waiting"] is None  # its chunk is in flight
    assert s.health()[backfill]["waiting"] == {"why": "priority", "behind": repair}
    finish(s, plan, rows(0, 1, 2, 3, 4))
    assert status(state, repair) is DumpStatus.DONE
    assert status(state, backfill) is DumpStatus.RUNNING
    assert s.next_chunk().start.last_key == (2,)  # the backfill goes on where it was


def test_a_schema_redump_goes_before_a_backfill_requested_earlier(state, clock):
    backfill = request(state, tables=("app.other",))
    spec = DumpSpec.new(SOURCE_ID, [TABLE], repair=True)  # what core/schema_watch.py requests
    state.add_dump(spec, DumpControl())
    s = scheduler(state, clock)
    assert s.next_chunk().dump_id == spec.dump_id
    assert s.health()[backfill]["waiting"] == {"why": "priority", "behind": spec.dump_id}


def test_two_backfills_take_turns_chunk_by_chunk(state, clock):
    first = request(state, chunk_size=2)
    second = request(state, tables=("app.other",), chunk_size=2)
    s = scheduler(state, clock)
    served = []
    for i in range(3):
        for _ in range(2):
            plan = s.next_chunk()
            served.append(plan.dump_id)
            finish(s, plan, rows(2 * i + 1, 2 * i + 2))  # full chunks: neither ends
    assert served == [first, second] * 3


def test_a_stream_of_new_dumps_does_not_hold_a_backfill_back(state, clock):
    """The capture's TOAST repairs under an update load: whenever none is waiting, a new one
    arrives during the chunk window (core/toast.py merges a new one into one that waits).
    A new dump queues behind the dumps already there, so the backfill still gets one of every
    two chunks; a new dump used to go first, and the backfill waited as long as the load."""
    backfill = request(state, chunk_size=2)
    s = scheduler(state, clock)
    served, waiting = [], None
    for i in range(12):
        plan = s.next_chunk()
        served.append(plan.dump_id)
        if waiting is None or plan.dump_id == waiting:  # none waits: the next one is new
            spec = DumpSpec.new(SOURCE_ID, [TABLE], [(1000 + i,)], toast_repair=True)
            state.add_dump(spec, DumpControl())
            waiting = spec.dump_id
        key = (plan.start.last_key or (0,))[0] if plan.keys is None else 0
        finish(s, plan, rows(*range(key + 1, key + 1 + plan.size)) if plan.keys is None else rows(1000 + i))
        clock.advance(REQUEST_CHECK)
    assert all(backfill in served[i : i + 2] for i in range(len(served) - 1)), served
    assert len(set(served)) > 4, served  # the repairs are served too


def test_a_repair_superseded_during_every_chunk_keeps_its_place(state, clock):
    """New keys replace the waiting TOAST repair by one listing both (core/toast.py): the new
    dump takes the old one's place in the queue, so a repair superseded during every window
    is still served, and the backfill too."""
    backfill = request(state, chunk_size=2)
    s = scheduler(state, clock)
    served, waiting = [], None
    for i in range(12):
        plan = s.next_chunk()
        served.append(plan.dump_id)
        keys = [(1000 + i,)]
        if waiting is not None and plan.dump_id != waiting:
            keys = list(state.get_dump(waiting).spec.keys) + keys
        spec = DumpSpec.new(SOURCE_ID, [TABLE], keys, toast_repair=True)
        state.add_dump(spec, DumpControl())
        if waiting is not None and plan.dump_id != waiting:
            s.superseded(waiting, spec.dump_id)
        waiting = spec.dump_id
        key = (plan.start.last_key or (0,))[0] if plan.keys is None else 0
        finish(s, plan, rows(*range(key + 1, key + 1 + plan.size)) if plan.keys is None else [])
        clock.advance(REQUEST_CHECK)
    repairs = [i for i, d in enumerate(served) if d != backfill]
    assert len(repairs) >= 4 and all(b - a <= 3 for a, b in zip(repairs, repairs[1:])), served
    assert all(backfill in served[i : i + 3] for i in range(len(served) - 2)), served


def _run(s: DumpScheduler, clock, seconds: float, chunk_seconds: float) -> dict[str, list[float]]:
    """The engine's loop on the fake clock: each chunk takes ``chunk_seconds`` from its
    hand-out to its HW and comes back full; returns each dump's hand-out times."""
    starts: dict[str, list[float]] = {}
    end = clock.now + seconds
    while clock.now < end:
        plan = s.next_chunk()
        if plan is None:
            clock.advance(chunk_seconds)  # a log batch
            continue
        starts.setdefault(plan.dump_id, []).append(clock.now)
        clock.advance(chunk_seconds)
        key = (plan.start.last_key or (0,))[0]
        finish(s, plan, rows(*range(key + 1, key + 1 + plan.size)))
    return starts


def test_a_delay_paces_its_own_dump_only(state, clock, tmp_path):
    """A throttled dump's chunks come at the same times with or without another dump running,
    and the other dump is not slowed by the delay: it gets every chunk in between."""
    slow = request(state, chunk_size=1, delay_ms=2000)
    alone = _run(scheduler(state, clock), clock, 10, 0.125)[slow]
    assert [round(b - a, 3) for a, b in zip(alone, alone[1:])] == [2.125] * (len(alone) - 1)

    shared = LocalStateStore(str(tmp_path / "shared.db"))
    try:
        clock.now = 100.0
        slow = request(shared, chunk_size=1, delay_ms=2000)
        fast = request(shared, tables=("app.other",), chunk_size=1)
        starts = _run(scheduler(shared, clock), clock, 10, 0.125)
    finally:
        shared.close()
    assert starts[slow] == alone
    assert len(starts[slow]) + len(starts[fast]) == 10 / 0.125  # no chunk slot left idle


def test_an_aborted_chunk_backs_off_its_own_dump_only(state, clock):
    first = request(state)
    second = request(state, tables=("app.other",))
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.dump_id == first
    s.aborted(plan, "transaction 7 was emitted but invisible to the SELECT")
    assert s.next_chunk().dump_id == second  # at once, not after the first one's back-off
    assert s.health()[first]["waiting"] == {
        "why": "backoff",
        "seconds": 0.02,
        "cause": "transaction 7 was emitted but invisible to the SELECT",
    }


def test_health_says_why_each_dump_waits(state, clock):
    paused = request(state, tables=("app.other",))
    state.set_control(paused, DumpControl().as_paused())
    throttled = request(state, chunk_size=2, delay_ms=1500)
    other = request(state, chunk_size=2)
    s = scheduler(state, clock)
    plan = s.next_chunk()
    assert plan.dump_id == throttled
    waiting = {d: h["waiting"] for d, h in s.health().items()}
    assert waiting == {paused: {"why": "paused"}, throttled: None, other: {"why": "turn", "behind": throttled}}
    finish(s, plan, rows(1, 2))
    clock.advance(0.5)
    waiting = {d: h["waiting"] for d, h in s.health().items()}
    assert waiting == {paused: {"why": "paused"}, throttled: {"why": "delay", "seconds": 1.0}, other: None}
    shown = [describe_wait(w) for w in waiting.values() if w is not None]
    assert shown == ["paused", "delay(1.0s)"]
    assert describe_wait({"why": "priority", "behind": "4f2a"}) == "priority(behind 4f2a)"
    assert describe_wait({"why": "backoff", "seconds": 0.04, "cause": "table t was truncated"}) == (
        "backoff(0.04s: table t was truncated)"
    )
