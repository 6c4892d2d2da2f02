"""The ZooKeeper leader lease (``core.protocols.LeaderLease``), under
``sources/<source>/leader`` of the store's chroot (docs/state.md):

* ``contenders/n_<seq>`` ephemeral sequential znodes, one per capture instance, holding its
  identity. The lowest sequence holds the lease; each other contender watches the next lower
  one only (no herd effect). The znode dies with its session, so a killed or partitioned
  leader is replaced once its session times out.
* ``epoch`` a persistent znode ``{"epoch", "identity", "acquired_at"}``. The new holder
  increments it in one transaction that also checks its own contender znode still exists,
  with a versioned set, so epochs are strictly increasing even under races.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Optional

from ..core.protocols import Fence
from .lease_common import coordination_domain, default_identity, lease_lost
from .zookeeper import encode_name

log = logging.getLogger(__name__)


class ZooKeeperLease:
    """``LeaderLease`` on the session of a ``ZooKeeperStateStore``."""

    def __init__(
        self, store: Any, source_id: str, identity: Optional[str] = None, suspend_limit: Optional[float] = None
    ):
        self.client = store.client
        self.source_id = source_id
        self.identity = identity or default_identity()
        self.base = store.path("sources", encode_name(source_id), "leader")
        self.contenders = self.base + "/contenders"
        self.epoch_path = self.base + "/epoch"
        self._store = store
        self._domain: Optional[str] = None
        # How long `check` waits for a suspended connection before giving the lease up. Safety
        # does not depend on it (`check` is a round trip: after a reconnect it passes only if
        # our znode is still ours, and every write is fenced), only availability does: an
        # outage shorter than the session timeout, plus the reconnect delay after it (at most
        # session_timeout/8, see zookeeper.py), must not cost the lease.
        self.suspend_limit = suspend_limit if suspend_limit is not None else 1.25 * store.session_timeout
        self.epoch: Optional[int] = None
        self._epoch_version = -1  # the epoch znode's version once we took our epoch
        self._node: Optional[str] = None
        self._session: Optional[int] = None
        self._lost = threading.Event()
        self._suspended = threading.Event()
        self._out_since: Optional[float] = None  # when `check` last lost contact (None: in contact)
        self.client.add_listener(self._on_state)

    def _on_state(self, state: str) -> None:
        # Called on kazoo's thread: only flip flags here, never block.
        from kazoo.client import KazooState

        if state == KazooState.LOST:
            self._lost.set()
        elif state == KazooState.SUSPENDED:
            self._suspended.set()
        else:
            self._suspended.clear()

    @property
    def domain(self) -> str:
        """The chroot znode's creation (zxid and time): the same tree however its ensemble's
        hosts are spelled; the root has none, so the hosts stand in for it."""
        if self._domain is None:
            chroot = self._store.chroot or "/"
            stat = self.client.retry(self.client.exists, chroot)
            if stat is None or not stat.czxid:
                hosts = ",".join(sorted(h.strip() for h in self._store.hosts.split(",")))
                self._domain = coordination_domain(f"zookeeper {hosts}{self._store.chroot}")
            else:
                self._domain = coordination_domain(f"zookeeper {chroot} {stat.czxid} {stat.ctime}")
        return self._domain

    # -- acquiring -----------------------------------------------------------------------
    def acquire(
        self, stop: threading.Event, on_standby: Optional[Callable[[Optional[dict]], None]] = None
    ) -> Optional[int]:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        c = self.client
        c.retry(c.ensure_path, self.contenders)
        try:
            c.retry(c.create, self.epoch_path, json.dumps({"epoch": 0}).encode())
        except NodeExistsError:
            pass
        announced: Any = object()
        while not stop.is_set():
            session = (c.client_id or (None,))[0]
            if session is None:  # not connected right now (kazoo reconnects by itself)
                stop.wait(0.2)
                continue
            if self._node is None or self._session != session:
                self._lost.clear()
                self._session = session
                self._node = c.retry(
                    c.create, self.contenders + "/n_", self.identity.encode(), ephemeral=True, sequence=True
                )
            mine = self._node.rsplit("/", 1)[1]
            children = sorted(c.retry(c.get_children, self.contenders))
            if mine not in children:
                self._node = None  # our session expired while waiting: queue up again
                continue
            i = children.index(mine)
            if i > 0:
                leader = self.leader()
                if on_standby is not None and leader != announced:
                    on_standby(leader)
                    announced = leader
                wake = threading.Event()
                if c.retry(c.exists, f"{self.contenders}/{children[i - 1]}", watch=lambda _e, w=wake: w.set()):
                    wake.wait(0.5)  # short, so that `stop` is seen promptly
                continue
            # Lowest contender: take the next epoch, atomically with "my znode still exists".
            data, stat = c.retry(c.get, self.epoch_path)
            epoch = int(json.loads(data or b"{}").get("epoch", 0)) + 1
            info = {"epoch": epoch, "identity": self.identity, "acquired_at": time.time()}
            tx = c.transaction()
            tx.check(self._node, 0)
            tx.set_data(self.epoch_path, json.dumps(info).encode(), version=stat.version)
            results = c.retry(tx.commit)
            if any(isinstance(r, (BadVersionError, NoNodeError)) for r in results):
                continue  # raced (or our session expired): look again
            if any(isinstance(r, Exception) for r in results):
                raise next(r for r in results if isinstance(r, Exception))
            self.epoch = epoch
            self._epoch_version = stat.version + 1  # our set_data moved it by one
            log.info("leader of %s with epoch %d (%s)", self.source_id, epoch, self.identity)
            return epoch
        self.release()
        return None

    # -- holding -------------------------------------------------------------------------
    def held(self) -> bool:
        return (
            self.epoch is not None
            and not self._lost.is_set()
            and not self._suspended.is_set()
            and self.client.client_id is not None
            and self.client.client_id[0] == self._session
        )

    def check(self) -> None:
        from kazoo.exceptions import ConnectionLoss, SessionExpiredError

        if self.epoch is None:
            raise lease_lost(self.source_id, None, "this process does not hold the lease")
        timeout_exc = self.client.handler.timeout_exception
        deadline = time.monotonic() + self.suspend_limit
        while True:
            if self._lost.is_set():
                raise lease_lost(self.source_id, self.epoch, "the ZooKeeper session expired")
            try:
                # A round trip to the server: a local flag alone could be stale (this process
                # may just have woken from a pause longer than its session).
                stat = self.client.exists_async(self._node).get(timeout=0.5)
            except SessionExpiredError:
                self._lost.set()
                continue
            except (ConnectionLoss, timeout_exc):
                if self._out_since is None:  # once per outage, not once per check
                    self._out_since = time.monotonic()
                    log.warning(
                        "capture of %s (leader, epoch %d): no contact with ZooKeeper (its servers down, or "
                        "too few of them for a quorum); commits and state writes wait for it, for up to "
                        "%.0f s, then the lease is given up",
                        self.source_id,
                        self.epoch,
                        self.suspend_limit,
                    )
                if time.monotonic() > deadline:
                    raise lease_lost(
                        self.source_id, self.epoch, f"no contact with ZooKeeper for {self.suspend_limit:.0f} s"
                    ) from None
                time.sleep(0.1)
                continue
            if stat is None or stat.ephemeralOwner != self._session:
                self._lost.set()
                raise lease_lost(self.source_id, self.epoch, "its ZooKeeper znode is gone")
            if self._out_since is not None:
                log.warning(
                    "capture of %s: ZooKeeper answers again after %.1f s; the lease (epoch %d) is still ours",
                    self.source_id,
                    time.monotonic() - self._out_since,
                    self.epoch,
                )
                self._out_since = None
            return

    def fence(self) -> Fence:
        if self.epoch is None or self._node is None:
            raise lease_lost(self.source_id, None, "this process does not hold the lease")
        return Fence(self.source_id, self.epoch, self._node, self._epoch_version)

    def leader(self) -> Optional[dict]:
        from kazoo.exceptions import NoNodeError

        c = self.client
        try:
            children = sorted(c.retry(c.get_children, self.contenders))
            info = json.loads(c.retry(c.get, self.epoch_path)[0] or b"{}")
        except NoNodeError:
            return None
        if not children:
            return None
        try:
            first = c.retry(c.get, f"{self.contenders}/{children[0]}")[0].decode()
        except NoNodeError:
            return None
        # `epoch` is the newest acquisition; a holder that has not taken its epoch yet shows
        # its predecessor's until it does (a moment).
        return {
            "identity": first,
            "epoch": info.get("epoch"),
            "acquired_at": info.get("acquired_at"),
            "standby": len(children) - 1,
        }

    def release(self) -> None:
        from kazoo.exceptions import KazooException

        node, self._node, self.epoch = self._node, None, None
        if node is not None and not self._lost.is_set():
            try:
                self.client.delete(node)
            except KazooException:
                pass  # the session ends soon anyway, and its ephemeral znode with it
