"""The ZooKeeper state store against a real ZooKeeper: the same contract as the local store,
its znode layout, and a clear error when ZooKeeper cannot be reached."""

from __future__ import annotations

import socket
import uuid

import pytest

from airflow_provider_dblog.config import make_state
from airflow_provider_dblog.core.dumps import DumpSpec, TableProgress
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.state.zookeeper import ZooKeeperStateStore, encode_name
from tests.contract.state_store_contract import FencedStateContract, StateStoreContract

from .databases import env

pytestmark = pytest.mark.integration


@pytest.fixture
def zk_hosts():
    return env("DBLOG_ZK_HOSTS")


@pytest.fixture
def chroot(zk_hosts):
    """A chroot of its own per test, removed afterwards."""
    root = f"/dblog-test/{uuid.uuid4().hex[:10]}"
    yield root
    s = ZooKeeperStateStore(zk_hosts, "/")
    try:
        s.client.delete(root, recursive=True)
    finally:
        s.close()


class TestZooKeeperStateStore(StateStoreContract, FencedStateContract):
    @pytest.fixture
    def store(self, zk_hosts, chroot):
        s = ZooKeeperStateStore(zk_hosts, chroot, timeout=5)
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, zk_hosts, chroot):
        handles = []

        def make():
            handles.append(ZooKeeperStateStore(zk_hosts, chroot, timeout=5))
            return handles[-1]

        yield make
        for h in handles:
            h.close()


def test_znode_layout_is_the_documented_one(zk_hosts, chroot):
    """docs/state.md describes these paths: operators read them with zkCli."""
    s = ZooKeeperStateStore(zk_hosts, chroot, timeout=5)
    try:
        s.set_checkpoint("shop/eu", Position("0001", 2))
        spec = DumpSpec.new("shop/eu", ["public.t"])
        s.add_dump(spec)
        s.save_progress(spec.dump_id, "public.t", TableProgress((5,), 5, 1))
        s.put_value("status/shop/eu", "{}")
        c, src = s.client, encode_name("shop/eu")
        assert src == "shop%2Feu"
        assert c.get(f"{chroot}/sources/{src}/checkpoint")[0].decode() == Position("0001", 2).encode()
        base = f"{chroot}/sources/{src}/dumps/{spec.dump_id}"
        assert DumpSpec.from_json(c.get(base)[0].decode()) == spec
        assert sorted(c.get_children(base)) == ["control", "progress", "status"]
        assert c.get_children(base + "/progress") == ["public.t"]
        assert c.get(f"{chroot}/dump_ids/{spec.dump_id}")[0].decode() == "shop/eu"
        assert c.get(f"{chroot}/values/status%2Fshop%2Feu")[0] == b"{}"
        assert encode_name("..") == "%2E%2E" and encode_name(".") == "%2E"
    finally:
        s.close()


def test_unreachable_zookeeper_is_a_clear_error():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConfigurationError) as info:
        ZooKeeperStateStore(f"127.0.0.1:{port}", connect_timeout=1.5)
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "Fix:" in text and "zk://" in text


def test_state_url_in_config_and_cli_form(zk_hosts, chroot):
    for cfg in (
        {"url": f"zk://{zk_hosts}{chroot}?session_timeout=5"},
        {"path": f"zk://{zk_hosts}{chroot}"},  # what `--state zk://...` sets
        {"zookeeper": zk_hosts, "chroot": chroot, "session_timeout": 5},
    ):
        s = make_state(cfg)
        try:
            assert isinstance(s, ZooKeeperStateStore) and s.chroot == chroot
            s.put_value("k", "v")
            assert s.get_value("k") == "v"
        finally:
            s.close()
    with pytest.raises(ConfigurationError, match="zk://host:port"):
        make_state({"url": "zk:///nohosts"})


def test_a_write_retried_in_a_new_session_after_expiry_is_refused(zk_hosts, chroot):
    """kazoo retries a write that failed on an expired session in a new session; without a
    newer leader the epoch has not moved, so only the holder's vanished contender znode
    tells that this process no longer leads (docs/state.md, "What is fenced")."""
    import threading
    import time

    from kazoo.client import KazooClient

    from airflow_provider_dblog.core.errors import StaleEpochError
    from airflow_provider_dblog.state.lease import make_lease

    store = ZooKeeperStateStore(zk_hosts, chroot, timeout=4)
    other = ZooKeeperStateStore(zk_hosts, chroot, timeout=4)
    try:
        lease = make_lease(store, "src", "a")
        assert lease.acquire(threading.Event()) == 1
        fenced = store.fenced(lease.fence())
        fenced.set_checkpoint("src", Position("0001"))
        old_session = store.client.client_id[0]
        twin = KazooClient(hosts=zk_hosts, client_id=store.client.client_id, timeout=4)
        twin.start(5)
        twin.stop()  # ends the session on the server, as a long pause or a partition would
        twin.close()
        end = time.monotonic() + 20
        while time.monotonic() < end and (store.client.client_id or (old_session,))[0] == old_session:
            time.sleep(0.1)
        assert store.client.client_id[0] != old_session, "kazoo did not open a new session"
        with pytest.raises(StaleEpochError, match="znode is gone"):
            fenced.set_checkpoint("src", Position("0002"))
        with pytest.raises(StaleEpochError):
            fenced.put_value("status/src", "from the new session")
        assert other.get_checkpoint("src") == Position("0001")
        assert other.get_value("status/src") is None
    finally:
        store.close()
        other.close()


def test_status_of_a_chroot_no_capture_made_is_refused_and_creates_nothing(zk_hosts, chroot, capsys, monkeypatch):
    """`dblog status` (and every command that reads or controls dumps) on a mistyped chroot
    says that no capture state is there, and leaves ZooKeeper as it was."""
    from airflow_provider_dblog import cli

    monkeypatch.delenv("DBLOG_CONFIG", raising=False)
    url = f"zk://{zk_hosts}{chroot}"
    for command in (["status"], ["pause", "d1"], ["dump", "--all", "--source-type", "postgres"]):
        assert cli.main([*command, "--source-id", "src", "--state", url]) == 2
        err = capsys.readouterr().err
        assert f"no capture state at {url}" in err and "Fix:" in err, err
    probe = ZooKeeperStateStore(zk_hosts, "/")
    try:
        assert probe.client.exists(chroot) is None
    finally:
        probe.close()
    store = make_state({"url": url})  # what the capture does: it makes the store
    try:
        store.set_checkpoint("src", Position("0000000001", 1))
    finally:
        store.close()
    assert cli.main(["status", "--source-id", "src", "--state", url]) == 0
    assert "checkpoint" in capsys.readouterr().out
