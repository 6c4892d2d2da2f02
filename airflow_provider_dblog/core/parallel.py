"""Parallel chunk reads (``--readers N``): one watermark window, several chunk SELECTs.

The window rule does not care how the chunk was read: every row selected between LW and HW
is at least as new as the state at LW, and the log events inside the window remove the keys
whose row may be older than the log's. So N connections can each select a disjoint key range
of ``size`` rows at once, and their rows together are one chunk.

The ranges are cut at the keys a key-only SELECT finds every ``size`` rows after the table's
progress (``split_points``); reader i then selects (split i-1, split i] with LIMIT ``size``,
the last one up to the dump's upper bound. Rows inserted into a range between the split and
its SELECT can make a reader stop short of its range's end: the chunk then keeps the readers
up to and including that one, whose rows are contiguous from the progress on, and drops the
rest (``combine``), so a chunk always covers one unbroken key range, as its range event says.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from .events import Key, Row
from .protocols import ChunkResult


def split_points(keys: Sequence[Key], size: int, readers: int) -> list[Key]:
    """The ``size``-th, ``2 * size``-th, ... of ``keys`` (in key order): at most
    ``readers - 1`` points, fewer when the table has fewer rows left."""
    return list(keys[size - 1 :: size][: readers - 1])


def combine(
    results: Sequence[ChunkResult], uppers: Sequence[Optional[Key]], size: int, key_of: Callable[[Row], Key]
) -> tuple[ChunkResult, bool]:
    """One chunk from the readers' results, in key order, and whether it is the table's
    last (every range read to its end and the last one came back short). A reader whose
    range is not read to its end (``size`` rows that stop before its upper key) ends the
    chunk: the later readers' rows are dropped and selected again by the next chunk."""
    rows: list[Row] = []
    # Any reader's snapshot may have missed these; ``|`` of the source's own type (a
    # PostgreSQL snapshot's set also holds every xid from its xmax on).
    invisible: frozenset[str] = frozenset()
    for i, (result, upper) in enumerate(zip(results, uppers)):
        rows += result.rows
        invisible = invisible | result.invisible_txids
        last = i == len(results) - 1
        whole = len(result.rows) < size or (upper is not None and key_of(result.rows[-1]) == upper)
        if not whole:
            return ChunkResult(rows, invisible), False
        if last:
            return ChunkResult(rows, invisible), len(result.rows) < size
    return ChunkResult(rows, invisible), True
