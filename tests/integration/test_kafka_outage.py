"""A long Kafka broker outage under a running capture (``make soak``; docs/kafka.md, "Broker
outages"): the broker is SIGKILLed for ``DBLOG_KAFKA_OUTAGE_SECONDS`` (default 72) while rows
are inserted, then started again. The capture must still run afterwards, and every insert
must be in the topic exactly once (``read_committed``). And a broker left down until the
capture gives up: it exits, and a restarted capture delivers every insert exactly once.

The same test measures other outage lengths:
``DBLOG_SOAK=1 DBLOG_KAFKA_OUTAGE_SECONDS=150 pytest -m soak tests/integration/test_kafka_outage.py``.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import REPO, Capture, wait_for, write_config
from .databases import ADAPTERS, env
from .test_kafka_oracle import committed_records

pytestmark = [pytest.mark.integration, pytest.mark.soak]

SERVICES = str(REPO / "scripts" / "services")


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
    """A ``dblog capture`` of a fresh PostgreSQL schema to the test broker, reading the log."""

    def __init__(self, tmp_path):
        self.bootstrap = env("DBLOG_KAFKA_BOOTSTRAP")
        self.db = ADAPTERS["postgres"]()
        self.sid = f"k_outage_{uuid.uuid4().hex[:6]}"
        self.table = f"{self.db.ns}.accounts"
        self.db.create()
        url = f"kafka://{self.bootstrap}"
        config = write_config(tmp_path / "dblog.toml", self.db.source_config(self.sid), tmp_path / "state.db", url)
        self.capture = Capture(config, tmp_path / "capture.log")
        self.capture.start()
        state = LocalStateStore(str(tmp_path / "state.db"))
        c = self.capture
        wait_for(lambda: state.get_value(status_key(self.sid)), 90, "the capture", c.assert_alive, detail=c.detail)

    def keys(self) -> collections.Counter:
        return keys_in_topic(self.bootstrap, self.sid, self.table)

    def assert_each_insert_once(self, ids: list[int]) -> None:
        want = {f"[{i}]" for i in ids}
        c = self.capture
        wait_for(lambda: want <= set(self.keys()), 180, "every insert in the topic", c.assert_alive, 2, c.tail)
        counts = self.keys()
        assert {k: n for k, n in counts.items() if n != 1} == {}, "an insert committed twice"
        assert set(counts) == want

    def close(self) -> None:
        self.capture.close()
        self.db.drop(self.sid)
        broker("up")  # a no-op when it runs; else the tests after a failed one find none


def broker(command: str) -> None:
    subprocess.run([SERVICES, command, "kafka"], check=True, capture_output=True, timeout=300)


@pytest.mark.timeout(900)
def test_capture_outlives_a_long_broker_outage_exactly_once(tmp_path):
    """The writer's retries span the outage (docs/kafka.md, "Broker outages")."""
    outage = float(os.environ.get("DBLOG_KAFKA_OUTAGE_SECONDS", "72"))
    run = Run(tmp_path)
    try:
        with Inserts(run.db) as inserts:
            wait_for(run.keys, 60, "the first records", run.capture.assert_alive, detail=run.capture.detail)
            broker("crash")
            end = time.monotonic() + outage
            while time.monotonic() < end:  # the capture waits for the broker all along
                run.capture.assert_alive()
                time.sleep(1)
            broker("up")
            time.sleep(5)  # inserts after the restart too
        run.assert_each_insert_once(inserts.ids)
        assert run.capture.stop() == 0, run.capture.tail()
    finally:
        run.close()


@pytest.mark.timeout(900)
def test_an_outage_beyond_the_retries_stops_the_capture_and_a_restart_resumes_exactly_once(tmp_path):
    """The broker stays down until the capture gives up: it exits with Kafka's timeout, and
    a new capture process (Airflow's next session) goes on where the topics end."""
    run = Run(tmp_path)
    try:
        with Inserts(run.db) as inserts:
            wait_for(run.keys, 60, "the first records", run.capture.assert_alive, detail=run.capture.detail)
            broker("crash")
            assert run.capture.proc is not None
            code = run.capture.proc.wait(600)
            assert code == 2, run.capture.tail()  # one error line naming the cause and the fix
            tail = run.capture.tail()
            assert "dblog: error: the output KafkaOutput(" in tail and "Timed out waiting for operation" in tail, tail
            assert "Traceback" not in tail, tail
            broker("up")
            run.capture.start()
            time.sleep(5)  # inserts after the restart too
        run.assert_each_insert_once(inserts.ids)
        assert run.capture.stop() == 0, run.capture.tail()
    finally:
        run.close()
