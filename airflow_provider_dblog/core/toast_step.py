"""The engine's side of TOAST repairs: which log changes lack their full row, and the repair
dumps queued for them.

PostgreSQL without REPLICA IDENTITY FULL gives an UPDATE's unchanged TOAST values as a
placeholder (core/toast.py). This step turns the source's placeholders into key-list dumps
(``ToastRepairs``) unless this process, or the changelog, has the key's full row already
(``ToastKnown``), and at a start merges the repair dumps an earlier process left pending.
For an output whose consumers take row images whole (``whole_rows``: Debezium's envelope,
where a sink writes the placeholder as a value) it repairs every placeholder: only the
repair's full row sets the column right there.
It exists so that the engine's log step only calls ``queue_unchanged`` and its start
``merge_pending``; the bookkeeping stays here, beside the two structures it keeps.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from .events import Key, Position
from .protocols import FullRowIndex, Source, StateStore
from .scheduler import DumpScheduler
from .toast import ToastKnown, ToastRepairs

log = logging.getLogger(__name__)


class ToastStep:
    def __init__(
        self,
        source: Source,
        index: Optional[FullRowIndex],
        scheduler: DumpScheduler,
        state: StateStore,
        whole_rows: bool = False,
    ):
        self.source = source
        self.whole_rows = whole_rows
        self.source_id = source.source_id
        self.index = index  # the output's full-row keys (the Delta output), or None
        self.scheduler = scheduler
        self.known = ToastKnown()  # keys whose full row this process emitted (core/toast.py)
        self.repairs = ToastRepairs(state, self.source_id, superseded=scheduler.superseded, ended=scheduler.ended)

    @property
    def state(self) -> StateStore:
        """The store the repair dumps are written to (the engine fences it: ``Engine._fence_state``)."""
        return self.repairs.state

    @state.setter
    def state(self, state: StateStore) -> None:
        self.repairs.state = state

    def queue_unchanged(self, out: list[Any], skip_until: Optional[Position]) -> None:
        """Queue a key-list dump for the keys of changes whose ``after`` still holds an
        unchanged-TOAST placeholder (PostgreSQL without REPLICA IDENTITY FULL; core/toast.py)
        and whose full row this process has not emitted before (``ToastKnown``: the replay
        fills those). Stored before ``out`` reaches the writer, so it is never lost: a crash
        before those changes are durable reads them again."""
        skip = skip_until
        raw = [(t, key, pos) for t, key, pos in self.source.take_unchanged_toast() if skip is None or pos > skip]
        if self.whole_rows:  # nothing downstream fills a placeholder: repair each key
            hits = list(dict.fromkeys((t, key) for t, key, _ in raw))
        else:
            for table in {t for t, _, _ in raw} - self.known.tables:
                self._seed(table)
            if not self.known.tables:
                return
            hits = self.known.walk(out, {pos: (t, key) for t, key, pos in raw})
        if hits:
            for spec in self.repairs.queue(hits):
                log.info(
                    "capture of %s: dump %s queued for %d key(s) of %s whose rows the log does not carry "
                    "(unchanged TOAST values, partitions that joined or left)",
                    self.source_id,
                    spec.dump_id,
                    len(spec.keys or ()),
                    (spec.tables or ("?",))[0],
                )
            self.scheduler.wake()

    def merge_pending(self) -> None:
        """At a start: the TOAST repair dumps an earlier process queued and did not begin
        become one per table, less the keys whose full row the changelog holds by now."""
        dumps = self.state.list_dumps(self.source_id)
        pending = [d for d in dumps if d.spec.toast_repair and not d.status.finished]
        tables = {d.spec.tables[0] for d in pending if d.spec.tables}
        for table in sorted(tables - self.known.tables) if not self.whole_rows else ():
            self._seed(table)
        for spec in self.repairs.merge_pending(pending, lambda t, k: not self.whole_rows and (t, k) in self.known):
            log.info(
                "capture of %s: dump %s repairs the %d key(s) of %s that the pending repair dumps list and the changelog lacks",
                self.source_id,
                spec.dump_id,
                len(spec.keys or ()),
                (spec.tables or ("?",))[0],
            )

    def _seed(self, table: str) -> None:
        """The first placeholder of ``table`` in this process: learn from the output which
        of its keys have a full row in the changelog already (one read of its events' keys),
        so that a restart or failover does not repair every key an update touches again."""
        keys: list[Key] = []
        if self.index is not None:
            keys = self.index.full_row_keys(self.source_id, table)
            log.info(
                "capture of %s: %d key(s) of %s have a full row in the changelog", self.source_id, len(keys), table
            )
        self.known.seed(table, keys)
