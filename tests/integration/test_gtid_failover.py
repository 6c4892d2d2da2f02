"""A MariaDB primary dies mid-dump under the oracle's workload; its GTID replica is promoted;
the capture (GTID positions, both servers in its host list) follows by itself, the dump goes
on, and the changelog converges to the new primary's tables (DESIGN invariant 3).

The pair comes from `scripts/services up gtid` (a fresh one per test): a primary and a replica
replicating it through GTID with log_slave_updates and gtid_strict_mode, both TLS-only for
the capture user, as the oracle's servers are.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pymysql
import pytest

from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.sources.mysql.gtid import decode_gtid_coord, is_gtid_coord
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import MySQLAdapter, env
from .test_oracle import RANDOM_SEED, Workload, capture_status, sentinel_arrived

REPO = Path(__file__).resolve().parents[2]
SERVICES = str(REPO / "scripts" / "services")


@pytest.fixture
def pair():
    """(primary port, replica port) of a fresh GTID pair, removed afterwards."""
    ports = int(env("DBLOG_GTID_PRIMARY_PORT")), int(env("DBLOG_GTID_REPLICA_PORT"))
    subprocess.run([SERVICES, "down", "--purge", "gtid"], capture_output=True, timeout=300)
    up = subprocess.run([SERVICES, "up", "gtid"], capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stderr
    try:
        yield ports
    finally:
        subprocess.run([SERVICES, "down", "--purge", "gtid"], capture_output=True, timeout=300)


def root(port: int):
    return pymysql.connect(host="127.0.0.1", port=port, user="root", password="root", autocommit=True)


def promote(port: int) -> None:
    """What an operator (or an orchestrator) does: let the replica apply everything it
    received, stop replicating, and accept writes."""
    with root(port) as c, c.cursor(pymysql.cursors.DictCursor) as cur:

        def applied() -> bool:
            cur.execute("SHOW SLAVE STATUS")
            st = cur.fetchone()
            return st["Slave_IO_Running"] != "Yes" and (
                st["Relay_Master_Log_File"],
                st["Exec_Master_Log_Pos"],
            ) == (st["Master_Log_File"], st["Read_Master_Log_Pos"])

        wait_for(applied, 60, "the replica to apply its relay log")
        cur.execute("STOP SLAVE")
        cur.execute("RESET SLAVE ALL")
        cur.execute("SET GLOBAL read_only = OFF")


def caught_up(primary: int, replica: int) -> None:
    """Wait until the replica has applied everything in the primary's binlog now."""
    with root(primary) as c, c.cursor() as cur:
        cur.execute("SELECT @@gtid_binlog_pos")
        (pos,) = cur.fetchone()
    with root(replica) as c, c.cursor() as cur:
        cur.execute("SELECT MASTER_GTID_WAIT(%s, 60)", (pos,))
        assert cur.fetchone()[0] == 0, f"the replica did not reach {pos} in 60 s"


class PairAdapter(MySQLAdapter):
    """The oracle's MariaDB tables and workload, on the pair's primary (moved at failover)."""

    def __init__(self, port: int):
        super().__init__()
        self.port = port


@pytest.mark.integration
def test_capture_follows_a_failover_to_the_promoted_replica_mid_dump(pair, tmp_path):
    # One seed per run (CI time): a random one, printed; DBLOG_ORACLE_SEED replays it.
    seed = RANDOM_SEED
    print(f"\nGTID failover: seed {seed} (rerun with DBLOG_ORACLE_SEED={seed})")
    primary, replica = pair
    rng = random.Random(seed)
    db = PairAdapter(primary)
    source_id = f"failover_{uuid.uuid4().hex[:6]}"
    db.create()
    db.seed(rng, 300)
    hosts = f"127.0.0.1:{primary},127.0.0.1:{replica}"
    config = write_config(
        tmp_path / "dblog.toml",
        db.tls_source_config(source_id, host=hosts, use_gtid=True),
        tmp_path / "state.db",
        f"delta://{tmp_path / 'lake'}",
    )
    # The replica's lag, as adaptive dumps read it (issue 15 part 3): a number while it
    # replicates, infinite while its SQL thread is stopped.
    from airflow_provider_dblog.config import make_source

    watcher = make_source({**db.source_config(source_id), "port": primary, "replicas": [f"127.0.0.1:{replica}"]})
    watcher.open()
    try:
        assert 0 <= watcher.replication_lag() < 60
        with root(replica) as c:
            c.cursor().execute("STOP SLAVE SQL_THREAD")
            try:
                assert watcher.replication_lag() == float("inf")
            finally:
                c.cursor().execute("START SLAVE SQL_THREAD")
    finally:
        watcher.close()
    state = LocalStateStore(str(tmp_path / "state.db"))
    out = make_output(f"delta://{tmp_path / 'lake'}")
    out.open()
    capture = Capture(config, tmp_path / "capture.log", faults=("--window-delay-ms", "30"))
    capture.start()
    try:
        wait_for(lambda: capture_status(state, source_id), 90, "the capture to start", capture.assert_alive)
        dumps = []
        with Workload(db, seed) as load:
            time.sleep(1)
            dumps.append(dblog(config, "dump", "--all", "--chunk-size", "20", "--delay-ms", "80").stdout.strip())
            time.sleep(rng.uniform(1, 3))
            capture.kill()  # a restart on the same server: resumes by GTID there
            capture.start()
            wait_for(
                lambda: (
                    capture_status(state, source_id).get("pid") == capture.proc.pid
                    and capture_status(state, source_id).get("dumps")
                ),
                90,
                "the restarted capture to run the dump",
                capture.assert_alive,
                detail=capture.detail,
            )
            # The primary dies under the writers' load, in the middle of the dump.
            with load._writing[-1]:  # no TRUNCATE in flight (a blind retry could run it twice)
                # Asynchronous replication loses the primary's last commits at a crash; when the
                # capture had read one of them the promoted replica has diverged from the
                # changelog, and the capture rightly stops (the test below). Here the replica
                # holds what the capture read: the capture pauses, the replica catches up to the
                # primary's binlog as it is then, and the writers go on during the crash.
                capture.proc.send_signal(signal.SIGSTOP)
                try:
                    caught_up(primary, replica)
                    killed_at = time.monotonic()
                    subprocess.run([SERVICES, "crash", "gtid"], check=True, capture_output=True, timeout=120)
                finally:
                    capture.proc.send_signal(signal.SIGCONT)
                promote(replica)
                db.port = replica  # the writers reconnect to the new primary

            def following() -> bool:  # the same process, through its own reconnect path
                st = capture_status(state, source_id)
                return (
                    st.get("pid") == capture.proc.pid
                    and (st.get("reconnects") or 0) >= 1
                    and st.get("log", {}).get("server") == f"127.0.0.1:{replica}"
                )

            wait_for(
                following,
                180,
                "the capture to read the promoted replica",
                capture.assert_alive,
                detail=capture.detail,
            )
            failover_seconds = time.monotonic() - killed_at
            time.sleep(rng.uniform(2, 4))
            capture.kill()  # and a restart on the new primary
            capture.start()
            time.sleep(rng.uniform(2, 4))
        assert load.txns > 50, f"workload too small: {load.txns} transactions, errors {load.errors[:3]}"

        def all_done():
            ds = [state.get_dump(d) for d in dumps]
            failed = [d for d in ds if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)]
            assert not failed, f"dump failed: {failed[0].error}"
            return all(d.status is DumpStatus.DONE for d in ds)

        wait_for(all_done, 240, "the dump to finish on the new primary", capture.assert_alive, detail=capture.detail)
        sentinel_arrived(db, out, source_id, capture)
        status = capture_status(state, source_id)
        assert capture.stop() == 0, capture.tail()

        # Every log event has a GTID position, and each transaction one counter (no
        # transaction read twice under two positions), nothing twice at one position.
        seen: dict[str, int] = {}
        positions = set()
        events = [e for t in db.tables() for e in out.scan(source_id, t)]
        for e in events:
            if e.origin.value != "log":
                continue
            assert is_gtid_coord(e.position.coord), e.position
            at = decode_gtid_coord(e.position.coord)
            assert seen.setdefault(at.gtid, at.counter) == at.counter, (at.gtid, seen[at.gtid], at.counter)
            assert e.position not in positions, e.position
            positions.add(e.position)
        servers = {decode_gtid_coord(e.position.coord).gtid.split("-")[1] for e in events if e.origin.value == "log"}
        assert servers == {"11", "12"}, servers  # transactions of both primaries were captured

        result = dblog(config, "verify", check=False)
        print(result.stdout)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}\n{capture.tail()}"
        assert result.stdout.count(" 0 mismatches") == len(db.tables()), result.stdout
        recovered = status.get("position_recoveries") or 0
        print(
            f"GTID failover: {load.txns} transactions, failover to the replica in {failover_seconds:.1f} s, "
            f"{status.get('reconnects')} reconnects, {recovered} position recoveries, log {json.dumps(status.get('log'))}"
        )
        assert recovered == 0, "the promoted replica lacked a transaction the capture had read"
    finally:
        capture.close()


def _write(db: PairAdapter, statements: list[tuple[str, tuple]]) -> None:
    with db.connect() as c:
        for sql, params in statements:
            c.cursor().execute(sql.format(ns=db.ns), params)
        c.commit()


def _changes(tag: str, n: int) -> list[tuple[str, tuple]]:
    """Inserts into every table (integer, composite text and text keys), one transaction each."""
    out: list[tuple[str, tuple]] = []
    for i in range(n):
        out += [
            (
                "INSERT INTO {ns}.accounts (id, name) VALUES (%s, %s)",
                (10_000 + i + (0 if tag == "lost" else 5000), tag),
            ),
            ("INSERT INTO {ns}.orders (region, order_no, status) VALUES (%s, %s, %s)", (tag[:8], i, tag)),
            ("INSERT INTO {ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (f"{tag}-{i}", "{}", False)),
        ]
    return out


@pytest.mark.integration
def test_a_fresh_capture_refuses_a_promoted_replica_without_the_changelogs_last_transactions(pair, tmp_path):
    """Issue 39 part 00: the changelog holds transactions after the checkpoint (a kill between
    the output's commit and the checkpoint write) that the promoted replica never received.
    A capture started afresh must not resume from the checkpoint and skip the new primary's
    own transactions up to the changelog's end (their counters fall there): it stops with the
    position-lost error; with --redump-on-position-lost it recovers and converges, also for
    tables whose keys state no ranges (text keys keep no row of the lost transactions)."""
    primary, replica = pair
    db = PairAdapter(primary)
    source_id = f"diverged_{uuid.uuid4().hex[:6]}"
    db.create()
    db.seed(random.Random(7), 40)
    config = write_config(
        tmp_path / "dblog.toml",
        db.tls_source_config(source_id, host=f"127.0.0.1:{primary},127.0.0.1:{replica}", use_gtid=True),
        tmp_path / "state.db",
        f"delta://{tmp_path / 'lake'}",
    )
    state = LocalStateStore(str(tmp_path / "state.db"))
    out = make_output(f"delta://{tmp_path / 'lake'}")
    out.open()
    capture = Capture(config, tmp_path / "capture.log")
    capture.start()
    try:
        wait_for(
            lambda: state.get_checkpoint(source_id), 90, "a checkpoint", capture.assert_alive, detail=capture.detail
        )
        checkpoint = state.get_checkpoint(source_id)
        # The replica holds the checkpoint's transaction, then stops receiving.
        with root(replica) as c, c.cursor(pymysql.cursors.DictCursor) as cur:

            def caught_up() -> bool:
                cur.execute("SELECT @@gtid_slave_pos AS pos")
                applied = {g.split("-")[0]: int(g.split("-")[2]) for g in cur.fetchone()["pos"].split(",") if g}
                domain, _, seq = decode_gtid_coord(checkpoint.coord).gtid.split("-")
                return applied.get(domain, -1) >= int(seq)

            wait_for(caught_up, 60, "the replica to apply the checkpoint's transaction")
            cur.execute("STOP SLAVE")
        _write(db, _changes("lost", 20))  # only the old primary and the changelog see these
        sentinel_arrived(db, out, source_id, capture)
        capture.kill()
        reread = make_output(f"delta://{tmp_path / 'lake'}")
        reread.open()
        ahead = reread.last_position(source_id)
        assert ahead > checkpoint
        state.set_checkpoint(source_id, checkpoint)  # as if killed before the checkpoint write

        subprocess.run([SERVICES, "crash", "gtid"], check=True, capture_output=True, timeout=120)
        promote(replica)
        db.port = replica
        _write(db, _changes("new", 30))  # the new primary's own: counters up to past the changelog's

        capture.start()
        assert capture.proc.wait(120) != 0, capture.tail()
        assert "dblog: error:" in capture.tail() and "the changelog's last transaction" in capture.tail(), (
            capture.tail()
        )

        capture.start("--redump-on-position-lost")
        wait_for(
            lambda: state.list_dumps(source_id), 90, "the recovery dump", capture.assert_alive, detail=capture.detail
        )
        wait_for(
            lambda: all(d.status is DumpStatus.DONE for d in state.list_dumps(source_id)),
            180,
            "the recovery dump to finish",
            capture.assert_alive,
            detail=capture.detail,
        )
        sentinel_arrived(db, out, source_id, capture)
        assert capture.stop() == 0, capture.tail()
        result = dblog(config, "verify", check=False)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}"
        assert result.stdout.count(" 0 mismatches") == len(db.tables()), result.stdout
    finally:
        capture.close()
