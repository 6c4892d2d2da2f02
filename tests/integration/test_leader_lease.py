"""The ZooKeeper leader lease against a real ZooKeeper: one holder, strictly increasing
epochs, takeover after release and after the holder's session expires, and the old holder's
check() refusing afterwards."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from airflow_provider_dblog.core.errors import StaleEpochError
from airflow_provider_dblog.core.protocols import LeaderLease
from airflow_provider_dblog.state.lease import ZooKeeperLease, make_lease
from airflow_provider_dblog.state.zookeeper import ZooKeeperStateStore

from .databases import env

pytestmark = pytest.mark.integration


@pytest.fixture
def open_store():
    hosts = env("DBLOG_ZK_HOSTS")
    chroot = f"/dblog-test/{uuid.uuid4().hex[:10]}"
    handles = []

    def make():
        handles.append(ZooKeeperStateStore(hosts, chroot, timeout=4))
        return handles[-1]

    yield make
    for h in handles:
        if h.client.connected:
            h.close()
    admin = ZooKeeperStateStore(hosts, "/")
    admin.client.delete(chroot, recursive=True)
    admin.close()


class Contender:
    def __init__(self, lease):
        self.lease, self.epoch, self.standby, self.stop = lease, None, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        self.epoch = self.lease.acquire(self.stop, self.standby.append)


def wait(cond, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_one_holder_and_takeover_on_release(open_store):
    a = make_lease(open_store(), "shop", "a")
    b = make_lease(open_store(), "shop", "b")
    assert isinstance(a, ZooKeeperLease) and isinstance(a, LeaderLease)
    assert a.acquire(threading.Event()) == 1
    cb = Contender(b)
    wait(lambda: cb.standby, 5, "b to report standby")
    assert cb.standby[0]["identity"] == "a" and cb.standby[0]["epoch"] == 1 and cb.standby[0]["standby"] == 1
    time.sleep(0.5)
    assert cb.epoch is None, "two holders at once"
    a.check()
    assert a.held()
    a.release()
    wait(lambda: cb.epoch is not None, 5, "b to take over")
    assert cb.epoch == 2
    b.check()
    with pytest.raises(StaleEpochError, match="does not hold"):
        a.check()
    assert b.leader()["identity"] == "b" and b.leader()["epoch"] == 2
    # a third contender queues behind b; stop() ends its wait promptly and leaves no znode
    c = Contender(make_lease(open_store(), "shop", "c"))
    wait(lambda: c.standby, 5, "c to report standby")
    c.stop.set()
    c.thread.join(3)
    assert not c.thread.is_alive() and c.epoch is None
    assert b.leader()["standby"] == 0


def test_expired_session_loses_the_lease_and_the_standby_takes_over(open_store):
    sa = open_store()
    a = make_lease(sa, "shop", "a")
    a.acquire(threading.Event())
    cb = Contender(make_lease(open_store(), "shop", "b"))
    wait(lambda: cb.standby, 5, "b to report standby")
    # Expire a's session the way a long pause or a partition does: on the server. (A second
    # client attached to the same session and closed ends it: the ZooKeeper FAQ's recipe.)
    from kazoo.client import KazooClient

    t0 = time.monotonic()
    twin = KazooClient(hosts=sa.hosts, client_id=sa.client.client_id, timeout=4)
    twin.start(5)
    twin.stop()
    twin.close()
    wait(lambda: cb.epoch is not None, 10, "b to take over")
    print(f"\ntakeover {time.monotonic() - t0:.2f} s after the session ended")
    assert cb.epoch == 2
    with pytest.raises(StaleEpochError, match="session expired|znode is gone"):
        a.check()
    assert not a.held()
