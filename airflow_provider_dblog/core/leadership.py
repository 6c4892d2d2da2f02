"""The engine's side of the leader lease (invariant 7), or of no lease at all.

A capture with a lease waits as standby until it holds it, checks it before it reconnects and
while it runs, reports a lost lease rather than whatever failed first because of it (a
deposed leader's source connection is usually taken over before its next check), and
releases it at the end. Without a lease every one of these is a no-op. It exists so that the
engine does not test for a lease at each of those places.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from .errors import StaleEpochError
from .protocols import LeaderLease

log = logging.getLogger(__name__)


class Leadership:
    def __init__(self, lease: Optional[LeaderLease], source_id: str):
        self.lease = lease
        self.source_id = source_id

    def acquire(
        self, stop: threading.Event, on_standby: Optional[Callable[[Optional[dict[str, Any]]], None]]
    ) -> Optional[int]:
        """Standby until we lead (only the lease holder connects to the log): the epoch, or
        None when stopped while standby."""
        assert self.lease is not None
        log.info("capture of %s: contending for the leader lease as %s", self.source_id, self.lease.identity)
        return self.lease.acquire(stop, on_standby)

    def check(self) -> None:
        """Raise StaleEpochError unless we still hold the lease (asks the coordinator)."""
        if self.lease is not None:
            self.lease.check()

    def keep(self) -> None:
        """Each turn of the loop: raise when the lease is lost; wait out a short suspension."""
        if self.lease is not None and not self.lease.held():
            self.lease.check()

    def error_or(self, exc: BaseException) -> BaseException:
        """The lost lease (caused by ``exc``) when that is what happened, else ``exc``."""
        if self.lease is not None:
            try:
                self.lease.check()
            except StaleEpochError as lost:
                lost.__cause__ = exc
                return lost
            except Exception as unreachable:  # noqa: BLE001 - logged; the original error matters more
                log.warning(
                    "capture of %s: could not ask the coordinator whether the lease is still "
                    "held (%s); reporting the original error",
                    self.source_id,
                    unreachable,
                )
        return exc

    def release(self) -> None:
        if self.lease is not None:
            self.lease.release()
