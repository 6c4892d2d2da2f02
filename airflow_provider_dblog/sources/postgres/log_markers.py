"""Read-only watermarks (``watermarks = "log"``): a watermark is a WAL position, not a row.

With table watermarks, LW and HW are UPDATEs of the source's watermark row, and come back
through the log as changes. A read-only dump writes nothing, so the capture reads the
server's WAL insert position instead (``pg_current_wal_insert_lsn()``, which any user may
call) and puts a ``WatermarkEvent`` into the stream where the log passes that position:

* before the first transaction whose commit record starts at or after it (pgoutput's Begin
  carries the commit LSN), and never inside a transaction;
* or, when no such transaction comes (an idle database), once the server reports that its
  decoding passed it (the WAL end of a keepalive or message: every transaction that
  committed before it has then been sent) and no transaction is open.

Why this is what Algorithm 1 needs:

* HW, read after the chunk's SELECT: every transaction the SELECT saw had inserted its
  commit record before the SELECT's snapshot was taken, so it starts before HW's position.
* LW, read before the SELECT: a transaction that commits later starts at or after it; one
  that committed before LW but was still invisible to the snapshot (PostgreSQL's commit
  order and visibility order differ) is in the snapshot's in-progress list, and the window
  treats it as inside (``invisible_txids``, core/watermark.py), as it does with table
  watermarks.

A marker's position sorts after every change of a transaction that commits before it and
before every change of one that commits at or after it: commit records are 8-byte aligned,
so ``lsn - 1`` is no commit's LSN, and the index part (1, 2, ...) orders markers read at
the same LSN (LW and HW of a chunk on an idle database) by when they were taken.

Markers live in the stream's decoder: a restarted stream forgets them, as the engine
abandons the window then (its watermarks become stale, as table watermarks of an abandoned
window do).
"""

from __future__ import annotations

import bisect
from typing import Optional

from ...core.events import Position, WatermarkEvent

# A WAL page starts with a header: 24 bytes, 40 on a segment's first page. The insert
# position of an empty page points past it, where the decoder's end of the last record
# is the page boundary; the marker is put at the boundary so that an idle server reaches it.
SHORT_PAGE_HEADER, LONG_PAGE_HEADER = 24, 40


def marker_lsn(insert_lsn: int, block_size: int, segment_size: int) -> int:
    """The position to wait for: ``pg_current_wal_insert_lsn()``, 8-byte aligned, moved back
    over the page header it may point past."""
    lsn = (insert_lsn + 7) & ~7
    if lsn % segment_size == LONG_PAGE_HEADER:
        return lsn - LONG_PAGE_HEADER
    if lsn % block_size == SHORT_PAGE_HEADER:
        return lsn - SHORT_PAGE_HEADER
    return lsn


def marker_position(lsn: int, n: int) -> Position:
    """Between the changes of transactions committed before ``lsn`` and at or after it (module
    docstring); ``n`` (>= 1) orders markers of one LSN. Same layout as log.make_position."""
    return Position(f"{lsn - 1:016X}{n:010d}")


class LogMarkers:
    """The markers not yet in the stream, by LSN (then by when they were added)."""

    def __init__(self) -> None:
        self._waiting: list[tuple[int, int, str]] = []  # (lsn, n, uuid), sorted
        self._n = 0

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, uuid: str, lsn: int) -> None:
        self._n += 1
        bisect.insort(self._waiting, (lsn, self._n, uuid))

    def due(self, passed: Optional[int], before_commit: Optional[int] = None) -> list[WatermarkEvent]:
        """The markers to put into the stream now, in order: ``before_commit``, the commit LSN
        of a transaction about to start (markers at or before it go first); ``passed``, the
        WAL end the server reported with no transaction open (markers at or before it)."""
        limit = before_commit if before_commit is not None else passed
        if limit is None or not self._waiting or self._waiting[0][0] > limit:
            return []
        cut = bisect.bisect_right(self._waiting, (limit, float("inf"), ""))
        due, self._waiting = self._waiting[:cut], self._waiting[cut:]
        return [WatermarkEvent(uuid=u, position=marker_position(lsn, n), txid=None) for lsn, n, u in due]
