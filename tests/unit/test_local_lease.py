"""The local leader lease: a file lock next to the SQLite store, epochs from its counter."""

import threading
import time

import pytest

from airflow_provider_dblog.core.errors import StaleEpochError
from airflow_provider_dblog.core.protocols import LeaderLease
from airflow_provider_dblog.state.lease import LocalLease, make_lease
from airflow_provider_dblog.state.local import LocalStateStore


@pytest.fixture
def stores(tmp_path):
    handles = [LocalStateStore(str(tmp_path / "state.db")) for _ in range(2)]
    yield handles
    for h in handles:
        h.close()


def test_one_holder_per_source_and_increasing_epochs(stores):
    a = make_lease(stores[0], "src", "a")
    b = make_lease(stores[1], "src", "b")
    assert isinstance(a, LocalLease) and isinstance(a, LeaderLease)
    assert a.acquire(threading.Event()) == 1
    seen, got = [], []
    t = threading.Thread(target=lambda: got.append(b.acquire(threading.Event(), seen.append)))
    t.start()
    time.sleep(0.6)
    assert not got, "a second holder while the first holds the lease"
    assert seen and seen[0]["identity"] == "a" and seen[0]["epoch"] == 1
    assert b.leader()["identity"] == "a"
    a.check()
    a.release()
    t.join(5)
    assert got == [2]
    b.check()
    with pytest.raises(StaleEpochError, match="does not hold"):
        a.check()
    # another source has a lease (and counter) of its own
    other = make_lease(stores[0], "other", "c")
    assert other.acquire(threading.Event()) == 1
    other.release()
    b.release()
    assert make_lease(stores[0], "src").leader() is None  # nobody holds it


def test_a_newer_epoch_fences_the_old_holder(stores, tmp_path):
    a = make_lease(stores[0], "src", "a")
    a.acquire(threading.Event())
    # Someone removed the lock file and a new process locked a fresh one: the counter shows it.
    (tmp_path / a.lock_path.rsplit("/", 1)[1]).unlink()
    b = make_lease(stores[1], "src", "b")
    assert b.acquire(threading.Event()) == 2
    with pytest.raises(StaleEpochError, match="epoch 2"):
        a.check()
    b.check()


def test_stop_while_standby(stores):
    a = make_lease(stores[0], "src", "a")
    a.acquire(threading.Event())
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    assert make_lease(stores[1], "src", "b").acquire(stop) is None
    assert time.monotonic() - t0 < 2


def test_the_lease_domain_is_the_lock_file_whatever_path_names_it(stores, tmp_path):
    """Captures whose leases exclude each other share a domain (a symlinked directory too);
    a second state file is another domain (docs/state.md, "Lease domains")."""
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    other = LocalStateStore(str(tmp_path / "other.db"))
    linked = LocalStateStore(str(tmp_path / "link" / "state.db"))
    try:
        a, b = make_lease(stores[0], "src"), make_lease(stores[1], "src")
        assert a.domain == b.domain == make_lease(linked, "src").domain
        assert make_lease(other, "src").domain != a.domain
    finally:
        other.close()
        linked.close()
