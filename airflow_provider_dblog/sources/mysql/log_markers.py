"""Read-only watermarks on MariaDB (``watermarks = "log"``): a watermark is a binlog position.

A read-only dump writes no watermark row. Instead the capture takes a consistent snapshot
(``START TRANSACTION WITH CONSISTENT SNAPSHOT``) and reads MariaDB's
``binlog_snapshot_file`` / ``binlog_snapshot_position``: the binlog position that matches
that snapshot exactly, even under group commit (a transaction before it is committed in
InnoDB and visible to any later read view; one after it is not, and commits later). The
reader thread puts a ``WatermarkEvent`` into the stream where the binlog passes it:

* before an event that starts at or after it with no transaction open (the next
  transaction's GTID event, or a statement of its own);
* after the event that ends at it with no transaction open (the last transaction's XID);
* on a heartbeat (the server's position when it has nothing to send): the reader asks for one
  every ``READ_ONLY_HEARTBEAT`` seconds, so an idle server gives the watermark within it.

Why it is exact: LW, read before the chunk's SELECT, precedes every transaction the SELECT
(an autocommit READ COMMITTED statement, whose read view is taken after LW's snapshot) could
miss; HW, read after it, follows every transaction it saw. MySQL has no such position (the
executed GTID set read around the SELECT can hold a transaction that is in the binlog but not
yet committed in InnoDB), so the mode is refused there.

A marker's position: file number and ``pos`` as the transaction-start part, event offset 0,
and the row part counting the markers of one position (LW and HW of a chunk on an idle
server share it). A transaction starting at ``pos`` has event offsets past it, so the
marker sorts before all of it and after every transaction that started before ``pos``.
"""

from __future__ import annotations

import bisect
import threading

from ...core.events import Position, WatermarkEvent

READ_ONLY_HEARTBEAT = 0.1  # seconds: an idle server's binlog position at least this often


class BinlogMarkers:
    """The markers not yet in the stream; added by the engine, taken by the reader thread."""

    def __init__(self, coord) -> None:  # coord: log.encode_coord
        self._coord = coord
        self._waiting: list[tuple[int, int, int, str]] = []  # (file number, pos, n, uuid), sorted
        self._lock = threading.Lock()
        self._n = 0
        self._last: tuple[int, int, int] = (-1, -1, 0)  # (file number, pos, n) of the last one out

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def add(self, uuid: str, file_no: int, pos: int) -> None:
        with self._lock:
            self._n += 1
            bisect.insort(self._waiting, (file_no, pos, self._n, uuid))

    def due(self, file_no: int, pos: int) -> list[WatermarkEvent]:
        """The markers at or before (``file_no``, ``pos``), in order, taken out."""
        with self._lock:
            if not self._waiting or self._waiting[0][:2] > (file_no, pos):
                return []
            cut = bisect.bisect_right(self._waiting, (file_no, pos, float("inf"), ""))
            due, self._waiting = self._waiting[:cut], self._waiting[cut:]
        out = []
        for f, p, _, uuid in due:
            lf, lp, ln = self._last
            n = ln + 1 if (f, p) == (lf, lp) else 1
            self._last = (f, p, n)
            out.append(WatermarkEvent(uuid=uuid, position=Position(self._coord(f, p, 0, n)), txid=None))
        return out
