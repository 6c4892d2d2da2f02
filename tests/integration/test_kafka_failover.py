"""Leader failover into Kafka, with two capture processes contending for the ZooKeeper lease
(test_failover.py's Pair): the leader is paused (SIGSTOP) past its session timeout while the
workload goes on, the standby takes over, and when the old leader wakes (SIGCONT) nothing it
writes ever becomes visible to a ``read_committed`` consumer; the new leader's records carry
the new epoch, epochs never go down within a partition, and the topics replay to the source.
"""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from airflow_provider_dblog.outputs import make_output

from .capture_proc import dblog, wait_for, write_config
from .databases import env
from .test_failover import Pair
from .test_kafka_oracle import committed_records
from .test_oracle import Workload

pytestmark = pytest.mark.integration


class KafkaPair(Pair):
    def setup(self, seed_rows: int):
        super().setup(seed_rows)
        self.url = f"kafka://{env('DBLOG_KAFKA_BOOTSTRAP')}"
        self.config = write_config(
            self.tmp_path / "dblog.toml",
            self.db.source_config(self.source_id),
            self.state_url,
            self.url,
            state=self.state_auth,
        )

    def records(self) -> list[tuple[str, int, dict]]:
        return [r for r in committed_records(self.url[len("kafka://") :], self.source_id) if "dblog.epoch" in r[2]]

    def epoch_records(self, epoch: int) -> set[tuple[str, int, str]]:
        return {(t, p, h["dblog.position"]) for t, p, h in self.records() if h["dblog.epoch"] == str(epoch)}

    def converge(self, capture):
        sentinel = str(uuid.uuid4())
        with self.db.connect() as c:
            c.cursor().execute(
                f"INSERT INTO {self.db.ns}.notes (uid, body, flag) VALUES (%s, %s, %s)", (sentinel, "{}", True)
            )
            c.commit()
        out = make_output(self.url)
        out.open()
        wait_for(
            lambda: any(e.key == (sentinel,) for e in out.scan(self.source_id, f"{self.db.ns}.notes")),
            60,
            "the last write to reach Kafka",
            capture.assert_alive,
            detail=capture.detail,
            interval=0.5,
        )
        result = dblog(self.config, "verify", check=False)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}"
        assert result.stdout.count(" 0 mismatches") == len(self.db.tables()), result.stdout


@pytest.fixture
def pair(tmp_path, monkeypatch):
    p = KafkaPair("mysql", tmp_path, monkeypatch)
    yield p
    p.close()


@pytest.mark.timeout(400)
def test_deposed_leader_never_becomes_visible_in_kafka(pair):
    pair.setup(seed_rows=0)  # every row is born under capture: the log alone converges
    a, b = pair.start_pair()
    with Workload(pair.db, seed=14):
        wait_for(lambda: pair.epoch_records(1), 30, "a to write", a.assert_alive, detail=a.detail)
        a.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: pair.leader_epoch("b") == 2, 30, "b to take over", b.assert_alive, detail=b.detail)
        wait_for(lambda: pair.epoch_records(2), 30, "b to write", b.assert_alive, detail=b.detail)
        before = pair.epoch_records(1)
        a.proc.send_signal(signal.SIGCONT)
        code = a.proc.wait(30)
        assert code != 0, "the deposed leader kept running"
        time.sleep(2)  # anything a still sent would be committed or aborted by now
        after = pair.epoch_records(1)
        assert after == before, f"the deposed leader's records became visible: {sorted(after - before)[:5]}"
    pair.converge(b)
    assert b.stop() == 0, b.tail()
    # In every partition, in offset order, the epoch never goes down.
    last: dict[tuple[str, int], int] = {}
    for t, p, h in pair.records():
        e = int(h["dblog.epoch"])
        assert e >= last.get((t, p), e), f"{t}[{p}]: epoch {e} after {last[(t, p)]}"
        last[(t, p)] = e
