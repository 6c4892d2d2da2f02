"""The writer with a pure in-memory output (no I/O): order, markers, backpressure, retry."""

import dataclasses
import sys
import threading
import time

import pytest

from airflow_provider_dblog.core.batch import DumpRows
from airflow_provider_dblog.core.errors import OutputStorageError, StaleEpochError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Position, TableSchema
from airflow_provider_dblog.core.markers import Marker
from airflow_provider_dblog.core.writer import Writer, WriterFailed


def ev(i):
    return ChangeEvent("s", "t", Op.CREATE, (i,), None, {"id": i}, Position(f"{i:08d}"))


class MemoryOutput:
    def __init__(self, fail_times=0, gate=None, error=None):
        self.batches, self.schemas, self.fail_times, self.gate = [], [], fail_times, gate
        self.error = error or RuntimeError("flaky")
        self.last = None

    def register_schema(self, s):
        self.schemas.append(s)

    def register_schemas(self, schemas):
        self.schemas.extend(schemas)

    def write(self, events, epoch=None):
        if self.gate:
            self.gate.wait()
        if self.fail_times:
            self.fail_times -= 1
            raise self.error
        fresh = [e for e in events if self.last is None or e.position > self.last]
        self.batches.append(fresh)
        if fresh:
            self.last = fresh[-1].position


@dataclasses.dataclass(frozen=True)
class Tag(Marker):
    """A marker that only names itself, to see which markers completed and in what order."""

    name: object


def drain(w, want, timeout=10):
    """The names of the markers completed within ``timeout``, in order."""
    got, end = [], time.time() + timeout
    while len(got) < want and time.time() < end:
        got += [m.name for m in w.completed()]
        time.sleep(0.01)
    return got


def test_order_batches_and_markers_after_durability():
    out = MemoryOutput()
    w = Writer(out, max_batch=7, flush_interval=0.01)
    w.start()
    schema = TableSchema("t", (Column("id", "int"),), ("id",))
    w.put(schema)
    for i in range(30):
        w.put(ev(i))
        if i % 10 == 9:
            w.put(Tag(i))
    assert drain(w, 3) == [9, 19, 29]
    w.close()
    flat = [e.key[0] for b in out.batches for e in b]
    assert flat == list(range(30))
    assert max(len(b) for b in out.batches) <= 7
    assert out.schemas == [schema]


def test_marker_waits_for_the_commit():
    gate = threading.Event()
    out = MemoryOutput(gate=gate)
    w = Writer(out, flush_interval=0.01)
    w.start()
    w.put_many([ev(1), Tag("m")])
    time.sleep(0.2)
    assert w.completed() == []  # output has not returned yet: not durable
    gate.set()
    assert drain(w, 1) == ["m"]
    w.close()


def test_flush_deadline_counts_from_arrival_not_from_pickup():
    # An event that queued while a slow commit ran has waited already: it is flushed right
    # after that commit, not a whole flush_interval later (latency = commit + interval).
    gate = threading.Event()

    class Timed(MemoryOutput):
        def write(self, events, epoch=None):
            self.times = getattr(self, "times", [])
            self.times.append(("start", time.monotonic()))
            super().write(events, epoch)
            self.times.append(("end", time.monotonic()))

    out = Timed(gate=gate)
    w = Writer(out, max_batch=2, flush_interval=1.0)
    w.start()
    w.put_many([ev(1), ev(2), Tag("first")])  # a full batch flushes at once: the write blocks
    time.sleep(0.2)
    w.put_many([ev(3), Tag("second")])  # arrives during the blocked commit (batch not full)
    time.sleep(1.5)  # longer than flush_interval: ev(2) is overdue when the commit ends
    gate.set()
    assert drain(w, 2) == ["first", "second"]
    w.close()
    (_, end1), (_, start2) = out.times[1], out.times[2]
    assert start2 - end1 < 0.6, f"second flush waited {start2 - end1:.2f} s after the first commit"


def test_backpressure_blocks_the_producer():
    gate = threading.Event()
    out = MemoryOutput(gate=gate)
    w = Writer(out, max_buffer=10, max_batch=5, flush_interval=0.01)
    w.start()
    done = threading.Event()

    def produce():
        for i in range(40):
            w.put(ev(i))
        done.set()

    t = threading.Thread(target=produce)
    t.start()
    time.sleep(0.3)
    assert not done.is_set() and w.buffered() <= 10
    gate.set()
    t.join(10)
    assert done.is_set()
    w.close()
    assert [e.key[0] for b in out.batches for e in b] == list(range(40))


@pytest.mark.parametrize("budget", [4 * 2**20, None], ids=["byte budget", "events only"])
def test_wide_rows_are_held_back_by_the_byte_budget(budget):
    """Chunks of wide rows stop the producer once about ``max_buffer_bytes`` are buffered,
    long before ``max_buffer`` events: the engine must not select chunk after chunk of
    30-column rows ahead of a slow output (issue 13: peak RSS). Without the budget, all the
    chunks are taken."""
    gate = threading.Event()
    out = MemoryOutput(gate=gate)
    w = Writer(out, max_buffer=100_000, max_buffer_bytes=budget, max_batch=1_000, flush_interval=0.01)
    w.start()
    wide = {f"c{i}": f"value {i} " * 4 for i in range(30)}  # ~4 kB in Python objects
    put = []

    def produce():
        for n in range(10):  # 10 chunks of 1,000 rows: ~40 MB, 10,000 events
            keys = [(n * 1000 + i,) for i in range(1000)]
            w.put(DumpRows("s", "t", "d1", None, Position(f"{n + 1:08d}"), 1, keys, [dict(wide) for _ in keys]))
            put.append(n)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(0.5)
    if budget is None:
        assert len(put) == 10
    else:
        assert 1 <= len(put) < 4 and w.buffered_bytes() >= budget  # ~4 MB per chunk
        assert not w.has_room()  # the engine selects no chunk now
    gate.set()
    t.join(10)
    w.close()
    assert len(put) == 10 and w.buffered() == 0 and w.buffered_bytes() == 0 and w.has_room()
    assert sum(len(b) for b in out.batches) == 10_000


def test_retry_after_failure_writes_nothing_twice():
    out = MemoryOutput(fail_times=2)
    w = Writer(out, flush_interval=0.01)
    w.start()
    w.put_many([ev(i) for i in range(5)] + [Tag("ok")])
    assert drain(w, 1) == ["ok"]
    w.close()
    assert [e.key[0] for b in out.batches for e in b] == list(range(5))


def test_stale_epoch_is_fatal_and_surfaces_to_the_engine():
    out = MemoryOutput(fail_times=1, error=StaleEpochError("old epoch.", "stop."))
    w = Writer(out, flush_interval=0.01, epoch=1)
    w.start()
    w.put(ev(1))
    time.sleep(0.3)
    with pytest.raises(WriterFailed, match="old epoch"):
        w.completed()
    assert out.batches == []


@pytest.mark.parametrize("batch_bytes", [2 * 2**20, None], ids=["byte bound", "events only"])
def test_a_batch_of_wide_rows_ends_at_the_byte_bound(batch_bytes):
    """One output commit holds at most about ``max_batch_bytes`` of rows: chunks of 30-column
    rows are split at the bound, while narrow rows fill ``max_batch`` events (issue 13: the
    commit's fixed cost against the batch's memory). Without the bound, events only."""
    gate = threading.Event()
    out = MemoryOutput(gate=gate)
    w = Writer(out, max_buffer=100_000, max_buffer_bytes=None, max_batch=2_000, max_batch_bytes=batch_bytes)
    wide = {f"c{i}": f"value {i} " * 4 for i in range(30)}  # ~4 kB in Python objects
    for n in range(4):
        keys = [(n * 1000 + i,) for i in range(1000)]
        w.put(DumpRows("s", "t", "d1", None, Position(f"{n + 1:08d}"), 1, keys, [dict(wide) for _ in keys]))
    narrow = [ev(10_000 + i) for i in range(6_000)]
    w.put_many(narrow)
    w.start()
    gate.set()
    w.close()
    sizes = [len(b) for b in out.batches]
    assert sum(sizes) == 10_000
    if batch_bytes is None:
        assert sizes == [2_000] * 5
    else:
        row = dict(wide)  # sized as the writer sizes it (core/writer.py approx_bytes)
        per_row = 300 + sum(map(sys.getsizeof, row.values())) + sys.getsizeof(row)
        assert sizes[0] == batch_bytes // per_row < 1_000  # the first chunk split at the bound
        assert max(sizes) == 2_000  # ~0.5 kB events: max_batch ends their batches


def test_a_dumps_last_chunk_is_written_without_waiting_for_the_flush_interval():
    """A ChunkProgress that finishes its dump ends the batch at once (Marker.flush_now): the
    dump's DONE waits for nothing but the commit; an ordinary marker waits for the interval."""
    from airflow_provider_dblog.core.dumps import TableProgress
    from airflow_provider_dblog.core.markers import ChunkProgress

    out = MemoryOutput()
    w = Writer(out, flush_interval=3600)
    w.start()
    progress = TableProgress((3,), 3, 1, True, 0)
    w.put_many([ev(1), ChunkProgress("d1", "public.t", progress, False), ev(2)])
    time.sleep(0.2)
    assert w.completed() == [] and out.batches == []  # waits for the interval (an hour)
    last = ChunkProgress("d1", "public.t", progress, True)
    assert not w.awaits_urgent()
    w.put_many([ev(3), last, ev(4)])
    assert w.awaits_urgent()  # the engine waits for the log in short steps meanwhile
    end = time.time() + 10
    done: list = []
    while not done and time.time() < end:
        done = w.completed()
        time.sleep(0.01)
    assert done and done[-1] == last and not w.awaits_urgent()
    # What came after the marker waits for the next batch (and its interval).
    assert [e.position for b in out.batches for e in b] == [ev(i).position for i in (1, 2, 3)]
    w.close()


class Down:
    """An output that refuses every write (a broker down), or raises ``error``."""

    def __init__(self, error=None):
        self.error = error or ConnectionError("Timed out waiting for operation to finish\nsecond line")
        self.attempts = 0

    def __repr__(self):
        return "BrokerOutput('b:9092')"

    def register_schema(self, schema):
        pass

    def register_schemas(self, schemas):
        pass

    def write(self, events, epoch=None):
        self.attempts += 1
        raise self.error


def test_an_output_down_past_the_outage_timeout_ends_with_its_cause_and_the_fix():
    """Issue 39 part 5: a broker down longer than the writer waits ended the capture with
    the client library's traceback; it ends with one error naming the output, the last
    failure and the fix (the CLI prints it as `dblog: error:`), the original chained."""
    from airflow_provider_dblog.core.errors import OutputUnavailable

    w = Writer(Down(), flush_interval=0.01, outage_timeout=0.5, max_backoff=0.05)
    w.start()
    w.put_many([ev(1)])
    with pytest.raises(WriterFailed) as failed:
        w.close(timeout=30)
    cause = failed.value.__cause__
    assert isinstance(cause, OutputUnavailable) and isinstance(cause.__cause__, ConnectionError)
    assert "BrokerOutput('b:9092') refused" in str(cause) and "longer than the output outage timeout" in str(cause)
    assert "Timed out waiting for operation to finish." in str(cause) and "second line" not in str(cause)
    assert "nothing is lost" in cause.fix and "--output-outage-timeout" in cause.fix


def test_an_outage_is_waited_out_reported_while_it_lasts_and_the_batch_written_once(caplog):
    """Issue 34 part 4: the writer retries a refused batch for the outage timeout (not a
    count of attempts), says so through ``outage()`` for the status report, and forgets the
    outage once a write goes through."""
    out = MemoryOutput(fail_times=4, error=ConnectionError("broker down"))
    w = Writer(out, flush_interval=0.01, outage_timeout=0, max_backoff=0.05)
    w.start()
    seen = []
    with caplog.at_level("WARNING", logger="airflow_provider_dblog.core.writer"):
        w.put_many([ev(i) for i in range(3)] + [Tag("ok")])
        end = time.monotonic() + 10
        while not w.completed() and time.monotonic() < end:
            if w.outage():
                seen.append(w.outage())
            time.sleep(0.001)
    w.close()
    assert [e.key[0] for b in out.batches for e in b] == [0, 1, 2]
    assert seen and seen[-1]["error"] == "broker down" and seen[-1]["gives_up_at"] is None
    assert max(o["attempts"] for o in seen) >= 3 and w.outage() is None
    assert any("accepts writes again" in r.getMessage() for r in caplog.records)


def test_puts_during_an_outage_do_not_shorten_the_backoff(monkeypatch):
    """Every put wakes the writer's condition; a fast-failing output (a refused connection)
    must still be retried at the backoff's pace, not at the pace of the puts."""
    from airflow_provider_dblog.core import writer

    monkeypatch.setattr(writer, "STOP_GRACE", 0.1)
    down = Down(ConnectionError("connection refused"))
    w = Writer(down, max_buffer=10**6, flush_interval=0.001, outage_timeout=0, max_backoff=0.4)
    w.start()
    end = time.monotonic() + 1.5
    i = 0
    while time.monotonic() < end:  # a put every 5 ms: 300 wake-ups
        i += 1
        w.put_many([ev(i)])
        time.sleep(0.005)
    # pauses 0.2, 0.4, 0.4, 0.4 ... s: about 5 attempts in 1.5 s
    assert 3 <= down.attempts <= 8, down.attempts
    with pytest.raises(WriterFailed):
        w.close(timeout=30)


def test_a_stop_during_an_outage_ends_the_writer_after_the_grace(monkeypatch):
    """A capture stopped (SIGTERM) while its output is down exits after STOP_GRACE, not after
    the outage timeout: nothing is lost, the next start writes the batch."""
    from airflow_provider_dblog.core import writer
    from airflow_provider_dblog.core.errors import OutputUnavailable

    monkeypatch.setattr(writer, "STOP_GRACE", 0.3)
    w = Writer(Down(), flush_interval=0.01, outage_timeout=0, max_backoff=5.0)
    w.start()
    w.put_many([ev(1)])
    t0 = time.monotonic()
    with pytest.raises(WriterFailed) as failed:
        w.close(timeout=30)
    assert time.monotonic() - t0 < 10  # the 5 s backoffs were cut short by the stop
    assert isinstance(failed.value.__cause__, OutputUnavailable)
    assert "while the capture was stopping" in str(failed.value.__cause__)


@pytest.mark.parametrize(
    "error",
    [
        OutputStorageError("the changelog's storage at /lake is full", "free space at /lake"),
        TypeError("Integer exceeds 64-bit range"),
    ],
    ids=["a-refusal-with-its-own-fix", "an-error-no-wait-changes"],
)
def test_an_error_waiting_cannot_heal_stops_after_a_few_attempts_whatever_the_timeout(error):
    """A full or read-only disk (a DBLogError with its fix), or a TypeError/ValueError from
    the output (a value it cannot encode, a bug), is no outage: waiting an hour would only
    hide it. The writer stops after FIXED_BY_OPERATOR_ATTEMPTS with that error, even with
    no timeout."""
    from airflow_provider_dblog.core import writer

    down = Down(error)
    w = Writer(down, flush_interval=0.01, outage_timeout=0, max_backoff=0.01)
    w.start()
    w.put_many([ev(1)])
    with pytest.raises(WriterFailed) as failed:
        w.close(timeout=30)
    assert failed.value.__cause__ is error
    assert down.attempts == writer.FIXED_BY_OPERATOR_ATTEMPTS


def test_a_commit_another_writer_beat_is_retried_counted_and_not_warned_about(caplog):
    """Captures sharing a lake root race for the changelog's next version: the loser's batch
    is retried without the failure back-off (a pause of a few milliseconds) and without a warning per commit (one line a
    minute sums them up); the batch is written once."""
    from airflow_provider_dblog.core.errors import CommitConflict

    out = MemoryOutput(fail_times=3, error=CommitConflict("another writer committed changelog version 7 first"))
    w = Writer(out, flush_interval=0.01, outage_timeout=0.001)  # conflicts are no outage
    w.start()
    with caplog.at_level("INFO", logger="airflow_provider_dblog.core.writer"):
        w.put_many([ev(i) for i in range(3)] + [Tag("ok")])
        assert drain(w, 1) == ["ok"]
    w.close()
    assert [e.key[0] for b in out.batches for e in b] == [0, 1, 2]
    assert w.commit_conflicts == 3
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in caplog.records if "retried" in r.getMessage()] == [
        "changelog commit retried: another writer committed changelog version 7 first (captures sharing a lake "
        "written before the table per source race for its one table (docs/changelog-format.md, Layout); in a table "
        "per source, only this source's deposed leader does; more are summed up once a minute)"
    ]


def test_a_conflict_that_never_clears_ends_the_writer_with_the_fix(monkeypatch):
    from airflow_provider_dblog.core import writer
    from airflow_provider_dblog.core.errors import CommitConflict, OutputUnavailable

    monkeypatch.setattr(writer.random, "uniform", lambda lo, hi: 0.0)  # no pauses: 100 conflicts

    out = MemoryOutput(fail_times=10**6, error=CommitConflict("another writer committed first"))
    w = Writer(out, flush_interval=0.01)
    w.start()
    w.put_many([ev(1)])
    with pytest.raises(WriterFailed) as failed:
        w.close(timeout=30)
    assert (
        isinstance(failed.value.__cause__, OutputUnavailable) and "lake root of its own" in failed.value.__cause__.fix
    )
    assert out.batches == []


def test_each_commit_is_handed_to_on_commit_and_a_failing_callback_changes_nothing():
    seen = []

    def on_commit(seconds, events):
        seen.append((seconds, events))
        raise RuntimeError("a broken metrics exporter")

    out = MemoryOutput()
    w = Writer(out, flush_interval=0.01, max_batch=3, on_commit=on_commit)
    w.start()
    w.put_many([ev(i) for i in range(7)] + [Tag("ok")])
    assert drain(w, 1) == ["ok"]
    w.close()
    assert [e.key[0] for b in out.batches for e in b] == list(range(7))  # all written once
    assert sum(n for _, n in seen) == 7 and len(seen) == w.flushes and all(s >= 0 for s, _ in seen)
