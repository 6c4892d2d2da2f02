"""The capture loop: log batches, dump chunks between them, ordered writes, checkpoints.

One thread does everything that touches the source and the state store; the writer thread
only talks to the output. Each turn of the loop:

1. poll a batch of log items and pass them through the watermark window (Algorithm 1);
2. hand the resulting stream to the writer, followed by a checkpoint marker;
3. store the checkpoints and dump progress whose markers the writer completed (invariant 5);
4. if no chunk is in flight and a dump wants one: LW, SELECT, HW (the only pause of log
   processing, invariant 6), then open the window; its rows are emitted when HW comes by.

While the captured tables are idle, a *heartbeat* (a watermark no window waits for) goes
through the log every ``heartbeat_interval`` so the checkpoint, and PostgreSQL's slot with
it, keeps moving. A lost source connection (server restart, killed session) does not stop
the capture: the engine closes the source, waits with backoff, reopens it and reads the log
again from where it was (``_reconnect``); only after ``reconnect_timeout`` does it fail.

With a leader lease (invariant 7) the engine first waits as standby until it holds the lease,
then runs with the lease's epoch; the lease is checked before every output commit and every
checkpoint, and losing it stops the engine at once with StaleEpochError.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from typing import Any, Callable, Optional

from .batch import DumpRows
from .dumps import Dump, DumpStatus, TableProgress
from .errors import DBLogError, PositionLostError, StaleEpochError
from .fencing import FencedOutput
from .events import ChangeEvent, Op, Position, SchemaEvent, TableSchema, split_key_update
from .protocols import LeaderLease, Output, Source, StateStore
from .watermark import ChunkAborted, ChunkDone, WatermarkWindow
from .writer import Marker, Writer, WriterFailed

log = logging.getLogger(__name__)


@dataclasses.dataclass
class EngineConfig:
    poll_batch: int = 5_000  # log items per poll
    poll_timeout: float = 0.1  # seconds to wait for the log when it is idle
    writer_buffer: int = 100_000  # events buffered before backpressure
    writer_batch: int = 20_000  # events per output commit at most
    flush_interval: float = 0.2  # seconds an event may wait for its commit
    control_interval: float = 0.5  # seconds between reads of dump requests and controls
    status_interval: float = 5.0  # seconds between progress reports
    epoch: Optional[int] = None  # leader epoch written with every commit
    # Fault injection for tests: sleep this long between the chunk SELECT and the HW write,
    # widening the window in which concurrent writes must remove keys from the chunk.
    window_delay: float = 0.0
    # Forget the checkpoint and start at the end of the log (after a lost position; a full
    # dump restores the state). Applied only once this instance holds the lease.
    reset_position: bool = False
    # Write a heartbeat watermark after this many seconds without a log item (None: never).
    heartbeat_interval: Optional[float] = 10.0
    # Keep trying to reconnect to a source that dropped the connection for this long.
    reconnect_timeout: float = 300.0
    reconnect_max_backoff: float = 10.0  # seconds between attempts at most (doubling from 0.5)


@dataclasses.dataclass
class _Chunk:
    dump_id: str
    table: str
    progress: TableProgress  # the table's progress once this chunk is emitted (rows added at HW)


@dataclasses.dataclass
class _ProgressDurable:
    dump_id: str
    table: str
    progress: TableProgress
    dump_done: bool


class Engine:
    def __init__(
        self,
        source: Source,
        output: Output,
        state: StateStore,
        config: Optional[EngineConfig] = None,
        on_progress: Optional[Callable[[dict], None]] = None,
        lease: Optional[LeaderLease] = None,
        on_standby: Optional[Callable[[Optional[dict]], None]] = None,
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
        self.schemas: dict[str, TableSchema] = {}
        self.durable: Optional[Position] = None  # last checkpoint stored
        self.last_seen: Optional[Position] = None
        self._skip_until: Optional[Position] = None
        self._progress: dict[str, dict[str, TableProgress]] = {}  # emitted (not yet durable)
        self._emitted_done: set[str] = set()
        self._dumps: list[Dump] = []
        self._next_control = 0.0
        self._next_chunk_at = 0.0
        self._abort_backoff = 0.0
        self._events_in = 0
        self._last_commit_ts: Optional[int] = None  # µs, of the newest log event processed
        self._estimates: dict[str, int] = {}  # table -> estimated rows, for dump percentages
        self._writer: Optional[Writer] = None
        self._last_item_at = time.monotonic()  # when the log last gave us anything
        self._heartbeats = 0
        self._reconnects = 0
        self._dump_rate: dict[str, tuple[float, int]] = {}  # dump id -> (first seen, rows then)
        self._warned: set[str] = set()

    # -- lifecycle -----------------------------------------------------------------------
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
            self.output = FencedOutput(self.output, self.lease)
            log.info("capture of %s: leader with epoch %d", self.source_id, epoch)
        try:
            self._run(stop, deadline)
        except StaleEpochError:
            raise
        except WriterFailed as exc:
            # The output's own refusal (a newer epoch) or a lease check in the writer thread.
            if isinstance(exc.__cause__, DBLogError):
                raise self._lease_error_or(exc.__cause__) from exc.__cause__
            raise self._lease_error_or(exc)
        except Exception as exc:
            # A deposed leader usually fails elsewhere first (its source connection was taken
            # over, say): report the real cause, the lost lease, when that is what happened.
            raise self._lease_error_or(exc)
        finally:
            if self.lease is not None:
                self.lease.release()

    def _lease_error_or(self, exc: BaseException) -> BaseException:
        if self.lease is not None:
            try:
                self.lease.check()
            except StaleEpochError as lost:
                lost.__cause__ = exc
                return lost
            except Exception:  # the coordinator is unreachable: keep the original error
                pass
        return exc

    def _fence(self) -> None:
        """Raise StaleEpochError unless we still hold the lease (asks the coordinator)."""
        if self.lease is not None:
            self.lease.check()

    def _run(self, stop: threading.Event, deadline: Optional[float]) -> None:
        self.source.open()
        self.output.open()
        writer = self._writer = Writer(
            self.output,
            max_buffer=self.config.writer_buffer,
            max_batch=self.config.writer_batch,
            flush_interval=self.config.flush_interval,
            epoch=self.config.epoch,
        )
        try:
            self._start(writer)
            next_status = time.monotonic() + self.config.status_interval
            t0, n0 = time.monotonic(), 0
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                if self.lease is not None and not self.lease.held():
                    self.lease.check()  # raises when lost; waits out a short suspension
                try:
                    self._log_step(writer)
                    self._apply_durable(writer)
                    self._dump_step(writer)
                    self._heartbeat_step()
                except Exception as exc:
                    if not self._is_connection_error(exc):
                        raise
                    self._reconnect(exc, stop)
                    continue
                now = time.monotonic()
                if now >= next_status:
                    rate = (self._events_in - n0) / max(now - t0, 1e-9)
                    self._report(rate)
                    t0, n0, next_status = now, self._events_in, now + self.config.status_interval
            writer.close()
            self._apply_durable(writer)
            self._report(0.0)
        finally:
            if writer._thread.is_alive():
                try:
                    writer.close(timeout=30)
                except Exception:  # already failing: keep the original error
                    log.exception("writer did not close cleanly")
            self.source.close()
            self.output.close()

    def _start(self, writer: Writer) -> None:
        if self.config.reset_position:
            self.state.clear_checkpoint(self.source_id)
            log.warning("capture of %s: checkpoint reset, starting at the end of the log", self.source_id)
        checkpoint = self.state.get_checkpoint(self.source_id)
        self.durable = checkpoint
        out_last = self.output.last_position(self.source_id)
        # Events up to here are durable already (the output may be ahead of the checkpoint
        # after a crash between its commit and the checkpoint write).
        self._skip_until = max(p for p in (checkpoint, out_last) if p is not None) if (checkpoint or out_last) else None
        for table in self.source.tables():
            schema = self.source.table_schema(table)
            self.schemas[table] = schema
            writer.put(schema)
        writer.start()
        self.source.start_log(checkpoint, from_end=self.config.reset_position and checkpoint is None)
        self._last_item_at = time.monotonic()
        log.info("capture of %s started at %s", self.source_id, checkpoint or "the source's bookmark (no checkpoint)")

    # -- heartbeats and reconnects ------------------------------------------------------------
    def _heartbeat_step(self) -> None:
        """An idle log still moves the checkpoint: a watermark no window waits for comes back
        through the log, and _log_step checkpoints its position like any item's (the window
        drops it). Not while a chunk is in flight: its own LW/HW are on the way anyway."""
        interval = self.config.heartbeat_interval
        if not interval or self.window.busy or time.monotonic() - self._last_item_at < interval:
            return
        self.source.write_watermark(uuid.uuid4().hex)
        self._heartbeats += 1
        self._last_item_at = time.monotonic()

    def _is_connection_error(self, exc: BaseException) -> bool:
        if isinstance(exc, (PositionLostError, StaleEpochError, WriterFailed)):
            return False
        classify = getattr(self.source, "is_connection_error", None)
        return bool(classify is not None and classify(exc))

    def _reconnect(self, exc: BaseException, stop: threading.Event) -> None:
        """Close the source, wait with backoff, reopen it and read the log again from the last
        position handed to the writer. The writer keeps what it has (it does not depend on
        the source); an open chunk window is abandoned and its chunk selected again, its
        watermarks arriving later are stale and dropped. Events up to ``last_seen`` are
        dropped when delivered again."""
        self._reconnects += 1
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
            except Exception:  # already broken
                pass
            if stop.wait(delay):
                raise last  # stopping: nothing more to read
            self._fence()  # the lease may have moved on while we were cut off
            try:
                self.source.open()
                # Without any position yet, the source resumes from its own bookmark (the
                # PostgreSQL slot; MySQL's first start position): nothing is skipped.
                self.source.start_log(resume)
            except Exception as err:
                if not self._is_connection_error(err):
                    raise
                last = err
                if time.monotonic() + delay > deadline:
                    raise DBLogError(
                        f"lost the connection to source {self.source_id} and could not reconnect "
                        f"within {self.config.reconnect_timeout:.0f} s (last error: {err}).",
                        "check that the database is up and reachable; a restarted capture resumes "
                        "from its checkpoint without loss.",
                    ) from err
                delay = min(delay * 2, self.config.reconnect_max_backoff)
                continue
            self._last_item_at = time.monotonic()
            self._next_control = 0.0
            log.warning("capture of %s: reconnected, reading the log after %s", self.source_id,
                        resume or "the source's bookmark")
            return

    # -- log ------------------------------------------------------------------------------
    def _log_step(self, writer: Writer) -> None:
        items = self.source.poll(self.config.poll_batch, self.config.poll_timeout)
        if not items:
            return
        self._last_item_at = time.monotonic()
        out: list[Any] = []
        last: Optional[Position] = None
        skip = self._skip_until
        process = self.window.process
        for item in items:
            if isinstance(item, SchemaEvent):
                self.schemas[item.schema.table] = item.schema
                out.append(item.schema)
                continue
            pos = item.position
            if skip is not None and pos <= skip:
                continue  # delivered again after a restart; already durable
            last = pos
            if isinstance(item, ChangeEvent):
                self._events_in += 1
                if item.commit_ts is not None:
                    self._last_commit_ts = item.commit_ts
                for ev in self._split(item) if item.op is Op.UPDATE else (item,):
                    emitted = process(ev)
                    if len(emitted) == 1 and emitted[0] is ev:  # the usual case: passed on as is
                        out.append(ev)
                    else:
                        out.extend(self._emit(emitted))
            else:
                out.extend(self._emit(self.window.process(item)))
        if last is not None:
            self.last_seen = last
            out.append(Marker(("log", last)))
        writer.put_many(out)

    def _split(self, ev: ChangeEvent) -> list[ChangeEvent]:
        if ev.op is Op.UPDATE and ev.before is not None:
            schema = self.schemas.get(ev.table)
            if schema is not None and all(c in ev.before for c in schema.key):
                old = schema.key_of(ev.before)
                if old != ev.key:
                    return split_key_update(ev, old)
        return [ev]

    def _emit(self, emitted: list) -> list[Any]:
        out: list[Any] = []
        for em in emitted:
            if isinstance(em, ChangeEvent):
                out.append(em)
            elif isinstance(em, ChunkDone):
                out.extend(self._chunk_done(em))
            elif isinstance(em, ChunkAborted):
                log.info("chunk of %s selected again: %s", em.context.table, em.reason)
        return out

    # -- dumps ----------------------------------------------------------------------------
    def _chunk_done(self, done: ChunkDone) -> list[Any]:
        ctx: _Chunk = done.context
        schema = self.schemas[ctx.table]
        # One block for the chunk's rows (subs 1..n at HW), not an event per row.
        rows = DumpRows(self.source_id, ctx.table, ctx.dump_id, schema.schema_id(), done.hw, 1, done.keys, done.rows)
        p = dataclasses.replace(ctx.progress, rows=ctx.progress.rows + len(rows))
        tables = self._progress.setdefault(ctx.dump_id, {})
        tables[ctx.table] = p
        dump = self._find_dump(ctx.dump_id)
        dump_done = dump is not None and self._next_table(dump) is None
        if dump_done:
            self._emitted_done.add(ctx.dump_id)
        delay = dump.control.delay_ms if dump else 0
        self._next_chunk_at = time.monotonic() + delay / 1000.0
        return [rows, Marker(_ProgressDurable(ctx.dump_id, ctx.table, p, dump_done))]

    def _refresh_dumps(self) -> None:
        now = time.monotonic()
        if now < self._next_control:
            return
        self._next_control = now + self.config.control_interval
        self._dumps = [d for d in self.state.list_dumps(self.source_id) if not d.status.finished]
        for d in self._dumps:
            for t in self._tables_of(d):
                if t not in self._estimates:
                    try:
                        self._estimates[t] = self.source.estimate_rows(t)
                    except DBLogError:
                        self._estimates[t] = 0  # unknown table: the dump fails with the reason
            known = self._progress.setdefault(d.dump_id, {})
            for t, p in d.progress.items():  # durable progress from an earlier run
                if t not in known or known[t].chunks < p.chunks:
                    known[t] = p

    def _find_dump(self, dump_id: str) -> Optional[Dump]:
        return next((d for d in self._dumps if d.dump_id == dump_id), None)

    def _tables_of(self, dump: Dump) -> list[str]:
        return list(dump.spec.tables) if dump.spec.tables else self.source.tables()

    def _next_table(self, dump: Dump) -> Optional[str]:
        return dump.next_table(self.source.tables(), self._progress.get(dump.dump_id, {}))

    def _dump_step(self, writer: Writer) -> None:
        if self.window.busy:
            return
        self._refresh_dumps()
        for dump in self._dumps:
            if dump.dump_id in self._emitted_done:
                continue
            if dump.control.cancelled:
                self.state.set_status(dump.dump_id, DumpStatus.CANCELLED)
                self._emitted_done.add(dump.dump_id)
                continue
            if dump.control.paused:
                if dump.status is not DumpStatus.PAUSED:
                    self.state.set_status(dump.dump_id, DumpStatus.PAUSED)
                    self._next_control = 0.0
                continue
            if time.monotonic() < self._next_chunk_at:
                return
            if dump.status is not DumpStatus.RUNNING:
                self.state.set_status(dump.dump_id, DumpStatus.RUNNING)
                self._next_control = 0.0
            try:
                self._select_chunk(dump)
            except DBLogError as exc:
                if self._is_connection_error(exc):
                    raise  # the source is gone for a moment, the request is fine
                # A bad request (unknown table, malformed key) fails that dump, not the capture.
                log.error("dump %s failed: %s", dump.dump_id, exc)
                self.state.set_status(dump.dump_id, DumpStatus.FAILED, str(exc))
                self._emitted_done.add(dump.dump_id)
                continue
            return  # one chunk at a time

    def _select_chunk(self, dump: Dump) -> None:
        table = self._next_table(dump)
        if table is None:
            return
        if table not in self.schemas:
            self.schemas[table] = self.source.table_schema(table)  # RequestError if unknown
            self._writer.put(self.schemas[table])
        schema = self.schemas[table]
        p = self._progress.setdefault(dump.dump_id, {}).get(table, TableProgress())
        size = dump.control.chunk_size
        lw, hw = uuid.uuid4().hex, uuid.uuid4().hex
        # Log processing is paused from here to the HW write (invariant 6).
        self.source.write_watermark(lw)
        if dump.spec.keys is not None:
            batch = dump.spec.keys[p.keys_done : p.keys_done + size]
            result = self.source.select_keys(schema, batch) if batch else None
            keys_done = p.keys_done + len(batch)
            new = TableProgress(p.last_key, p.rows, p.chunks + 1, keys_done >= len(dump.spec.keys), keys_done)
        else:
            result = self.source.select_chunk(schema, p.last_key, size)
            last_key = schema.key_of(result.rows[-1]) if result.rows else p.last_key
            new = TableProgress(last_key, p.rows, p.chunks + 1, len(result.rows) < size, 0)
        if self.config.window_delay:
            time.sleep(self.config.window_delay)
        self.source.write_watermark(hw)
        rows = zip(schema.keys_of(result.rows), result.rows) if result else ()
        invisible = result.invisible_txids if result else frozenset()
        ctx = _Chunk(dump.dump_id, table, new)
        aborted = [em for em in self.window.open(lw, hw, table, rows, invisible, ctx) if isinstance(em, ChunkAborted)]
        if aborted:
            # The transaction is about to become visible; back off (20 ms doubling to 1 s) so
            # that re-selecting does not spin on LW/HW writes while it does.
            self._abort_backoff = min(1.0, max(0.02, self._abort_backoff * 2))
            self._next_chunk_at = time.monotonic() + self._abort_backoff
            log.info("chunk of %s will be selected again in %.2f s: %s", table, self._abort_backoff, aborted[0].reason)
        else:
            self._abort_backoff = 0.0

    # -- durability ------------------------------------------------------------------------
    def _apply_durable(self, writer: Writer) -> None:
        done = writer.completed()
        if not done:
            return
        last_log: Optional[Position] = None
        self._fence()  # a deposed leader must not move checkpoints or dump progress
        for payload in done:
            if isinstance(payload, _ProgressDurable):
                self.state.save_progress(payload.dump_id, payload.table, payload.progress)
                if payload.dump_done:
                    self.state.set_status(payload.dump_id, DumpStatus.DONE)
                    self._next_control = 0.0
            else:
                last_log = payload[1]
        if last_log is not None:
            self.state.set_checkpoint(self.source_id, last_log)
            self.durable = last_log
            self.source.acknowledge(last_log)

    # -- reporting ---------------------------------------------------------------------------
    def status(self, rate: float) -> dict:
        try:
            src = self.source.log_status()
        except PositionLostError:
            raise  # the slot was dropped or invalidated under us: stop with the fix
        except Exception as exc:  # status must never stop the capture otherwise
            src = {"error": str(exc)}
        return {
            "source_id": self.source_id,
            "pid": os.getpid(),
            "updated_at": time.time(),
            "position": self.last_seen.encode() if self.last_seen else None,
            "checkpoint": self.durable.encode() if self.durable else None,
            "events_per_s": round(rate, 1),
            "events_total": self._events_in,
            "buffered": self._writer.buffered() if self._writer else 0,
            "window": self.window.state.value,
            # seconds between the newest processed commit and now (0 when the log is idle)
            "lag_seconds": round(max(0.0, time.time() - self._last_commit_ts / 1e6), 3)
            if self._last_commit_ts and rate > 0 else 0.0,
            "lag_bytes": src.get("lag_bytes"),  # log bytes written but not yet read
            "warnings": list(src.get("warnings") or []),
            "heartbeats": self._heartbeats,
            "reconnects": self._reconnects,
            "dumps": self._dump_health(),
            "estimates": self._estimates,
            "leader": {"identity": self.lease.identity, "epoch": self.config.epoch} if self.lease else None,
            "log": src,
        }

    def _dump_health(self) -> dict:
        """Per running dump: rows so far, estimated total, rows/s since this engine saw it
        first, and the ETA that gives (None while unknown)."""
        out = {}
        now = time.monotonic()
        for d in self._dumps:
            if d.dump_id in self._emitted_done:
                continue
            progress = self._progress.get(d.dump_id, {})
            rows = sum(p.rows for p in progress.values())
            total = len(d.spec.keys) if d.spec.keys is not None else \
                sum(self._estimates.get(t, 0) for t in self._tables_of(d))
            t0, rows0 = self._dump_rate.setdefault(d.dump_id, (now, rows))
            rate = (rows - rows0) / (now - t0) if now > t0 else 0.0
            eta = round(max(0, total - rows) / rate, 1) if rate > 0 and total else None
            out[d.dump_id] = {"rows": rows, "estimated_total": total, "rows_per_s": round(rate, 1),
                              "eta_seconds": eta, "paused": d.control.paused}
        return out

    def _report(self, rate: float) -> None:
        st = self.status(rate)
        for w in st["warnings"]:
            if w not in self._warned:  # once per distinct warning, not every report
                log.warning("capture of %s: %s", self.source_id, w)
        self._warned = set(st["warnings"])
        self.state.put_value(f"status/{self.source_id}", json.dumps(st, default=str))
        if self.on_progress:
            self.on_progress(st)
