"""The ordered writer: one thread, a bounded buffer, one output commit per flush.

The engine thread hands over items in stream order; the writer groups them into batches and
makes each durable with one ``Output.write`` call. Items:

* ``ChangeEvent``  written in order;
* ``DumpRows``     a chunk's rows, written in order as one block (split across batches
                   when bigger than what is left of one);
* ``LogRows``      a binlog rows event's changes, likewise (core/batch.py);
* ``TableSchema``  registered with the output before any later event (schema store);
* ``Marker``       (core/markers.py) completed once everything handed over before it is durable. The engine
                   stores checkpoints and dump progress only from completed markers
                   (invariant 5: a checkpoint never runs ahead of the output).

Backpressure: ``put`` blocks while the buffer holds ``max_buffer`` events or about
``max_buffer_bytes`` of them, so a slow output slows the log reader instead of growing memory
without bound. The byte budget is what holds wide rows: 100,000 events of 30 columns are
hundreds of MB in Python objects, so the engine could select chunk after chunk ahead of the
writer. A put's size is estimated from one sample event (``approx_bytes``), not per event.

A batch ends at ``max_batch`` events or about ``max_batch_bytes``, whichever comes first: each
output commit has a fixed cost (a Delta commit: a log entry, a Parquet footer, the catch-up
read), so narrow rows go 50,000 to a commit, while 30-column rows stop at about 18,000 (their
batch's Arrow columns and Parquet encoding are the writer's share of the peak memory).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import sys
import threading
import time
from typing import Any, Callable, Iterable, Optional

from .batch import Block, DumpRows, EventBatch, LogRows, Segment
from .errors import CommitConflict, DBLogError, OutputUnavailable, StaleEpochError
from .events import ChangeEvent, TableSchema
from .markers import Marker
from .protocols import Output

log = logging.getLogger(__name__)


# Attempts at a batch the output refused with a cause and fix of its own (DBLogError: a full
# or read-only disk, a refused topic), or with an error no wait changes (a value the output
# cannot take, a bug: _DETERMINISTIC): the capture stops after these (about 6 s) instead of
# waiting out the outage timeout.
FIXED_BY_OPERATOR_ATTEMPTS = 6
_DETERMINISTIC = (TypeError, ValueError, KeyError, AttributeError, IndexError, AssertionError)
# Seconds a stopping capture keeps retrying a batch the output refuses before it exits
# (nothing lost: the next start writes it); within Writer.close's and the trigger's waits.
STOP_GRACE = 20.0


class WriterFailed(RuntimeError):
    pass


# An event's own objects beside its row image (the event, its key and position).
_EVENT_OVERHEAD = 300


def approx_bytes(row: Optional[dict[str, Any]] | str) -> int:
    """A row image's approximate size in memory: the dict and its values (not what nested
    values hold), or its JSON text (a chunk's rows, core/row_text.py)."""
    if not row:
        return 0
    if isinstance(row, str):
        return sys.getsizeof(row)
    return sys.getsizeof(row) + sum(map(sys.getsizeof, row.values()))


def _event_bytes(item: ChangeEvent | DumpRows | LogRows) -> int:
    """Approximate bytes of one event of ``item``: a block's sized by its first row."""
    if isinstance(item, ChangeEvent):
        image: Any = item.after if item.after is not None else item.before
    elif isinstance(item, DumpRows):
        image = item.rows[0] if item.rows else None
    else:
        image = (item.afters[0] if item.afters[0] is not None else item.befores[0]) if item.positions else None
    return _EVENT_OVERHEAD + approx_bytes(image)


def _estimate(items: list[Any]) -> tuple[int, int]:
    """(events, approximate bytes) of a put: each list of events sized by its first one,
    each chunk by its first row."""
    events = nbytes = 0
    sample: Optional[int] = None
    for i in items:
        if isinstance(i, ChangeEvent):
            if sample is None:
                sample = _event_bytes(i)
            events += 1
            nbytes += sample
        elif isinstance(i, Block) and len(i):
            events += len(i)
            nbytes += len(i) * _event_bytes(i)
    return events, nbytes


class Writer:
    def __init__(
        self,
        output: Output,
        *,
        max_buffer: int = 100_000,
        max_buffer_bytes: Optional[int] = 64 * 2**20,
        max_batch: int = 50_000,
        max_batch_bytes: Optional[int] = 20 * 2**20,
        flush_interval: float = 0.2,
        epoch: Optional[int] = None,
        outage_timeout: float = 3600.0,
        max_backoff: float = 10.0,
        on_commit: Optional[Callable[[float, int], None]] = None,
    ):
        """``outage_timeout``: seconds the writer keeps retrying a batch the output refuses
        (a broker or object store down) before it gives up (0: never); ``max_backoff``: the
        longest pause between two attempts (doubling from 0.2 s); ``on_commit``: called with
        each commit's seconds and events, on the writer's thread (the metrics' histogram)."""
        self.output = output
        self.on_commit = on_commit
        self.max_buffer = max_buffer
        self.max_buffer_bytes = max_buffer_bytes  # None: events only
        self.max_batch = max_batch
        self.max_batch_bytes = max_batch_bytes  # None: events only
        self.flush_interval = flush_interval
        self.epoch = epoch
        self.outage_timeout = outage_timeout
        self.max_backoff = max_backoff
        # The output refusing writes right now (Outage), for the status report; None while it accepts them.
        self._outage: Optional[Outage] = None
        self._items: collections.deque[Any] = collections.deque()
        # When the buffer last went from empty to non-empty: its oldest item has waited at
        # least since then, so a flush is due flush_interval after it.
        self._waiting_since = 0.0
        self._buffered_events = 0
        self._buffered_bytes = 0  # approximate, see _estimate
        # The batch being committed (retried through an outage): events, approximate bytes.
        self._in_flight = (0, 0)
        # When the output call under way began (Unix time; None between calls): a commit that
        # does not answer shows before it fails (a broker gone: its 30 s timeout).
        self._calling_since: Optional[float] = None
        self._cond = threading.Condition()
        self._completed: collections.deque[Marker] = collections.deque()
        self._stopping = False
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="dblog-writer", daemon=True)
        self.events_written = 0
        self.flushes = 0
        self.commit_seconds = 0.0  # summed over the output commits that went through
        self.failed_attempts = 0  # output writes that failed and were retried or gave up
        # Commits another writer of the same changelog beat (captures sharing a lake root):
        # retried after a short pause, summed up in the log once a minute, not warned about.
        self.commit_conflicts = 0
        self._conflicts_logged = (0, time.monotonic())
        self._urgent = 0  # markers put with flush_now and not yet taken by completed()

    # -- engine side -------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def put_many(self, items: Iterable[Any]) -> None:
        items = list(items)
        if not items:
            return
        n, nbytes = _estimate(items)
        urgent = sum(1 for i in items if isinstance(i, Marker) and i.flush_now)
        with self._cond:
            while self._full() and self._error is None:
                self._cond.wait(0.5)
            self._raise_if_failed()
            if not self._items:
                self._waiting_since = time.monotonic()
            self._items.extend(items)
            self._buffered_events += n
            self._buffered_bytes += nbytes
            self._urgent += urgent
            self._cond.notify_all()

    def has_room(self) -> bool:
        """Whether a put would go through now. The engine selects no dump chunk while there
        is none: a chunk selected only to wait in ``put`` is one more chunk in memory."""
        with self._cond:
            return not self._full()

    def _full(self) -> bool:
        """No room for one more put? (One put may overshoot: it is never split or refused.)"""
        if self._buffered_events >= self.max_buffer:
            return True
        return self.max_buffer_bytes is not None and self._buffered_bytes >= self.max_buffer_bytes

    def put(self, item: Any) -> None:
        self.put_many([item])

    def completed(self) -> list[Marker]:
        """Markers that became durable since the last call, in order."""
        self._raise_if_failed()
        out: list[Marker] = []
        while self._completed:
            out.append(self._completed.popleft())
        if self._urgent:
            self._urgent -= sum(1 for m in out if m.flush_now)
        return out

    def awaits_urgent(self) -> bool:
        """Whether a marker that is written at once (Marker.flush_now) has not completed yet:
        the engine then waits for the log in short steps, to apply it as soon as it is done."""
        return self._urgent > 0

    def buffered(self) -> int:
        return self._buffered_events

    def buffered_bytes(self) -> int:
        """The buffered events' approximate size in memory."""
        return self._buffered_bytes

    def in_flight(self) -> tuple[int, int]:
        """(events, approximate bytes) of the batch being committed: held beside the buffer,
        at most ``max_batch`` events or about ``max_batch_bytes``."""
        return self._in_flight

    def commit_pending_since(self) -> Optional[float]:
        """When the output commit under way began (Unix time), None between commits."""
        return self._calling_since

    def outage(self) -> Optional[dict[str, Any]]:
        """The output refusing writes, for the status report: since when (Unix time), how
        many attempts, the last error and when the writer gives up (None: never); None
        while the output accepts writes."""
        o = self._outage
        return None if o is None else o.report(self.outage_timeout)

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for room in the buffer (the engine keeps reporting
        and holding its lease meanwhile instead of blocking in ``put``)."""
        with self._cond:
            if self._full() and self._error is None:
                self._cond.wait(timeout)
            self._raise_if_failed()
            return not self._full()

    def running(self) -> bool:
        """True while the writer thread is alive (started and not yet stopped or failed)."""
        return self._thread.is_alive()

    def close(self, timeout: float = 60.0) -> None:
        """Flush what is buffered and stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise WriterFailed(f"the writer did not drain its buffer within {timeout} s")
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise WriterFailed(f"the output failed: {self._error}") from self._error

    # -- writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                batch, schemas, markers, stop = self._take_batch()
                if batch or schemas or markers:
                    self._flush(batch, schemas)
                    self._completed.extend(markers)
                self._in_flight = (0, 0)
                if stop:
                    return
        except BaseException as exc:  # surfaced to the engine thread by put/completed
            if isinstance(exc, DBLogError):  # a cause with its fix (a lost lease, say): no traceback
                log.error("writer stopped: %s", exc)
            else:
                log.exception("writer failed")
            with self._cond:
                self._error = exc
                self._cond.notify_all()

    def _take_batch(self) -> tuple[EventBatch, list[TableSchema], list[Marker], bool]:
        """Wait for items, then gather until the batch is full or the flush interval ends."""
        segments: list[Segment] = []  # lists of ChangeEvents and DumpRows blocks, in order
        events: list[ChangeEvent] = []  # the open list segment
        size = 0
        nbytes = 0  # approximate, as _estimate
        full = False  # max_batch events or max_batch_bytes reached
        due = False  # a marker that wants its batch written now (Marker.flush_now)
        event_bytes: Optional[int] = None  # of this batch's first ChangeEvent, for all of them
        schemas: list[TableSchema] = []
        markers: list[Marker] = []
        deadline: Optional[float] = None

        def batch() -> EventBatch:
            self._in_flight = (size, nbytes)
            return EventBatch(segments + [events])

        taken = 0  # events taken off the buffer since the last release
        with self._cond:
            while True:
                while self._items and not full and not due:
                    item = self._items.popleft()
                    if isinstance(item, ChangeEvent):
                        if event_bytes is None:
                            event_bytes = _event_bytes(item)
                        events.append(item)
                        size += 1
                        nbytes += event_bytes
                        taken += 1
                    elif isinstance(item, Block):
                        per = _event_bytes(item)
                        room = self.max_batch - size
                        if self.max_batch_bytes is not None:
                            room = min(room, (self.max_batch_bytes - nbytes) // per)
                            if room < 1 and size:  # no room for a row: it opens the next batch
                                self._items.appendleft(item)
                                full = True
                                continue
                            room = max(room, 1)  # a row bigger than the bound goes alone
                        if len(item) > room:
                            item, rest = item.split(room)
                            self._items.appendleft(rest)
                        if events:
                            segments.append(events)
                            events = []
                        segments.append(item)
                        size += len(item)
                        nbytes += len(item) * per
                        taken += len(item)
                    elif isinstance(item, Marker):
                        markers.append(item)
                        due = item.flush_now
                    elif isinstance(item, TableSchema):
                        schemas.append(item)
                    else:
                        raise TypeError(f"writer got an unknown item {type(item).__name__}")
                    full = size >= self.max_batch or (
                        self.max_batch_bytes is not None and nbytes >= self.max_batch_bytes
                    )
                self._take(taken)
                taken = 0
                self._cond.notify_all()  # room in the buffer again
                if full or due:
                    return batch(), schemas, markers, False
                if self._stopping and not self._items:
                    return batch(), schemas, markers, True
                if markers and not size and not schemas:
                    return batch(), schemas, markers, False  # everything before is durable
                now = time.monotonic()
                if size or markers or schemas:
                    if deadline is None:
                        # From the items' arrival, not from now: what queued while the last
                        # commit ran has already waited (else latency = commit + interval).
                        deadline = min(now, self._waiting_since) + self.flush_interval
                    if now >= deadline:
                        return batch(), schemas, markers, False
                    self._cond.wait(deadline - now)
                else:
                    self._cond.wait(0.5)

    def _take(self, n: int) -> None:
        """``n`` events left the buffer: their share of the estimated bytes goes with them."""
        if n >= self._buffered_events:
            self._buffered_bytes = 0
        elif n:
            self._buffered_bytes -= self._buffered_bytes * n // self._buffered_events
        self._buffered_events = max(0, self._buffered_events - n)

    def _conflict(self, exc: CommitConflict) -> None:
        self.commit_conflicts += 1
        seen, since = self._conflicts_logged
        now = time.monotonic()
        hint = (
            "captures sharing a lake written before the table per source race for its one table "
            "(docs/changelog-format.md, Layout); in a table per source, only this source's deposed leader does"
        )
        if seen == 0:
            log.info("changelog commit retried: %s (%s; more are summed up once a minute)", exc, hint)
        elif now - since >= 60:
            log.info(
                "%d changelog commits retried in the last %.0f s (%s)", self.commit_conflicts - seen, now - since, hint
            )
        else:
            return
        self._conflicts_logged = (self.commit_conflicts, now)

    def _flush(self, batch: EventBatch, schemas: list[TableSchema]) -> None:
        conflicts = 0
        while True:
            try:
                if schemas:
                    self.output.register_schemas(schemas)
                if batch:
                    # Output.write skips positions it already has, so a retry after an
                    # unknown outcome (commit done, answer lost) writes nothing twice.
                    started = time.monotonic()
                    self._calling_since = time.time()
                    try:
                        self.output.write(batch, epoch=self.epoch)
                    finally:
                        self._calling_since = None
                    took = time.monotonic() - started
                    if self.on_commit is not None:  # before the counters: never behind them
                        try:
                            self.on_commit(took, len(batch))
                        except Exception:  # noqa: BLE001 - a metric must never fail the capture
                            log.exception("the commit callback failed")
                    self.commit_seconds += took
                    self.events_written += len(batch)
                    self.flushes += 1
                if self._outage is not None:
                    o, self._outage = self._outage, None
                    log.warning(
                        "the output %r accepts writes again, after %.0f s and %d failed attempts",
                        self.output,
                        time.time() - o.since,
                        o.attempts,
                    )
                return
            except StaleEpochError:
                raise
            except CommitConflict as exc:
                # Not a failure: another writer's commit took the version. The retry re-reads
                # the log first, after a short random pause: writers that retried at once
                # collided again (on S3, 3.8 conflicts per commit among 5 writers, measured:
                # bench/shared_root.py). Bounded, in case the conflict never clears.
                conflicts += 1
                self._conflict(exc)
                if conflicts > 100:  # not the occasional race of a shared root
                    raise OutputUnavailable(
                        f"the output {self.output!r} lost {conflicts} commits in a row to other writers.",
                        "give each capture a lake root of its own (docs/deploy.md), then start it again.",
                    ) from exc
                time.sleep(random.uniform(0, min(0.5, 0.01 * 2**conflicts)))  # full jitter
                continue
            except Exception as exc:  # noqa: BLE001 - any refusal: _failed retries or gives up
                self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        """One refused attempt: wait before the next (the engine holds the log meanwhile,
        backpressure), or give up once the outage outlasts ``outage_timeout`` or the capture
        is stopping. Nothing is lost either way: no checkpoint passes this batch."""
        self.failed_attempts += 1
        o = self._outage
        if o is None:
            o = self._outage = Outage(time.time(), time.monotonic())
        o.attempts += 1
        o.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        elapsed = time.monotonic() - o.started
        if isinstance(exc, (DBLogError, *_DETERMINISTIC)) and o.attempts >= FIXED_BY_OPERATOR_ATTEMPTS:
            raise exc  # a cause with its fix already (a full disk), or a bug: waiting will not fix it
        given_up = bool(self.outage_timeout) and elapsed >= self.outage_timeout
        if given_up or (self._stopping and elapsed >= STOP_GRACE):
            # A cause and a fix instead of the client's traceback (issue 39 part 5).
            why = "while the capture was stopping" if not given_up else "for longer than the output outage timeout"
            raise OutputUnavailable(
                f"the output {self.output!r} refused {o.attempts} attempt(s) in a row over {elapsed:.0f} s "
                f"({why}), last with: {o.error}.",
                "check that the output is reachable and accepts writes (Kafka: the brokers are up; "
                "Delta: the lake's storage), then start the capture again: nothing is lost, it resumes "
                "from its checkpoint and writes this batch exactly once. A longer wait: "
                "dblog capture --output-outage-timeout SECONDS (0: wait for ever).",
            ) from exc
        delay = min(0.2 * 2 ** (o.attempts - 1), self.max_backoff)
        if self.outage_timeout:
            delay = max(0.0, min(delay, self.outage_timeout - elapsed))
        # One warning per attempt while they are frequent, then one a minute.
        if o.attempts <= 5 or time.monotonic() - o.warned_at >= 60:
            log.warning("output write failed (%s), attempt %d, next in %.1f s", o.error, o.attempts + 1, delay)
            o.warned_at = time.monotonic()
        # The whole pause, though every put wakes the condition: a fast-failing output would
        # else be retried at the pace of the puts. A stop ends it early (one more attempt,
        # then the grace decides), and while stopping pauses are 1 s at most.
        end = time.monotonic() + delay
        with self._cond:
            while (left := end - time.monotonic()) > 0:
                if self._stopping and left > 1.0:
                    end = time.monotonic() + 1.0
                    continue
                self._cond.wait(left)


@dataclasses.dataclass
class Outage:
    """The output refusing writes: since ``since`` (Unix time; ``started`` monotonic)."""

    since: float
    started: float
    attempts: int = 0
    error: str = ""
    warned_at: float = 0.0

    def report(self, timeout: float) -> dict[str, Any]:
        return {
            "since": self.since,
            "seconds": round(time.monotonic() - self.started, 1),
            "attempts": self.attempts,
            "error": self.error,
            "gives_up_at": self.since + timeout if timeout else None,
        }
