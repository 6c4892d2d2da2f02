"""What an adaptive dump paces itself by, read from the capture and the source.

core/pacing.py decides the pace from ``PaceSignals``; this module gathers them after each
chunk: the SELECT's time, the capture's lag behind the log (from the log cursor: the newest
commit processed, 0 while the log is idle) and the source's replicas' lag, read at most every
``interval`` seconds (a query on the source). It exists so that the chunk step gets its
signals from one small callable instead of from the engine's fields.
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from .errors import SourceUnavailable
from .log_cursor import LogCursor
from .pacing import PaceSignals
from .protocols import Source

log = logging.getLogger(__name__)


class PaceSampler:
    def __init__(self, source: Source, cursor: LogCursor, interval: float):
        self.source = source
        self.cursor = cursor
        self.interval = interval  # EngineConfig.replica_lag_interval
        self._replica_lag: Optional[float] = None  # the source's replicas' lag, last read
        self._replica_lag_at = float("-inf")

    def __call__(self, select_seconds: float, rows: int) -> PaceSignals:
        """The signals after a chunk whose SELECT took ``select_seconds`` for ``rows`` rows."""
        now = time.monotonic()
        capture_lag = 0.0
        last_commit_ts = self.cursor.last_commit_ts
        if last_commit_ts and now - self.cursor.last_item_at < 2.0:
            capture_lag = max(0.0, time.time() - last_commit_ts / 1e6)
        if now - self._replica_lag_at > self.interval:
            self._replica_lag_at = now
            try:
                self._replica_lag = self.source.replication_lag()
            except SourceUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - a signal, not a reason to stop the capture
                log.warning("capture of %s: replica lag unavailable: %s", self.source.source_id, exc)
                self._replica_lag = None
        return PaceSignals(select_seconds, rows, capture_lag, self._replica_lag)
