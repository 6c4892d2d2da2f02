"""The local leader lease (``core.protocols.LeaderLease``): ``fcntl.flock`` on
``<state file>.leader-<source>.lock`` (released by the kernel when the process dies, however
it dies), the epoch counter in the store's value table.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from typing import Callable, Optional

from ..core.protocols import Fence, StateStore
from .lease_common import coordination_domain, default_identity, lease_lost


class LocalLease:
    """``LeaderLease`` for the local store: one holder per source on this machine."""

    def __init__(self, store: StateStore, lock_path: str, source_id: str, identity: Optional[str] = None):
        self.store = store
        self.lock_path = lock_path
        self.source_id = source_id
        self.identity = identity or default_identity()
        self.epoch: Optional[int] = None
        self._fd: Optional[int] = None
        self._key = f"leader/{source_id}"
        # The lock file's inode is what excludes: every path to it names one domain.
        self.domain = coordination_domain(f"local {os.path.realpath(lock_path)}")

    def acquire(
        self, stop: threading.Event, on_standby: Optional[Callable[[Optional[dict]], None]] = None
    ) -> Optional[int]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        announced = False
        while not stop.is_set():
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_standby is not None and not announced:
                    on_standby(self.leader())
                    announced = True
                stop.wait(0.2)
                continue
            self._fd = fd
            # Under the lock nobody else writes the counter: read, increment, store.
            old = json.loads(self.store.get_value(self._key) or "{}")
            self.epoch = int(old.get("epoch", 0)) + 1
            self.store.put_value(
                self._key, json.dumps({"epoch": self.epoch, "identity": self.identity, "acquired_at": time.time()})
            )
            return self.epoch
        os.close(fd)
        return None

    def held(self) -> bool:
        return self._fd is not None

    def check(self) -> None:
        if self._fd is None:
            raise lease_lost(self.source_id, self.epoch, "this process does not hold the lease")
        # The kernel keeps the lock while we live; but if the lock file was removed, another
        # process could lock a new file and take a newer epoch: the counter tells.
        now = json.loads(self.store.get_value(self._key) or "{}").get("epoch")
        if now != self.epoch:
            raise lease_lost(self.source_id, self.epoch, f"epoch {now} was taken by {self.lock_path}'s new holder")

    def fence(self) -> Fence:
        if self.epoch is None:
            raise lease_lost(self.source_id, None, "this process does not hold the lease")
        return Fence(self.source_id, self.epoch, self.lock_path)

    def leader(self) -> Optional[dict]:
        info = json.loads(self.store.get_value(self._key) or "null")
        if not info:
            return None
        try:  # no lock file: nobody holds the lease (and a reader creates none)
            fd = os.open(self.lock_path, os.O_RDWR) if self._fd is None else None
        except FileNotFoundError:
            return None
        try:
            if fd is not None:  # is anybody holding the lock right now?
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return None
                except BlockingIOError:
                    pass
        finally:
            if fd is not None:
                os.close(fd)  # also releases the probe lock
        return {**info, "standby": None}

    def release(self) -> None:
        fd, self._fd, self.epoch = self._fd, None, None
        if fd is not None:
            os.close(fd)  # releases the flock
