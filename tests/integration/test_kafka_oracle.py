"""The convergence oracle (invariant 3) over the Kafka output, bounded for CI time: PostgreSQL
and MariaDB in ``make test`` (issue 34 part 5); one seed, a 15 s workload of concurrent transactions and TRUNCATEs,
dumps of all tables and of key lists, and SIGKILLs of the capture at random moments. Then:

* every record of every topic of the source, read with ``read_committed``, appears once:
  no (topic, partition, position) twice, and no row event's position twice at all (a
  TRUNCATE or dump range is one copy per partition by design);
* ``dblog verify`` (which replays the Kafka topics: latest position per key wins, deletes,
  TRUNCATEs and dump ranges remove) finds the source tables, with zero mismatches.

``DBLOG_KAFKA_ORACLE_SECONDS`` lengthens the workload.
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.outputs import make_output
from airflow_provider_dblog.outputs.kafka_format import BROADCAST_OPS, header_map
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env
from .test_oracle import Workload, sentinel_arrived

pytestmark = pytest.mark.integration

SEED = 20261123
SECONDS = float(os.environ.get("DBLOG_KAFKA_ORACLE_SECONDS", "15"))


def committed_records(bootstrap: str, source_id: str) -> list[tuple[str, int, dict]]:
    """(topic, partition, headers) of every committed record in the source's topics."""
    import confluent_kafka
    import confluent_kafka.admin

    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    topics = sorted(t for t in admin.list_topics(timeout=30).topics if t.startswith(source_id + "."))
    out = []
    conf = {"bootstrap.servers": bootstrap}
    for t in topics:
        meta = admin.list_topics(t, timeout=30).topics[t]
        for p in sorted(meta.partitions):
            # read_all walks partitions in order; tag each record with its partition
            out += [(t, p, header_map(h)) for h, _ in _partition(conf, t, p)]
    return out


def _partition(conf, topic, partition):
    import confluent_kafka

    from airflow_provider_dblog.outputs import kafka_tail

    consumer = kafka_tail._consumer(conf)
    try:
        tp = confluent_kafka.TopicPartition(topic, partition)
        # as the output itself reads them: a topic just created may have no leader for a
        # moment (NOT_LEADER_FOR_PARTITION), which is retried, not a failure
        lo, hi = kafka_tail._retrying(lambda: consumer.get_watermark_offsets(tp, timeout=30, cached=False), 30)
        for msg in kafka_tail._read_range(consumer, topic, partition, lo, hi, 60):
            yield msg.headers() or [], msg.value()
    finally:
        consumer.close()


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "kind,fmt",
    # format=debezium: its own records (key objects, murmur2 partitions of the canonical key,
    # no dump ranges, TOAST repairs for whole rows), built column-wise as dblog's are. make
    # test runs one case per database and format; PostgreSQL's dblog case in make soak.
    [pytest.param("postgres", "dblog", marks=pytest.mark.soak), ("mysql", "dblog"), ("postgres", "debezium")],
)
def test_convergence_oracle_over_kafka(kind, fmt, tmp_path):
    bootstrap = env("DBLOG_KAFKA_BOOTSTRAP")
    rng = random.Random(SEED)
    db = ADAPTERS[kind]()
    source_id = f"koracle_{uuid.uuid4().hex[:6]}"
    db.create()
    capture = None
    try:
        db.seed(rng, 200)  # rows older than the capture: only the dumps deliver them
        url = f"kafka://{bootstrap}" + ("?format=debezium" if fmt == "debezium" else "")
        config = write_config(tmp_path / "dblog.toml", db.source_config(source_id), tmp_path / "state.db", url)
        state = LocalStateStore(str(tmp_path / "state.db"))
        # Wide chunk windows, and 100 ms between each commit and its checkpoint: so SIGKILLs
        # land there often (a restart must then skip what Kafka already holds).
        faults = ("--window-delay-ms", "30", "--write-delay-ms", "200")
        capture = Capture(config, tmp_path / "capture.log", faults=faults)
        capture.start()
        wait_for(
            lambda: state.get_value(status_key(source_id)) is not None,
            90,
            "the capture to start",
            capture.assert_alive,
            detail=capture.detail,
        )
        out = make_output(url)
        out.open()
        dumps = [dblog(config, "dump", "--all", "--chunk-size", "23").stdout.strip()]
        with Workload(db, SEED) as load:
            end = time.time() + SECONDS
            key_dump = True
            while time.time() < end:
                time.sleep(rng.uniform(1.5, 3.5))
                if key_dump:
                    args = ["dump", "--table", f"{db.ns}.accounts", "--chunk-size", "7"]
                    for k in rng.sample(range(1, 201), 20):
                        args += ["--key", json.dumps(k)]
                    dumps.append(dblog(config, *args).stdout.strip())
                    key_dump = False
                capture.kill()  # SIGKILL: mid-transaction, mid-dump, between commit and checkpoint
                time.sleep(rng.uniform(0.05, 0.8))
                capture.start()
        assert load.txns > 30, f"workload too small: {load.txns} transactions, errors {load.errors[:3]}"

        def all_done():
            ds = [state.get_dump(d) for d in dumps]
            assert not [d for d in ds if d.status in (DumpStatus.FAILED, DumpStatus.CANCELLED)], ds
            return all(d.status is DumpStatus.DONE for d in state.list_dumps(source_id))

        wait_for(all_done, 240, "all dumps to finish", capture.assert_alive, detail=capture.detail)
        sentinel_arrived(db, out, source_id, capture)
        assert capture.stop() == 0, capture.tail()

        recs = committed_records(bootstrap, source_id)
        assert recs, "nothing reached Kafka"
        per_partition = collections.Counter((t, p, h["dblog.position"]) for t, p, h in recs if "dblog.position" in h)
        twice = [k for k, n in per_partition.items() if n > 1]
        assert not twice, f"{len(twice)} records committed twice, e.g. {twice[:3]}"
        rows = collections.Counter(
            h["dblog.position"] for _, _, h in recs if "dblog.position" in h and h["dblog.op"] not in BROADCAST_OPS
        )
        assert not [p for p, n in rows.items() if n > 1], "a row event's position appears twice"
        ops = collections.Counter(h.get("dblog.op") for _, _, h in recs)
        assert ops["r"] > 0 and ops["c"] > 0 and ops["t"] > 0, ops

        result = dblog(config, "verify", check=False)
        print(result.stdout)
        assert result.returncode == 0, f"verify found mismatches:\n{result.stdout}\n{result.stderr}\n{capture.tail()}"
        for t in db.tables():
            assert f"{t}: " in result.stdout
        assert result.stdout.count(" 0 mismatches") == len(db.tables()), result.stdout
        print(f"kafka oracle: {load.txns} transactions, {capture.kills} SIGKILLs, {ops}")
        assert capture.kills >= 3
    finally:
        if capture is not None:
            capture.close()
        db.drop(source_id)
