"""Algorithm 1 of the DBLog paper as a pure state machine (no I/O).

The engine (1) pauses log processing, (2) commits a low watermark (LW), (3) selects a chunk,
(4) commits a high watermark (HW), (5) resumes log processing and hands the chunk to
``WatermarkWindow.open``. Log items then flow through ``process``:

* a log event is always passed on (the log is the truth);
* between LW and HW, an event on the chunk's table removes its key from the chunk, because
  the log holds a state at least as new as the SELECT saw (invariant 2, "no time travel");
* at HW, the chunk rows still left are passed on, *before* any later log event, so each dump
  row sits at the HW position (invariant 1);
* watermarks with unknown UUIDs (from a window abandoned by a crash) are dropped.

One deviation from the paper, for PostgreSQL: the order of commit records in the WAL is not
the order in which transactions become visible, so a transaction committed just before LW
can still be invisible to the chunk SELECT. The source reports such transactions
(``invisible_txids``, from the SELECT's snapshot); their events remove keys from the chunk even
when they come before LW, and if one of them was already passed on before the window was
opened the chunk is discarded (``ChunkAborted``) and selected again.

A TRUNCATE of the chunk's table (op ``t``) between LW and HW (or in such an invisible
transaction) also discards the chunk: the SELECT may have read rows the TRUNCATE removed,
and emitted at HW they would outlive it. A TRUNCATE before LW needs nothing: the SELECT
came after it and saw only rows written since.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any, Iterable, Optional, Sequence, Union

from .errors import WatermarkSequenceError
from .events import ChangeEvent, Key, Op, Position, Row, WatermarkEvent
from .text_column import take_rows


class WindowState(enum.Enum):
    IDLE = "idle"  # no chunk in flight
    AWAITING_LW = "awaiting_lw"  # chunk selected, LW not yet seen in the log
    OPEN = "open"  # LW seen, HW not yet


@dataclasses.dataclass
class ChunkRows:
    """A selected chunk: ``keys[i]`` is the key of ``rows[i]`` (dicts, or their JSON texts:
    a list or a TextColumn, core/text_column.py), in key order; ``key_texts``: the keys'
    JSON texts, where the source wrote them."""

    keys: list[Key]
    rows: Sequence[Any]
    key_texts: Optional[Sequence[str]] = None

    def take(self, indices: list[int]) -> "ChunkRows":
        keys = self.keys
        kt = None if self.key_texts is None else take_rows(self.key_texts, indices)
        return ChunkRows([keys[i] for i in indices], take_rows(self.rows, indices), kt)


@dataclasses.dataclass
class ChunkDone:
    """HW reached: ``rows`` are the chunk rows to emit at ``hw`` (in key order)."""

    hw: Position
    rows: Sequence[Row]  # or their texts (ChunkRows)
    selected: int  # rows the SELECT returned (before removals)
    context: Any
    keys: list[Key] = dataclasses.field(default_factory=list)  # the key of each row, same order
    # The chunk's range repair holds for keys whose last event is older than this: the LW's
    # position, or the earliest event of a transaction the SELECT could not see (PostgreSQL).
    since: Optional[Position] = None
    key_texts: Optional[Sequence[str]] = None  # the keys' JSON texts (ChunkRows)


@dataclasses.dataclass
class ChunkAborted:
    """The chunk cannot be trusted (see module docstring) and must be selected again."""

    context: Any
    reason: str


Emitted = Union[ChangeEvent, ChunkDone, ChunkAborted]


class WatermarkWindow:
    """At most one chunk in flight; feed every log item of the source through ``process``."""

    def __init__(self, recent_txids: int = 10_000):
        self.state = WindowState.IDLE
        self._lw: Optional[str] = None
        self._hw: Optional[str] = None
        self._table: Optional[str] = None
        self._chunk = ChunkRows([], [])
        # Key -> row number of the rows still in the chunk; made at the first removal (most
        # chunks see no change of their table in their window).
        self._index: Optional[dict[Key, int]] = None
        self._selected = 0
        self._invisible: frozenset[str] = frozenset()
        self._context: Any = None
        self._since: Optional[Position] = None
        # Transactions whose events were already passed on, newest last (bounded memory).
        self._recent: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._recent_max = recent_txids
        self._last_txid: Optional[str] = None

    @property
    def busy(self) -> bool:
        return self.state is not WindowState.IDLE

    def open(
        self,
        lw: str,
        hw: str,
        table: str,
        rows: Union[ChunkRows, Iterable[tuple[Key, Row]]],
        invisible_txids: frozenset[str] = frozenset(),
        context: Any = None,
    ) -> list[Emitted]:
        """Register a selected chunk whose LW and HW are committed but not yet processed;
        ``rows``: a ChunkRows, or (key, row) pairs in key order."""
        if self.busy:
            raise WatermarkSequenceError("a chunk window is already open; wait for its high watermark")
        if lw == hw:
            raise ValueError("low and high watermark must differ")
        seen = [t for t in invisible_txids if t in self._recent]
        if seen:
            return [ChunkAborted(context, f"transaction {seen[0]} was emitted but invisible to the SELECT")]
        if not isinstance(rows, ChunkRows):
            pairs = list(rows)
            rows = ChunkRows([k for k, _ in pairs], [r for _, r in pairs])
        self._chunk = rows
        self._index = None
        self._selected = len(rows.keys)
        self._lw, self._hw, self._table = lw, hw, table
        self._invisible = invisible_txids
        self._context = context
        self.state = WindowState.AWAITING_LW
        return []

    def process(self, item: Union[ChangeEvent, WatermarkEvent]) -> list[Emitted]:
        if isinstance(item, WatermarkEvent):
            return self._on_watermark(item)
        if item.txid is not None and item.txid != self._last_txid:
            self._remember(item.txid)
        if self.state is not WindowState.IDLE and item.table == self._table:
            in_window = self.state is WindowState.OPEN
            if in_window or (item.txid is not None and item.txid in self._invisible):
                if item.op is Op.TRUNCATE:
                    # Any row of the chunk may be gone, and which ones the SELECT saw before or
                    # after the TRUNCATE is unknown: select the chunk again.
                    aborted = ChunkAborted(self._context, f"table {item.table} was truncated inside the window")
                    self._reset()
                    return [item, aborted]
                self._remove(item.key)
                if self._since is None or item.position < self._since:
                    self._since = item.position
        return [item]

    def pass_block(self, table: str, txid: Optional[str]) -> bool:
        """Whether every change of one transaction to ``table`` would pass ``process`` as it
        is (no chunk of that table in flight), so a block of them may skip it; the
        transaction is then remembered as ``process`` would."""
        if self.state is not WindowState.IDLE and table == self._table:
            return False
        if txid is not None and txid != self._last_txid:
            self._remember(txid)
        return True

    def _on_watermark(self, wm: WatermarkEvent) -> list[Emitted]:
        if self.state is WindowState.AWAITING_LW and wm.uuid == self._lw:
            self.state = WindowState.OPEN
            if self._since is None or wm.position < self._since:
                self._since = wm.position
            return []
        if self.state is WindowState.OPEN and wm.uuid == self._hw:
            chunk = self._chunk
            if self._index is not None and len(self._index) < len(chunk.keys):
                chunk = chunk.take(list(self._index.values()))  # in key order still
            done = ChunkDone(
                wm.position, chunk.rows, self._selected, self._context, chunk.keys, self._since, chunk.key_texts
            )
            self._reset()
            return [done]
        if self.state is WindowState.AWAITING_LW and wm.uuid == self._hw:
            # LW is committed before HW, so the log cannot show HW first.
            raise WatermarkSequenceError(f"high watermark {wm.uuid} seen before its low watermark")
        return []  # a watermark of an abandoned window (crash, restart): drop it

    def abandon(self) -> None:
        """Forget the window (e.g. the dump was cancelled); its watermarks become stale."""
        self._reset()

    def _reset(self) -> None:
        self.state = WindowState.IDLE
        self._lw = self._hw = self._table = None
        self._chunk = ChunkRows([], [])
        self._index = None
        self._selected = 0
        self._invisible = frozenset()
        self._context = None
        self._since = None

    def _remove(self, key: Key) -> None:
        """The chunk's row of ``key``, if any, is not emitted at HW."""
        if self._index is None:
            keys = self._chunk.keys
            # Insertion order = key order; a key listed twice keeps its last row (as a dict
            # of the pairs would).
            self._index = dict(zip(keys, range(len(keys))))
        self._index.pop(key, None)

    def _remember(self, txid: str) -> None:
        self._last_txid = txid
        if txid in self._recent:
            self._recent.move_to_end(txid)
            return
        self._recent[txid] = None
        if len(self._recent) > self._recent_max:
            self._recent.popitem(last=False)
