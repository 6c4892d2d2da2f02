"""The engine's place in the source's log, and how it gets the log back.

``LogCursor`` is the position state the log step, the checkpoints, reconnects and position
recovery share: the checkpoint stored last, the position handed to the writer last, and the
floor below which items delivered again are dropped. ``LogRecovery`` starts the log from the
cursor and gets it back when it is lost: a dropped connection (``reconnect``: close, back off,
reopen, resume after the cursor) and, opt-in, a lost position (``recover``: a dump of every
table, then the log's end). ``Heartbeat`` keeps the cursor moving while the captured tables
are idle. They exist so that the engine's loop only says *when* to do these,
and the one place that moves the positions is this module and the engine's log step.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from typing import Any, Callable, Optional

from .dumps import DumpControl, DumpSpec
from .errors import DBLogError, PositionLostError, SourceUnavailable
from .events import Position
from .protocols import RowTextLog, Source, StateStore
from .scheduler import DumpScheduler
from .watermark import WatermarkWindow

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LogCursor:
    durable: Optional[Position] = None  # last checkpoint stored
    last_seen: Optional[Position] = None  # last log position handed to the writer
    # Items at or below this were delivered before and are durable, or handed to the writer
    # before a reconnect: dropped when the log gives them again.
    skip_until: Optional[Position] = None
    last_item_at: float = dataclasses.field(default_factory=time.monotonic)  # the log's last item
    last_commit_ts: Optional[int] = None  # µs, of the newest log event processed

    def resume_point(self) -> Optional[Position]:
        """Where the log is read again after a reconnect: the later of the checkpoint and the
        last position handed to the writer (None: the source's own bookmark)."""
        return max((p for p in (self.durable, self.last_seen) if p is not None), default=None)

    def floor(self) -> Optional[Position]:
        """The lowest position the log may give from its end (after a lost position)."""
        return max((p for p in (self.skip_until, self.last_seen) if p is not None), default=None)


@dataclasses.dataclass(frozen=True)
class ReconnectPolicy:
    timeout: float = 300.0  # keep trying for this long (EngineConfig.reconnect_timeout)
    max_backoff: float = 10.0  # seconds between attempts at most, doubling from 0.5
    redump_on_position_lost: bool = False  # recover a lost position by a full dump (opt-in)


class LogRecovery:
    def __init__(
        self,
        source: Source,
        state: StateStore,
        window: WatermarkWindow,
        scheduler: DumpScheduler,
        cursor: LogCursor,
        policy: ReconnectPolicy,
        takes_texts: bool,
        fence: Callable[[], None],
    ):
        self.source = source
        self.source_id = source.source_id
        self.state = state  # the engine fences it (Engine._fence_state)
        self.window = window
        self.scheduler = scheduler
        self.cursor = cursor
        self.policy = policy
        self.takes_texts = takes_texts
        self.fence = fence  # raises StaleEpochError once the lease is lost
        self.reconnects = 0
        self.position_recoveries = 0  # lost positions recovered by a full dump (opt-in)

    def start_log(self, after: Optional[Position], **kwargs: Any) -> None:
        """``source.start_log``; the log's row images as their changelog JSON text when the
        output stores that text and the source can read them so (core/row_text.py). Nothing
        in the engine reads a log image but a key update's ``before``, which a source gives
        as a dict."""
        source = self.source
        if self.takes_texts and isinstance(source, RowTextLog) and source.logs_row_text:
            source.start_log(after, texts=True, **kwargs)
        else:
            source.start_log(after, **kwargs)

    def open_log(self, checkpoint: Optional[Position], from_end: bool, stop: threading.Event) -> None:
        """At the start: read the log after ``checkpoint`` (None: the source's bookmark, or its
        end with ``from_end``), reconnecting or recovering the position as the loop would."""
        try:
            self.start_log(checkpoint, from_end=from_end, floor=self.cursor.skip_until)
        except SourceUnavailable as exc:  # e.g. a previous leader's session still holds the log
            self.reconnect(exc, stop)
        except PositionLostError as exc:
            self.recover(exc)
        self.cursor.last_item_at = time.monotonic()

    def recover(self, exc: PositionLostError) -> None:
        """Opt-in (``redump_on_position_lost``): request a dump of every table first (a crash
        right after asks again, as the position is still lost), then forget the checkpoint
        and read the log from its current end. Changes in the gap reach the changelog through
        the dump; rows deleted in it go through its key ranges."""
        if not self.policy.redump_on_position_lost:
            raise exc
        spec = DumpSpec.new(self.source_id, None)
        self.state.add_dump(spec, DumpControl())
        self.position_recoveries += 1
        log.warning(
            "capture of %s: %s Reading from the current end of the log; dump %s of every table restores what the gap held.",
            self.source_id,
            exc.cause,
            spec.dump_id,
        )
        self.window.abandon()
        self.state.clear_checkpoint(self.source_id)
        self.cursor.durable = None
        self.source.reset_log()
        self.start_log(None, from_end=True, floor=self.cursor.floor())
        self.scheduler.wake()

    def open_source(self, stop: threading.Event) -> None:
        """At the start: open the source, waiting with backoff within the reconnect timeout
        while it is unavailable (a database still starting up, a failover under way), as a
        reconnect would, instead of ending the capture at once."""
        try:
            self.source.open()
        except SourceUnavailable as exc:
            log.warning("capture of %s: the source is unavailable (%s); waiting for it", self.source_id, exc)
            self._reopen(exc, stop, lambda: None)
            log.warning("capture of %s: the source is available", self.source_id)

    def reconnect(self, exc: SourceUnavailable, stop: threading.Event) -> None:
        """Close the source, wait with backoff, reopen it and read the log again from the last
        position handed to the writer. The writer keeps what it has (it does not depend on
        the source); an open chunk window is abandoned and its chunk selected again, its
        watermarks arriving later are stale and dropped. Events up to ``last_seen`` are
        dropped when delivered again."""
        cursor = self.cursor
        self.reconnects += 1
        self.window.abandon()
        resume = cursor.resume_point()
        if resume is not None:
            cursor.skip_until = max(cursor.skip_until, resume) if cursor.skip_until else resume
        log.warning("capture of %s: lost the source connection (%s); reconnecting", self.source_id, exc)

        def read_log() -> None:
            try:
                # Without any position yet, the source resumes from its own bookmark (the
                # PostgreSQL slot; MySQL's first start position): nothing is skipped.
                self.start_log(resume, floor=cursor.skip_until)
            except PositionLostError as lost:  # e.g. a promoted replica without our transaction
                self.recover(lost)

        self._reopen(exc, stop, read_log)
        cursor.last_item_at = time.monotonic()
        self.scheduler.wake()
        log.warning(
            "capture of %s: reconnected, reading the log after %s",
            self.source_id,
            resume or "the source's bookmark",
        )

    def _reopen(self, exc: SourceUnavailable, stop: threading.Event, then: Callable[[], None]) -> None:
        """Close the source and open it again, then ``then()``, with backoff (0.5 s doubling
        up to the policy's maximum) while it stays unavailable; DBLogError with the last
        cause after the policy's timeout; the last cause when ``stop`` is set meanwhile."""
        deadline = time.monotonic() + self.policy.timeout
        delay, last = 0.5, exc
        while True:
            try:
                self.source.close()
            except Exception as broken:  # noqa: BLE001 - the connection is broken already
                log.debug("closing the lost source connection: %s", broken)
            if stop.wait(delay):
                raise last  # stopping: nothing more to read
            self.fence()  # the lease may have moved on while we were cut off
            try:
                self.source.open()
                then()
            except SourceUnavailable as err:
                last = err
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DBLogError(
                        f"lost the connection to source {self.source_id} and could not reconnect "
                        f"within {self.policy.timeout:.0f} s (last error: {err.cause}).",
                        "check that the database is up and reachable; a restarted capture resumes "
                        "from its checkpoint without loss.",
                    ) from err
                # The last attempt comes at the deadline, not a whole backoff before it.
                delay = min(delay * 2, self.policy.max_backoff, remaining)
                continue
            return


class Heartbeat:
    """An idle log still moves the checkpoint: a watermark no window waits for comes back
    through the log, and the engine's log step checkpoints its position like any item's (the
    window drops it). Not while a chunk is in flight: its own LW/HW are on the way anyway."""

    def __init__(self, source: Source, cursor: LogCursor, window: WatermarkWindow, interval: Optional[float]):
        self.source = source
        self.cursor = cursor
        self.window = window
        self.interval = interval  # seconds without a log item (EngineConfig.heartbeat_interval; None: never)
        self.count = 0  # heartbeats written

    def step(self) -> None:
        interval = self.interval
        if not interval or self.window.busy or time.monotonic() - self.cursor.last_item_at < interval:
            return
        self.source.write_watermark(uuid.uuid4().hex)
        self.count += 1
        self.cursor.last_item_at = time.monotonic()
