"""The I/O half of the watermark window, as one step: LW -> read the chunk -> HW -> window.

The engine calls ``ChunkStep.run`` with a chunk the scheduler planned (core/scheduler.py),
between two log batches: these three statements are the only pause of log processing
(DESIGN invariant 6). The read depends on the kind of plan:

* ``keys``      a key-list slice: ``select_keys``;
* ``parallel``  a table dump with several readers: key ranges read at once on connections
  of their own (``ParallelChunkReaders``, core/parallel.py);
* ``range``     a table dump chunk: ``select_chunk``, its rows as JSON text when the output
  takes them so and the source can give them (``RowTextChunks``, core/row_text.py);
* ``none``      nothing to select (an empty key list, a table empty at the dump's start): the
  window still opens, so the chunk completes, and states what it covers, at its HW.

The rows wait in the window (core/watermark.py, Algorithm 1) until HW comes back through
the log; then ``emit`` turns them into the chunk's block, its range event and its progress
marker. ``ChunkStepHooks`` run around LW and HW, for tests that need to act at exactly
those points (a write inside the window, a crash before HW).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
import uuid
from typing import Any, Callable, Optional

from .batch import DumpRows
from .events import SUB_WIDTH, Position, TableSchema
from .pacing import PaceSignals
from .parallel import combine, split_points
from .protocols import ChunkReader, ChunkResult, ParallelChunkReaders, RowTextChunks, Source
from .range_events import OpenChunk, range_events, states_coverage
from .row_text import encode_rows
from .scheduler import ChunkPlan, DumpScheduler
from .watermark import ChunkAborted, ChunkDone, ChunkRows, WatermarkWindow

Hook = Callable[[ChunkPlan], None]


@dataclasses.dataclass(frozen=True)
class ChunkStepHooks:
    """Called with the plan around the step's two watermark writes (None: nothing)."""

    before_lw: Optional[Hook] = None
    after_lw: Optional[Hook] = None  # LW committed; the chunk is not read yet
    before_hw: Optional[Hook] = None  # the chunk is read; HW not written yet
    after_hw: Optional[Hook] = None  # HW committed; the window is not open yet


def plan_kind(plan: ChunkPlan) -> str:
    """How a plan's chunk is read: "keys", "parallel", "range" or "none" (module docstring)."""
    if plan.keys is not None:
        return "keys" if plan.keys else "none"
    if not plan.selects_rows:
        return "none"
    return "parallel" if plan.readers > 1 else "range"


class ChunkStep:
    def __init__(
        self,
        source: Source,
        window: WatermarkWindow,
        scheduler: DumpScheduler,
        takes_texts: bool,
        pace_signals: Callable[[float, int], PaceSignals],
        hooks: Optional[ChunkStepHooks] = None,
    ):
        self.source = source
        self.source_id = source.source_id
        self.window = window
        self.scheduler = scheduler
        self.takes_texts = takes_texts  # the output stores rows as their JSON text
        # The source, if it gives a chunk's rows as their JSON text itself.
        self._text_chunks = source if isinstance(source, RowTextChunks) and source.selects_row_text else None
        self._readers = source if isinstance(source, ParallelChunkReaders) else None
        self._pace_signals = pace_signals
        self.hooks = hooks or ChunkStepHooks()
        self.parallel_reads = 0  # chunks read by more than one connection (--readers)
        self._dating_at = 0.0  # when a watermark was last written to date a dump's bound
        self._read: dict[str, Callable[[ChunkPlan, TableSchema], tuple[Optional[ChunkResult], Optional[bool]]]] = {
            "keys": self._read_keys,
            "parallel": self._read_parallel,
            "range": self._read_range,
            "none": lambda plan, schema: (None, None),
        }

    def _hook(self, hook: Optional[Hook], plan: ChunkPlan) -> None:
        if hook is not None:
            hook(plan)

    # -- LW -> read -> HW -> window --------------------------------------------------------
    def run(self, plan: ChunkPlan, schema: TableSchema, last_seen: Optional[Position]) -> None:
        """Select the planned chunk between LW and HW and open the window on it; the
        scheduler learns whether it opened or was aborted at once. ``last_seen``: the last
        log position read (a table dump's bound is dated by it)."""
        if plan.needs_bound:
            # A table dump starts: fix its upper bound, so that it ends under a steady insert
            # stream (later rows reach the changelog through the log anyway), and date it by
            # the log position read so far (every key committed before it is <= the bound).
            if last_seen is None:  # nothing read yet: a watermark gives a position
                if time.monotonic() - self._dating_at > 1.0:
                    self.source.write_watermark(uuid.uuid4().hex)
                    self._dating_at = time.monotonic()
                return
            # The bound's "since": past every sub of the last coordinate read (all committed).
            bound_at = Position(last_seen.coord, 10**SUB_WIDTH - 1)
            plan = plan.bounded(self.source.max_key(schema), bound_at)
        lw, hw = uuid.uuid4().hex, uuid.uuid4().hex
        hooks = self.hooks
        self._hook(hooks.before_lw, plan)
        # Log processing is paused from here to the HW write (invariant 6).
        self.source.write_watermark(lw)
        self._hook(hooks.after_lw, plan)
        selecting = time.monotonic()
        result, short = self._read[plan_kind(plan)](plan, schema)
        select_seconds = time.monotonic() - selecting
        self._hook(hooks.before_hw, plan)
        self.source.write_watermark(hw)
        self._hook(hooks.after_hw, plan)
        self._open(plan, schema, lw, hw, result, short, select_seconds)

    def _open(
        self,
        plan: ChunkPlan,
        schema: TableSchema,
        lw: str,
        hw: str,
        result: Optional[ChunkResult],
        short: Optional[bool],
        select_seconds: float,
    ) -> None:
        selected = result.rows if result is not None else []
        invisible = result.invisible_txids if result is not None else frozenset()
        if result is not None and result.texts and result.keys is not None:
            keys = result.keys
        else:
            keys = schema.keys_of(selected)
            if self.takes_texts:  # what waits for HW and for the writer is the rows' text (core/row_text.py)
                selected = selected if isinstance(selected, list) else list(selected)
                encode_rows(selected)
        progress = plan.progress_of(len(keys), keys[-1] if keys else None, short)
        chunk = OpenChunk(plan, progress, schema, self.takes_texts)
        key_texts = result.key_texts if result is not None and result.keys is not None else None
        opened = self.window.open(lw, hw, plan.table, ChunkRows(keys, selected, key_texts), invisible, chunk)
        aborted = [em for em in opened if isinstance(em, ChunkAborted)]
        if aborted:
            self.scheduler.aborted(plan, aborted[0].reason)
        else:
            self.scheduler.opened(plan)
            if result is not None and self.scheduler.adaptive(plan):  # signals cost a query: adaptive dumps only
                self.scheduler.observe(plan, self._pace_signals(select_seconds, len(selected)))

    # -- the reads, by kind of plan ----------------------------------------------------------
    def _read_keys(self, plan: ChunkPlan, schema: TableSchema) -> tuple[Optional[ChunkResult], Optional[bool]]:
        assert plan.keys is not None
        return self.source.select_keys(schema, plan.keys), None

    def _read_range(self, plan: ChunkPlan, schema: TableSchema) -> tuple[Optional[ChunkResult], Optional[bool]]:
        args = (schema, plan.start.last_key, plan.size, plan.upper_key, plan.where)
        if self.takes_texts and self._text_chunks is not None:
            return self._text_chunks.select_chunk(*args, texts=True), None
        return self.source.select_chunk(*args), None

    def _read_parallel(self, plan: ChunkPlan, schema: TableSchema) -> tuple[Optional[ChunkResult], Optional[bool]]:
        """The chunk of a dump with several readers (core/parallel.py): its key ranges cut
        every ``size`` keys (one key-only SELECT), read at once on connections of their own;
        (the rows, whether the table is done). Between LW and HW like any chunk SELECT."""
        by_name = {c.name: c for c in schema.columns}
        key_only = TableSchema(schema.table, tuple(by_name[k] for k in schema.key), schema.key)
        sample = self.source.select_chunk(key_only, plan.start.last_key, plan.size * (plan.readers - 1), plan.upper_key)
        splits = split_points(key_only.keys_of(sample.rows), plan.size, plan.readers)
        lows, uppers = [plan.start.last_key, *splits], [*splits, plan.upper_key]
        readers = self._chunk_readers(len(splits))
        if len(readers) < len(splits):  # a source without parallel readers: one range at a time
            results = [self.source.select_chunk(schema, lo, plan.size, up, plan.where) for lo, up in zip(lows, uppers)]
        else:
            with concurrent.futures.ThreadPoolExecutor(len(lows), thread_name_prefix="dblog-chunk") as pool:
                futures = [
                    pool.submit(read, schema, lo, plan.size, up, plan.where)
                    for read, lo, up in zip([self.source.select_chunk, *readers], lows, uppers)
                ]
                results = [f.result() for f in futures]  # the first error of a reader is raised
        self.parallel_reads += len(lows) > 1
        result, short = combine(results, uppers, plan.size, schema.key_getter())
        return result, short

    def _chunk_readers(self, n: int) -> list[ChunkReader]:
        """``n`` connections besides the source's own for a parallel chunk (kept open by the
        source between chunks); none from a source without ``ParallelChunkReaders``."""
        if n == 0 or self._readers is None:
            return []
        return list(self._readers.chunk_readers(n))

    # -- HW: the window's rows leave --------------------------------------------------------
    def emit(self, done: ChunkDone) -> list[Any]:
        """The chunk's range events (if it states what it covers: subs 0 and 1 of HW), its
        rows as one block at the following subs, and its progress marker."""
        chunk: OpenChunk = done.context
        plan = chunk.plan
        out: list[Any] = range_events(self.source_id, done, chunk) if states_coverage(chunk) else []
        # One block for the chunk's rows (subs 1..n at HW, after the range events), not an event per row.
        rows = DumpRows(
            self.source_id,
            plan.table,
            plan.dump_id,
            chunk.schema.schema_id(),
            done.hw,
            max(1, len(out)),
            done.keys,
            done.rows,
            chunk.texts,
            done.key_texts,
        )
        return out + [rows, self.scheduler.emitted(plan, chunk.progress, len(rows))]
