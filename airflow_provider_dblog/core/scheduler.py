"""The dump scheduler: which dump gets the next chunk, and when (beside the log loop).

The engine asks ``next_chunk`` whenever no chunk window is open. The scheduler reads the dump
requests and their controls from the state store (every ``control_interval``, and as soon as
the store's ``dumps_version`` says a request came or went), moves each dump
through its lifecycle (running, paused, cancelled, failed, done) and keeps each table's
progress twice:

* *emitted*: a chunk's rows went to the writer (what the next chunk continues from);
* *durable*: the writer completed the chunk's marker; only then is the progress stored
  (invariant 5), so a restart continues from the last durable chunk.

Dumps share the one chunk window fairly (invariant 11): each is paced by its own delay and
its own back-off after an aborted chunk only; among the dumps due, repairs (key-list dumps and
the capture's schema re-dumps) go before table dumps, and the dumps of one class take turns,
chunk by chunk. So a repair of a few keys waits for at most the chunk in flight, not for a
backfill to end, and a throttled dump slows nobody else.

It does no source I/O of its own: the engine selects the chunk the plan describes.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from typing import Any, Callable, Optional, Sequence

from .dumps import MAX_CHUNK_SIZE, Dump, DumpStatus, TableProgress
from .errors import DBLogError
from .events import Key, Position, Row, TableSchema
from .markers import ChunkProgress
from .pacing import Pacer, PaceSignals
from .protocols import StateStore

log = logging.getLogger(__name__)

# Seconds between two looks at the state store's dumps_version (_requests_moved).
REQUEST_CHECK = 0.02

# After an aborted chunk its dump waits 20 ms, doubling up to 1 s, before selecting again.
_BACKOFF_FIRST, _BACKOFF_MAX = 0.02, 1.0


def repairs(dump: Dump) -> bool:
    """Key-list dumps (a user's repair) and the capture's schema re-dumps restore rows the
    changelog has wrong: they go before table dumps (backfills). The capture's TOAST repairs
    take turns with the table dumps instead: under an update load they come one after another,
    and going first they held a backfill back for as long as the load lasted."""
    return (dump.spec.keys is not None and not dump.spec.toast_repair) or dump.spec.repair


@dataclasses.dataclass
class _Timing:
    """One dump's pace: when its next chunk may be selected, why not before, and its turn."""

    next_at: float = 0.0
    why: str = "delay"  # "delay": its own delay after a chunk; "backoff": after an aborted one
    backoff: float = 0.0
    cause: str = ""  # why the last chunk was aborted (while backing off)
    turn: int = -1  # when it last got a chunk, or was first seen: the least recent goes first


class _Pacers:
    """Each dump's chunk size and delay: its control's, or its Pacer's when adaptive."""

    def __init__(self) -> None:
        self._pacers: dict[str, Pacer] = {}  # adaptive dumps' pace, per dump id

    def of(self, dump: Dump) -> Pacer:
        pacer = self._pacers.get(dump.dump_id)
        if pacer is None:
            c = dump.control
            pacer = self._pacers[dump.dump_id] = Pacer(c.chunk_size, c.delay_ms, MAX_CHUNK_SIZE)
        return pacer

    def chunk_size(self, dump: Dump) -> int:
        return self.of(dump).chunk_size if dump.control.adaptive else dump.control.chunk_size

    def delay_ms(self, dump: Dump) -> int:
        return self.of(dump).delay_ms if dump.control.adaptive else dump.control.delay_ms

    def report(self, dump: Dump) -> dict[str, Any]:
        c = dump.control
        return (
            self.of(dump).report()
            if c.adaptive
            else {"mode": "fixed", "chunk_size": c.chunk_size, "delay_ms": c.delay_ms}
        )


@dataclasses.dataclass(frozen=True)
class ChunkPlan:
    """The next chunk of one table of one dump: a key range after ``start.last_key`` up to
    ``upper_key`` (at most ``size`` rows), or, for a key-list dump, exactly ``keys``."""

    dump_id: str
    table: str
    start: TableProgress  # the table's emitted progress before this chunk
    size: int
    keys: Optional[tuple[Key, ...]] = None
    keys_total: int = 0  # key-list dumps: how many keys the request lists
    where: Optional[str] = None  # a filtered dump's row filter (core/predicates.py)
    readers: int = 1  # table dumps: key ranges of ``size`` rows selected in parallel

    @property
    def needs_bound(self) -> bool:
        """A table dump whose upper bound is not fixed yet: the engine reads the table's
        greatest key (``Source.max_key``) before this chunk and calls ``bounded``."""
        return self.keys is None and not self.start.bounded

    @property
    def upper_key(self) -> Optional[Key]:
        """The table dump's fixed upper bound: chunks select keys up to it and no further."""
        return self.start.upper_key

    def bounded(self, upper_key: Optional[Key], bound_at: Position) -> "ChunkPlan":
        """This plan with the table's upper bound fixed at log position ``bound_at`` (stored
        with the table's progress, so a restarted capture keeps it). ``upper_key`` None: the
        table is empty; its one chunk selects nothing and only states its range."""
        start = dataclasses.replace(self.start, upper_key=upper_key, bound_at=bound_at.encode())
        return dataclasses.replace(self, start=start)

    @property
    def selects_rows(self) -> bool:
        """False for the one chunk of a table that was empty when its dump started."""
        return self.keys is not None or self.start.upper_key is not None

    def progress_after(self, rows: Sequence[Row], schema: TableSchema, short: Optional[bool] = None) -> TableProgress:
        """The table's progress once this chunk's rows (as selected) are emitted; the rows
        themselves are counted when the chunk's high watermark arrives. A table is done when
        a chunk comes back short (``short``; by default fewer rows than ``size``) or reaches
        the upper bound."""
        return self.progress_of(len(rows), schema.key_of(rows[-1]) if rows else None, short)

    def progress_of(self, count: int, last_key: Optional[Key], short: Optional[bool] = None) -> TableProgress:
        """``progress_after`` from the chunk's row count and last key (None: no rows)."""
        p = self.start
        if self.keys is not None:
            done = p.keys_done + len(self.keys)
            return TableProgress(p.last_key, p.rows, p.chunks + 1, done >= self.keys_total, done)
        last_key = last_key if count else p.last_key
        reached = p.upper_key is not None and last_key == p.upper_key
        done = (count < self.size if short is None else short) or reached
        return TableProgress(last_key, p.rows, p.chunks + 1, done, 0, p.upper_key, p.bound_at)


class DumpScheduler:
    def __init__(
        self,
        state: StateStore,
        source_id: str,
        all_tables: Callable[[], list[str]],
        estimate_rows: Callable[[str], int],
        control_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.state = state
        self.source_id = source_id
        self._all_tables = all_tables
        self._estimate_rows = estimate_rows
        self.control_interval = control_interval
        self._clock = clock
        self.dumps: list[Dump] = []  # unfinished dumps as last read from the state store
        self.estimates: dict[str, int] = {}  # table -> estimated rows, for percentages
        self._emitted: dict[str, dict[str, TableProgress]] = {}  # dump id -> table -> progress
        self._finished: set[str] = set()  # dumps this engine ended (done emitted, cancelled, failed)
        self._next_refresh = 0.0
        self._version: Any = None  # the store's dumps_version at the last read
        self._next_version_check = 0.0
        self._timings: dict[str, _Timing] = {}  # dump id -> its own pace and turn
        self._turns = itertools.count()
        self._serving: Optional[str] = None  # the dump whose chunk was handed out last
        self._rate_base: dict[str, tuple[float, int]] = {}  # dump id -> (first seen, rows then)
        self._pacers = _Pacers()
        # dump id -> the waiting dumps it superseded (core/toast.py): done when it is done
        self._covers: dict[str, list[str]] = {}

    # -- reading requests -------------------------------------------------------------------
    def wake(self) -> None:
        """Read requests and controls again at the next chance (a change is expected)."""
        self._next_refresh = 0.0

    def _refresh(self) -> None:
        now = self._clock()
        if now < self._next_refresh and not self._requests_moved(now):
            return
        self._next_refresh = now + self.control_interval
        self._next_version_check = now + REQUEST_CHECK
        self._version = self._dumps_version()  # before the read: a change after it shows next time
        self.dumps = [d for d in self.state.list_dumps(self.source_id) if not d.status.finished]
        ids = {d.dump_id for d in self.dumps}
        self._timings = {i: t for i, t in self._timings.items() if i in ids}
        for d in self.dumps:  # a dump first seen queues behind every dump seen before it
            if d.dump_id not in self._timings:
                self._timings[d.dump_id] = _Timing(turn=next(self._turns))
        # Only the tables of unfinished dumps: the estimates go into every status report, which
        # must not keep a part per table ever dumped (a source of 1,000 tables after `dump --all`).
        pending = {t for d in self.dumps for t in self._tables_of(d)}
        self.estimates = {t: n for t, n in self.estimates.items() if t in pending}
        for d in self.dumps:
            for t in self._tables_of(d):
                if t not in self.estimates:
                    try:
                        self.estimates[t] = self._estimate_rows(t)
                    except DBLogError:
                        self.estimates[t] = 0  # unknown table: the dump fails with the reason
            emitted = self._emitted.setdefault(d.dump_id, {})
            for t, p in d.progress.items():  # durable progress from an earlier run
                if t not in emitted or emitted[t].chunks < p.chunks:
                    emitted[t] = p

    def _dumps_version(self) -> Any:
        """The store's token for this source's requests (None: the store has none, and is
        read every ``control_interval`` only)."""
        version_of = getattr(self.state, "dumps_version", None)
        return version_of(self.source_id) if version_of is not None else None

    def _requests_moved(self, now: float) -> bool:
        """Whether a request came or went since the last read: a dump asked for starts within
        one turn of the engine's loop, not up to ``control_interval`` later. The token costs no
        round trip (a ZooKeeper watch, SQLite's data_version), and is checked at most every
        REQUEST_CHECK seconds."""
        if now < self._next_version_check:
            return False
        self._next_version_check = now + REQUEST_CHECK
        version = self._dumps_version()
        return version is not None and version != self._version

    def _tables_of(self, dump: Dump) -> list[str]:
        return list(dump.spec.tables) if dump.spec.tables else self._all_tables()

    def _find(self, dump_id: str) -> Optional[Dump]:
        return next((d for d in self.dumps if d.dump_id == dump_id), None)

    def _next_table(self, dump: Dump) -> Optional[str]:
        return dump.next_table(self._all_tables(), self._emitted.get(dump.dump_id, {}))

    def _set_status(self, dump: Dump, status: DumpStatus, error: Optional[str] = None) -> None:
        self.state.set_status(dump.dump_id, status, error)
        self.wake()  # show the new status in the next read

    # -- the engine's questions -------------------------------------------------------------
    def next_chunk(self) -> Optional[ChunkPlan]:
        """The chunk to select now, or None (nothing to dump, all paused, or none due yet).
        Cancelled and paused dumps get their status here. One chunk at a time overall: the
        first due dump in ``_order`` gets it."""
        self._refresh()
        now = self._clock()
        for dump in self._order(self._active()):
            timing = self._timing(dump.dump_id)
            if now < timing.next_at:
                continue  # its own delay or back-off; the others go on
            table = self._next_table(dump)
            if table is None:  # every table durable already (a crash before the status write)
                self._set_status(dump, DumpStatus.DONE)
                self._finished.add(dump.dump_id)
                continue
            if dump.status is not DumpStatus.RUNNING:
                self._set_status(dump, DumpStatus.RUNNING)
            timing.turn = next(self._turns)
            self._serving = dump.dump_id
            start = self._emitted.setdefault(dump.dump_id, {}).get(table, TableProgress())
            size = self._pacers.chunk_size(dump)
            keys = dump.spec.keys
            if keys is None:
                return ChunkPlan(dump.dump_id, table, start, size, where=dump.spec.where, readers=dump.control.readers)
            batch = keys[start.keys_done : start.keys_done + size]
            return ChunkPlan(dump.dump_id, table, start, size, batch, len(keys))
        return None

    def _active(self) -> list[Dump]:
        """The dumps that may get chunks, in request order; a cancelled dump ends here and a
        paused one is marked paused."""
        active = []
        for dump in self.dumps:
            if dump.dump_id in self._finished:
                continue
            if dump.control.cancelled:
                self._set_status(dump, DumpStatus.CANCELLED)
                self._finished.add(dump.dump_id)
                self._release(dump.dump_id)
            elif dump.control.paused:
                if dump.status is not DumpStatus.PAUSED:
                    self._set_status(dump, DumpStatus.PAUSED)
            else:
                active.append(dump)
        return active

    def _order(self, dumps: list[Dump]) -> list[Dump]:
        """Who is first for the next chunk: repairs before table dumps, and within each class
        the dump that had a chunk (or was first seen) least recently, so two backfills
        alternate and a new one waits for one chunk of each dump already there, never longer:
        a stream of new dumps (TOAST repairs under an update load) cannot hold one back."""
        return sorted(dumps, key=lambda d: (not repairs(d), self._timing(d.dump_id).turn))

    def _timing(self, dump_id: str) -> _Timing:
        return self._timings.setdefault(dump_id, _Timing())

    def adaptive(self, plan: ChunkPlan) -> bool:
        dump = self._find(plan.dump_id)
        return dump is not None and dump.control.adaptive

    def observe(self, plan: ChunkPlan, signals: PaceSignals) -> None:
        """A chunk of an adaptive dump was selected: it adjusts its pace to the source's health."""
        dump = self._find(plan.dump_id)
        if dump is None or not dump.control.adaptive:
            return
        pacer = self._pacers.of(dump)
        before = pacer.signal
        pacer.observe(signals)
        if pacer.signal != before:
            log.info("dump %s: pace %s", plan.dump_id, pacer.report())

    def failed(self, plan: ChunkPlan, exc: BaseException) -> None:
        """The chunk could not be selected for a reason of the request's own (unknown table,
        malformed key): that dump fails with the cause; the capture and other dumps go on."""
        log.error("dump %s failed: %s", plan.dump_id, exc)
        self._serving = None
        self.state.set_status(plan.dump_id, DumpStatus.FAILED, str(exc))
        self._finished.add(plan.dump_id)
        self._release(plan.dump_id)
        self.wake()

    def aborted(self, plan: ChunkPlan, reason: str) -> None:
        """The selected chunk cannot be trusted (watermark.ChunkAborted, a column gone): its
        dump selects it again after a growing back-off, so that re-selecting does not spin on
        LW/HW writes while the transaction it waits for becomes visible. The back-off is the
        dump's own: the other dumps' chunks go on meanwhile (each aborted chunk backs off its
        own dump, so LW/HW writes stay bounded by the dumps waiting)."""
        timing = self._timing(plan.dump_id)
        timing.backoff = min(_BACKOFF_MAX, max(_BACKOFF_FIRST, timing.backoff * 2))
        timing.next_at, timing.why, timing.cause = self._clock() + timing.backoff, "backoff", reason
        self._serving = None
        log.info("chunk of %s will be selected again in %.2f s: %s", plan.table, timing.backoff, reason)

    def opened(self, plan: ChunkPlan) -> None:
        """A chunk window of ``plan``'s dump opened normally: its back-off starts over."""
        self._timing(plan.dump_id).backoff = 0.0

    def emitted(self, plan: ChunkPlan, progress: TableProgress, rows: int) -> ChunkProgress:
        """The chunk's ``rows`` are handed to the writer (at its HW). Returns the marker to put
        after them; ``durable`` stores it once the writer completes it."""
        p = dataclasses.replace(progress, rows=progress.rows + rows)
        self._emitted.setdefault(plan.dump_id, {})[plan.table] = p
        dump = self._find(plan.dump_id)
        dump_done = dump is not None and self._next_table(dump) is None
        if dump_done:
            self._finished.add(plan.dump_id)
        delay_ms = self._pacers.delay_ms(dump) if dump is not None else 0
        timing = self._timing(plan.dump_id)
        timing.next_at, timing.why = self._clock() + delay_ms / 1000.0, "delay"
        self._serving = None
        return ChunkProgress(plan.dump_id, plan.table, p, dump_done)

    def durable(self, marker: ChunkProgress) -> None:
        """Everything up to the chunk's rows is durable in the output: store its progress."""
        self.state.save_progress(marker.dump_id, marker.table, marker.progress)
        if marker.dump_done:
            self.state.set_status(marker.dump_id, DumpStatus.DONE)
            for covered in self._covers.pop(marker.dump_id, ()):  # their keys came with it
                self.state.set_status(covered, DumpStatus.DONE)
            self.wake()

    def ended(self, dump_id: str) -> bool:
        """Whether this scheduler ended ``dump_id`` (done, cancelled, failed, superseded)."""
        return dump_id in self._finished

    def superseded(self, dump_id: str, by: str) -> None:
        """``dump_id`` (a waiting repair dump, core/toast.py) is covered by the newer ``by``,
        which lists its keys too: never hand out its chunks; it becomes done when ``by`` does
        (a crash before that leaves it pending, and the next run performs it)."""
        self._finished.add(dump_id)
        self._covers.setdefault(by, []).extend([dump_id, *self._covers.pop(dump_id, [])])
        if dump_id in self._timings:  # ``by`` keeps its place in the queue, not one at the back
            self._timings[by] = _Timing(turn=self._timings[dump_id].turn)
        self.wake()

    def _release(self, dump_id: str) -> None:
        """``dump_id`` ended without its rows: the dumps it covered are performed after all."""
        for covered in self._covers.pop(dump_id, ()):
            self._finished.discard(covered)

    # -- reporting --------------------------------------------------------------------------
    def health(self) -> dict[str, dict[str, Any]]:
        """Per running dump: rows so far, estimated total, rows/s since this scheduler first
        saw it, the ETA that gives (None while unknown), and why it waits (``waiting``)."""
        out: dict[str, dict[str, Any]] = {}
        now = self._clock()
        waits = self._waits(now)
        for d in self.dumps:
            if d.dump_id in self._finished:
                continue
            rows = sum(p.rows for p in self._emitted.get(d.dump_id, {}).values())
            total = (
                len(d.spec.keys)
                if d.spec.keys is not None
                else sum(self.estimates.get(t, 0) for t in self._tables_of(d))
            )
            t0, rows0 = self._rate_base.setdefault(d.dump_id, (now, rows))
            rate = (rows - rows0) / (now - t0) if now > t0 else 0.0
            eta = round(max(0, total - rows) / rate, 1) if rate > 0 and total else None
            out[d.dump_id] = {
                "rows": rows,
                "estimated_total": total,
                "rows_per_s": round(rate, 1),
                "eta_seconds": eta,
                "paused": d.control.paused,
                "waiting": waits.get(d.dump_id),
                "pace": self._pacers.report(d),
            }
        return out

    def _waits(self, now: float) -> dict[str, Optional[dict[str, Any]]]:
        """Why each unfinished dump does not have the chunk window (None: it has the chunk in
        flight, or it is next). ``why``: "paused"; "delay" (its own delay after a chunk) or
        "backoff" (after an aborted chunk, with its ``cause``), for ``seconds`` more; or,
        due, "priority" (a repair goes first) or "turn" (one chunk at a time, dumps of a
        class in turn) ``behind`` the dump ahead of it."""
        out: dict[str, Optional[dict[str, Any]]] = {}
        due = []
        for d in self.dumps:
            if d.dump_id in self._finished:
                continue
            timing = self._timing(d.dump_id)
            if d.control.paused:
                out[d.dump_id] = {"why": "paused"}
            elif d.dump_id == self._serving:
                out[d.dump_id] = None
            elif now < timing.next_at:
                cause = {"cause": timing.cause} if timing.why == "backoff" else {}
                out[d.dump_id] = {"why": timing.why, "seconds": round(timing.next_at - now, 3), **cause}
            else:
                due.append(d)
        serving = self._find(self._serving) if self._serving is not None else None
        ordered = self._order(due)
        for i, d in enumerate(ordered):
            ahead = ordered[0] if i else serving  # the first due waits for the chunk in flight
            if ahead is None:
                out[d.dump_id] = None  # next
            else:
                why = "priority" if repairs(ahead) and not repairs(d) else "turn"
                out[d.dump_id] = {"why": why, "behind": ahead.dump_id}
        return out


def describe_wait(waiting: dict[str, Any]) -> str:
    """A ``waiting`` entry of ``health`` as ``dblog status`` prints it."""
    why = waiting["why"]
    if why in ("delay", "backoff"):
        cause = f": {waiting['cause']}" if waiting.get("cause") else ""
        return f"{why}({waiting['seconds']}s{cause})"
    if "behind" in waiting:
        return f"{why}(behind {waiting['behind']})"
    return str(why)
