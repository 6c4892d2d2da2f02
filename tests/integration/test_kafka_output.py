"""The Kafka output against a real broker (scripts/services' `kafka`): exactly once across a
lost commit answer, Kafka's own fencing of a leader paused inside its transaction, and the
Debezium envelope of real PostgreSQL and MariaDB captures."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid

import pytest

from airflow_provider_dblog.core.dump_requests import status_key
from airflow_provider_dblog.core.dumps import DumpStatus
from airflow_provider_dblog.core.errors import StaleEpochError
from airflow_provider_dblog.core.events import ChangeEvent, Column, Op, Origin, Position, TableSchema
from airflow_provider_dblog.outputs.kafka import KafkaOutput, parse_url
from airflow_provider_dblog.outputs.kafka_format import header_map
from airflow_provider_dblog.outputs.kafka_tail import read_all
from airflow_provider_dblog.state.local import LocalStateStore

from .capture_proc import Capture, dblog, wait_for, write_config
from .databases import ADAPTERS, env

pytestmark = pytest.mark.integration

SCHEMA = TableSchema("app.items", (Column("id", "integer"), Column("v", "text")), ("id",))


@pytest.fixture
def bootstrap() -> str:
    return env("DBLOG_KAFKA_BOOTSTRAP")


def records(bootstrap: str, prefix: str) -> list[tuple[str, dict, bytes]]:
    """(topic, headers, value) of every committed record of the topics under ``prefix``."""
    out = KafkaOutput(bootstrap)
    out.open()
    topics = [t for t in out._admin.list_topics(timeout=30).topics if t.startswith(prefix + ".")]
    conf = {"bootstrap.servers": bootstrap}
    return [(t, header_map(h), v) for t in sorted(topics) for h, v in read_all(conf, [t])]


def events(source_id: str, first: int, n: int) -> list[ChangeEvent]:
    return [
        ChangeEvent(
            source_id=source_id,
            table=SCHEMA.table,
            op=Op.CREATE,
            key=(i,),
            before=None,
            after={"id": i, "v": f"v{i}"},
            position=Position(f"{i:026d}"),
            commit_ts=None,
            txid=None,
            origin=Origin.LOG,
            dump_id=None,
            schema_id=SCHEMA.schema_id(),
        )
        for i in range(first, first + n)
    ]


def output(bootstrap: str, **options: str) -> KafkaOutput:
    out = KafkaOutput(bootstrap, options)
    out.open()
    out.register_schema(SCHEMA)
    return out


def test_a_batch_retried_after_its_commit_sends_nothing_twice(bootstrap):
    """The commit went through but the capture died before its checkpoint: the next process
    finds the position in the topics' committed tails and skips what is there."""
    sid = f"k_retry_{uuid.uuid4().hex[:6]}"
    first = output(bootstrap)
    first.write(events(sid, 1, 40), epoch=1)
    first.close()  # "killed" before the checkpoint: the engine will hand the same batch again

    second = output(bootstrap)
    assert second.last_position(sid) == Position(f"{40:026d}")
    second.write(events(sid, 1, 60), epoch=2)  # the old batch again, and 20 new events
    positions = [h["dblog.position"] for _, h, _ in records(bootstrap, sid) if h.get("dblog.source_id") == sid]
    assert len(positions) == 60 and len(set(positions)) == 60
    assert output(bootstrap).last_position(sid) == Position(f"{60:026d}")


@pytest.mark.parametrize("with_epochs", [False, True], ids=["kafka-fencing-alone", "with-epochs"])
def test_a_leader_paused_inside_its_transaction_is_fenced_by_kafka(bootstrap, with_epochs):
    """Leader A has produced its batch but not committed (paused, e.g. a GC or SIGSTOP);
    B takes over and initialises the same transactional id: Kafka aborts A's transaction and
    refuses A's commit, so no read_committed consumer ever sees A's late records, even
    without DBLog's own epoch check."""
    sid = f"k_fence_{uuid.uuid4().hex[:6]}"
    a = output(bootstrap)
    a.write(events(sid, 1, 5), epoch=1 if with_epochs else None)
    b = output(bootstrap)
    producer = a._source(sid)
    real_commit = producer.commit_transaction

    class Paused:
        """A's producer, with B's takeover happening between A's produce and commit."""

        def __getattr__(self, name):
            return getattr(producer, name)

        def commit_transaction(self, *args):
            assert b.last_position(sid) == Position(f"{5:026d}")  # B's init_transactions
            return real_commit(*args)

    a._producers[sid] = Paused()
    with pytest.raises(StaleEpochError, match="fenced"):
        a.write(events(sid, 6, 10), epoch=1 if with_epochs else None)
    b.write(events(sid, 6, 3), epoch=2 if with_epochs else None)
    time.sleep(0.5)
    seen = sorted(
        (h["dblog.position"], json.loads(v)["epoch"]) for _, h, v in records(bootstrap, sid) if "dblog.position" in h
    )
    assert [int(p.split(".")[0]) for p, _ in seen] == list(range(1, 9)), seen  # none of A's 6..15
    if with_epochs:
        assert [e for _, e in seen] == [1] * 5 + [2] * 3


@pytest.mark.parametrize("fmt", ["dblog", "debezium"])
def test_each_key_is_in_the_partition_kafkas_java_client_gives_it(bootstrap, fmt):
    """The docs' contract: partition = Kafka's murmur2 of the canonical key text, in both
    formats (dblog's records are partitioned by librdkafka's murmur2_random, debezium's by
    ours, their record key being the key object)."""
    from airflow_provider_dblog.outputs.kafka_format import murmur2_partition

    from .test_kafka_oracle import committed_records

    sid = f"k_part_{fmt}_{uuid.uuid4().hex[:6]}"
    output(bootstrap, format=fmt).write(events(sid, 1, 200), epoch=1)
    recs = [(p, h) for _, p, h in committed_records(bootstrap, sid) if "dblog.key" in h]
    assert len(recs) == 200 and len({p for p, _ in recs}) == 3  # the test broker's 3 partitions
    assert [p for p, h in recs] == [murmur2_partition(h["dblog.key"].encode(), 3) for _, h in recs]


def test_a_delete_in_debeziums_envelope_is_followed_by_its_tombstone(bootstrap):
    """tombstones=true (Debezium's tombstones.on.delete): after a delete, a record with the
    same key, no value and no headers in the same partition, so log compaction can drop the
    key; our own readers (scan, the topics' tails) skip it."""
    sid = f"k_tomb_{uuid.uuid4().hex[:6]}"
    out = output(bootstrap, format="debezium", tombstones="true")
    created = events(sid, 1, 3)
    deleted = dataclasses.replace(
        created[1], op=Op.DELETE, before=created[1].after, after=None, position=Position(f"{9:026d}")
    )
    out.write([*created, deleted], epoch=1)
    topic = out.topic_for(sid, SCHEMA.table)
    conf = {"bootstrap.servers": bootstrap}
    got = [(h, v) for h, v in read_all(conf, [topic])]
    nulls = [i for i, (_, v) in enumerate(got) if v is None]
    assert len(got) == 5 and len(nulls) == 1, got
    before = got[nulls[0] - 1]
    assert header_map(before[0])["dblog.op"] == "d" and got[nulls[0]][0] == []  # right after its delete
    assert [e.op for e in out.scan(sid, SCHEMA.table)].count(Op.DELETE) == 1  # scan skips it
    assert output(bootstrap, format="debezium").last_position(sid) == Position(f"{9:026d}")


def test_a_write_below_the_recorded_epoch_is_refused(bootstrap):
    sid = f"k_epoch_{uuid.uuid4().hex[:6]}"
    output(bootstrap).write(events(sid, 1, 3), epoch=4)
    with pytest.raises(StaleEpochError, match="epoch 3"):
        output(bootstrap).write(events(sid, 4, 3), epoch=3)


def test_with_topic_creation_off_a_missing_topic_stops_with_the_topics_to_create(bootstrap):
    """Issue 34 part 4: where an administrator creates the topics (create_topics=false), the
    first write to a missing one fails naming every topic to create and its settings (the
    schema topic compacted); once they exist, the same output writes."""
    from confluent_kafka.admin import NewTopic

    from airflow_provider_dblog.core.errors import ConfigurationError

    sid = f"k_nocreate_{uuid.uuid4().hex[:6]}"
    out = output(bootstrap, create_topics="false")
    with pytest.raises(ConfigurationError) as refused:
        out.write(events(sid, 1, 3), epoch=1)
    text = str(refused.value)  # the cause, then "Fix: ..."
    data, schemas = f"{sid}.app.items", f"{sid}.dblog_schemas"
    assert f"the Kafka topics {data}, {schemas} do not exist" in text and "create_topics=false" in text, text
    assert f"--create --topic {data}; " in text, text  # a data topic: broker defaults
    assert f"--create --topic {schemas} --config cleanup.policy=compact)" in text, text
    assert data not in out._admin.list_topics(timeout=30).topics  # nothing created behind the user's back
    created = out._admin.create_topics(
        [NewTopic(data, num_partitions=2), NewTopic(schemas, 1, config={"cleanup.policy": "compact"})]
    )
    for future in created.values():
        future.result()
    out.write(events(sid, 1, 3), epoch=1)
    assert len([1 for _, h, _ in records(bootstrap, sid) if h.get("dblog.source_id") == sid]) == 3


def test_create_topics_takes_true_or_false_only():
    from airflow_provider_dblog.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="neither true nor false"):
        parse_url("b:9092?create_topics=no")


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_debezium_envelope_of_a_real_capture(kind, bootstrap, tmp_path):
    """Inserts, updates, deletes, a TRUNCATE and a dump's reads through `dblog capture` into
    Debezium envelopes, checked field by field where a real source decides them."""
    db = ADAPTERS[kind]()
    sid = f"k_dbz_{kind}_{uuid.uuid4().hex[:6]}"
    connector = {"postgres": "postgresql", "mysql": "mysql"}[kind]
    url = f"kafka://{bootstrap}?format=debezium&connector={connector}"
    if kind == "postgres":
        url += f"&database={db.db}"
    db.create()
    capture = None
    try:
        config = write_config(tmp_path / "dblog.toml", db.source_config(sid), tmp_path / "state.db", url)
        capture = Capture(config, tmp_path / "capture.log")
        capture.start()
        acc = f"{db.ns}.accounts"
        with db.connect() as c:
            cur = c.cursor()
            for i in (1, 2, 3):
                cur.execute(f"INSERT INTO {acc} (id, name, balance) VALUES (%s, %s, %s)", (i, f"n{i}", "1.50"))
            c.commit()
            state = LocalStateStore(str(tmp_path / "state.db"))
            wait_for(lambda: state.get_value(status_key(sid)), 90, "the capture", capture.assert_alive)
            cur.execute(f"INSERT INTO {acc} (id, name, balance) VALUES (4, 'n4', '2.00')")
            cur.execute(f"UPDATE {acc} SET balance = '3.25' WHERE id = 4")
            cur.execute(f"DELETE FROM {acc} WHERE id = 4")
            c.commit()
        dump_id = dblog(config, "dump", "--table", acc).stdout.strip()
        wait_for(lambda: state.get_dump(dump_id).status is DumpStatus.DONE, 90, "the dump", capture.assert_alive)
        with db.connect() as c:
            db.truncate(c, ["accounts"])
            c.commit()
        topic = f"{sid}.{acc}"

        def envelopes():
            return [(h, json.loads(v)) for t, h, v in records(bootstrap, sid) if t == topic]

        wait_for(lambda: any(v["op"] == "t" for _, v in envelopes()), 90, "the TRUNCATE", capture.assert_alive)
        got = envelopes()
        by_op: dict[str, list[dict]] = {}
        for _, v in got:
            by_op.setdefault(v["op"], []).append(v)
        assert set(by_op) == {"c", "u", "d", "r", "t"}, sorted(by_op)
        for op, vals in by_op.items():
            for v in vals:
                assert set(v) == {"before", "after", "source", "op", "ts_ms", "ts_us", "transaction"}
                src = v["source"]
                assert src["connector"] == connector and src["name"] == sid
                assert src["table"] == "accounts" and isinstance(src["ts_ms"], int) and isinstance(v["ts_ms"], int)
                if kind == "postgres":
                    assert (src["db"], src["schema"]) == (db.db, db.ns)
                else:
                    assert src["db"] == db.ns and "schema" not in src
                assert src["snapshot"] == ("incremental" if op == "r" else "false")
        c_ = next(v for v in by_op["c"] if v["after"]["id"] == 4)
        assert c_["before"] is None and c_["after"]["balance"] == "2.00"
        u = by_op["u"][0]
        assert u["after"]["id"] == 4 and u["after"]["balance"] == "3.25"
        d = by_op["d"][0]
        assert d["after"] is None and d["before"]["id"] == 4
        assert sorted(v["after"]["id"] for v in by_op["r"]) == [1, 2, 3] and all(
            v["before"] is None for v in by_op["r"]
        )
        assert all(v["before"] is None and v["after"] is None for v in by_op["t"])
        # The key is the primary key by column name, in one partition per key.
        keys = {h["dblog.key"] for h, v in got if v["op"] != "t"}
        assert keys == {"[1]", "[2]", "[3]", "[4]"}
        assert capture.stop() == 0, capture.tail()
    finally:
        if capture is not None:
            capture.close()
        db.drop(sid)


def test_unknown_url_option_is_refused():
    with pytest.raises(Exception, match="unknown option"):
        parse_url("127.0.0.1:1?topics=x")


@pytest.mark.timeout(400)
# make soak (the longest runs; make test keeps the suite under 35 minutes)
@pytest.mark.soak
def test_broker_restart_mid_run_loses_nothing_and_duplicates_nothing(bootstrap, tmp_path):
    """SIGKILL of the Kafka broker under a running capture, and a start again a few seconds
    later: the capture waits (its failed transaction is retried by a new producer) and goes
    on; the topics then replay to the source and hold every position once."""
    import subprocess

    from .capture_proc import REPO
    from .test_kafka_oracle import committed_records
    from .test_oracle import Workload, sentinel_arrived

    services = str(REPO / "scripts" / "services")

    def broker_pid():
        status = subprocess.run([services, "status", "kafka"], capture_output=True, text=True).stdout
        return status.split("pid=")[1].split()[0] if "pid=" in status else None

    db = ADAPTERS["postgres"]()
    sid = f"k_restart_{uuid.uuid4().hex[:6]}"
    url = f"kafka://{bootstrap}"
    db.create()
    capture = None
    try:
        config = write_config(tmp_path / "dblog.toml", db.source_config(sid), tmp_path / "state.db", url)
        capture = Capture(config, tmp_path / "capture.log")
        capture.start()
        state = LocalStateStore(str(tmp_path / "state.db"))
        # The workload starts once the capture reads the log (its slot exists): no dump here.
        wait_for(
            lambda: state.get_value(status_key(sid)), 90, "the capture", capture.assert_alive, detail=capture.detail
        )
        out = KafkaOutput(bootstrap)
        out.open()
        with Workload(db, seed=31):
            wait_for(
                lambda: records(bootstrap, sid), 60, "the first records", capture.assert_alive, detail=capture.detail
            )
            broker = broker_pid()
            subprocess.run([services, "crash", "kafka"], check=True, capture_output=True, timeout=60)
            time.sleep(3)
            subprocess.run([services, "up", "kafka"], check=True, capture_output=True, timeout=300)
            assert broker_pid() not in (None, broker), "the broker did not restart"
            time.sleep(3)
        sentinel_arrived(db, out, sid, capture)
        # the key-list dumps the capture queued itself (unchanged TOAST values)
        wait_for(
            lambda: all(d.status.finished for d in state.list_dumps(sid)), 120, "repair dumps", capture.assert_alive
        )
        recs = committed_records(bootstrap, sid)
        positions = [h["dblog.position"] for _, _, h in recs if "dblog.position" in h and h["dblog.op"] not in "tk"]
        assert len(positions) == len(set(positions)), "a position committed twice"
        result = dblog(config, "verify", check=False)
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\n{capture.tail()}"
        assert capture.stop() == 0, capture.tail()
    finally:
        if capture is not None:
            capture.close()
        db.drop(sid)
