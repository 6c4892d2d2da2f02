"""The capture's status report: what ``dblog status``, the Airflow trigger and ``on_progress``
read about a running capture.

It gathers each part's view (the log position and checkpoint, the writer's buffer, the
window, the dumps, reconnects, the leader) into one JSON-able dict, and publishes it: stored
under the source's status key, each distinct warning of the source logged once, and handed
to ``on_progress``. It exists so that what a report holds is read in one place, apart from
the loop that decides when to report.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Callable, Optional

from .chunk_step import ChunkStep
from .dump_requests import status_key
from .errors import PositionLostError
from .log_cursor import LogCursor, LogRecovery
from .protocols import LeaderLease, Source, StateStore
from .scheduler import DumpScheduler
from .schema_watch import SchemaWatch
from .watermark import WatermarkWindow
from .writer import Writer

log = logging.getLogger(__name__)

# A commit taking this many seconds is reported as a warning while it is still under way: a
# broker or store that stopped answering shows before the call's own timeout fails it.
SLOW_COMMIT = 10.0


class StatusReport:
    def __init__(
        self,
        source: Source,
        cursor: LogCursor,
        window: WatermarkWindow,
        scheduler: DumpScheduler,
        schema_watch: SchemaWatch,
        chunk_step: ChunkStep,
        recovery: LogRecovery,
        lease: Optional[LeaderLease],
        interval: float,
        on_progress: Optional[Callable[[dict[str, Any]], None]] = None,
    ):
        self.source = source
        self.source_id = source.source_id
        self.cursor = cursor
        self.window = window
        self.scheduler = scheduler
        self.schema_watch = schema_watch
        self.chunk_step = chunk_step
        self.recovery = recovery
        self.lease = lease
        self.interval = interval  # seconds between reports (EngineConfig.status_interval)
        self.on_progress = on_progress
        self._warned: set[str] = set()

    def build(
        self,
        rate: float,
        events_in: int,
        heartbeats: int,
        writer: Optional[Writer],
        epoch: Optional[int],
    ) -> dict[str, Any]:
        """The report, given the engine's own counters: the log events processed per second
        and in all, the heartbeats written, the writer (None before the output is open) and
        the leader's epoch."""
        try:
            src = self.source.log_status()
        except PositionLostError:
            raise  # the slot was dropped or invalidated under us: stop with the fix
        except Exception as exc:  # noqa: BLE001 - a report must never stop the capture
            log.warning("capture of %s: the source's log status is unavailable: %s", self.source_id, exc)
            src = {"error": str(exc)}
        cursor = self.cursor
        last_commit_ts = cursor.last_commit_ts
        warnings = list(src.get("warnings") or [])
        outage = writer.outage() if writer else None
        pending = writer.commit_pending_since() if writer else None
        pending_s = round(max(0.0, time.time() - pending), 1) if pending is not None else 0.0
        if outage is not None and writer is not None:
            warnings.append(outage_warning(repr(writer.output), outage))
        elif writer is not None and pending is not None and pending_s >= SLOW_COMMIT:
            warnings.append(
                f"the output {writer.output!r} has not answered the commit begun at {_utc(pending)} "
                f"({writer.in_flight()[0]} events): slow or unreachable; the log waits for it, nothing is lost"
            )
        return {
            "source_id": self.source_id,
            "pid": os.getpid(),
            "updated_at": time.time(),
            # the next report is due this many seconds later: `dblog status` tells a silent capture
            "status_interval": self.interval,
            "position": cursor.last_seen.encode() if cursor.last_seen else None,
            "checkpoint": cursor.durable.encode() if cursor.durable else None,
            "events_per_s": round(rate, 1),
            "events_total": events_in,
            "buffered": writer.buffered() if writer else 0,
            "buffered_mb": round(writer.buffered_bytes() / 2**20, 1) if writer else 0.0,
            "buffered_bytes": writer.buffered_bytes() if writer else 0,  # exact, for the metrics
            # the batch being committed (or retried through an outage), beside the buffer
            "in_flight": writer.in_flight()[0] if writer else 0,
            "in_flight_bytes": writer.in_flight()[1] if writer else 0,
            "window": self.window.state.value,
            # seconds between the newest processed commit and now (0 when the log is idle)
            "lag_seconds": round(max(0.0, time.time() - last_commit_ts / 1e6), 3)
            if last_commit_ts and rate > 0
            else 0.0,
            "lag_bytes": src.get("lag_bytes"),  # log bytes written but not yet read
            "warnings": warnings,
            # the output refusing writes (core/writer.py Outage.report); None while it accepts them
            "output_outage": outage,
            # seconds the output commit under way has taken so far (0 between commits)
            "output_commit_pending_seconds": pending_s,
            # the output's commits so far: events, commits, seconds spent in them, failed attempts
            "events_written": writer.events_written if writer else 0,
            "output_commits": writer.flushes if writer else 0,
            "output_commit_seconds": round(writer.commit_seconds, 3) if writer else 0.0,
            "output_failures": writer.failed_attempts if writer else 0,
            "heartbeats": heartbeats,
            "schemas_checked_at": self.schema_watch.checked_at,
            "reconnects": self.recovery.reconnects,
            "position_recoveries": self.recovery.position_recoveries,
            "parallel_reads": self.chunk_step.parallel_reads,
            "dumps": self.scheduler.health(),
            "estimates": self.scheduler.estimates,
            "leader": {"identity": self.lease.identity, "epoch": epoch} if self.lease else None,
            "log": src,
        }

    def publish(self, state: StateStore, status: dict[str, Any]) -> None:
        """Store the report (through the engine's state store: fenced once it leads), log
        each new warning once, and hand the report to ``on_progress``."""
        for w in status["warnings"]:
            if w not in self._warned:  # once per distinct warning, not every report
                log.warning("capture of %s: %s", self.source_id, w)
        self._warned = set(status["warnings"])
        state.put_value(status_key(self.source_id), json.dumps(status, default=str))
        if self.on_progress:
            self.on_progress(status)


def outage_warning(output: str, outage: dict[str, Any]) -> str:
    """The warning of an output outage: the same text all along one outage (logged once)."""
    until = outage.get("gives_up_at")
    end = f"until {_utc(until)} (--output-outage-timeout), then stops" if until else "for as long as it takes"
    return (
        f"the output {output} refuses writes since {_utc(outage['since'])} ({outage['error']}): the capture holds its "
        f"position and buffer and retries {end}; nothing is lost"
    )


def _utc(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def previous_log_status(state: StateStore, source_id: str) -> Optional[dict[str, Any]]:
    """The log status in the last report of this source's capture (the previous leader's)."""
    report = state.get_value(status_key(source_id))
    try:
        log_status = json.loads(report).get("log") if report else None
    except ValueError:  # a torn or foreign value: nothing to learn from it
        return None
    return log_status if isinstance(log_status, dict) else None
