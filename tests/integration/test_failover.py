"""Active-passive capture with the ZooKeeper state store (DESIGN invariant 7), end to end.

Two ``dblog capture`` processes run for one source. The leader is SIGKILLed in the middle of
a dump: the standby takes over, finishes the dump, and the convergence oracle still holds.
A leader paused (SIGSTOP) past its session timeout is deposed; when it wakes (SIGCONT) it
writes nothing and exits with a lease error. In the changelog, epochs never decrease, neither
in commit order nor in position order. The failover time (leader SIGKILL -> first event
written by the new leader) is printed. A ZooKeeper restart pauses the capture, which then
resumes with the same lease and without loss.

ZooKeeper runs with digest authentication and ACLs on (docs/state.md, "Authentication and
ACLs"): every process gets a throw-away password through the environment, and each test
checks that a client without it is refused the lease and the checkpoint.
"""

from __future__ import annotations

import random
import secrets
import signal
import time
import uuid

import pytest

from airflow_provider_dblog.config import make_state
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.zookeeper_acl import DigestAuth

from ..support.s3_env import use_s3
from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env
from .test_oracle import Workload
from .zk_tmpserver import TmpZooKeeper, TmpZooKeeperEnsemble

pytestmark = pytest.mark.integration

SESSION_TIMEOUT = 4  # seconds: ZooKeeper's minimum with the test server's tickTime of 2 s
ZK_USER = "dblog-test"
# Not the default DBLOG_STATE_PASSWORD: a variable of its own, named by the config's
# auth_password_env, reaches no other test's store.
ZK_PASSWORD_ENV = "DBLOG_TEST_ZK_PASSWORD"


class Pair:
    """A source, its ZooKeeper chroot (digest ACL on), a lake, and two capture processes "a"
    and "b"."""

    def __init__(self, param, tmp_path, monkeypatch):
        # "postgres" / "mysql": the lake on local disk; "postgres@s3": on the test S3 store.
        kind, _, store = param.partition("@")
        # Throw-away credentials: the password reaches the children only through their
        # environment (child_env copies this one), never argv or the config file.
        self.auth = DigestAuth(ZK_USER, secrets.token_urlsafe(24))
        monkeypatch.setenv(ZK_PASSWORD_ENV, self.auth.password)
        self.state_auth = {"auth_user": ZK_USER, "auth_password_env": ZK_PASSWORD_ENV}
        self.db = ADAPTERS[kind]()
        self.source_id = f"ha_{kind}_{uuid.uuid4().hex[:6]}"
        self.chroot = f"/dblog-test/{uuid.uuid4().hex[:10]}"
        self.state_url = f"zk://{env('DBLOG_ZK_HOSTS')}{self.chroot}?session_timeout={SESSION_TIMEOUT}"
        self.lake = tmp_path / "lake"
        self.lake_url = use_s3(monkeypatch) if store == "s3" else f"delta://{self.lake}"
        self.tmp_path = tmp_path
        self.captures: dict[str, Capture] = {}

    def setup(self, seed_rows: int):
        self.db.create()
        if seed_rows:
            self.db.seed(random.Random(7), seed_rows)
        self.config = write_config(
            self.tmp_path / "dblog.toml",
            self.db.source_config(self.source_id),
            self.state_url,
            self.lake_url,
            state=self.state_auth,
        )
        # Authenticated like the children (the same keys): it creates the chroot with the ACL,
        # and reads, writes and deletes it for the assertions and the cleanup.
        self.state = make_state({"url": self.state_url, **self.state_auth})
        assert self.state.auth == self.auth

    def start(self, name: str, faults: tuple[str, ...] = ()) -> Capture:
        cap = self.captures[name] = Capture(
            self.config, self.tmp_path / f"{name}.log", "--identity", name, faults=faults
        )
        cap.start()
        return cap

    def status(self) -> dict:
        import json

        raw = self.state.get_value(status_key(self.source_id))
        return json.loads(raw) if raw else {}

    def leader_epoch(self, name: str):
        st = self.status()
        leader = st.get("leader") or {}
        return leader.get("epoch") if leader.get("identity") == name else None

    def start_pair(self):
        a = self.start("a")
        wait_for(lambda: self.leader_epoch("a") is not None, 90, "a to lead", a.assert_alive, detail=a.detail)
        b = self.start("b")
        wait_for(
            lambda: "standby: a (epoch" in b.log_path.read_text(),
            60,
            "b to wait as standby",
            b.assert_alive,
            detail=b.detail,
        )
        assert self.leader_epoch("a") is not None, "b must not have taken the lease"
        return a, b

    def changelog(self):
        """(rows sorted by position, per-commit epochs in version order) of this source."""
        import deltalake
        import pyarrow.compute as pc

        uri = make_output(self.lake_url).changelog_uri(self.source_id)
        if not deltalake.DeltaTable.is_deltatable(uri):
            return [], []  # the source's table comes with its first commit
        dt = deltalake.DeltaTable(uri)
        t = dt.to_pyarrow_table(columns=["source_id", "position", "epoch", "written_at"])
        t = t.filter(pc.equal(t["source_id"], self.source_id))
        rows = sorted(
            zip(t["position"].to_pylist(), t["epoch"].to_pylist(), [w.timestamp() for w in t["written_at"].to_pylist()])
        )
        commits = [c.get("dblog.epoch") for c in sorted(dt.history(), key=lambda c: c["version"]) if "dblog.epoch" in c]
        return rows, [int(e) for e in commits]

    def assert_epochs_never_decrease(self):
        rows, commits = self.changelog()
        assert rows and all(e is not None for _, e, _ in rows), "every event carries its leader's epoch"
        epochs = [e for _, e, _ in rows]
        bad = [(rows[i - 1], rows[i]) for i in range(1, len(rows)) if epochs[i] < epochs[i - 1]]
        assert not bad, f"a stale epoch after a newer one in position order: {bad[:3]}"
        assert commits == sorted(commits), f"a commit with a stale epoch: {commits}"
        return rows

    def converge(self, capture: Capture):
        """The oracle: a recognisable last write reaches the changelog, then verify finds
        no mismatch in any table."""
        sentinel = str(uuid.uuid4())
        with self.db.connect() as c:
            c.cursor().execute(
                f"INSERT INTO {self.db.ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (sentinel, "{}", True)
            )
            c.commit()
        out = make_output(self.lake_url)
        out.open()
        wait_for(
            lambda: any(e.key == (sentinel,) for e in out.scan(self.source_id, f"{self.db.ns}.notes")),
            60,
            "the last write to reach the changelog",
            capture.assert_alive,
            detail=capture.detail,
            interval=0.5,
        )
        # The key-list dumps the capture queued itself (unchanged TOAST values, PostgreSQL)
        # are queued before their events reach the writer: all there by now; let them finish.
        wait_for(
            self._repairs_finished,
            300,  # one window per queued key-list dump: slow on a loaded machine, not stuck
            "the capture's own repair dumps",
            capture.assert_alive,
            detail=capture.detail,
        )
        result = dblog(self.config, "verify", check=False)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}"
        assert result.stdout.count(" 0 mismatches") == len(self.db.tables()), result.stdout

    def _repairs_finished(self) -> bool:
        from kazoo.retry import RetryFailedError

        try:
            return all(d.status.finished for d in self.state.list_dumps(self.source_id))
        except RetryFailedError:
            # This test's own client is an observer, not the capture under test: after a
            # ZooKeeper restart its reconnect can hang until its session expired (a connect
            # made while the server was starting gets no answer), and kazoo opens a new one.
            return False

    def assert_acl_on(self):
        """The chroot really carries the digest ACL, on the znodes the capture processes
        created too: a client without credentials sees the lease's epoch and the checkpoint
        exist but may not read them (with auth off it could). And no log shows the password."""
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoAuthError

        epoch = self.state._source(self.source_id, "leader", "epoch")
        checkpoint = self.state._source(self.source_id, "checkpoint")
        outsider = KazooClient(hosts=self.state.hosts)
        outsider.start(15)
        try:
            for path in (self.chroot, epoch, checkpoint):
                assert outsider.exists(path) is not None, f"{path} does not exist"
                try:
                    outsider.get(path)
                except NoAuthError:
                    pass
                else:
                    raise AssertionError(f"{path} is readable without credentials: ZooKeeper's ACL is off")
                assert self.state.client.get_acls(path)[0] == self.auth.acl, f"{path} lacks the digest ACL"
        finally:
            outsider.stop()
            outsider.close()
        for cap in self.captures.values():
            assert self.auth.password not in cap.log_path.read_text(errors="replace"), f"{cap.log_path} shows it"

    def close(self):
        for cap in self.captures.values():
            if cap.proc is not None and cap.proc.poll() is None:
                cap.proc.send_signal(signal.SIGCONT)
            cap.close()
        if getattr(self, "state", None) is not None:
            self.state.client.delete(self.chroot, recursive=True)
            self.state.close()
        self.db.drop(self.source_id)


@pytest.fixture
def pair(request, tmp_path, monkeypatch):
    p = Pair(request.param, tmp_path, monkeypatch)
    yield p
    p.close()


@pytest.mark.parametrize("pair", ["postgres", "mysql"], indirect=True)
def test_sigkill_of_the_leader_during_a_dump(pair):
    pair.setup(seed_rows=300)
    a, b = pair.start_pair()
    with Workload(pair.db, seed=11):
        dump_id = dblog(pair.config, "dump", "--all", "--chunk-size", "20", "--delay-ms", "60").stdout.strip()

        def some_chunks_durable():
            d = pair.state.get_dump(dump_id)
            return sum(p.chunks for p in d.progress.values()) >= 3

        wait_for(some_chunks_durable, 60, "the dump to be under way", a.assert_alive, detail=a.detail, interval=0.1)
        assert pair.state.get_dump(dump_id).status is DumpStatus.RUNNING
        killed_at = time.time()
        a.kill()

        def dump_done():
            d = pair.state.get_dump(dump_id)
            assert d.status not in (DumpStatus.FAILED, DumpStatus.CANCELLED), d.error
            return d.status is DumpStatus.DONE

        # Generous: on a loaded 2-core machine the dump waits behind the capture's own one-key
        # TOAST repair dumps (a window each; a new leader knows no full row yet, so it queues
        # one per log step under this update workload: 100-400 of them, seen taking 110-200 s
        # on a slow machine); a timeout here means stuck, not slow.
        wait_for(dump_done, 360, "the new leader to finish the dump", b.assert_alive, detail=b.detail)
        assert pair.leader_epoch("b") == 2
    pair.converge(b)
    pair.assert_acl_on()
    assert b.stop() == 0, b.tail()
    rows = pair.assert_epochs_never_decrease()
    assert {e for _, e, _ in rows} == {1, 2}
    first_new = min(w for _, e, w in rows if e == 2)
    failover = first_new - killed_at
    print(
        f"\nfailover ({pair.db.kind}, session timeout {SESSION_TIMEOUT} s): leader SIGKILL -> first "
        f"event of the new leader in {failover:.2f} s"
    )


@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_deposed_leader_that_wakes_up_writes_nothing(pair):
    pair.setup(seed_rows=0)  # every row is born under capture: the log alone converges
    a, b = pair.start_pair()
    with Workload(pair.db, seed=12):
        wait_for(
            lambda: any(e == 1 for _, e, _ in pair.changelog()[0]), 30, "a to write", a.assert_alive, detail=a.detail
        )
        a.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: pair.leader_epoch("b") == 2, 30, "b to take over", b.assert_alive, detail=b.detail)
        wait_for(
            lambda: any(e == 2 for _, e, _ in pair.changelog()[0]), 30, "b to write", b.assert_alive, detail=b.detail
        )
        before = [r for r in pair.changelog()[0] if r[1] == 1]
        a.proc.send_signal(signal.SIGCONT)
        code = a.proc.wait(30)
        log = a.log_path.read_text()
        assert code != 0, "the deposed leader kept running"
        assert "lost the leader lease" in log or "refused to write" in log, a.tail()
        time.sleep(1)
        after = [r for r in pair.changelog()[0] if r[1] == 1]
        assert after == before, f"the deposed leader wrote {len(after) - len(before)} events after waking"
    pair.converge(b)
    pair.assert_acl_on()
    assert b.stop() == 0, b.tail()
    pair.assert_epochs_never_decrease()


@pytest.fixture
def tmp_zk():
    zk = TmpZooKeeper()
    zk.start()
    yield zk
    zk.close()


@pytest.mark.parametrize("pair", ["postgres"], indirect=True)
def test_zookeeper_restart_pauses_and_resumes_the_capture(tmp_zk, pair):
    # A private server (the shared one stays up), and a session long enough to outlive the
    # restart: ZooKeeper keeps sessions across restarts, so the lease survives too. 30 s, not
    # 20: on a loaded 2-core machine the restarted JVM takes a while to serve again.
    pair.state_url = f"zk://{tmp_zk.hosts}{pair.chroot}?session_timeout=30"
    pair.setup(seed_rows=0)
    a = pair.start("a")
    wait_for(lambda: pair.leader_epoch("a") == 1, 90, "a to lead", a.assert_alive, detail=a.detail)
    with Workload(pair.db, seed=13):
        wait_for(
            lambda: any(e == 1 for _, e, _ in pair.changelog()[0]), 30, "a to write", a.assert_alive, detail=a.detail
        )
        tmp_zk.kill()
        time.sleep(3)
        a.assert_alive()  # paused, not failed
        tmp_zk.start()
        n = len(pair.changelog()[0])
        # 90 s: a reconnect made while the restarted server was still starting gets no answer
        # and waits out kazoo's read timeout (the 30 s session) before it tries again.
        wait_for(lambda: len(pair.changelog()[0]) > n, 90, "a to write again", a.assert_alive, detail=a.detail)
    pair.converge(a)
    pair.assert_acl_on()
    assert "connection lost" in a.log_path.read_text().lower(), "ZooKeeper was not really away"
    assert a.stop() == 0, a.tail()
    rows = pair.assert_epochs_never_decrease()
    assert {e for _, e, _ in rows} == {1}, "the lease survived the restart: no new election"


@pytest.fixture
def zk_ensemble():
    zk = TmpZooKeeperEnsemble()
    zk.start()
    yield zk
    zk.close()


@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_a_zookeeper_ensemble_loses_a_follower_then_its_leader_then_its_quorum(zk_ensemble, pair):
    """Three ZooKeeper servers under a capture and a write load. A follower SIGKILLed, then
    the ensemble's leader: the capture keeps its lease (the same session, moved to a live
    server) and goes on writing. Two of the three SIGKILLed (no quorum): the capture stops
    writing and waits, alive; the two back, it resumes by itself with the same lease, and the
    mirrors of the oracle converge with every epoch 1: nothing lost, nothing written twice."""
    zk = zk_ensemble
    # Session 30 s (ZooKeeper's maximum at a 2 s tick is 40): longer than the quorum loss
    # below, a JVM's start and an election included.
    pair.state_url = f"zk://{zk.hosts}{pair.chroot}?session_timeout=30"
    pair.setup(seed_rows=0)
    a = pair.start("a")
    wait_for(lambda: pair.leader_epoch("a") == 1, 90, "a to lead", a.assert_alive, detail=a.detail)

    outages: dict[str, float] = {}  # printed (docs/deploy.md), not asserted

    def writes_on(what: str, since: float = 0.0) -> None:
        n = len(pair.changelog()[0])
        wait_for(lambda: len(pair.changelog()[0]) > n, 90, f"a to write {what}", a.assert_alive, detail=a.detail)
        if since:
            outages[what] = time.monotonic() - since

    with Workload(pair.db, seed=17):
        writes_on("at first")
        leader = zk.leader()
        follower = next(n for n in (1, 2, 3) if n != leader)
        zk.kill(follower)
        writes_on("without a follower", time.monotonic())
        zk.start(follower)
        leader = zk.leader()
        zk.kill(leader)
        writes_on("after the ensemble's leader died", time.monotonic())
        zk.start(leader)
        survivor = zk.leader()
        down = [n for n in (1, 2, 3) if n != survivor]
        for n in down:
            zk.kill(n)
        time.sleep(3)  # a commit in flight when the quorum went may still land
        n = len(pair.changelog()[0])
        time.sleep(5)
        a.assert_alive()  # waiting, not failed
        assert len(pair.changelog()[0]) == n, "a committed without a quorum to check its lease with"
        restarted = time.monotonic()
        zk.start(*down)  # returns once they answer
        writes_on("the two restarted (JVM start and election included)", restarted)
    print(
        "\n[zk ensemble] kill -> the capture's next changelog commit: "
        + "; ".join(f"{k}: {v:.1f} s" for k, v in outages.items())
    )
    pair.converge(a)
    log = a.log_path.read_text()
    assert "no contact with ZooKeeper (its servers down, or too few of them for a quorum)" in log, a.tail()
    assert "ZooKeeper answers again after" in log, a.tail()
    assert a.stop() == 0, a.tail()
    rows = pair.assert_epochs_never_decrease()
    assert {e for _, e, _ in rows} == {1}, "the lease survived every loss: no new election"


@pytest.mark.parametrize("pair", ["mysql"], indirect=True)
def test_runtime_control_through_zookeeper(pair):
    """pause / resume / throttle / cancel written by `dblog` (another process, another
    ZooKeeper session) reach the running capture (the time each took is printed)."""
    pair.setup(seed_rows=600)
    a = pair.start("a")
    wait_for(lambda: pair.leader_epoch("a") == 1, 90, "a to lead", a.assert_alive, detail=a.detail)
    table = f"{pair.db.ns}.accounts"
    dump_id = dblog(pair.config, "dump", "--table", table, "--chunk-size", "5", "--delay-ms", "150").stdout.strip()

    def progress():
        return pair.state.get_dump(dump_id).progress.get(table)

    wait_for(lambda: progress() is not None and progress().chunks >= 2, 30, "chunks", a.assert_alive, detail=a.detail)
    for command, expected in (("pause", DumpStatus.PAUSED), ("resume", DumpStatus.RUNNING)):
        dblog(pair.config, command, dump_id)
        t0 = time.time()
        wait_for(
            lambda expected=expected: pair.state.get_dump(dump_id).status is expected,
            5,
            command,
            a.assert_alive,
            detail=a.detail,
            interval=0.02,
        )
        took = time.time() - t0
        print(f"\n{command} took effect in {took:.2f} s")
    dblog(pair.config, "throttle", dump_id, "--chunk-size", "40", "--delay-ms", "300")
    time.sleep(1.0)  # picked up by now; the chunk in flight may still have the old size
    p0 = progress()
    wait_for(lambda: progress().chunks >= p0.chunks + 2, 10, "throttled chunks", a.assert_alive, detail=a.detail)
    p1 = progress()
    assert not p1.done and (p1.rows - p0.rows) == 40 * (p1.chunks - p0.chunks), "the new chunk size is not in use"
    dblog(pair.config, "cancel", dump_id)
    t0 = time.time()
    wait_for(
        lambda: pair.state.get_dump(dump_id).status is DumpStatus.CANCELLED or progress().done,
        5,
        "cancel",
        a.assert_alive,
        detail=a.detail,
        interval=0.02,
    )
    if pair.state.get_dump(dump_id).status is DumpStatus.CANCELLED:
        assert time.time() - t0 < 1.0, "cancel took more than a second"
    assert a.stop() == 0, a.tail()
    pair.assert_acl_on()
