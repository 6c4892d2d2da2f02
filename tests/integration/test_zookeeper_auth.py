"""ZooKeeper digest authentication and ACLs against a real ZooKeeper (docs/state.md,
"Authentication and ACLs"): a client without the credentials reads and writes nothing under
the chroot, the authenticated store passes the whole StateStore contract, a tree created
without credentials is secured once, and the password shows up nowhere."""

from __future__ import annotations

import logging
import secrets
import threading
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoAuthError, NotEmptyError
from kazoo.security import OPEN_ACL_UNSAFE

from airflow_provider_dblog.config import make_state
from airflow_provider_dblog.core.dumps import DumpControl, DumpSpec, TableProgress
from airflow_provider_dblog.core.errors import ConfigurationError
from airflow_provider_dblog.core.events import Position
from airflow_provider_dblog.state.lease import make_lease
from airflow_provider_dblog.state.zookeeper import ZooKeeperStateStore, encode_name
from airflow_provider_dblog.state.zookeeper_acl import MARKER, DigestAuth
from tests.contract.state_store_contract import FencedStateContract, StateStoreContract

from .databases import env

pytestmark = pytest.mark.integration


@pytest.fixture
def zk_hosts():
    return env("DBLOG_ZK_HOSTS")


@pytest.fixture
def auth():
    return DigestAuth("dblog-test", "pw-" + secrets.token_hex(12))


def kazoo(hosts, auth=None):
    c = KazooClient(hosts=hosts, auth_data=auth.auth_data if auth else None)
    c.start(10)
    return c


@pytest.fixture
def chroot(zk_hosts, auth):
    """A chroot of its own per test, removed afterwards with the credentials (nobody else can)."""
    root = f"/dblog-test/auth-{uuid.uuid4().hex[:10]}"
    yield root
    admin = kazoo(zk_hosts, auth)
    try:
        admin.delete(root, recursive=True)
    finally:
        admin.stop()
        admin.close()


@pytest.fixture
def outsider(zk_hosts):
    """A kazoo client without credentials: what anybody who reaches the ensemble has."""
    c = kazoo(zk_hosts)
    yield c
    c.stop()
    c.close()


def tree(client, root):
    """Every znode under ``root``, ``root`` included, top-down."""
    out, todo = [], [root]
    while todo:
        path = todo.pop()
        out.append(path)
        todo.extend(f"{path}/{c}" for c in client.get_children(path))
    return out


def fill(store, source="shop/eu"):
    """Writes every kind of znode the store and its lease create: checkpoint, a dump request
    with control, status and progress, a status value, the lease's contender and epoch.
    Returns the paths of the sensitive ones and the lease (still held)."""
    lease = make_lease(store, source, "host-a:1")
    assert lease.acquire(threading.Event()) == 1
    fenced = store.fenced(lease.fence())
    fenced.set_checkpoint(source, Position("00000000016B3F28", 3))
    spec = DumpSpec.new(source, ["public.accounts"], [(42,)])
    store.add_dump(spec, DumpControl(chunk_size=10))
    store.set_control(spec.dump_id, DumpControl(paused=True))
    fenced.save_progress(spec.dump_id, "public.accounts", TableProgress((42,), 42, 1))
    fenced.put_value(f"status/{source}", '{"position": "00000000016B3F28"}')
    src = f"{store.chroot}/sources/{encode_name(source)}"
    dump = f"{src}/dumps/{spec.dump_id}"
    sensitive = {
        "checkpoint": f"{src}/checkpoint",
        "dump request": dump,
        "dump control": f"{dump}/control",
        "dump status": f"{dump}/status",
        "dump progress": f"{dump}/progress/{encode_name('public.accounts')}",
        "dump id": f"{store.chroot}/dump_ids/{spec.dump_id}",
        "status value": f"{store.chroot}/values/{encode_name('status/' + source)}",
        "lease epoch": f"{src}/leader/epoch",
        "lease contender": lease.fence().holder,
    }
    return sensitive, lease


def refusals(client, path, only=None):
    """Which of read, list, write, create, delete and ACL change ``client`` was refused on
    ``path`` (any other outcome, success or another error, is not a refusal)."""
    attempts = {
        "get": lambda: client.get(path),
        "get_children": lambda: client.get_children(path),
        "get_acls": lambda: client.get_acls(path),
        "set": lambda: client.set(path, b"forged"),
        "create": lambda: client.create(path + "/forged", b"x"),
        "delete": lambda: client.delete(path),
        "set_acls": lambda: client.set_acls(path, OPEN_ACL_UNSAFE),
    }
    refused = set()
    for name, attempt in attempts.items():
        if only and name not in only:
            continue
        try:
            attempt()
        except NoAuthError:
            refused.add(name)
        except KazooException:
            pass
    return refused


ALL = {"get", "get_children", "get_acls", "set", "create", "delete", "set_acls"}
READS = {"get", "get_children", "get_acls"}


def assert_locked(outsider, chroot, path):
    """``path`` is refused to ``outsider`` in every way. Deleting the chroot itself is up to
    its parent's ACL (outside DBLog's tree), but ZooKeeper deletes no znode with children
    and the chroot always holds at least the marker."""
    if path == chroot:
        assert refusals(outsider, path) == ALL - {"delete"}, path
        with pytest.raises(NotEmptyError):
            outsider.delete(path)
    else:
        assert refusals(outsider, path) == ALL, path


def test_a_client_without_credentials_reads_and_writes_nothing(zk_hosts, chroot, auth, outsider):
    store = ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth)
    try:
        sensitive, lease = fill(store)
        before = {p: store.client.get(p)[0] for p in sensitive.values()}
        for what, path in sensitive.items():
            assert refusals(outsider, path) == ALL, f"{what} ({path}) is not protected"
        # every other znode of the tree too (the chroot, sources/, dumps/, leader/, the marker)
        every = tree(store.client, chroot)
        assert set(sensitive.values()) <= set(every)
        for path in every:
            assert store.client.get_acls(path)[0] == auth.acl, path
            assert_locked(outsider, chroot, path)
        # nothing was written by the outsider, and the store and its lease still work
        assert {p: store.client.get(p)[0] for p in sensitive.values()} == before
        assert tree(store.client, chroot) == every
        lease.check()
        store.fenced(lease.fence()).set_checkpoint("shop/eu", Position("00000000016B3F29"))
        assert store.get_checkpoint("shop/eu") == Position("00000000016B3F29")
    finally:
        store.close()


def test_the_probe_sees_an_open_tree(zk_hosts, outsider):
    """The check above can fail: without credentials the same znodes are open to anybody."""
    root = f"/dblog-test/open-{uuid.uuid4().hex[:10]}"
    store = ZooKeeperStateStore(zk_hosts, root, timeout=5)
    try:
        sensitive, lease = fill(store)
        for path in sensitive.values():
            assert refusals(outsider, path, only=READS) == set(), path
        lease.release()
    finally:
        store.client.delete(root, recursive=True)
        store.close()


class TestAuthenticatedZooKeeperStore(StateStoreContract, FencedStateContract):
    """The whole StateStore contract with credentials on."""

    @pytest.fixture
    def store(self, zk_hosts, chroot, auth):
        s = ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth)
        yield s
        s.close()

    @pytest.fixture
    def reopen(self, zk_hosts, chroot, auth):
        handles = []

        def make():
            handles.append(ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth))
            return handles[-1]

        yield make
        for h in handles:
            h.close()


def test_a_tree_made_without_credentials_is_secured_once(zk_hosts, chroot, auth, outsider, caplog):
    old = ZooKeeperStateStore(zk_hosts, chroot, timeout=5)
    try:
        sensitive, lease = fill(old)  # the old capture keeps running, holding the lease
        assert outsider.get(sensitive["checkpoint"])[0]
        with caplog.at_level(logging.WARNING, "airflow_provider_dblog"):
            new = ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth)
        try:
            every = tree(new.client, chroot)
            assert f"{chroot}/{MARKER}" in every and set(sensitive.values()) <= set(every)
            for path in every:
                assert new.client.get_acls(path)[0] == auth.acl, path
                assert_locked(outsider, chroot, path)
            assert "secured" in caplog.text and auth.password not in caplog.text
            assert new.get_checkpoint("shop/eu") == Position("00000000016B3F28", 3)
            # the old, unauthenticated process is now refused, with the fix
            with pytest.raises(ConfigurationError, match="without credentials.*Fix: set \\[state\\] auth_user"):
                old.get_checkpoint("shop/eu")
            with pytest.raises(ConfigurationError, match="without credentials"):  # not "lost the lease"
                old.fenced(lease.fence()).put_value("status/shop/eu", "{}")
            with pytest.raises(ConfigurationError, match="without credentials"):
                old.add_dump(DumpSpec.new("shop/eu", None))
            # later starts find the marker and walk nothing
            caplog.clear()
            with caplog.at_level(logging.WARNING, "airflow_provider_dblog"):
                ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth).close()
            assert "secured" not in caplog.text
        finally:
            new.close()
    finally:
        old.close()


def test_missing_or_wrong_credentials_are_refused_with_the_fix(zk_hosts, chroot, auth):
    ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=auth).close()
    with pytest.raises(ConfigurationError) as info:
        ZooKeeperStateStore(zk_hosts, chroot, timeout=5)
    assert "without credentials" in str(info.value) and "auth_password_env" in info.value.fix
    wrong = DigestAuth(auth.user, auth.password + "x")
    with pytest.raises(ConfigurationError) as info:
        ZooKeeperStateStore(zk_hosts, chroot, timeout=5, auth=wrong)
    text = str(info.value)
    assert "'dblog-test'" in text and "other credentials" in text and "superuser" in info.value.fix
    assert wrong.password not in text and auth.password not in text


def test_config_reads_the_password_from_env_or_file_and_never_shows_it(
    zk_hosts, chroot, auth, monkeypatch, tmp_path, caplog
):
    pw_file = tmp_path / "zk-password"
    pw_file.write_text(auth.password + "\n")
    monkeypatch.setenv("MY_ZK_PW", auth.password)
    with caplog.at_level(logging.DEBUG):  # kazoo logs every request it sends at DEBUG
        for cfg in (
            {"url": f"zk://{zk_hosts}{chroot}", "auth_user": auth.user, "auth_password_env": "MY_ZK_PW"},
            {"zookeeper": zk_hosts, "chroot": chroot, "auth_user": auth.user, "auth_password_file": str(pw_file)},
        ):
            s = make_state(cfg)
            try:
                s.put_value("k", "v")
                assert s.get_value("k") == "v"
                assert auth.password not in repr(s)
            finally:
                s.close()
    assert "Auth(" in caplog.text  # the redacted record is there ...
    assert auth.password not in caplog.text  # ... without the password
    # the default variables, as scripts and the CLI's --state zk://... use them
    monkeypatch.setenv("DBLOG_STATE_USER", auth.user)
    monkeypatch.setenv("DBLOG_STATE_PASSWORD", auth.password)
    s = make_state({"path": f"zk://{zk_hosts}{chroot}"})
    try:
        assert s.get_value("k") == "v"
    finally:
        s.close()
