"""A Kafka broker outage under a running capture (docs/kafka.md, "Broker outages"): the
broker is SIGKILLed while rows are inserted, a burst among them bigger than the capture's
buffer, then started again. While it is down the capture reads no more of the log than its
buffer holds, keeps its checkpoint, and says so in its status (``dblog status``); afterwards
every insert is in the topic exactly once (``read_committed``). ``make test`` holds the
broker down for 45 s, ``make soak`` for 5 minutes (``DBLOG_KAFKA_OUTAGE_SECONDS`` sets
another length). And, in ``make soak``, a broker left down past ``--output-outage-timeout``:
the capture exits with the cause, and a restarted capture delivers every insert exactly once.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import threading
import time
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import REPO, Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env
from .test_kafka_oracle import committed_records

pytestmark = pytest.mark.integration

SERVICES = str(REPO / "scripts" / "services")
BUFFER_MB = 4  # the capture's --buffer-mb: the burst below is several times as much
BURST = 40_000  # rows inserted in one statement while the broker is down


class Inserts:
    """One thread inserting a row into ``accounts`` every ``pause`` seconds until stopped."""

    def __init__(self, db, pause: float = 0.1):
        self.db, self.pause, self.ids, self.stop = db, pause, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        c = self.db.connect()
        try:
            i = 0
            while not self.stop.wait(self.pause):
                i += 1
                c.cursor().execute(f"INSERT INTO {self.db.ns}.accounts (id, name) VALUES (%s, %s)", (i, f"n{i}"))
                c.commit()
                self.ids.append(i)
        finally:
            c.close()

    def __enter__(self) -> Inserts:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)


def keys_in_topic(bootstrap: str, source_id: str, table: str) -> collections.Counter:
    """How often each key's row events (not TRUNCATE or dump ranges) are committed."""
    return collections.Counter(
        h["dblog.key"]
        for _, _, h in committed_records(bootstrap, source_id)
        if h.get("dblog.table") == table and h.get("dblog.op") not in ("t", "k")
    )


class Run:
    """A ``dblog capture`` of a fresh schema (PostgreSQL) or database (MariaDB) to the test
    broker, reading the log."""

    def __init__(self, tmp_path, *extra: str, kind: str = "postgres"):
        self.bootstrap = env("DBLOG_KAFKA_BOOTSTRAP")
        self.db = ADAPTERS[kind]()
        self.sid = f"k_outage_{uuid.uuid4().hex[:6]}"
        self.table = f"{self.db.ns}.accounts"
        self.db.create()
        url = f"kafka://{self.bootstrap}"
        config = write_config(tmp_path / "dblog.toml", self.db.source_config(self.sid), tmp_path / "state.db", url)
        self.config = config
        self.capture = Capture(config, tmp_path / "capture.log", *extra)
        self.capture.start()
        self.state = state = LocalStateStore(str(tmp_path / "state.db"))
        c = self.capture
        wait_for(lambda: state.get_value(status_key(self.sid)), 90, "the capture", c.assert_alive, detail=c.detail)

    def status(self) -> dict:
        """The capture's last status report."""
        return json.loads(self.state.get_value(status_key(self.sid)) or "{}")

    def burst(self, first: int, n: int) -> list[int]:
        """``n`` rows in one transaction (ids from ``first``)."""
        c = self.db.connect()
        try:
            if self.db.kind == "postgres":
                c.cursor().execute(
                    f"INSERT INTO {self.db.ns}.accounts (id, name) SELECT g, 'burst ' || g "
                    "FROM generate_series(%s, %s) AS g",
                    (first, first + n - 1),
                )
            else:  # MariaDB's Sequence engine: the table seq_A_to_B holds A..B
                c.cursor().execute(
                    f"INSERT INTO {self.db.ns}.accounts (id, name) SELECT seq, CONCAT('burst ', seq) "
                    f"FROM {self.db.ns}.seq_{first}_to_{first + n - 1}"
                )
            c.commit()
        finally:
            c.close()
        return list(range(first, first + n))

    def keys(self) -> collections.Counter:
        return keys_in_topic(self.bootstrap, self.sid, self.table)

    def assert_each_insert_once(self, ids: list[int]) -> None:
        want = {f"[{i}]" for i in ids}
        c = self.capture
        wait_for(lambda: want <= set(self.keys()), 300, "every insert in the topic", c.assert_alive, 2, c.tail)
        counts = self.keys()
        assert {k: n for k, n in counts.items() if n != 1} == {}, "an insert committed twice"
        assert set(counts) == want

    def close(self) -> None:
        self.capture.close()
        self.db.drop(self.sid)
        broker("up")  # a no-op when it runs; else the tests after a failed one find none


def broker(command: str) -> None:
    subprocess.run([SERVICES, command, "kafka"], check=True, capture_output=True, timeout=300)


def hold_an_outage(tmp_path, seconds: float, kind: str = "postgres") -> None:
    """The broker down for ``seconds`` under a capture, a burst beyond its buffer in it."""
    run = Run(tmp_path, "--buffer-mb", str(BUFFER_MB), "--output-outage-timeout", "0", kind=kind)
    c = run.capture
    try:
        with Inserts(run.db) as inserts:
            wait_for(run.keys, 60, "the first records", c.assert_alive, detail=c.detail)
            broker("crash")
            down_at = time.monotonic()
            burst = run.burst(1_000_000, BURST)
            # Reported while the first commit still waits for its 30 s timeout (SLOW_COMMIT).
            wait_for(
                lambda: [w for w in run.status().get("warnings", ()) if "has not answered the commit" in w],
                25,
                "the unanswered commit in the status",
                c.assert_alive,
            )
            assert not run.status().get("output_outage")  # before any attempt failed
            wait_for(lambda: run.status().get("output_outage"), 120, "the outage in the status", c.assert_alive)
            checkpoint = run.state.get_checkpoint(run.sid)
            held = []
            while time.monotonic() < down_at + seconds:  # the capture waits for the broker all along
                c.assert_alive()
                st = run.status()
                held.append((st["buffered_bytes"], st["in_flight_bytes"], st["output_outage"]["seconds"]))
                time.sleep(1)
            shown = dblog(run.config, "status").stdout
            assert run.state.get_checkpoint(run.sid) == checkpoint  # nothing passed the failed batch
            broker("up")
            time.sleep(5)  # inserts after the restart too
        # The buffer filled to its budget and stayed there (one poll of 5,000 events may
        # overshoot it); the batch being retried is apart, bounded by its own 20 MiB.
        budget = BUFFER_MB * 2**20
        assert max(b for b, _, _ in held) >= budget * 0.9, held[-3:]
        assert max(b for b, _, _ in held) <= budget + 5_000 * 1_000, held[-3:]
        assert max(f for _, f, _ in held) <= 21 * 2**20, held[-3:]
        # One outage all along, its length growing in the reports (it starts at the first
        # failed attempt: the commit's 30 s timeout after the broker died).
        assert held[-1][2] >= held[0][2] + 0.5 * (len(held) - 1) > held[0][2], held
        assert "output refusing writes for" in shown and "refuses writes since" in shown, shown
        assert "KafkaOutput(" in shown and "nothing is lost" in shown, shown
        run.assert_each_insert_once(inserts.ids + burst)
        assert run.status().get("output_outage") is None
        assert "accepts writes again" in c.tail(400), c.tail()
        assert c.stop() == 0, c.tail()
    finally:
        run.close()


@pytest.mark.timeout(900)
def test_a_broker_outage_is_held_reported_and_delivered_exactly_once(tmp_path):
    hold_an_outage(tmp_path, float(os.environ.get("DBLOG_KAFKA_OUTAGE_SECONDS", "45")))


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_a_broker_outage_under_a_mariadb_capture_is_held_reported_and_delivered_exactly_once(tmp_path):
    """The binlog reader thread: its queue fills and it waits while the engine reads nothing."""
    hold_an_outage(tmp_path, float(os.environ.get("DBLOG_KAFKA_OUTAGE_SECONDS", "45")), kind="mysql")


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_a_five_minute_broker_outage_is_held_reported_and_delivered_exactly_once(tmp_path):
    """Issue 34 part 4's length, beyond PostgreSQL's wal_sender_timeout (60 s) for the
    replication connection the capture stopped reading."""
    hold_an_outage(tmp_path, float(os.environ.get("DBLOG_KAFKA_OUTAGE_SECONDS", "300")))


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_an_outage_beyond_the_timeout_stops_the_capture_and_a_restart_resumes_exactly_once(tmp_path):
    """The broker stays down past --output-outage-timeout: the capture exits with the cause
    and the fix, and a new capture process (Airflow's next session) goes on where the topics end."""
    run = Run(tmp_path, "--output-outage-timeout", "30")
    try:
        with Inserts(run.db) as inserts:
            wait_for(run.keys, 60, "the first records", run.capture.assert_alive, detail=run.capture.detail)
            broker("crash")
            assert run.capture.proc is not None
            code = run.capture.proc.wait(600)
            assert code == 2, run.capture.tail()  # one error line naming the cause and the fix
            tail = run.capture.tail()
            assert "dblog: error: the output KafkaOutput(" in tail, tail
            assert "longer than the output outage timeout" in tail and "--output-outage-timeout" in tail, tail
            assert "Traceback" not in tail, tail
            broker("up")
            run.capture.start()
            time.sleep(5)  # inserts after the restart too
        run.assert_each_insert_once(inserts.ids)
        assert run.capture.stop() == 0, run.capture.tail()
    finally:
        run.close()
