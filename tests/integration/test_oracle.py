"""The convergence oracle (DESIGN invariant 3), on PostgreSQL and on MariaDB.

A random concurrent workload (inserts, updates, deletes, primary-key updates, on three tables,
one with a composite key, and a 30-column table of every type the source supports, with edge
values in every column; on PostgreSQL also TOASTed values that most updates leave unchanged,
in a table with and one without REPLICA IDENTITY FULL, and a partitioned table whose
partitions are created under load; TRUNCATEs; ALTER TABLEs that add
columns with constant and volatile defaults, rename, retype and drop them) runs while dumps of
all tables (one with parallel readers, one adaptive) and of key lists are requested, and the capture is killed with SIGKILL at random
moments and restarted; the database server itself is crashed once while a dump runs and
started again (the capture reconnects by itself); once, rows are deleted and updated while
nothing captures and the capture restarts with --reset-position (a dump of all tables
repairs them). At the end `dblog verify`
must report zero mismatches for every table: replaying the changelog gives the source tables.
Then the Spark job lands the changelog (once while the workload runs, once at the end) and
every typed Delta mirror must equal its source table, row for row.

Seeds: `make test` runs one random seed on PostgreSQL (MariaDB's: make soak), drawn per run and printed
(DBLOG_ORACLE_SEED replays a failing one); `make soak` runs a fixed seed and more random
ones (DBLOG_SOAK_SEEDS, default 3) with a longer workload (DBLOG_ORACLE_SECONDS).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_provider_dblog.config import make_state
from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.state.local import LocalStateStore
from tests.e2e.test_spark_cluster import cluster  # noqa: F401 - the standalone cluster's fixture (skips if down)
from tests.support.s3_env import use_s3

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS
from .zk_tmpserver import TmpZooKeeperEnsemble

FIXED_SEED = 20261121
RANDOM_SEED = int(os.environ.get("DBLOG_ORACLE_SEED") or random.SystemRandom().randrange(10**9))
REPO = Path(__file__).resolve().parents[2]
WORKLOAD_SECONDS = float(os.environ.get("DBLOG_ORACLE_SECONDS", "25"))


class Workload:
    """Writer threads issuing random transactions until stopped, and a thread that TRUNCATEs
    captured tables at random moments (on PostgreSQL sometimes two tables in one statement)."""

    def __init__(self, db, seed: int, threads: int = 2, schema_changes: bool = False):
        self.db, self.stop, self.errors, self.txns = db, threading.Event(), [], 0
        self.running = threading.Event()  # cleared: writers hold still (pause)
        self.running.set()
        self._writing = [threading.Lock() for _ in range(threads + 2)]  # held per transaction
        start = 10**6
        self._ids = itertools.count(start)
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(seed + i, i), daemon=True) for i in range(threads)]
        self.threads.append(threading.Thread(target=self._truncate, args=(seed + 99,), daemon=True))
        if schema_changes:  # the oracle's; other users of the workload keep their tables' shape
            self.threads.append(threading.Thread(target=self._alter, args=(seed + 98,), daemon=True))
        self.truncates: list[list[str]] = []
        self.altered: list[str] = []

    def _truncate(self, seed: int) -> None:
        """Two TRUNCATEs: one while the first dump of all tables runs, one later. Never of
        notes, so that its 300 seeded rows always come through the dump."""
        rng = random.Random(seed)
        choices = [["accounts"], ["orders"]] + ([["accounts", "orders"]] * 2 if self.db.kind == "postgres" else [])
        if self.db.wide:
            choices += [["wide"]] + ([["orders", "wide"]] if self.db.kind == "postgres" else [])
        c = self.db.connect()
        try:
            for at in (rng.uniform(1.5, 5), rng.uniform(8, max(9, WORKLOAD_SECONDS - 3))):
                if self.stop.wait(max(0.0, at - (time.monotonic() - self._started))):
                    return
                tables = rng.choice(choices)
                for _ in range(5):  # a deadlock with a writer, or a server restart: try again
                    try:
                        self._while_running(-1, lambda ts=tables, c=c: self.db.truncate(c, ts))
                        self.truncates.append(tables)
                        break
                    except Exception as exc:
                        c = self._recover(c)
                        self.errors.append(repr(exc))
        finally:
            c.close()

    def _alter(self, seed: int) -> None:
        """The adapter's ALTER TABLEs (add with constant and volatile defaults, rename, type
        change, drop), at random moments: during the dumps and while writers write."""
        rng = random.Random(seed)
        steps = self.db.schema_changes()
        moments = sorted(rng.uniform(1.0, max(2.0, WORKLOAD_SECONDS - 6)) for _ in steps)
        c = self.db.connect()
        try:
            for at, ddl in zip(moments, steps):
                if self.stop.wait(max(0.0, at - (time.monotonic() - self._started))):
                    return
                for attempt in range(5):  # a server restart (the crash holds DDL back): again
                    try:
                        self._while_running(-2, lambda ddl=ddl, c=c: (c.cursor().execute(ddl), c.commit()))
                        break
                    except Exception as exc:
                        if attempt == 4:
                            raise
                        c = self._recover(c)
                        self.errors.append(repr(exc))
                self.altered.append(ddl)
        except Exception as exc:
            self.errors.append(f"ALTER failed: {exc!r}")
        finally:
            c.close()

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _while_running(self, me: int, work) -> None:
        """Run ``work`` while not paused (a pause waits for it to finish)."""
        while True:
            self.running.wait()
            with self._writing[me]:
                if self.running.is_set():
                    work()
                    return

    def _recover(self, c):
        """Roll back; if the connection is gone (the server crashed), a new one once the
        server is back."""
        try:
            c.rollback()
            return c
        except Exception as exc:  # noqa: BLE001 - the connection is gone: a new one below
            self.errors.append(f"reconnecting: {exc!r}")
        with contextlib.suppress(Exception):
            c.close()
        deadline = time.monotonic() + 180
        while True:
            try:
                return self.db.connect()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def pause(self) -> None:
        """Hold every writer still (transactions under way finish first)."""
        self.running.clear()
        for lock in self._writing:
            with lock:
                pass

    def _run(self, seed: int, me: int) -> None:
        rng = random.Random(seed)
        c = self.db.connect()
        try:
            while not self.stop.is_set():
                try:
                    self.running.wait()
                    with self._writing[me]:
                        if not self.running.is_set():  # paused after the wait: hold still
                            continue
                        self.db.random_transaction(c, rng, self.next_id)
                    self.txns += 1
                except Exception as exc:  # deadlocks, serialisation, a crashed server: go on
                    c = self._recover(c)
                    self.errors.append(repr(exc))
                time.sleep(rng.uniform(0, 0.01))
        finally:
            c.close()

    def __enter__(self):
        self._started = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.running.set()
        for t in self.threads:
            t.join(30)


def _spark_env() -> dict:
    jars = subprocess.run([str(REPO / "scripts" / "spark-jars")], capture_output=True, text=True, timeout=900)
    assert jars.returncode == 0, jars.stderr
    return dict(os.environ, DBLOG_SPARK_JARS=jars.stdout.strip())


def spark_module(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"airflow_provider_dblog.spark.{name}", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=_spark_env(),
    )


def spark_module_async(log_path, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", f"airflow_provider_dblog.spark.{name}", *args],
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
        env=_spark_env(),
    )


def land_in_process(lake: str, source_id: str) -> dict:
    """The landing after the capture stopped, in this process's Spark session (the e2e tests
    that run before this one started it; else it starts here). As a process of its own it paid
    a cold JVM, about 40 s of every oracle run; the entry point keeps running as a process in
    the landing during the workload, and verify_mirror's below."""
    os.environ.setdefault("DBLOG_SPARK_JARS", _spark_env()["DBLOG_SPARK_JARS"])
    from airflow_provider_dblog.spark.land_changelog import land
    from airflow_provider_dblog.spark.session import get_session

    spark = get_session("dblog-tests", master="local[2]")
    return land(spark, lake, source=source_id, register=False, log=lambda _: None)


def sentinel_arrived(db, out, source_id: str, capture) -> None:
    """Write a row we can recognise and wait until it is in the changelog: then so is every
    write committed before it."""
    sentinel = str(uuid.uuid4())
    with db.connect() as c:
        c.cursor().execute(f"INSERT INTO {db.ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (sentinel, "{}", True))
        c.commit()
    wait_for(
        lambda: any(e.key == (sentinel,) for e in out.scan(source_id, f"{db.ns}.notes")),
        120,
        "the last write to reach the changelog",
        capture.assert_alive,
        interval=1,
        detail=capture.detail,
    )


def capture_status(state, source_id: str) -> dict:
    return json.loads(state.get_value(status_key(source_id)) or "{}")


def crash_and_restart(db, load: Workload, capture: Capture, state, source_id: str) -> None:
    """Crash the database server under the writers' load while a dump runs (PostgreSQL: an
    immediate shutdown; MariaDB: SIGKILL, and a new binlog file at the restart) and start it
    again; the capture must come back through its own reconnect path (its status counts it).
    DDL and TRUNCATE hold still meanwhile (a blind retry could run them twice)."""
    kind = {"postgres": "pg", "mysql": "mysql"}[db.kind]
    services = str(REPO / "scripts" / "services")
    with load._writing[-1], load._writing[-2]:
        subprocess.run([services, "crash", kind], check=True, capture_output=True, timeout=120)
        time.sleep(1.0)
        subprocess.run([services, "up", kind], check=True, capture_output=True, timeout=300)

    def reconnected():
        st = capture_status(state, source_id)
        return st.get("pid") == capture.proc.pid and (st.get("reconnects") or 0) >= 1

    wait_for(reconnected, 300, "the capture to reconnect after the crash", capture.assert_alive, detail=capture.detail)


def reset_position_gap(db, load: Workload, capture: Capture, out, state, source_id: str, rng: random.Random) -> dict:
    """Stop writers and capture (everything written so far is in the changelog), change rows
    while nothing captures, restart with --reset-position (which skips those changes) and let
    the writers go on once the capture reads the log again (it starts at the log's end then)."""
    load.pause()
    try:
        sentinel_arrived(db, out, source_id, capture)
        capture.kill()
        with db.connect() as c:
            gap = db.gap_changes(c, rng, load.next_id)
        capture.start("--reset-position")

        def reading():  # a status report of the new process: written after it started the log
            report = json.loads(state.get_value(status_key(source_id)) or "{}")
            return report.get("pid") == capture.proc.pid

        wait_for(reading, 90, "the reset capture to read the log", capture.assert_alive, detail=capture.detail)
    finally:
        load.running.set()
    return gap


# make test: one random seed (a new one every run, printed for replay); MariaDB's is skipped there.
# make soak: the fixed seed and DBLOG_SOAK_SEEDS more random ones, with DBLOG_ORACLE_SECONDS.
SOAK_SEEDS = [random.SystemRandom().randrange(10**9) for _ in range(int(os.environ.get("DBLOG_SOAK_SEEDS", "3")))]
SEEDS = [
    pytest.param(RANDOM_SEED, id="random-seed"),
    pytest.param(FIXED_SEED, id="fixed-seed", marks=pytest.mark.soak),
    *(pytest.param(s, id=f"soak-seed-{i}", marks=pytest.mark.soak) for i, s in enumerate(SOAK_SEEDS)),
]


@pytest.mark.integration
@pytest.mark.parametrize("lake_at", ["disk", "s3-cluster"])
@pytest.mark.parametrize("watermarks", ["table", "log"])
@pytest.mark.parametrize("store", ["local", "zookeeper-ensemble"])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_convergence_oracle(kind, seed, store, watermarks, lake_at, tmp_path, monkeypatch, request):
    """``store`` zookeeper-ensemble: the state in a three-node ZooKeeper ensemble whose leader
    is SIGKILLed during the workload and started again (the fleet's deployment, issue 33); in
    make soak, with the fixed seed. ``watermarks`` log: read-only dumps (docs/sources.md), as a
    user that can write nothing (on the local store; in make soak). ``lake_at``
    s3-cluster: the changelog on the S3 test store (delta-rs, put-if-absent) and the landing
    and the mirror check on the Spark standalone cluster (executors in the workers' JVMs),
    mirrors and checkpoints on S3 (issue 32; table watermarks, the local store, in make soak).
    make test runs PostgreSQL's with table watermarks on the local store and a disk lake."""
    soak = os.environ.get("DBLOG_SOAK") == "1"
    if lake_at == "s3-cluster" and (watermarks != "table" or store != "local" or seed not in (RANDOM_SEED, FIXED_SEED)):
        pytest.skip("the oracle on S3 and the cluster runs with table watermarks, the local store, two seeds")
    if lake_at == "s3-cluster" and not soak:
        # 7 minutes on a 2-core machine: make test's longest run. make test keeps the object
        # store (test_object_store.py, test_fencing.py); the cluster's tests are all in make soak
        # (docs/deploy.md, "Limits (issue 32)")
        pytest.skip("the oracle on S3 and the cluster runs in make soak, with the fixed seed")
    if watermarks == "log" and not soak:
        # make test's read-only dumps: test_read_only_dumps.py, test_replica_chunks.py's oracle workload
        pytest.skip("the oracle with read-only dumps runs in make soak, with the fixed seed and the soak seeds")
    if watermarks == "log" and store != "local":
        pytest.skip("the oracle on a ZooKeeper ensemble runs with table watermarks")
    if watermarks == "log" and kind == "mysql" and seed != FIXED_SEED:
        pytest.skip("MariaDB's oracle with read-only dumps runs in make soak, with the fixed seed")
    if kind == "mysql" and seed == RANDOM_SEED:
        # make test keeps PostgreSQL's (and PostgreSQL's over Kafka); MariaDB's run in make
        # soak (a fixed seed and DBLOG_SOAK_SEEDS random ones): the suite's longest run.
        pytest.skip("MariaDB's oracle runs in make soak (the suite's longest run)")
    if store != "local" and (seed != FIXED_SEED or not soak):
        pytest.skip("the oracle on a ZooKeeper ensemble runs in make soak, with the fixed seed")
    spark_cluster = None
    if lake_at == "s3-cluster":
        from tests.e2e.test_spark_cluster import s3a_classpath

        spark_cluster = request.getfixturevalue("cluster")  # skips, naming the command, when it is not up
        lake_url = use_s3(monkeypatch)  # the store's keys in this environment: the children inherit them
        lake_arg = lake_url
        monkeypatch.setenv("DBLOG_SPARK_MASTER", spark_cluster.master)
        monkeypatch.setenv("DBLOG_SPARK_S3A_JARS", s3a_classpath())
        apps_before = spark_cluster.app_ids()
        checks_before = spark_cluster.app_ids("dblog-verify-mirror")
    else:
        lake_arg = str(tmp_path / "lake")
        lake_url = f"delta://{lake_arg}"
    print(
        f"\noracle {kind}: seed {seed} (rerun with DBLOG_ORACLE_SEED={seed}), state {store}, "
        f"watermarks {watermarks}, lake {lake_url}"
    )
    rng = random.Random(seed)
    db = ADAPTERS[kind]()
    if kind == "postgres":  # ledger: LIST-partitioned (one partition sub-partitioned), created under load
        db.partitioned = True
    db.wide = True  # every column type, end to end: capture, dumps, verify and the typed mirror
    source_id = f"oracle_{kind}_{uuid.uuid4().hex[:6]}"
    db.create()
    capture = None
    mid_land = None
    ensemble = None
    try:
        db.seed(rng, 300)  # rows that exist before the capture: only dumps can deliver them
        source = db.tls_source_config(source_id) if watermarks == "table" else db.read_only_source_config(source_id)
        if store == "local":
            config = write_config(tmp_path / "dblog.toml", source, tmp_path / "state.db", lake_url)
            state = LocalStateStore(str(tmp_path / "state.db"))
        else:
            ensemble = TmpZooKeeperEnsemble(tick_ms=500)
            ensemble.start()
            # a short session: a SIGKILLed capture's lease is gone in seconds, so its restart leads
            zk = {"url": f"zk://{ensemble.hosts}/dblog_{source_id}", "session_timeout": 4}
            config = write_config(tmp_path / "dblog.toml", source, None, lake_url, zk)
            state = make_state(zk)
        # Widen each chunk's window (SELECT .. HW) so concurrent writes land inside it often:
        # without the window's key removal this test then fails (checked by mutation).
        capture = Capture(
            config, tmp_path / "capture.log", "--schema-check-interval", "2", faults=("--window-delay-ms", "30")
        )
        capture.start()
        wait_for(
            lambda: state.get_value(status_key(source_id)) is not None,
            90,
            "the capture to start",
            capture.assert_alive,
            detail=capture.detail,
        )

        dumps = []
        out = make_output(lake_url)
        out.open()
        gap: dict = {}
        with Workload(db, seed, schema_changes=True) as load:
            time.sleep(1)
            gap_at = time.time() + rng.uniform(6, max(7, WORKLOAD_SECONDS - 8))
            crash_at, crashed = time.time() + rng.uniform(2, 5), False
            # the ensemble's leader SIGKILLed and started again (zookeeper-ensemble only)
            zk_fault_at, zk_faults = (time.time() + rng.uniform(5, max(6, WORKLOAD_SECONDS - 5))) if ensemble else 0, 0
            # the first dump of all tables reads with parallel readers (issue 15 part 2)
            readers = str(rng.randint(2, 3))
            dumps.append(
                dblog(
                    config, "dump", "--all", "--chunk-size", str(rng.randint(17, 60)), "--readers", readers
                ).stdout.strip()
            )
            end = time.time() + WORKLOAD_SECONDS
            key_dump_at = time.time() + rng.uniform(3, 8)
            # until the workload's time is up, the capture was killed at least 3 times and every
            # planned fault ran (a loaded machine gets fewer rounds in; up to 60 s more for them)
            while time.time() < end or ((capture.kills < 3 or gap_at or zk_fault_at) and time.time() < end + 60):
                time.sleep(rng.uniform(1.5, 4.0))
                if key_dump_at and time.time() > key_dump_at:
                    keys = [json.dumps(k) for k in rng.sample(range(1, 301), 25)]
                    args = ["dump", "--table", f"{db.ns}.accounts", "--chunk-size", "7"]
                    for k in keys:
                        args += ["--key", k]
                    dumps.append(dblog(config, *args).stdout.strip())
                    dumps.append(
                        dblog(config, "dump", "--table", f"{db.ns}.orders", "--chunk-size", "11").stdout.strip()
                    )
                    args = ["dump", "--table", f"{db.ns}.wide", "--chunk-size", "3"]
                    for k in rng.sample(range(1, 301), 10):
                        args += ["--key", json.dumps(k)]
                    dumps.append(dblog(config, *args).stdout.strip())
                    key_dump_at = 0
                if not crashed and time.time() > crash_at:
                    # The crash hits a running capture, not one still starting after the last
                    # SIGKILL (its first connection would fail, and a start-up refuses a source
                    # it cannot reach): the status must be this process's own first.
                    wait_for(
                        lambda: capture_status(state, source_id).get("pid") == capture.proc.pid,
                        90,
                        "the restarted capture to report",
                        capture.assert_alive,
                        detail=capture.detail,
                    )
                    if not capture_status(state, source_id).get("dumps"):  # none running now: start one
                        dumps.append(
                            dblog(config, "dump", "--all", "--chunk-size", "20", "--delay-ms", "50").stdout.strip()
                        )
                        wait_for(
                            lambda: capture_status(state, source_id).get("dumps"),
                            60,
                            "a dump to run before the crash",
                            capture.assert_alive,
                            detail=capture.detail,
                        )
                    crash_and_restart(db, load, capture, state, source_id)  # mid-dump
                    crashed = True
                    continue
                if zk_fault_at and time.time() > zk_fault_at:
                    leader = ensemble.leader()
                    ensemble.kill(leader)  # the capture's session moves to a follower; the quorum holds
                    time.sleep(rng.uniform(2, 6))
                    capture.assert_alive()
                    ensemble.start(leader)
                    zk_fault_at, zk_faults = 0, zk_faults + 1
                    continue
                if gap_at and time.time() > gap_at:
                    # A gap: rows deleted and updated while nothing captures, skipped by
                    # --reset-position; the dump of all tables that follows repairs them.
                    gap = reset_position_gap(db, load, capture, out, state, source_id, rng)
                    # an adaptive dump (issue 15): its pace changes chunk by chunk under the load
                    dumps.append(
                        dblog(
                            config, "dump", "--all", "--chunk-size", str(rng.randint(17, 60)), "--adaptive"
                        ).stdout.strip()
                    )
                    gap_at = 0
                    continue
                capture.kill()
                time.sleep(rng.uniform(0.05, 1.0))
                capture.start()
                if mid_land is None:  # (out.open() created the changelog)
                    # land incrementally while the capture runs and gets killed
                    mid_land_log = tmp_path / "land-mid.log"
                    mid_land = spark_module_async(
                        mid_land_log, "land_changelog", "--lake", lake_arg, "--source", source_id, "--no-register"
                    )
        assert load.txns > 50, f"workload too small: {load.txns} transactions, errors {load.errors[:3]}"
        assert len(load.truncates) == 2, f"truncates: {load.truncates}, errors {load.errors[-3:]}"
        assert len(load.altered) == len(db.schema_changes()), (load.altered, [e for e in load.errors if "ALTER" in e])

        def all_done():
            ds = [state.get_dump(d) for d in dumps]
            failed = [d for d in ds if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)]
            # everything needed to diagnose it after the fact: the dump, its settings, the log
            assert not failed, (
                f"dump {failed[0].spec.dump_id} failed: {failed[0].error}\n{failed[0].control}\n{capture.tail()}"
            )
            return all(d.status is DumpStatus.DONE for d in ds)

        wait_for(all_done, 240, "all dumps to finish", capture.assert_alive, detail=capture.detail)

        # A last write we can recognise: once it is in the changelog, so is everything before it.
        last_write = time.time()
        sentinel_arrived(db, out, source_id, capture)
        # The capture compared the schemas after the last ALTER (a changed table is dumped again).
        wait_for(
            lambda: (
                (json.loads(state.get_value(status_key(source_id)) or "{}").get("schemas_checked_at") or 0) > last_write
            ),
            60,
            "a schema check after the last write",
            capture.assert_alive,
            detail=capture.detail,
        )
        # Dumps the capture queued itself: key lists (on PostgreSQL, keys whose unchanged TOAST
        # value had no earlier value in the changelog) and re-dumps of tables whose schema changed.
        wait_for(
            lambda: all(d.status is DumpStatus.DONE for d in state.list_dumps(source_id)),
            120,
            "the capture's own key-list dumps to finish",
            capture.assert_alive,
            detail=capture.detail,
        )
        assert capture.stop() == 0, capture.tail()

        origins = {"log": 0, "dump": 0, "truncate": 0, "notes dump": 0}
        for t in db.tables():
            for e in out.scan(source_id, t):
                origins[e.origin.value] += 1
                origins["truncate"] += e.op.value == "t"
                origins["notes dump"] += e.origin.value == "dump" and t.endswith(".notes")
        # notes is never truncated: verify below shows its seeded rows all came through the dump
        assert origins["log"] > 0 and origins["notes dump"] > 0, origins
        assert origins["truncate"] == sum(len(ts) for ts in load.truncates), (origins, load.truncates)
        # The gap's deletes never reached the log: only the dump's key ranges (op k) remove them.
        assert gap, "no reset-position gap ran"
        assert crashed, "the server was never crashed while a dump ran"
        assert ensemble is None or zk_faults == 1, "the ZooKeeper ensemble's leader was never killed"
        accounts = list(out.scan(source_id, f"{db.ns}.accounts"))
        assert not any(e.op.value == "d" and e.key[0] in gap["deleted"] for e in accounts), gap
        wide = list(out.scan(source_id, f"{db.ns}.wide"))
        assert not any(e.op.value == "d" and e.key[0] in gap["wide deleted"] for e in wide), gap
        assert any(e.op.value == "k" for e in accounts)

        result = dblog(config, "verify", check=False)
        print(result.stdout)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}\n{capture.tail()}"
        for t in db.tables():
            assert f"{t}: " in result.stdout and "0 mismatches" in result.stdout

        # The oracle extended to the lakehouse: the Spark job lands the changelog (once while
        # the workload ran, once now) and every typed mirror must equal its source table.
        assert mid_land.wait(300) == 0, mid_land_log.read_text()[-3000:]
        if spark_cluster is None:
            land_in_process(lake_arg, source_id)
        else:  # a driver of its own, with the cluster as its master (this process's session is local)
            landed = spark_module("land_changelog", "--lake", lake_arg, "--source", source_id, "--no-register")
            assert landed.returncode == 0, landed.stdout[-2000:] + landed.stderr[-4000:]
        mirrors = spark_module("verify_mirror", "--config", str(config), "--lake", lake_arg)
        print(mirrors.stdout)
        assert mirrors.returncode == 0, mirrors.stdout + mirrors.stderr[-3000:]
        for t in db.tables():
            assert f"{t}: " in mirrors.stdout
        assert mirrors.stdout.count(" 0 mismatches") == len(db.tables())
        if spark_cluster is not None:  # by key ranges too: digests in SQL on the source, Spark on the cluster
            ranges = spark_module("verify_mirror", "--config", str(config), "--lake", lake_arg, "--ranges")
            print(ranges.stdout)
            assert ranges.returncode == 0, ranges.stdout + ranges.stderr[-3000:]
            assert ranges.stdout.count(" 0 mismatches") == len(db.tables())
            assert "(by ranges: " in ranges.stdout, ranges.stdout  # an integer-keyed table, by its digests
        print(f"oracle {kind}: {load.txns} transactions, {capture.kills} SIGKILLs, {origins}")
        assert capture.kills >= 3
        if spark_cluster is not None:
            # Both landings ran as applications of the cluster, their tasks in both workers'
            # executors (a landing that ran in its driver alone leaves no executor log).
            apps = spark_cluster.app_ids() - apps_before
            assert len(apps) >= 2, f"the landings were not applications of {spark_cluster.master}: {apps}"
            checks = spark_cluster.app_ids("dblog-verify-mirror") - checks_before  # whole, and by ranges
            assert len(checks) >= 2, f"the mirror checks were not applications of {spark_cluster.master}: {checks}"
            tasks: dict = {}
            for _ in range(20):  # executors' logs are flushed as they exit
                tasks = {app: spark_cluster.tasks_by_worker(app) for app in apps}
                if any(len(t) >= 2 and all(t.values()) for t in tasks.values()):
                    break
                time.sleep(0.5)
            assert any(len(t) >= 2 and all(t.values()) for t in tasks.values()), tasks
    finally:
        if mid_land is not None and mid_land.poll() is None:
            mid_land.kill()
        if capture is not None:
            capture.close()
        if ensemble is not None:
            state.close()
            ensemble.close()
        db.drop(source_id)
