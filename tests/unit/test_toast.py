"""Unchanged TOAST values (issue 11, part 3): replay never lets the placeholder overwrite a
value, and the engine queues a key-list dump for keys whose earlier value was never captured
(core/toast.py). The decoders are in test_pgoutput.py, the real server in
tests/integration/test_toast.py."""

from __future__ import annotations

import dataclasses

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.core.row_text import dumps
from airflow_provider_dblog.core.toast import ToastHistory, ToastRepairs, unchanged_columns, unchanged_toast_value
from airflow_provider_dblog.core.verify import replay
from airflow_provider_dblog.state.local import LocalStateStore

from .memory_capture import SOURCE_ID, MemoryChangelog, MemoryDatabase, MemorySource
from .test_engine import Running, wait_until

T = "app.docs"
SCHEMA = TableSchema(T, (Column("id", "integer", False), Column("n", "integer"), Column("big", "text")), ("id",))
U = unchanged_toast_value()


def ev(seq: int, op: Op, key: int, after=None, origin=Origin.LOG) -> ChangeEvent:
    return ChangeEvent(SOURCE_ID, T, op, (key,), None, after, Position(f"{seq:012d}"), origin=origin)


def test_replay_keeps_the_previous_value_of_an_unchanged_toast_column():
    events = [
        ev(1, Op.READ, 1, {"id": 1, "n": 0, "big": "B1"}, Origin.DUMP),
        ev(2, Op.UPDATE, 1, {"id": 1, "n": 1, "big": U}),
        ev(3, Op.UPDATE, 1, {"id": 1, "n": 2, "big": U}),
        ev(4, Op.CREATE, 2, {"id": 2, "n": 0, "big": "B2"}),
        ev(5, Op.UPDATE, 2, {"id": 2, "n": 1, "big": "B2b"}),
        ev(6, Op.UPDATE, 2, {"id": 2, "n": 2, "big": U}),
    ]
    want = {(1,): {"id": 1, "n": 2, "big": "B1"}, (2,): {"id": 2, "n": 2, "big": "B2b"}}
    assert replay(events) == want
    assert replay(reversed(events)) == want  # any order: the Delta scan's order is not the log's
    assert replay([events[i] for i in (4, 2, 0, 5, 1, 3)]) == want
    # The same with every image as its JSON text (a source's, for the Delta changelog).
    as_text = [dataclasses.replace(e, after=dumps(e.after)) for e in events]
    assert replay(as_text) == want
    assert [unchanged_columns(e.after) for e in as_text] == [[], ["big"], ["big"], [], [], ["big"]]


def test_replay_does_not_take_a_value_from_before_a_delete_and_a_later_dump_row_fills_it():
    events = [
        ev(1, Op.CREATE, 1, {"id": 1, "n": 0, "big": "old life"}),
        ev(2, Op.DELETE, 1),
        ev(3, Op.CREATE, 1, {"id": 1, "n": 0, "big": "new life"}),
        ev(4, Op.UPDATE, 1, {"id": 1, "n": 1, "big": U}),
        ev(5, Op.DELETE, 2),
        ev(6, Op.UPDATE, 2, {"id": 2, "n": 1, "big": U}),  # e.g. the new key of a key update
    ]
    rows = replay(events)
    assert rows[(1,)] == {"id": 1, "n": 1, "big": "new life"}
    assert rows[(2,)] == {"id": 2, "n": 1, "big": U}  # no earlier value: stays until its dump
    dumped = ev(7, Op.READ, 2, {"id": 2, "n": 1, "big": "from the dump"}, Origin.DUMP)
    assert replay(events + [dumped])[(2,)] == {"id": 2, "n": 1, "big": "from the dump"}


def test_history_keeps_only_what_a_placeholder_can_need():
    h = ToastHistory()
    for e in [
        ev(1, Op.CREATE, 1, {"id": 1, "big": "a"}),
        ev(2, Op.UPDATE, 1, {"id": 1, "big": "b"}),
        ev(3, Op.UPDATE, 1, {"id": 1, "big": U}),
        ev(0, Op.CREATE, 1, {"id": 1, "big": "older"}),  # late and older than a complete image
    ]:
        h.add(e)
    assert [p for p, _ in h._events[(1,)]] == [Position(f"{i:012d}") for i in (2, 3)]
    assert h.fill((1,), {"id": 1, "big": U}, Position(f"{3:012d}")) == {"id": 1, "big": "b"}


class ToastSource(MemorySource):
    """A MemorySource that reports the log's placeholder events like the PostgreSQL source."""

    def __init__(self, db):
        super().__init__(db)
        self.reported: list = []

    def poll(self, max_items, timeout):
        items = super().poll(max_items, timeout)
        self.reported += [
            (e.table, e.key, e.position)
            for e in items
            if isinstance(e, ChangeEvent) and e.after and any(v == U for v in e.after.values())
        ]
        return items

    def take_unchanged_toast(self):
        out, self.reported = self.reported, []
        return out


def toast_update(db: MemoryDatabase, key: int, n: int) -> Position:
    """An UPDATE that leaves ``big`` unchanged: the log has the placeholder, the table the value."""
    with db._lock:
        row = db.rows[T][(key,)]
        row["n"] = n
        pos = db._position()
        db.log.append(ChangeEvent(SOURCE_ID, T, Op.UPDATE, (key,), None, {**row, "big": U}, pos, txid=str(pos)))
        return pos


def test_a_placeholder_without_an_earlier_value_queues_a_key_dump_and_converges(tmp_path):
    db = MemoryDatabase([SCHEMA])
    for i in range(1, 11):
        db.upsert(T, {"id": i, "n": 0, "big": f"big value {i}"})  # before the capture: never captured
    state = LocalStateStore(str(tmp_path / "state.db"))
    source, out = ToastSource(db), MemoryChangelog()
    run = Running(source, out, state, reset_position=True)  # start at the end of the log
    try:
        wait_until(lambda: source._cursor is not None, what="the engine to start reading the log")
        db.upsert(T, {"id": 11, "n": 0, "big": "captured"})
        for k, n in ((3, 1), (7, 1), (3, 2), (11, 1)):
            toast_update(db, k, n)
        wait_until(lambda: len(state.list_dumps(SOURCE_ID)) >= 1, what="a key-list dump request")
        wait_until(
            lambda: all(d.status.finished for d in state.list_dumps(SOURCE_ID)),
            what="the key-list dumps to finish",
        )
        wait_until(lambda: any(e.origin is Origin.DUMP for e in out.events), what="the dump rows")
    finally:
        run.stop()
    # A dump still waiting when more keys came is replaced by one listing them all (cancelled)
    dumps = [d for d in state.list_dumps(SOURCE_ID) if d.status is DumpStatus.DONE]
    keys = {k for d in dumps for k in (d.spec.keys or ())}
    # 11's insert was captured just before its placeholder: no dump needed (ToastKnown)
    assert keys == {(3,), (7,)} and all(d.spec.tables == (T,) for d in dumps)
    rows = replay(e for e in out.events if e.table == T)
    # key 11 is filled from its captured insert, 3 and 7 from their dump rows
    assert rows == {k: r for k, r in db.snapshot(T).items() if k in {(3,), (7,), (11,)}}
    state.close()


def test_a_key_whose_full_row_was_emitted_needs_no_repair_dump(tmp_path):
    """Once this capture emitted a key's full row (its insert, or its repair dump's row), a
    later placeholder of that key queues nothing: the replay fills it from that row. Without
    this an update workload on a TOASTed table queued a one-key dump per poll, for ever."""
    db = MemoryDatabase([SCHEMA])
    for i in range(1, 11):
        db.upsert(T, {"id": i, "n": 0, "big": f"big value {i}"})  # never captured
    state = LocalStateStore(str(tmp_path / "state.db"))
    source, out = ToastSource(db), MemoryChangelog()
    run = Running(source, out, state, reset_position=True)
    try:
        wait_until(lambda: source._cursor is not None, what="the engine to start reading the log")
        toast_update(db, 3, 1)  # unknown: repaired by a dump, whose row makes 3 known
        wait_until(lambda: len(state.list_dumps(SOURCE_ID)) == 1, what="the first repair dump")
        wait_until(lambda: all(d.status.finished for d in state.list_dumps(SOURCE_ID)), what="it to end")
        db.upsert(T, {"id": 12, "n": 0, "big": "captured"})  # a full row in the log
        for n in range(2, 12):
            toast_update(db, 3, n)
            toast_update(db, 12, n)
        toast_update(db, 5, 1)  # never seen: the only new dump
        wait_until(lambda: len(state.list_dumps(SOURCE_ID)) >= 2, what="a repair dump for key 5")
        wait_until(lambda: all(d.status.finished for d in state.list_dumps(SOURCE_ID)), what="it to end")
        wait_until(lambda: any(e.key == (5,) and e.origin is Origin.DUMP for e in out.events), what="key 5's row")
    finally:
        run.stop()
    dumps = [d for d in state.list_dumps(SOURCE_ID) if d.status is DumpStatus.DONE]
    assert sorted(k for d in dumps for k in (d.spec.keys or ())) == [(3,), (5,)]
    rows = replay(e for e in out.events if e.table == T)
    assert rows == {k: r for k, r in db.snapshot(T).items() if k in {(3,), (5,), (12,)}}
    state.close()


class WholeRowChangelog(MemoryChangelog):
    """An output whose consumers write each row image as it is (Debezium's envelope)."""

    def needs_whole_rows(self) -> bool:
        return True


def test_for_consumers_that_take_rows_whole_every_placeholder_is_repaired(tmp_path):
    """Debezium's JDBC sink writes ``after`` as the row: a placeholder would stay in the
    target where nothing fills it. So for such an output every key with a placeholder gets a
    repair dump, including one whose full row was emitted before (which the replay, but no
    such sink, fills). Found by tests/integration/test_kafka_connect_sink.py."""
    db = MemoryDatabase([SCHEMA])
    state = LocalStateStore(str(tmp_path / "state.db"))
    source, out = ToastSource(db), WholeRowChangelog()
    run = Running(source, out, state, reset_position=True)
    try:
        wait_until(lambda: source._cursor is not None, what="the engine to start reading the log")
        db.upsert(T, {"id": 12, "n": 0, "big": "captured"})  # its full row goes out first
        toast_update(db, 12, 1)
        wait_until(lambda: len(state.list_dumps(SOURCE_ID)) == 1, what="a repair dump for key 12")
        wait_until(lambda: all(d.status.finished for d in state.list_dumps(SOURCE_ID)), what="it to end")
        wait_until(lambda: any(e.key == (12,) and e.origin is Origin.DUMP for e in out.events), what="12's row")
    finally:
        run.stop()
    dumps = [d for d in state.list_dumps(SOURCE_ID) if d.status is DumpStatus.DONE]
    assert [k for d in dumps for k in (d.spec.keys or ())] == [(12,)]
    last = [e for e in out.events if e.key == (12,)][-1]
    assert last.origin is Origin.DUMP and last.after == {"id": 12, "n": 1, "big": "captured"}  # the row whole
    state.close()


def test_a_waiting_repair_dump_is_replaced_by_one_listing_the_new_keys_too(tmp_path):
    """After a restart every key is unknown: an update workload must not queue one dump per
    log step (each a watermark window). A dump whose chunks have not started takes the next
    keys (a new dump listing both; the old one is never handed out and is done with the new
    one: the scheduler test below); keys it lists
    already queue nothing; once its chunk is handed out, a later placeholder queues anew."""
    state = LocalStateStore(str(tmp_path / "state.db"))
    gone: list[str] = []
    repairs = ToastRepairs(state, SOURCE_ID, max_keys=4, superseded=lambda old, by: gone.append(old))
    first = repairs.queue([(T, (1,)), (T, (2,)), (T, (1,))])
    assert [d.keys for d in first] == [((1,), (2,))]
    assert repairs.queue([(T, (2,)), (T, (1,))]) == []  # listed by the waiting dump
    second = repairs.queue([(T, (3,)), ("app.other", (9,))])
    assert sorted(d.keys for d in second) == [((1,), (2,), (3,)), ((9,),)]
    assert gone == [first[0].dump_id]

    # Full (max_keys 4): the next keys start a dump of their own, the full one stays
    third = repairs.queue([(T, (4,)), (T, (5,))])
    assert [d.keys for d in third] == [((4,), (5,))] and len(gone) == 1
    # Handed out: a change of its key now may fall into its chunk's window, so it queues again
    repairs.started(third[0].dump_id)
    assert [d.keys for d in repairs.queue([(T, (4,))])] == [((4,),)]
    # A waiting dump that ended without a chunk (a user cancelled it) no longer covers its keys
    ended: set[str] = set()
    repairs = ToastRepairs(state, SOURCE_ID, ended=ended.__contains__)
    (waiting,) = repairs.queue([(T, (6,))])
    assert repairs.queue([(T, (6,))]) == []
    ended.add(waiting.dump_id)
    assert [d.keys for d in repairs.queue([(T, (6,))])] == [((6,),)]
    state.close()


def test_a_superseded_dump_is_skipped_and_done_with_the_dump_that_covers_it(tmp_path):
    from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, TableProgress
    from airflow_provider_dblog.core.markers import ChunkProgress
    from airflow_provider_dblog.core.scheduler import DumpScheduler

    state = LocalStateStore(str(tmp_path / "state.db"))
    sched = DumpScheduler(state, SOURCE_ID, lambda: [T], lambda t: 0)
    a, b, c = (DumpSpec.new(SOURCE_ID, [T], [(k,)]) for k in (1, 2, 3))
    for spec in (a, b, c):
        state.add_dump(spec)
    sched.superseded(a.dump_id, b.dump_id)
    sched.superseded(b.dump_id, c.dump_id)  # c now covers a too
    plan = sched.next_chunk()
    assert plan is not None and plan.dump_id == c.dump_id  # a and b are never handed out
    sched.durable(ChunkProgress(c.dump_id, T, TableProgress(chunks=1, done=True, keys_done=1), True))
    assert {d.dump_id: d.status for d in state.list_dumps(SOURCE_ID)} == {
        a.dump_id: DumpStatus.DONE,
        b.dump_id: DumpStatus.DONE,
        c.dump_id: DumpStatus.DONE,
    }
    # Had the covering dump been cancelled, the covered one would be performed after all
    d, e = (DumpSpec.new(SOURCE_ID, [T], [(k,)]) for k in (4, 5))
    for spec in (d, e):
        state.add_dump(spec)
    sched.superseded(d.dump_id, e.dump_id)
    state.set_control(e.dump_id, DumpControl(cancelled=True))
    sched.wake()
    assert sched.next_chunk() is None  # e is cancelled here, which releases d
    plan = sched.next_chunk()
    assert plan is not None and plan.dump_id == d.dump_id
    state.close()


def test_the_changelog_knows_which_keys_have_a_full_row(tmp_path):
    """Delta's ``full_row_keys``: a key whose newest insert or dump row is newer than its last
    delete and the table's last TRUNCATE; not the create half of a split key update (it may
    hold a placeholder), nor an update."""
    from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput

    out = DeltaChangelogOutput(str(tmp_path / "lake"))
    out.open()
    out.register_schema(SCHEMA)
    split = dataclasses.replace(ev(8, Op.CREATE, 2, {"id": 2, "big": U}), position=Position(f"{8:012d}", 1))
    out.write(
        [
            ev(1, Op.CREATE, 4, {"id": 4}),  # before the TRUNCATE: gone
            ev(2, Op.TRUNCATE, 0),
            ev(3, Op.CREATE, 1, {"id": 1}),
            ev(4, Op.UPDATE, 1, {"id": 1, "big": U}),
            ev(5, Op.READ, 3, {"id": 3}, Origin.DUMP),
            ev(6, Op.DELETE, 3),
            ev(7, Op.DELETE, 6),
            split,
            ev(9, Op.READ, 6, {"id": 6}, Origin.DUMP),
            ev(10, Op.UPDATE, 7, {"id": 7}),
        ]
    )
    assert sorted(out.full_row_keys(SOURCE_ID, T)) == [(1,), (6,)]
    assert out.full_row_keys(SOURCE_ID, "app.other") == []
    out.close()


def test_a_restart_repairs_only_keys_the_changelog_lacks_and_merges_pending_repairs(tmp_path):
    """Issue 39 part 2: after a restart every key is unknown to the process. A placeholder of a
    key whose full row the changelog holds is filled by the replay (the capture reads which
    keys those are from the output), and the repair dumps a killed capture left pending (a
    chain of ever longer lists: each superseded one stays pending until its successor is
    done) are performed once, as one dump of the keys still lacking a row."""
    from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec
    from airflow_provider_dblog.outputs.delta import DeltaChangelogOutput

    db = MemoryDatabase([SCHEMA])
    for i in range(1, 6):
        db.upsert(T, {"id": i, "n": 0, "big": f"never captured {i}"})
    state = LocalStateStore(str(tmp_path / "state.db"))
    lake = str(tmp_path / "lake")
    source = ToastSource(db)
    run = Running(source, DeltaChangelogOutput(lake), state, reset_position=True)
    try:
        wait_until(lambda: source._cursor is not None, what="the engine to start reading the log")
        for i in range(6, 31):
            db.upsert(T, {"id": i, "n": 0, "big": f"captured {i}"})
        wait_until(lambda: state.get_checkpoint(SOURCE_ID) == db.log[-1].position, what="the inserts")
    finally:
        run.stop()
    # What a killed capture leaves: a chain of waiting repair dumps, none begun
    chain = [[(1,), (2,)], [(1,), (2,), (6,), (7,)], [(1,), (2,), (6,), (7,), (3,), (8,)]]
    for keys in chain:
        state.add_dump(DumpSpec.new(SOURCE_ID, [T], keys, toast_repair=True), DumpControl(chunk_size=1000))
    out = DeltaChangelogOutput(lake)
    run = Running(source, out, state)
    try:
        for i in range(6, 31):  # every captured key updated: all filled from their inserts
            toast_update(db, i, 1)
        toast_update(db, 4, 1)  # never captured: repaired
        wait_until(lambda: len(state.list_dumps(SOURCE_ID)) >= 5, what="the merged and the new repair dump")
        wait_until(lambda: all(d.status is DumpStatus.DONE for d in state.list_dumps(SOURCE_ID)), what="the repairs")
        wait_until(lambda: db.log[-1].position <= (out.last_position(SOURCE_ID) or db.log[0].position), what="the log")
    finally:
        run.stop()
    performed = [d for d in state.list_dumps(SOURCE_ID) if d.progress]
    read = sorted(k for d in performed for k in d.spec.keys or ())
    assert read == [(1,), (2,), (3,), (4,)], read  # each lacking key once; 6, 7, 8 had their inserts
    check = DeltaChangelogOutput(lake)
    check.open()
    rows = replay(check.scan(SOURCE_ID, T))
    assert rows == {k: r for k, r in db.snapshot(T).items() if k != (5,)}
    state.close()
