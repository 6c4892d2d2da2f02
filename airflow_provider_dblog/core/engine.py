"""The capture loop: log batches, dump chunks between them, ordered writes, checkpoints.

One thread does everything that touches the source and the state store; the writer thread
only talks to the output. Each turn of the loop:

1. poll a batch of log items and pass them through the watermark window (Algorithm 1);
2. hand the resulting stream to the writer, followed by a ``LogCheckpoint`` marker;
3. store the checkpoints and dump progress whose markers the writer completed (invariant 5);
4. if no chunk is in flight and the dump scheduler (core/scheduler.py) plans one: LW, SELECT,
   HW (the only pause of log processing, invariant 6), then open the window; its rows are
   emitted when HW comes by.

While the captured tables are idle, a *heartbeat* (a watermark no window waits for) goes
through the log every ``heartbeat_interval`` so the checkpoint, and PostgreSQL's slot with
it, keeps moving. A lost source connection (``SourceUnavailable``: server restart, killed
session) does not stop the capture: the engine closes the source, waits with backoff, reopens
it and reads the log again from where it was (``_reconnect``); only after
``reconnect_timeout`` does it fail.

With a leader lease (invariant 7) the engine first waits as standby until it holds the lease,
then runs with the lease's epoch: the lease is checked before every output commit, every state
write is conditional on it (``StateStore.fenced``), the source checks it before each log
connection (``Source.take_over``), and losing it stops the engine at once with StaleEpochError.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Optional, Sequence

from .batch import LogRows
from .chunk_step import ChunkStep, ChunkStepHooks
from .dump_requests import status_key
from .dumps import DumpControl, DumpSpec
from .errors import DBLogError, PositionLostError, SchemaChanged, SourceUnavailable, StaleEpochError
from .events import (
    ChangeEvent,
    Key,
    Op,
    Origin,
    Position,
    SchemaEvent,
    TableSchema,
    WatermarkEvent,
    split_key_update,
)
from .fencing import fenced_output
from .gc_threshold import raised_gc_threshold
from .markers import ChunkProgress, LogCheckpoint, TableReset
from .pacing import PaceSignals
from .protocols import (
    FullRowIndex,
    LeaderLease,
    Output,
    RowTextLog,
    RowTextOutput,
    Source,
    StateStore,
)
from .scheduler import DumpScheduler
from .schema_watch import SchemaWatch, describe
from .toast import ToastKnown, ToastRepairs
from .watermark import ChunkDone, Emitted, WatermarkWindow
from .writer import Writer, WriterFailed

log = logging.getLogger(__name__)

# Seconds the log is waited for at a time while a marker written at once is in flight
# (Writer.awaits_urgent): the dump's end is applied within this after its commit.
URGENT_POLL = 0.01


@dataclasses.dataclass
class EngineConfig:
    poll_batch: int = 5_000  # log items per poll
    poll_timeout: float = 0.1  # seconds to wait for the log when it is idle
    writer_buffer: int = 100_000  # events buffered before backpressure
    # ... or about this many bytes of them (wide rows: core/writer.py); None: events only
    writer_buffer_bytes: Optional[int] = 64 * 2**20
    writer_batch: int = 50_000  # events per output commit at most
    writer_batch_bytes: Optional[int] = 20 * 2**20  # and about this many bytes (None: events only)
    flush_interval: float = 0.2  # seconds an event may wait for its commit
    control_interval: float = 0.5  # seconds between reads of dump requests and controls
    status_interval: float = 5.0  # seconds between progress reports
    epoch: Optional[int] = None  # leader epoch written with every commit
    # Forget the checkpoint and start at the end of the log (after a lost position; a full
    # dump restores the state). Applied only once this instance holds the lease.
    reset_position: bool = False
    # Write a heartbeat watermark after this many seconds without a log item (None: never).
    heartbeat_interval: Optional[float] = 10.0
    # Keep trying to reconnect to a source that dropped the connection for this long.
    reconnect_timeout: float = 300.0
    reconnect_max_backoff: float = 10.0  # seconds between attempts at most (doubling from 0.5)
    # A lost log position (a dropped or lost PostgreSQL slot, a purged binlog): stop with the
    # fix (default), or start at the log's end and dump every table (rows deleted in the gap
    # go too: range repair), without a person.
    redump_on_position_lost: bool = False
    # Compare the captured tables' catalog schemas with the recorded ones this often (0: only
    # when the log or a chunk shows a new shape); a changed table is dumped again.
    schema_check_interval: float = 10.0
    # Adaptive dumps read the source's replicas' lag at most this often (seconds).
    replica_lag_interval: float = 2.0
    # Python's generation-0 GC threshold while the engine runs (core/gc_threshold.py; None or
    # 0: leave the interpreter's 700).
    gc_threshold: Optional[int] = 50_000


class Engine:
    def __init__(
        self,
        source: Source,
        output: Output,
        state: StateStore,
        config: Optional[EngineConfig] = None,
        on_progress: Optional[Callable[[dict[str, Any]], None]] = None,
        lease: Optional[LeaderLease] = None,
        on_standby: Optional[Callable[[Optional[dict[str, Any]]], None]] = None,
        chunk_hooks: Optional[ChunkStepHooks] = None,
    ):
        self.source = source
        self.output = output
        self.state = state
        self.config = config or EngineConfig()
        self.on_progress = on_progress
        self.lease = lease
        self.on_standby = on_standby
        self.source_id = source.source_id
        self.window = WatermarkWindow()
        self.scheduler = DumpScheduler(
            state, self.source_id, source.tables, source.estimate_rows, self.config.control_interval
        )
        self.schemas: dict[str, TableSchema] = {}
        # The output stores rows as their JSON text: chunks and the log give them so (row_text.py).
        self._takes_texts = isinstance(output, RowTextOutput) and output.takes_row_text
        self.chunk_step = ChunkStep(
            source, self.window, self.scheduler, self._takes_texts, self._pace_signals, chunk_hooks
        )
        self.durable: Optional[Position] = None  # last checkpoint stored
        self.last_seen: Optional[Position] = None
        self.events_in = 0  # log change events processed (the rate in status reports)
        self.heartbeats = 0
        self.reconnects = 0
        self.position_recoveries = 0  # lost positions recovered by a full dump (opt-in)
        self.writer: Optional[Writer] = None  # set once the source and output are open
        self._skip_until: Optional[Position] = None
        self._last_commit_ts: Optional[int] = None  # µs, of the newest log event processed
        self._replica_lag: Optional[float] = None  # the source's replicas' lag (adaptive dumps)
        self._replica_lag_at = float("-inf")
        self._last_item_at = time.monotonic()  # when the log last gave us anything
        self._unreadable: dict[str, str] = {}  # table -> why its catalog schema cannot be read
        self._resets: dict[str, TableSchema] = {}  # watermark uuid -> new schema (key changed)
        self._resetting: set[str] = set()  # tables whose reset is not durable yet
        self.toast_known = ToastKnown()  # keys whose full row this process emitted (core/toast.py)
        self.toast_repairs = ToastRepairs(
            self.state, self.source_id, superseded=self.scheduler.superseded, ended=self.scheduler.ended
        )
        self.schema_watch = SchemaWatch(self.state, self.source_id, self.config.schema_check_interval)
        self._warned: set[str] = set()

    @property
    def parallel_reads(self) -> int:
        """Chunks read by more than one connection (--readers)."""
        return self.chunk_step.parallel_reads

    # -- lifecycle -----------------------------------------------------------------------
    def _fence_state(self) -> None:
        """The lease holder's view of the state store for the engine and for every part that
        holds the store (the scheduler, the schema watch, the TOAST repairs; a part added
        later that holds it belongs in this list): a part left with the plain store would
        write as a deposed leader."""
        assert self.lease is not None
        self.state = self.state.fenced(self.lease.fence())
        self.scheduler.state = self.schema_watch.state = self.toast_repairs.state = self.state

    def run(self, stop: Optional[threading.Event] = None, max_seconds: Optional[float] = None) -> None:
        stop = stop or threading.Event()
        deadline = time.monotonic() + max_seconds if max_seconds else None
        if self.lease is not None:
            # Standby until we lead: only the lease holder connects to the log (invariant 7).
            log.info("capture of %s: contending for the leader lease as %s", self.source_id, self.lease.identity)
            epoch = self.lease.acquire(stop, self.on_standby)
            if epoch is None:
                return  # stopped while standby
            self.config = dataclasses.replace(self.config, epoch=epoch)
            # Fenced from here on: every output commit and every state write of this process
            # is refused once a newer leader exists, and the source opens no log connection.
            self.output = fenced_output(self.output, self.lease)
            self._fence_state()
            self.source.take_over(self.lease.check, self._previous_log_status(), self.lease.domain)
            log.info("capture of %s: leader with epoch %d", self.source_id, epoch)
        try:
            with raised_gc_threshold(self.config.gc_threshold):
                self._run(stop, deadline)
        except StaleEpochError:
            raise
        except WriterFailed as exc:
            # The output's own refusal (a newer epoch) or a lease check in the writer thread.
            cause = exc.__cause__ if isinstance(exc.__cause__, DBLogError) else exc
            raise self._lease_error_or(cause) from cause
        except Exception as exc:
            # A deposed leader usually fails elsewhere first (its source connection was taken
            # over, say): report the real cause, the lost lease, when that is what happened.
            raise self._lease_error_or(exc) from exc
        finally:
            if self.lease is not None:
                self.lease.release()

    def _previous_log_status(self) -> Optional[dict[str, Any]]:
        """The log status in the last report of this source's capture (the previous leader's)."""
        report = self.state.get_value(status_key(self.source_id))
        try:
            log_status = json.loads(report).get("log") if report else None
        except ValueError:  # a torn or foreign value: nothing to learn from it
            return None
        return log_status if isinstance(log_status, dict) else None

    def _lease_error_or(self, exc: BaseException) -> BaseException:
        if self.lease is not None:
            try:
                self.lease.check()
            except StaleEpochError as lost:
                lost.__cause__ = exc
                return lost
            except Exception as unreachable:  # noqa: BLE001 - logged; the original error matters more
                log.warning(
                    "capture of %s: could not ask the coordinator whether the lease is still "
                    "held (%s); reporting the original error",
                    self.source_id,
                    unreachable,
                )
        return exc

    def _fence(self) -> None:
        """Raise StaleEpochError unless we still hold the lease (asks the coordinator)."""
        if self.lease is not None:
            self.lease.check()

    def _run(self, stop: threading.Event, deadline: Optional[float]) -> None:
        self.source.open()
        self.output.open()
        writer = self.writer = Writer(
            self.output,
            max_buffer=self.config.writer_buffer,
            max_buffer_bytes=self.config.writer_buffer_bytes,
            max_batch=self.config.writer_batch,
            max_batch_bytes=self.config.writer_batch_bytes,
            flush_interval=self.config.flush_interval,
            epoch=self.config.epoch,
        )
        try:
            self._start(writer, stop)
            next_status = time.monotonic() + self.config.status_interval
            t0, n0 = time.monotonic(), 0
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                if self.lease is not None and not self.lease.held():
                    self.lease.check()  # raises when lost; waits out a short suspension
                try:
                    try:
                        self._log_step(writer)
                        self._apply_durable(writer)
                        self._schema_step(writer)
                        self._dump_step(writer)
                        self._heartbeat_step()
                    except SourceUnavailable as exc:
                        self._reconnect(exc, stop)
                        continue
                    now = time.monotonic()
                    if now >= next_status:
                        self._report((self.events_in - n0) / max(now - t0, 1e-9))
                        t0, n0, next_status = now, self.events_in, now + self.config.status_interval
                except PositionLostError as exc:  # the slot dropped under us, WAL removed, ...
                    self._recover_position(exc)
            writer.close()
            self._apply_durable(writer)
            self._report(0.0)
        finally:
            if writer.running():
                try:
                    writer.close(timeout=30)
                except WriterFailed as exc:  # already failing and reported: keep the original error
                    log.warning("writer did not close cleanly: %s", exc)
                except Exception:
                    log.exception("writer did not close cleanly")
            self.source.close()
            self.output.close()

    def _start(self, writer: Writer, stop: threading.Event) -> None:
        if self.config.reset_position:
            self.state.clear_checkpoint(self.source_id)
            log.warning("capture of %s: checkpoint reset, starting at the end of the log", self.source_id)
        checkpoint = self.state.get_checkpoint(self.source_id)
        self.durable = checkpoint
        # Events up to here are durable already (the output may be ahead of the checkpoint
        # after a crash between its commit and the checkpoint write).
        known = [p for p in (checkpoint, self.output.last_position(self.source_id)) if p is not None]
        self._skip_until = max(known) if known else None
        for table in self.source.tables():
            self._schema(table, writer)
        self._merge_toast_repairs()
        writer.start()
        try:
            self._start_log(
                checkpoint, from_end=self.config.reset_position and checkpoint is None, floor=self._skip_until
            )
        except SourceUnavailable as exc:  # e.g. a previous leader's session still holds the log
            self._reconnect(exc, stop)
        except PositionLostError as exc:
            self._recover_position(exc)
        self._last_item_at = time.monotonic()
        log.info("capture of %s started at %s", self.source_id, checkpoint or "the source's bookmark (no checkpoint)")

    def _schema(self, table: str, writer: Writer) -> TableSchema:
        """The table's schema, read from the source (and handed to the writer, which registers
        it with the output) on first use; RequestError for an unknown table."""
        schema = self.schemas.get(table)
        if schema is None:
            schema = self.schemas[table] = self.source.table_schema(table)
            writer.put(schema)
        return schema

    # -- lost positions -----------------------------------------------------------------------
    def _recover_position(self, exc: PositionLostError) -> None:
        """Opt-in (``redump_on_position_lost``): request a dump of every table first (a crash
        right after asks again, as the position is still lost), then forget the checkpoint
        and read the log from its current end. Changes in the gap reach the changelog through
        the dump; rows deleted in it go through its key ranges."""
        if not self.config.redump_on_position_lost:
            raise exc
        spec = DumpSpec.new(self.source_id, None)
        self.state.add_dump(spec, DumpControl())
        self.position_recoveries += 1
        log.warning(
            "capture of %s: %s Reading from the current end of the log; dump %s of every table restores what the gap held.",
            self.source_id,
            exc.cause,
            spec.dump_id,
        )
        self.window.abandon()
        self.state.clear_checkpoint(self.source_id)
        self.durable = None
        self.source.reset_log()
        floor = max((p for p in (self._skip_until, self.last_seen) if p is not None), default=None)
        self._start_log(None, from_end=True, floor=floor)
        self.scheduler.wake()

    # -- schema changes -----------------------------------------------------------------------
    def _schema_step(self, writer: Writer) -> None:
        """Compare each captured table's catalog schema with the recorded one; a changed table
        is dumped again (core/schema_watch.py). Chunks select the catalog's columns from here
        on. Not while a chunk is in flight (its rows are in the shape it selected)."""
        if self.window.busy or not self.schema_watch.due():
            return
        queued = False
        for table in self.source.tables():
            try:
                schema = self.source.catalog_schema(table)
            except SourceUnavailable:
                raise
            except DBLogError as exc:  # dropped, or no key any more: its dumps say why
                if self._unreadable.get(table) != str(exc):
                    log.warning("capture of %s: cannot read the schema of %s: %s", self.source_id, table, exc)
                self._unreadable[table] = str(exc)
                continue
            self._unreadable.pop(table, None)
            known = self.schemas.get(table)
            if known is None or known.schema_id() != schema.schema_id():
                self.schemas[table] = schema
                writer.put(schema)
            old = self.schema_watch.changed(schema)
            if old is None or table in self._resetting:
                continue
            if old.key != schema.key:
                # Old and new events name rows by different keys: clear the table's older rows
                # with a TRUNCATE at a position of our own (a watermark); the re-dump follows
                # once it is durable (markers.TableReset).
                reset = uuid.uuid4().hex
                self._resets[reset] = schema
                self._resetting.add(table)
                self.source.write_watermark(reset)
                log.warning(
                    "capture of %s: the primary key of %s changed (%s): its older rows are cleared "
                    "(op t) and the table is dumped again under the new key",
                    self.source_id,
                    table,
                    describe(old, schema),
                )
            else:
                self.schema_watch.redump(schema, old)
                queued = True
        self.schema_watch.checked()
        if queued:
            self.scheduler.wake()

    def _reset_table(self, wm: WatermarkEvent) -> list[Any]:
        """The TRUNCATE for a primary-key change, at the position of its own watermark."""
        schema = self._resets.pop(wm.uuid)
        truncate = ChangeEvent(
            self.source_id,
            schema.table,
            Op.TRUNCATE,
            (),
            None,
            None,
            wm.position,
            None,
            wm.txid,
            Origin.LOG,
            None,
            schema.schema_id(),
        )
        return self._emit(self.window.process(truncate)) + [TableReset(schema)]

    # -- heartbeats and reconnects ------------------------------------------------------------
    def _heartbeat_step(self) -> None:
        """An idle log still moves the checkpoint: a watermark no window waits for comes back
        through the log, and _log_step checkpoints its position like any item's (the window
        drops it). Not while a chunk is in flight: its own LW/HW are on the way anyway."""
        interval = self.config.heartbeat_interval
        if not interval or self.window.busy or time.monotonic() - self._last_item_at < interval:
            return
        self.source.write_watermark(uuid.uuid4().hex)
        self.heartbeats += 1
        self._last_item_at = time.monotonic()

    def _reconnect(self, exc: SourceUnavailable, stop: threading.Event) -> None:
        """Close the source, wait with backoff, reopen it and read the log again from the last
        position handed to the writer. The writer keeps what it has (it does not depend on
        the source); an open chunk window is abandoned and its chunk selected again, its
        watermarks arriving later are stale and dropped. Events up to ``last_seen`` are
        dropped when delivered again."""
        self.reconnects += 1
        self.window.abandon()
        resume = max((p for p in (self.durable, self.last_seen) if p is not None), default=None)
        if resume is not None:
            self._skip_until = max(self._skip_until, resume) if self._skip_until else resume
        log.warning("capture of %s: lost the source connection (%s); reconnecting", self.source_id, exc)
        deadline = time.monotonic() + self.config.reconnect_timeout
        delay, last = 0.5, exc
        while True:
            try:
                self.source.close()
            except Exception as broken:  # noqa: BLE001 - the connection is broken already
                log.debug("closing the lost source connection: %s", broken)
            if stop.wait(delay):
                raise last  # stopping: nothing more to read
            self._fence()  # the lease may have moved on while we were cut off
            try:
                self.source.open()
                # Without any position yet, the source resumes from its own bookmark (the
                # PostgreSQL slot; MySQL's first start position): nothing is skipped.
                self._start_log(resume, floor=self._skip_until)
            except PositionLostError as lost:  # e.g. a promoted replica without our transaction
                self._recover_position(lost)
            except SourceUnavailable as err:
                last = err
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DBLogError(
                        f"lost the connection to source {self.source_id} and could not reconnect "
                        f"within {self.config.reconnect_timeout:.0f} s (last error: {err.cause}).",
                        "check that the database is up and reachable; a restarted capture resumes "
                        "from its checkpoint without loss.",
                    ) from err
                # The last attempt comes at the deadline, not a whole backoff before it.
                delay = min(delay * 2, self.config.reconnect_max_backoff, remaining)
                continue
            self._last_item_at = time.monotonic()
            self.scheduler.wake()
            log.warning(
                "capture of %s: reconnected, reading the log after %s",
                self.source_id,
                resume or "the source's bookmark",
            )
            return

    # -- log ------------------------------------------------------------------------------
    def _log_step(self, writer: Writer) -> None:
        # A dump's last chunk is being written: its DONE should not wait for an idle log.
        timeout = min(self.config.poll_timeout, URGENT_POLL) if writer.awaits_urgent() else self.config.poll_timeout
        items = self.source.poll(self.config.poll_batch, timeout)
        if not items:
            self._queue_unchanged_toast([])  # e.g. keys of a partition that came or went
            return
        self._last_item_at = time.monotonic()
        out: list[Any] = []
        last: Optional[Position] = None
        skip = self._skip_until
        process = self.window.process
        for block in items:
            if block.__class__ is LogRows:
                # One rows event's changes: passed on whole unless the window or a restart
                # needs them one by one.
                if (skip is None or block.first_position > skip) and self.window.pass_block(block.table, block.txid):
                    self.events_in += len(block)
                    if block.commit_ts is not None:
                        self._last_commit_ts = block.commit_ts
                    last = block.last_position
                    out.append(block)
                    continue
                each: Sequence[Any] = block.events()
            else:
                each = (block,)
            for item in each:
                if isinstance(item, SchemaEvent):
                    self.schemas[item.schema.table] = item.schema
                    out.append(item.schema)
                    self.schema_watch.soon()  # maybe an ALTER TABLE: compare with the catalog
                    continue
                pos = item.position
                if skip is not None and pos <= skip:
                    continue  # delivered again after a restart; already durable
                last = pos
                if isinstance(item, ChangeEvent):
                    self.events_in += 1
                    if item.commit_ts is not None:
                        self._last_commit_ts = item.commit_ts
                    for ev in self._split(item) if item.op is Op.UPDATE else (item,):
                        emitted = process(ev)
                        if len(emitted) == 1 and emitted[0] is ev:  # the usual case: passed on as is
                            out.append(ev)
                        else:
                            out.extend(self._emit(emitted))
                elif isinstance(item, WatermarkEvent) and item.uuid in self._resets:
                    out.extend(self._reset_table(item))
                else:
                    out.extend(self._emit(process(item)))
        if last is not None:
            self.last_seen = last
            out.append(LogCheckpoint(last))
        self._queue_unchanged_toast(out)
        writer.put_many(out)

    def _queue_unchanged_toast(self, out: list[Any]) -> None:
        """Queue a key-list dump for the keys of changes whose ``after`` still holds an
        unchanged-TOAST placeholder (PostgreSQL without REPLICA IDENTITY FULL; core/toast.py)
        and whose full row this process has not emitted before (``ToastKnown``: the replay
        fills those). Stored before ``out`` reaches the writer, so it is never lost: a crash
        before those changes are durable reads them again."""
        skip = self._skip_until
        raw = [(t, key, pos) for t, key, pos in self.source.take_unchanged_toast() if skip is None or pos > skip]
        for table in {t for t, _, _ in raw} - self.toast_known.tables:
            self._seed_toast_known(table)
        if not self.toast_known.tables:
            return
        hits = self.toast_known.walk(out, {pos: (t, key) for t, key, pos in raw})
        if hits:
            for spec in self.toast_repairs.queue(hits):
                log.info(
                    "capture of %s: dump %s queued for %d key(s) of %s whose rows the log does not carry "
                    "(unchanged TOAST values, partitions that joined or left)",
                    self.source_id,
                    spec.dump_id,
                    len(spec.keys or ()),
                    (spec.tables or ("?",))[0],
                )
            self.scheduler.wake()

    def _seed_toast_known(self, table: str) -> None:
        """The first placeholder of ``table`` in this process: learn from the output which
        of its keys have a full row in the changelog already (one read of its events' keys),
        so that a restart or failover does not repair every key an update touches again."""
        keys: list[Key] = []
        if isinstance(self.output, FullRowIndex):  # the Delta output (protocols.py)
            keys = self.output.full_row_keys(self.source_id, table)
            log.info(
                "capture of %s: %d key(s) of %s have a full row in the changelog", self.source_id, len(keys), table
            )
        self.toast_known.seed(table, keys)

    def _merge_toast_repairs(self) -> None:
        """At a start: the TOAST repair dumps an earlier process queued and did not begin
        become one per table, less the keys whose full row the changelog holds by now."""
        pending = [d for d in self.state.list_dumps(self.source_id) if d.spec.toast_repair and not d.status.finished]
        tables = {d.spec.tables[0] for d in pending if d.spec.tables}
        for table in sorted(tables - self.toast_known.tables):
            self._seed_toast_known(table)
        for spec in self.toast_repairs.merge_pending(pending, lambda t, k: (t, k) in self.toast_known):
            log.info(
                "capture of %s: dump %s repairs the %d key(s) of %s that the pending repair dumps list and the changelog lacks",
                self.source_id,
                spec.dump_id,
                len(spec.keys or ()),
                (spec.tables or ("?",))[0],
            )

    def _split(self, ev: ChangeEvent) -> list[ChangeEvent]:
        """A primary-key update is a delete of the old key and an upsert of the new one. (A
        ``before`` as JSON text is from a source that found the key unchanged: ``start_log``.)"""
        if ev.before is not None and not isinstance(ev.before, str):
            schema = self.schemas.get(ev.table)
            if schema is not None and all(c in ev.before for c in schema.key):
                old = schema.key_of(ev.before)
                if old != ev.key:
                    return split_key_update(ev, old)
        return [ev]

    def _emit(self, emitted: list[Emitted]) -> list[Any]:
        out: list[Any] = []
        for em in emitted:
            if isinstance(em, ChangeEvent):
                out.append(em)
            elif isinstance(em, ChunkDone):
                out.extend(self.chunk_step.emit(em))
            else:  # e.g. a TRUNCATE of its table inside the window: select it again
                self.scheduler.aborted(em.context.plan, em.reason)
        return out

    def _dump_step(self, writer: Writer) -> None:
        if self.window.busy or not writer.has_room():
            return  # a chunk selected now would only wait for the writer, in memory
        plan = self.scheduler.next_chunk()
        if plan is None:
            return
        self.toast_repairs.started(plan.dump_id)
        try:
            self.chunk_step.run(plan, self._schema(plan.table, writer), self.last_seen)
        except SourceUnavailable:
            raise  # the source is gone for a moment, the request is fine
        except SchemaChanged as exc:  # a column the SELECT named is gone: select it again
            self.schema_watch.soon()
            self.scheduler.aborted(plan, str(exc))
        except DBLogError as exc:
            self.scheduler.failed(plan, exc)  # a bad request fails that dump, not the capture

    def _start_log(self, after: Optional[Position], **kwargs: Any) -> None:
        """``source.start_log``; the log's row images as their changelog JSON text when the
        output stores that text and the source can read them so (core/row_text.py). Nothing
        in the engine reads a log image but a key update's ``before``, which a source gives
        as a dict."""
        source = self.source
        if self._takes_texts and isinstance(source, RowTextLog) and source.logs_row_text:
            source.start_log(after, texts=True, **kwargs)
        else:
            source.start_log(after, **kwargs)

    def _pace_signals(self, select_seconds: float, rows: int) -> PaceSignals:
        """What an adaptive dump paces itself by (core/pacing.py): the SELECT's time, the
        capture's lag behind the log (0 while the log is idle) and the replicas' lag (read
        from the source at most every ``replica_lag_interval``)."""
        now = time.monotonic()
        capture_lag = 0.0
        if self._last_commit_ts and now - self._last_item_at < 2.0:
            capture_lag = max(0.0, time.time() - self._last_commit_ts / 1e6)
        if now - self._replica_lag_at > self.config.replica_lag_interval:
            self._replica_lag_at = now
            try:
                self._replica_lag = self.source.replication_lag()
            except SourceUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - a signal, not a reason to stop the capture
                log.warning("capture of %s: replica lag unavailable: %s", self.source_id, exc)
                self._replica_lag = None
        return PaceSignals(select_seconds, rows, capture_lag, self._replica_lag)

    # -- durability ------------------------------------------------------------------------
    def _apply_durable(self, writer: Writer) -> None:
        done = writer.completed()
        if not done:
            return
        last_log: Optional[Position] = None
        for marker in done:  # the fenced state store refuses these from a deposed leader
            if isinstance(marker, ChunkProgress):
                self.scheduler.durable(marker)
            elif isinstance(marker, LogCheckpoint):
                last_log = marker.position
            elif isinstance(marker, TableReset):
                self.schema_watch.redump(marker.schema, None)
                self._resetting.discard(marker.schema.table)
                self.scheduler.wake()
        if last_log is not None:
            self.state.set_checkpoint(self.source_id, last_log)
            self.durable = last_log
            self.source.acknowledge(last_log)

    # -- reporting ---------------------------------------------------------------------------
    def status(self, rate: float) -> dict[str, Any]:
        try:
            src = self.source.log_status()
        except PositionLostError:
            raise  # the slot was dropped or invalidated under us: stop with the fix
        except Exception as exc:  # noqa: BLE001 - a report must never stop the capture
            log.warning("capture of %s: the source's log status is unavailable: %s", self.source_id, exc)
            src = {"error": str(exc)}
        return {
            "source_id": self.source_id,
            "pid": os.getpid(),
            "updated_at": time.time(),
            # the next report is due this many seconds later: `dblog status` tells a silent capture
            "status_interval": self.config.status_interval,
            "position": self.last_seen.encode() if self.last_seen else None,
            "checkpoint": self.durable.encode() if self.durable else None,
            "events_per_s": round(rate, 1),
            "events_total": self.events_in,
            "buffered": self.writer.buffered() if self.writer else 0,
            "buffered_mb": round(self.writer.buffered_bytes() / 2**20, 1) if self.writer else 0.0,
            "window": self.window.state.value,
            # seconds between the newest processed commit and now (0 when the log is idle)
            "lag_seconds": round(max(0.0, time.time() - self._last_commit_ts / 1e6), 3)
            if self._last_commit_ts and rate > 0
            else 0.0,
            "lag_bytes": src.get("lag_bytes"),  # log bytes written but not yet read
            "warnings": list(src.get("warnings") or []),
            "heartbeats": self.heartbeats,
            "schemas_checked_at": self.schema_watch.checked_at,
            "reconnects": self.reconnects,
            "position_recoveries": self.position_recoveries,
            "parallel_reads": self.parallel_reads,
            "dumps": self.scheduler.health(),
            "estimates": self.scheduler.estimates,
            "leader": {"identity": self.lease.identity, "epoch": self.config.epoch} if self.lease else None,
            "log": src,
        }

    def _report(self, rate: float) -> None:
        st = self.status(rate)
        for w in st["warnings"]:
            if w not in self._warned:  # once per distinct warning, not every report
                log.warning("capture of %s: %s", self.source_id, w)
        self._warned = set(st["warnings"])
        self.state.put_value(status_key(self.source_id), json.dumps(st, default=str))
        if self.on_progress:
            self.on_progress(st)
