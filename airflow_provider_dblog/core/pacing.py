"""Self-pacing dumps (``--adaptive``): chunk size and delay set by the source's health.

AIMD, as TCP paces a sender: while every signal is healthy, chunks grow by a step and the
delay between them shrinks by a step; on any sign of distress the chunk size halves and the
delay doubles (from at least ``DELAY_STEP_MS``). The signals, after each chunk:

* the chunk SELECT's time per row against its own baseline (the fastest recent per-row time,
  allowed to drift up slowly): a source busy with other work answers more slowly;
* the replication lag of the source's replicas (PostgreSQL ``pg_stat_replication``; MySQL /
  MariaDB ``Seconds_Behind_Master`` of the configured replicas): a dump's reads must not make
  replicas fall behind;
* the capture's own lag behind the log: the window pauses log processing, so a dump must not
  starve the capture.

The pace and the signal that set it are in ``dblog status`` (the scheduler's health report).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

MIN_CHUNK = 100
DELAY_STEP_MS = 25
MAX_DELAY_MS = 5_000
LATENCY_FACTOR = 3.0  # per-row SELECT time above this many baselines: distress
REPLICA_LAG_LIMIT = 5.0  # seconds
CAPTURE_LAG_LIMIT = 10.0  # seconds
BASELINE_DRIFT = 1.02  # the baseline may rise 2 % per chunk (the table's rows get wider, caches cool)
WARMUP = 3  # chunks observed before the latency signal counts


@dataclasses.dataclass(frozen=True)
class PaceSignals:
    select_seconds: float  # the chunk SELECT's wall time
    rows: int  # rows it returned
    capture_lag: Optional[float] = None  # seconds the capture is behind the log head
    replica_lag: Optional[float] = None  # worst replica, seconds; inf: a replica not replicating


class Pacer:
    """The adaptive pace of one dump; starts from the dump's chunk size and delay."""

    def __init__(self, chunk_size: int, delay_ms: int, max_chunk: int):
        self.start_chunk = chunk_size
        self.chunk_size = chunk_size
        self.delay_ms = delay_ms
        self.max_chunk = max_chunk
        self.step = max(MIN_CHUNK, chunk_size // 4)
        self.baseline: Optional[float] = None  # seconds per row of a healthy SELECT
        self.samples = 0
        self.signal = "starting"

    def _distress(self, s: PaceSignals, per_row: float) -> Optional[str]:
        if s.replica_lag is not None and s.replica_lag > REPLICA_LAG_LIMIT:
            lag = "not replicating" if s.replica_lag == float("inf") else f"{s.replica_lag:.1f} s behind"
            return f"replica lag: a replica is {lag}"
        if s.capture_lag is not None and s.capture_lag > CAPTURE_LAG_LIMIT:
            return f"capture lag: {s.capture_lag:.1f} s behind the log"
        if self.baseline is not None and self.samples >= WARMUP and per_row > LATENCY_FACTOR * self.baseline:
            return f"select latency: {per_row / self.baseline:.1f}x its baseline per row"
        return None

    def observe(self, s: PaceSignals) -> None:
        """Adjust the pace after a chunk."""
        per_row = s.select_seconds / max(1, s.rows)
        self.samples += 1
        distress = self._distress(s, per_row)
        if distress:
            self.chunk_size = max(MIN_CHUNK, self.chunk_size // 2)
            self.delay_ms = min(MAX_DELAY_MS, max(DELAY_STEP_MS, self.delay_ms * 2))
            self.signal = distress
            return
        if s.rows >= min(self.chunk_size, MIN_CHUNK):  # a short last chunk says little about speed
            self.baseline = per_row if self.baseline is None else min(self.baseline * BASELINE_DRIFT, per_row)
        self.chunk_size = min(self.max_chunk, self.chunk_size + self.step)
        self.delay_ms = max(0, self.delay_ms - DELAY_STEP_MS)
        self.signal = "healthy"

    def report(self) -> dict[str, Any]:
        return {"mode": "adaptive", "chunk_size": self.chunk_size, "delay_ms": self.delay_ms, "signal": self.signal}
