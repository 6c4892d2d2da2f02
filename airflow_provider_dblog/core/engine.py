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
it and reads the log again from where it was (core/log_cursor.py); only after
``reconnect_timeout`` does it fail.

With a leader lease (invariant 7) the engine first waits as standby until it holds the lease,
then runs with the lease's epoch: the lease is checked before every output commit, every state
write is conditional on it (``StateStore.fenced``), the source checks it before each log
connection (``Source.take_over``), and losing it stops the engine at once with StaleEpochError.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Optional, Sequence

from .batch import LogRows
from .chunk_step import ChunkStep, ChunkStepHooks
from .errors import DBLogError, PositionLostError, SchemaChanged, SourceUnavailable, StaleEpochError
from .events import (
    ChangeEvent,
    Op,
    Position,
    SchemaEvent,
    WatermarkEvent,
)
from .fencing import fenced_output
from .gc_threshold import raised_gc_threshold
from .leadership import Leadership
from .log_cursor import Heartbeat, LogCursor, LogRecovery, ReconnectPolicy
from .markers import ChunkProgress, LogCheckpoint, TableReset
from .pace_sampler import PaceSampler
from .protocols import (
    FullRowIndex,
    LeaderLease,
    Output,
    RowTextOutput,
    Source,
    StateStore,
    WholeRowConsumers,
)
from .scheduler import DumpScheduler
from .schema_step import SchemaStep
from .schema_watch import SchemaWatch
from .status_report import StatusReport, previous_log_status
from .toast_step import ToastStep
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
    # Keep retrying a batch the output refuses (a broker, an object store down) for this long
    # (0: for ever); the log waits meanwhile and nothing is lost (core/writer.py).
    output_outage_timeout: float = 3600.0
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
        on_commit: Optional[Callable[[float, int], None]] = None,
    ):
        """``on_commit``: each output commit's seconds and events (Writer's ``on_commit``)."""
        self.source = source
        self.output = output
        self.state = state
        self.config = config or EngineConfig()
        self.on_progress = on_progress
        self.lease = lease
        self.on_standby = on_standby
        self.on_commit = on_commit
        self.source_id = source.source_id
        self.leadership = Leadership(lease, self.source_id)
        self.window = WatermarkWindow()
        self.scheduler = DumpScheduler(
            state, self.source_id, source.tables, source.estimate_rows, self.config.control_interval
        )
        # The output stores rows as their JSON text: chunks and the log give them so (row_text.py).
        self._takes_texts = isinstance(output, RowTextOutput) and output.takes_row_text
        self.cursor = LogCursor()  # the checkpoint, the last position seen, what to skip
        pace = PaceSampler(source, self.cursor, self.config.replica_lag_interval)  # adaptive dumps
        self.chunk_step = ChunkStep(source, self.window, self.scheduler, self._takes_texts, pace, chunk_hooks)
        self.events_in = 0  # log change events processed (the rate in status reports)
        self.writer: Optional[Writer] = None  # set once the source and output are open
        # Changes that lack their full row (unchanged TOAST values) and their repair dumps.
        index = output if isinstance(output, FullRowIndex) else None  # the Delta output
        whole = isinstance(output, WholeRowConsumers) and output.needs_whole_rows()  # Debezium's envelope
        self.toast = ToastStep(source, index, self.scheduler, state, whole_rows=whole)
        self.schema_watch = SchemaWatch(self.state, self.source_id, self.config.schema_check_interval)
        self.schema_step = SchemaStep(source, self.schema_watch, self.window, self.scheduler)
        policy = ReconnectPolicy(
            self.config.reconnect_timeout, self.config.reconnect_max_backoff, self.config.redump_on_position_lost
        )
        self.recovery = LogRecovery(
            source, state, self.window, self.scheduler, self.cursor, policy, self._takes_texts, self.leadership.check
        )
        self.heartbeat = Heartbeat(source, self.cursor, self.window, self.config.heartbeat_interval)
        self.reporter = StatusReport(
            source,
            self.cursor,
            self.window,
            self.scheduler,
            self.schema_watch,
            self.chunk_step,
            self.recovery,
            lease,
            self.config.status_interval,
            on_progress,
        )

    @property
    def reconnects(self) -> int:
        """Lost source connections reconnected."""
        return self.recovery.reconnects

    @property
    def position_recoveries(self) -> int:
        """Lost positions recovered by a full dump (opt-in)."""
        return self.recovery.position_recoveries

    @property
    def heartbeats(self) -> int:
        """Heartbeat watermarks written."""
        return self.heartbeat.count

    @property
    def parallel_reads(self) -> int:
        """Chunks read by more than one connection (--readers)."""
        return self.chunk_step.parallel_reads

    # -- lifecycle -----------------------------------------------------------------------
    def _fence_state(self) -> None:
        """The lease holder's view of the state store for the engine and for every part that
        holds the store (the scheduler, the schema watch, the TOAST step, the log recovery; a part added
        later that holds it belongs in this list): a part left with the plain store would
        write as a deposed leader."""
        assert self.lease is not None
        self.state = self.state.fenced(self.lease.fence())
        self.scheduler.state = self.schema_watch.state = self.toast.state = self.recovery.state = self.state

    def run(self, stop: Optional[threading.Event] = None, max_seconds: Optional[float] = None) -> None:
        stop = stop or threading.Event()
        deadline = time.monotonic() + max_seconds if max_seconds else None
        if self.lease is not None:
            epoch = self.leadership.acquire(stop, self.on_standby)  # standby until we lead
            if epoch is None:
                return  # stopped while standby
            self.config = dataclasses.replace(self.config, epoch=epoch)
            # Fenced from here on: every output commit and every state write of this process
            # is refused once a newer leader exists, and the source opens no log connection.
            self.output = fenced_output(self.output, self.lease)
            self._fence_state()
            self.source.take_over(self.lease.check, previous_log_status(self.state, self.source_id), self.lease.domain)
            log.info("capture of %s: leader with epoch %d", self.source_id, epoch)
        try:
            with raised_gc_threshold(self.config.gc_threshold):
                self._run(stop, deadline)
        except StaleEpochError:
            raise
        except WriterFailed as exc:
            # The output's own refusal (a newer epoch) or a lease check in the writer thread.
            cause = exc.__cause__ if isinstance(exc.__cause__, DBLogError) else exc
            raise self.leadership.error_or(cause) from cause
        except Exception as exc:
            # A deposed leader usually fails elsewhere first (its source connection was taken
            # over, say): report the real cause, the lost lease, when that is what happened.
            raise self.leadership.error_or(exc) from exc
        finally:
            self.leadership.release()

    def _run(self, stop: threading.Event, deadline: Optional[float]) -> None:
        self.recovery.open_source(stop)
        self.output.open()
        writer = self.writer = Writer(
            self.output,
            max_buffer=self.config.writer_buffer,
            max_buffer_bytes=self.config.writer_buffer_bytes,
            max_batch=self.config.writer_batch,
            max_batch_bytes=self.config.writer_batch_bytes,
            flush_interval=self.config.flush_interval,
            epoch=self.config.epoch,
            outage_timeout=self.config.output_outage_timeout,
            on_commit=self.on_commit,
        )
        try:
            self._start(writer, stop)
            # The first report right away (rate 0: nothing measured yet), so that `dblog status`
            # and the status page know the capture from its start, not a status interval later.
            t0, n0 = time.monotonic(), 0
            next_status, first = t0, True
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                self.leadership.keep()  # raises when the lease is lost
                try:
                    try:
                        if writer.wait_for_room(self.config.poll_timeout):
                            self._log_step(writer)
                            self._apply_durable(writer)
                            self.schema_step.check(writer)
                            self._dump_step(writer)
                            self.heartbeat.step()
                        else:
                            # Backpressure (the output slow or down): read nothing more, but go on
                            # reporting (an outage shows in `dblog status`) and holding the lease.
                            self._apply_durable(writer)
                    except SourceUnavailable as exc:
                        self.recovery.reconnect(exc, stop)
                        continue
                    now = time.monotonic()
                    if now >= next_status:
                        self._report(0.0 if first else (self.events_in - n0) / max(now - t0, 1e-9))
                        t0, n0, next_status, first = now, self.events_in, now + self.config.status_interval, False
                except PositionLostError as exc:  # the slot dropped under us, WAL removed, ...
                    self.recovery.recover(exc)
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
        self.cursor.durable = checkpoint
        # Events up to here are durable already (the output may be ahead of the checkpoint
        # after a crash between its commit and the checkpoint write).
        known = [p for p in (checkpoint, self.output.last_position(self.source_id)) if p is not None]
        self.cursor.skip_until = max(known) if known else None
        for table in self.source.tables():
            self.schema_step.schema(table, writer)
        self.toast.merge_pending()
        writer.start()
        self.recovery.open_log(checkpoint, self.config.reset_position and checkpoint is None, stop)
        log.info("capture of %s started at %s", self.source_id, checkpoint or "the source's bookmark (no checkpoint)")

    # -- log ------------------------------------------------------------------------------
    def _log_step(self, writer: Writer) -> None:
        # A dump's last chunk is being written: its DONE should not wait for an idle log.
        timeout = min(self.config.poll_timeout, URGENT_POLL) if writer.awaits_urgent() else self.config.poll_timeout
        items = self.source.poll(self.config.poll_batch, timeout)
        if not items:
            self.toast.queue_unchanged([], self.cursor.skip_until)  # e.g. keys of a partition that came or went
            return
        self.cursor.last_item_at = time.monotonic()
        out: list[Any] = []
        last: Optional[Position] = None
        cursor = self.cursor
        skip = cursor.skip_until
        process = self.window.process
        for block in items:
            if block.__class__ is LogRows:
                # One rows event's changes: passed on whole unless the window or a restart
                # needs them one by one.
                if (skip is None or block.first_position > skip) and self.window.pass_block(block.table, block.txid):
                    self.events_in += len(block)
                    if block.commit_ts is not None:
                        cursor.last_commit_ts = block.commit_ts
                    last = block.last_position
                    out.append(block)
                    continue
                each: Sequence[Any] = block.events()
            else:
                each = (block,)
            for item in each:
                if isinstance(item, SchemaEvent):
                    self.schema_step.logged(item.schema)
                    out.append(item.schema)
                    continue
                pos = item.position
                if skip is not None and pos <= skip:
                    continue  # delivered again after a restart; already durable
                last = pos
                if isinstance(item, ChangeEvent):
                    self.events_in += 1
                    if item.commit_ts is not None:
                        cursor.last_commit_ts = item.commit_ts
                    for ev in self.schema_step.split(item) if item.op is Op.UPDATE else (item,):
                        emitted = process(ev)
                        if len(emitted) == 1 and emitted[0] is ev:  # the usual case: passed on as is
                            out.append(ev)
                        else:
                            out.extend(self._emit(emitted))
                elif isinstance(item, WatermarkEvent) and (reset := self.schema_step.reset(item)) is not None:
                    truncate, marker = reset  # a primary key changed: clear the table's rows
                    out.extend(self._emit(process(truncate)))
                    out.append(marker)
                else:
                    out.extend(self._emit(process(item)))
        if last is not None:
            self.cursor.last_seen = last
            out.append(LogCheckpoint(last))
        self.toast.queue_unchanged(out, self.cursor.skip_until)
        writer.put_many(out)

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
        self.toast.repairs.started(plan.dump_id)
        try:
            self.chunk_step.run(plan, self.schema_step.schema(plan.table, writer), self.cursor.last_seen)
        except SourceUnavailable:
            raise  # the source is gone for a moment, the request is fine
        except SchemaChanged as exc:  # a column the SELECT named is gone: select it again
            self.schema_watch.soon()
            self.scheduler.aborted(plan, str(exc))
        except DBLogError as exc:
            self.scheduler.failed(plan, exc)  # a bad request fails that dump, not the capture

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
                self.schema_step.reset_durable(marker.schema)
        if last_log is not None:
            self.state.set_checkpoint(self.source_id, last_log)
            self.cursor.durable = last_log
            self.source.acknowledge(last_log)

    # -- reporting ---------------------------------------------------------------------------
    def status(self, rate: float) -> dict[str, Any]:
        """The status report (core/status_report.py) at ``rate`` log events per second."""
        return self.reporter.build(rate, self.events_in, self.heartbeats, self.writer, self.config.epoch)

    def _report(self, rate: float) -> None:
        self.reporter.publish(self.state, self.status(rate))
